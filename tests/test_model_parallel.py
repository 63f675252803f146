"""The ``model`` mesh axis (jaxrl.parallel.sharding: tp / fsdp rules, run key ``mesh``) and the
up-front memory estimate (jaxrl.models.lm.memory).

Training on ``data=2 x model=2`` needs 4 forced CPU devices before JAX starts, so it runs
once in a subprocess (tests/model_parallel_checks.py) whose JSON report the first tests
assert on. Rules, config and estimates run in-process on an abstract mesh (no devices).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys

import jax
import numpy as np
import optax
import pytest
from jax.sharding import AbstractMesh, PartitionSpec as P

from jaxrl.models.lm import LMConfig, LoRAParams, RopeConfig
from jaxrl.models.lm.memory import base_shapes, check_fits, count, estimate_memory, lora_shapes
from jaxrl.parallel import sharding
from jaxrl.run import config as config_lib

HERE = os.path.dirname(os.path.abspath(__file__))
TOL = 1e-4  # float32: GSPMD's partial sums and all-reduces change the summation order
MESH = AbstractMesh((2, 2), ("data", "model"))


@pytest.fixture(scope="module")
def report() -> dict:
    from fast_compile import subprocess_env  # XLA at -O0: both sides of each comparison compiled alike

    proc = subprocess.run([sys.executable, os.path.join(HERE, "model_parallel_checks.py")],
                          capture_output=True, text=True, env=subprocess_env(), timeout=900)
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def lm_config(**kw) -> LMConfig:
    base = dict(architecture="Qwen2ForCausalLM", vocab_size=10, hidden_size=4, num_layers=2, num_heads=2,
                num_kv_heads=1, head_dim=2, intermediate_size=6, rms_norm_eps=1e-6, rope=RopeConfig(),
                attention_bias=True, o_bias=False, qk_norm=False, tie_word_embeddings=True)
    return LMConfig(**{**base, **kw})


QWEN05 = lm_config(vocab_size=151936, hidden_size=896, num_layers=24, num_heads=14, num_kv_heads=2, head_dim=64,
                   intermediate_size=4864)


# ------------------------------------------------------------------- 4 forced CPU devices


def test_data_2_model_2_trains_like_one_device(report):
    assert report["n_devices"] == 4 and report["mesh"] == {"data": 2, "model": 2}
    assert "mesh 'data' x 'model' = 2 x 2" in report["summary"]
    for strategy in ("tp", "fsdp"):  # 3 Adam steps of a tiny Qwen2, params + moments + losses
        assert report[f"{strategy}_state_diff"] < TOL, strategy
        assert report[f"{strategy}_loss_diff"] < TOL, strategy
        assert report[f"{strategy}_losses"][-1] < report[f"{strategy}_losses"][0]


def test_the_memory_estimate_holds_on_two_devices(report):
    """The program's per-device estimate within 20% of XLA's figure for the compiled chunk of
    the GRPO LoRA recipe with 4 micro-batches, its prompt groups split over two devices (each
    device takes its rows of every micro-batch: well under one device's estimate).
    bench/results/lm_memory_devices.md holds the wider grid (1 device, model axis, full)."""
    assert report["memory_devices"] == 2
    assert 0.8 <= report["memory_estimate"] / report["memory_xla"] <= 1.2, report
    assert report["memory_xla"] < 0.75 * report["memory_estimate_one"], report


def test_parameters_and_adam_moments_really_are_split(report):
    tp = report["tp_specs"]
    assert tp["q_kernel"] == tp["mu_q_kernel"] == "P(None, None, 'model')"  # column: output dim
    assert tp["q_bias"] == "P(None, 'model')"
    assert tp["o_kernel"] == tp["down_kernel"] == tp["nu_down_kernel"] == "P(None, 'model', None)"  # row: input dim
    assert tp["embed"] == "P('model', None)" and tp["lm_head"] == "P(None, 'model')"  # the vocabulary
    assert tp["norm"] == tp["count"] == "P()"
    assert report["tp_q_shards"] == [[2, 32, 16]]  # 4 heads x 8 -> 2 heads per device
    fsdp = report["fsdp_specs"]
    assert fsdp["q_kernel"] == "P(None, 'model', None)" and fsdp["norm"] == "P('model',)"
    assert fsdp["mu_up_kernel"] == "P(None, None, 'model')"  # [2, 32, 48]: the largest axis
    # the memory estimate's weights figure is what device 0 really holds
    assert report["tp_device_bytes"] == report["tp_estimated_bytes"]
    assert report["fsdp_device_bytes"] == report["fsdp_estimated_bytes"]


def test_trainer_applies_the_mesh_key_to_declared_leaves(report):
    assert report["undeclared_error"] == (
        "mesh.model=2: this algorithm declares no parameters a model axis could split (Program.lm.model_params); "
        "use mesh.model: 1")
    specs = report["trainer_specs"]  # PPO, fsdp, params and opt_state declared; seeds in front
    assert specs[".agent.params['params']['actor']['dense_0']['kernel']"] == "P(None, None, 'model')"
    assert specs[".env.obs"] == "P(None, 'data')"  # the env batch still over data
    assert specs[".agent.obs_stats.mean"] == specs[".key"] == "P()"  # not declared: as before


def test_grpo_lora_on_a_loaded_model_shards_like_one_device(report):
    """jaxrl train's GRPO on the tiny Qwen2 fixture (LoRA), data=2 x model=2 (tp) vs one device."""
    runs = report["grpo_lm_metrics"]
    for one, dm in zip(runs["one"], runs["dm"]):
        for k in one:
            assert abs(one[k] - dm[k]) <= 1e-4 * max(1.0, abs(one[k])), (k, one[k], dm[k])
    assert any(r["frac_reward_zero_std"] < 1 for r in runs["one"])  # some group's rewards differ: a gradient
    assert report["grpo_lm_params_moved"] > 1e-4  # the updates really changed the adapters
    assert report["grpo_lm_max_diff"] < 1e-4, (report["grpo_lm_max_diff"], report["grpo_lm_worst_leaf"])
    split = report["grpo_lm_split"]
    assert any(".frozen" in k and "q_proj" in k for k in split), split  # the frozen base is split over model
    assert any(".params" in k and "q_proj" in k for k in split), split  # and the adapters


def test_refusals_are_one_line(report):
    assert report["heads_error"] == (
        "mesh.model=4: tensor parallelism splits attention heads over the model axis, but the model's "
        "num_heads=14 is not divisible by 4; use mesh.model: 2 or mesh.strategy: fsdp")
    assert report["mesh_error"] == "mesh.model=3 does not divide the 4 device(s) of the run"
    assert report["width_error"].startswith("mesh.model=2: tensor parallelism splits ['layers']['up_proj']['kernel']")
    assert report["odd_vocab_spec"] == "P()"  # a vocabulary that does not divide stays whole
    for key in ("heads_error", "mesh_error", "width_error", "undeclared_error"):
        assert "\n" not in report[key]


# ------------------------------------------------------------------- rules, in-process


def test_lora_and_optimizer_leaves_follow_their_projection():
    L, D, r = 2, 8, 2
    lora = LoRAParams({"q_proj": {"a": np.zeros((L, D, r)), "b": np.zeros((L, r, D))},
                       "o_proj": {"a": np.zeros((L, D, r)), "b": np.zeros((L, r, D))}}, 2.0)
    state = {"lora": lora, "opt": optax.adam(1e-3).init(lora)}
    specs = sharding.param_specs(state, MESH, "tp")
    assert specs["lora"]["q_proj"]["a"] == P() and specs["lora"]["q_proj"]["b"] == P(None, None, "model")
    assert specs["lora"]["o_proj"]["a"] == P(None, "model", None) and specs["lora"]["o_proj"]["b"] == P()
    assert specs["opt"][0].nu["o_proj"]["a"] == P(None, "model", None) and specs["opt"][0].count == P()
    mask = {"lora": jax.tree_util.tree_map(lambda _: False, lora), "opt": jax.tree_util.tree_map(lambda _: True, state["opt"])}
    masked = sharding.param_specs(state, MESH, "fsdp", mask=mask)
    assert masked["lora"]["q_proj"]["a"] == P() and masked["opt"][0].mu["q_proj"]["a"] == P(None, "model", None)
    one = sharding.param_specs(state, AbstractMesh((4,), ("data",)), "tp")  # no model axis: nothing split
    assert all(s == P() for s in jax.tree_util.tree_leaves(one, is_leaf=lambda x: isinstance(x, P)))
    with pytest.raises(ValueError, match=r"^mesh.strategy: expected one of tp, fsdp, got 'pp'$"):
        sharding.param_specs(state, MESH, "pp")


def test_model_specs_align_with_the_last_axes():
    """Specs of one seed's leaf apply to the ``[S, ...]`` leaf: seeds over data in front."""
    assert sharding._merge(P("data"), P(None, None, "model"), 4) == P("data", None, None, "model")
    assert sharding._merge(P(), P("model", None), 3) == P(None, "model", None)
    assert sharding._merge(P(None, "data"), P(), 3) == P(None, "data")
    with pytest.raises(ValueError, match="split over both 'data' and 'model'"):
        sharding._merge(P("data"), P("model"), 1)


@pytest.mark.parametrize("strategy", ["tp", "fsdp"])
def test_estimate_uses_the_rules_of_the_layout(strategy):
    """Per-device weights of a Qwen2.5-0.5B-shaped tree split by ``param_specs`` (arithmetic on
    shapes, nothing allocated) equal the estimate's figure."""
    shapes = base_shapes(QWEN05)
    tree: dict = {"layers": {}}
    for (module, leaf), shape in shapes.items():
        node = tree if module in ("embed_tokens", "norm", "lm_head") else tree["layers"]
        struct = jax.ShapeDtypeStruct(shape, np.float32)
        node[module] = struct if not leaf else {**node.get(module, {}), leaf: struct}
    specs = sharding.param_specs(tree, MESH, strategy)
    held = sum(count({0: x.shape}) // (2 if "model" in tuple(s) else 1)
               for x, s in zip(jax.tree_util.tree_leaves(tree), jax.tree_util.tree_leaves(specs, is_leaf=lambda x: isinstance(x, P))))
    est = estimate_memory(QWEN05, batch=8, seq_len=64, param_dtype_bytes=4, full_finetune=True, data=2, model=2,
                          strategy=strategy)
    assert est.weights == held * 4


# ------------------------------------------------------------------- the memory estimate


def test_estimate_matches_a_hand_computation():
    c = lm_config()  # V=10, D=4, L=2, heads 2 / kv 1, head_dim 2, F=6, q/k/v bias, tied
    # embed 10*4 = 40; a layer: norms 4+4, q 4*4+4, k 4*2+2, v 4*2+2, o 4*4, MLP 3*4*6 = 136;
    # 2 layers 272; final norm 4 -> 316 parameters
    assert count(base_shapes(c)) == 316
    e = estimate_memory(c, batch=2, seq_len=3, param_dtype_bytes=4, full_finetune=True)
    assert (e.weights, e.grads, e.optimizer) == (316 * 4, 316 * 4, 2 * 316 * 4)
    assert e.kv_cache == 2 * 2 * 2 * 3 * 1 * 2 * 4  # k and v, L, B, S, kv heads, head_dim, bytes
    # KEEP_FACTOR x 6 tokens x (4 D + (2*2 + 2*1) heads x 2 + 3 F) x 4 B + probabilities 2 x 2 heads x 3 x 3 x 4 B
    per_layer = 1.7 * 6 * (4 * 4 + 6 * 2 + 3 * 6) * 4 + 2 * 2 * 3 * 3 * 4
    inputs = 2 * 6 * 4 * 4  # every layer's input: 2 layers x 6 tokens x 4 D x 4 B
    logits = 3 * 6 * 10 * 4  # the head's backward: logits, softmax and gradient, float32 [6 positions, V]
    # rematerialised: the larger of the head's backward and one layer's recomputed inside, beside the inputs
    assert e.activations == int(max(inputs + logits, inputs + per_layer))
    no_remat = estimate_memory(c, batch=2, seq_len=3, param_dtype_bytes=4, full_finetune=True, remat=False)
    assert no_remat.activations == int(2 * per_layer + logits)  # every layer's inside kept through the head
    # generation's KV cache and the loss pass's activations are not alive at once
    assert e.total == e.weights + e.grads + e.optimizer + max(e.kv_cache, e.activations)
    # an evaluation of 5 rows inside the update (completion 2 of 3 tokens: a 1-token prompt): its
    # cache and one layer of its prefill (2 D + 2 F per prompt token, the attention probabilities)
    ev = estimate_memory(c, batch=2, seq_len=3, param_dtype_bytes=4, full_finetune=True, completion_len=2, eval_rows=5)
    assert ev.kv_cache == 2 * 2 * 5 * 3 * 1 * 2 * 4 + 5 * 1 * (2 * 4 + 2 * 6) * 4 + 5 * 2 * 1 * 1 * 4
    shared = estimate_memory(c, batch=8, seq_len=3, param_dtype_bytes=4, full_finetune=True, remat=False,
                             completion_len=2, group=4)
    unshared = estimate_memory(c, batch=8, seq_len=3, param_dtype_bytes=4, full_finetune=True, remat=False,
                               completion_len=2)
    assert shared.activations < unshared.activations  # 2 prompts + 8 x 2 tokens against 8 x 3
    ref = estimate_memory(c, batch=2, seq_len=3, param_dtype_bytes=4, full_finetune=True, reference=True)
    assert ref.weights == 2 * 316 * 4  # the float32 master weights and the KL reference's copy
    cpu = estimate_memory(c, batch=2, seq_len=3, param_dtype_bytes=2, full_finetune=False, lora_rank=2, platform="cpu")
    gpu = estimate_memory(c, batch=2, seq_len=3, param_dtype_bytes=2, full_finetune=False, lora_rank=2, platform="gpu")
    assert cpu.activations > gpu.activations  # XLA:CPU computes bf16 in float32
    lora = estimate_memory(c, batch=2, seq_len=3, param_dtype_bytes=2, full_finetune=False, lora_rank=2)
    # a layer's adapters: q 4*2+2*4, k 4*2+2*2, v 12, o 16, gate 4*2+2*6, up 20, down 6*2+2*4 = 116
    assert count(lora_shapes(c, 2)) == 2 * 116 and lora.trainable == 232
    assert (lora.weights, lora.grads, lora.optimizer) == (316 * 2 + 232 * 4, 232 * 4, 2 * 232 * 4)


def test_qwen25_05b_shaped_weights_and_splits():
    bf16 = estimate_memory(QWEN05, batch=8, seq_len=256, param_dtype_bytes=2, full_finetune=False, lora_rank=8)
    assert bf16.params == 494_032_768 and bf16.weights == 494_032_768 * 2 + bf16.trainable * 4
    full = estimate_memory(QWEN05, batch=8, seq_len=256, param_dtype_bytes=4, full_finetune=True)
    assert full.weights == 494_032_768 * 4 and full.optimizer == 2 * full.grads == 2 * 494_032_768 * 4
    tp = estimate_memory(QWEN05, batch=8, seq_len=256, param_dtype_bytes=4, full_finetune=True, data=2, model=2)
    assert tp.weights < full.weights / 2 + 896 * 24 * 4 * 3 and tp.kv_cache == full.kv_cache // 4
    with pytest.raises(ValueError, match=r"^mesh.model=4: .*num_heads=14 is not divisible by 4"):
        estimate_memory(QWEN05, batch=8, seq_len=256, param_dtype_bytes=2, full_finetune=True, model=4)
    deep = estimate_memory(lm_config(num_layers=100_000), batch=1, seq_len=8, param_dtype_bytes=2, full_finetune=True)
    assert deep.params == 40 + 100_000 * 136 + 4  # arithmetic: no tracing at any depth
    assert "494,032,768 parameters" in bf16.table() and "total" in bf16.table()


def test_check_fits_refuses_with_the_numbers():
    e = estimate_memory(QWEN05, batch=8, seq_len=256, param_dtype_bytes=2, full_finetune=True)
    check_fits(e, e.total)  # exactly enough is enough
    with pytest.raises(ValueError) as err:
        check_fits(e, 2**30, "host memory")
    line = str(err.value)
    assert line.startswith("not enough memory per device: weights 1.84 GiB + grads 1.84 GiB + Adam 3.68 GiB + max(KV cache ")
    assert "more than the 1.00 GiB of host memory available" in line and "\n" not in line


def test_the_loss_pass_plan_pays_for_remat_and_chunks_only_when_the_pass_does_not_fit():
    """Remat off and the head whole when that fits half the device; chunks next; remat last;
    overrides kept; the estimate grows without remat (every layer's activations kept)."""
    from jaxrl.models.lm.memory import plan_loss_pass

    def est(remat, chunk):
        return estimate_memory(QWEN05, batch=16, seq_len=384, param_dtype_bytes=2, full_finetune=False, lora_rank=16,
                               vocab_chunk=16 * (chunk or 384), remat=remat)

    plain, chunked, remat = est(False, 0), est(False, 64), est(True, 64)
    assert plain.total > chunked.total > remat.total and "no remat" in plain.setup
    assert plan_loss_pass(est, 4 * plain.total).remat is False and plan_loss_pass(est, 4 * plain.total).head_chunk == 0
    mid = plan_loss_pass(est, 2 * chunked.total + 2)
    assert (mid.remat, mid.head_chunk) == (False, 64) and "in chunks of 64" in mid.reason
    tight = plan_loss_pass(est, 2 * remat.total + 2)
    assert (tight.remat, tight.head_chunk) == (True, 64) and tight.reason.startswith("loss pass: remat on")
    forced = plan_loss_pass(est, 4 * plain.total, remat=True)
    assert (forced.remat, forced.head_chunk) == (True, 0) and "remat as configured" in forced.reason
    assert plan_loss_pass(est, 1, remat=False, head_chunk=8).reason.endswith("(as configured)")


def test_micro_batches_auto_is_one_when_the_pass_fits_and_the_fewest_that_fit_otherwise():
    """Remat and chunks are tried first at each count; more micro-batches only when none of
    those fits; nothing fitting gives the last (smallest) option, said to be above; an int is kept."""
    from jaxrl.models.lm.memory import plan_loss_pass

    def est(remat, chunk, k):
        return estimate_memory(QWEN05, batch=16, seq_len=384, param_dtype_bytes=2, full_finetune=False, lora_rank=16,
                               vocab_chunk=16 // k * (chunk or 384), remat=remat, grad_accum=k)

    counts = (1, 2, 4, 8, 16)
    roomy = plan_loss_pass(est, 4 * est(False, 0, 1).total, micro_batches=counts)
    assert (roomy.remat, roomy.head_chunk, roomy.micro_batches) == (False, 0, 1)
    assert roomy.reason.startswith("loss pass: remat off, LM head whole, 1 micro-batch (estimate ")
    one, two = est(True, 64, 1), est(True, 64, 2)
    assert one.total > two.total > est(True, 64, 4).total
    # half of it is 1 byte more than 2 slices with remat and chunks need: the cheapest pass that fits at 2
    small = plan_loss_pass(est, 2 * two.total + 2, micro_batches=counts)
    want = next((r, c) for r in (False, True) for c in (0, 64) if est(r, c, 2).total <= two.total + 1)
    assert (small.micro_batches, (small.remat, small.head_chunk)) == (2, want) and ", 2 micro-batches (" in small.reason
    assert plan_loss_pass(est, 2 * one.total + 2, micro_batches=counts).micro_batches == 1  # remat first
    hopeless = plan_loss_pass(est, 2, micro_batches=counts)
    assert (hopeless.micro_batches, hopeless.remat, hopeless.head_chunk) == (16, True, 64) and " above 50% of " in hopeless.reason
    kept = plan_loss_pass(est, 2, micro_batches=4)
    assert kept.micro_batches == 4 and kept.reason.endswith("; micro_batches as configured)")
    with pytest.raises(ValueError, match=r"^micro_batches: expected a count >= 1 or a non-empty sequence of them, got \(\)$"):
        plan_loss_pass(est, 2, micro_batches=())


def test_micro_batch_counts_keep_whole_groups_first():
    from jaxrl.algos.grpo import GRPOConfig, micro_batch_counts

    # minibatch of 3 groups x 4 = 12 sequences: 1 and 3 keep each group whole, the rest cut them
    assert micro_batch_counts(GRPOConfig(num_prompts=6, group_size=4, num_minibatches=2)) == (1, 3, 2, 4, 6, 12)
    assert micro_batch_counts(GRPOConfig(num_prompts=3, group_size=2, num_minibatches=2)) == (1, 3)  # groups cut anyway


def test_grpo_micro_batches_key_reads_auto_and_refuses_bad_values():
    from jaxrl.algos.grpo import GRPOConfig, resolved

    raw = {"algo": "grpo", "env": {"id": "CartPole-v1"}, "grpo": {"num_prompts": 4, "group_size": 4}}
    assert config_lib.config_from_dict(raw).algo_config.micro_batches == "auto"  # the default
    for value, want in (("auto", "auto"), ("4", 4)):
        cfg = config_lib.config_from_dict(config_lib.apply_overrides(raw, [f"grpo.micro_batches={value}"]))
        assert cfg.algo_config.micro_batches == want
    assert resolved(GRPOConfig()).micro_batches == 1  # no loaded model: no plan, one slice
    for value, message in (("auto2", "grpo.micro_batches: expected one of 'auto' or int, got 'auto2'"),
                           ("0", "grpo.micro_batches: expected auto or an integer >= 1, got 0"),
                           ("3", "grpo.micro_batches: 3 does not divide the minibatch of 16 sequences")):
        with pytest.raises(config_lib.ConfigError) as err:
            config_lib.config_from_dict(config_lib.apply_overrides(raw, [f"grpo.micro_batches={value}"]))
        assert str(err.value) == message


def test_a_resume_builds_with_the_choices_its_checkpoint_records(tmp_path):
    """--resume's config: the auto keys at the values the newest checkpoint records
    (meta.chosen); a key the config sets itself, or a value it no longer accepts, is not kept."""
    from jaxrl.run.checkpoint import Checkpoints
    from jaxrl.run.resume import keep_choices

    raw = {"algo": "grpo", "env": {"id": "CartPole-v1"}, "grpo": {"num_prompts": 4, "group_size": 4}}
    cfg = config_lib.config_from_dict(raw)
    assert keep_choices(cfg, str(tmp_path)) == (cfg, {})  # no checkpoint: chosen afresh
    with Checkpoints(tmp_path / "checkpoints", meta={"chosen": {"grpo.micro_batches": 2, "grpo.model.remat": True}}) as c:
        c.save(1, {"x": np.zeros(2, np.float32)})
    kept, pinned = keep_choices(cfg, str(tmp_path))
    assert pinned == {"grpo.micro_batches": 2, "grpo.model.remat": True}
    assert (kept.algo_config.micro_batches, kept.algo_config.model.remat) == (2, True)
    assert config_lib.config_to_dict(cfg)["grpo"]["micro_batches"] == "auto"  # the run's config.yaml keeps auto
    own = config_lib.config_from_dict(config_lib.apply_overrides(raw, ["grpo.micro_batches=4"]))
    assert keep_choices(own, str(tmp_path))[1] == {"grpo.model.remat": True}
    smaller = config_lib.config_from_dict(config_lib.apply_overrides(raw, ["grpo.num_prompts=1", "grpo.group_size=3"]))
    assert keep_choices(smaller, str(tmp_path)) == (smaller, {})  # 2 no longer divides the minibatch of 3


# ------------------------------------------------------------------- the run config key


def _raw(**kw) -> dict:
    return {"algo": "ppo", "env": {"id": "CartPole-v1"}, **kw}


def test_mesh_key_defaults_and_round_trips():
    cfg = config_lib.config_from_dict(_raw())
    assert cfg.mesh == config_lib.MeshConfig(model=1, strategy="tp")
    assert "mesh" not in config_lib.config_to_dict(cfg)  # a 1-D run's saved config is as before
    cfg = config_lib.config_from_dict(_raw(devices=4, mesh={"model": 2, "strategy": "fsdp"}))
    assert cfg.mesh == config_lib.MeshConfig(model=2, strategy="fsdp")
    assert config_lib.config_from_dict(config_lib.config_to_dict(cfg)) == cfg


@pytest.mark.parametrize("raw, message", [
    (_raw(devices=4, mesh={"model": 3}), "mesh.model: 3 does not divide devices=4; use a divisor of it"),
    (_raw(mesh={"model": 0}), "mesh.model: must be >= 1, got 0"),
    (_raw(mesh={"strategy": "pp"}), "mesh.strategy: expected one of 'tp', 'fsdp', got 'pp'"),
])
def test_mesh_key_refusals(raw, message):
    with pytest.raises(config_lib.ConfigError) as err:
        config_lib.config_from_dict(raw)
    assert str(err.value) == message
