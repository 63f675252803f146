"""Checks of the ``model`` mesh axis on 4 forced CPU devices, run by tests/test_model_parallel.py.

Like tests/sharding_checks.py: ``--xla_force_host_platform_device_count=4`` must be set
before JAX starts, so one subprocess runs every check and prints one JSON object on its
last stdout line. A tiny random Qwen2 (:mod:`jaxrl.models.lm`: HF names, layers stacked)
trains a few Adam steps of its next-token loss (chunked head) on a ``data=2 x model=2``
mesh (``tp`` and ``fsdp``; LoRA under ``tp`` with ``JAXRL_CHECK_LORA=1``) and on one device; the report holds the differences, the
specs and shard shapes the layouts gave, and the one-line refusals.

Usage: ``python tests/model_parallel_checks.py``.
"""

from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import dataclasses  # noqa: E402
import functools  # noqa: E402
import json  # noqa: E402
import time  # noqa: E402

import jax  # noqa: E402
import numpy as np  # noqa: E402
import optax  # noqa: E402
from jax.sharding import NamedSharding, PartitionSpec as P  # noqa: E402

from jaxrl.algos.contract import LMHooks, ModelParams, leaves_under  # noqa: E402
from jaxrl.models.lm import LM, LMConfig, LoRAParams, RopeConfig, token_logprobs  # noqa: E402
from jaxrl.models.lm.memory import estimate_memory  # noqa: E402
from jaxrl.parallel import sharding  # noqa: E402

STEPS = 3
LORA_RUN = os.environ.get("JAXRL_CHECK_LORA") == "1"  # also train LoRA under tp (the test checks its specs only)


CFG = LMConfig(
    architecture="Qwen2ForCausalLM", vocab_size=64, hidden_size=32, num_layers=2, num_heads=4, num_kv_heads=2,
    head_dim=8, intermediate_size=48, rms_norm_eps=1e-6, rope=RopeConfig(theta=10_000.0), attention_bias=True,
    o_bias=False, qk_norm=False, tie_word_embeddings=False,
)
MODEL = LM(CFG)


# ----------------------------------------------------------------------------- the model


def init_params(rng: np.random.Generator, c: LMConfig = CFG) -> dict:
    """Random parameters in the layout of jaxrl.models.lm (kernels [in, out], layers stacked);
    drawn with NumPy: no op compiles before the checks."""
    L, D, F, V = c.num_layers, c.hidden_size, c.intermediate_size, c.vocab_size
    q, kv = c.num_heads * c.head_dim, c.num_kv_heads * c.head_dim

    def w(*shape):
        return (rng.standard_normal(shape) / np.sqrt(shape[-2] if len(shape) > 1 else 1)).astype(np.float32)

    layers = {
        "input_layernorm": np.ones((L, D), np.float32), "post_attention_layernorm": np.ones((L, D), np.float32),
        "q_proj": {"kernel": w(L, D, q), "bias": 0.1 * w(L, q)}, "k_proj": {"kernel": w(L, D, kv), "bias": 0.1 * w(L, kv)},
        "v_proj": {"kernel": w(L, D, kv), "bias": 0.1 * w(L, kv)}, "o_proj": {"kernel": w(L, q, D)},
        "gate_proj": {"kernel": w(L, D, F)}, "up_proj": {"kernel": w(L, D, F)}, "down_proj": {"kernel": w(L, F, D)},
    }
    return {"embed_tokens": w(V, D), "layers": layers, "norm": np.ones((D,), np.float32), "lm_head": {"kernel": w(D, V)}}


def init_lora(rng: np.random.Generator, params, rank=4, targets=("q_proj", "v_proj", "o_proj", "down_proj")):
    """Adapters ``a [L, in, r]``, ``b [L, r, out]`` (b non-zero so the test sees them act)."""
    out = {}
    for t in targets:
        L, fan_in, fan_out = params["layers"][t]["kernel"].shape
        out[t] = {"a": (rng.standard_normal((L, fan_in, rank)) / np.sqrt(fan_in)).astype(np.float32),
                  "b": (0.1 * rng.standard_normal((L, rank, fan_out)) / np.sqrt(rank)).astype(np.float32)}
    return LoRAParams(out, 2.0)


def loss_fn(params, tokens, lora=None):
    """Mean next-token negative log-likelihood of ``tokens [B, T]`` (the model's forward and
    its chunked head)."""
    hidden = MODEL.hidden(params, tokens[:, :-1], lora=lora)
    logp, _ = token_logprobs(MODEL, params, hidden, tokens[:, 1:], chunk_size=4)
    return -logp.mean()


OPT = optax.adam(1e-2)


def full_step(state, tokens):
    loss, grads = jax.value_and_grad(loss_fn)(state["params"], tokens)
    updates, opt = OPT.update(grads, state["opt"], state["params"])
    return {"params": optax.apply_updates(state["params"], updates), "opt": opt}, loss


def lora_step(state, tokens):
    loss, grads = jax.value_and_grad(lambda a: loss_fn(state["base"], tokens, a))(state["lora"])
    updates, opt = OPT.update(grads, state["opt"], state["lora"])
    return {"base": state["base"], "lora": optax.apply_updates(state["lora"], updates), "opt": opt}, loss


# ----------------------------------------------------------------------------- runs


def run(step, state, batches, shardings=None, data=None, mesh=None):
    """``STEPS`` jitted steps: ``(final state, [losses], seconds)``; sharded with ``shardings``."""
    if shardings is None:
        fn = jax.jit(step)
    else:
        state = jax.device_put(state, shardings)
        fn = jax.jit(step, in_shardings=(shardings, data), out_shardings=(shardings, NamedSharding(mesh, P())))
    losses, t0 = [], time.perf_counter()
    for tokens in batches:
        state, loss = fn(state, tokens)
        losses.append(float(loss))
    return state, losses, time.perf_counter() - t0


def max_abs(a, b) -> float:
    return max(float(np.max(np.abs(np.asarray(x, np.float64) - np.asarray(y, np.float64))))
               for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)))


def spec_of(x) -> str:
    return str(x.sharding.spec)


def shard_shapes(x) -> list:
    return sorted({tuple(s.data.shape) for s in x.addressable_shards})


def per_device_bytes(tree) -> int:
    """Bytes device 0 holds of ``tree``."""
    dev = jax.devices()[0]
    return sum(s.data.nbytes for x in jax.tree_util.tree_leaves(tree) for s in x.addressable_shards if s.device == dev)


def compare(name, step, state, batches, mesh, report, strategy, reference):
    """``state`` trained on the mesh with ``strategy``, against ``reference`` (one device)."""
    shardings = jax.tree_util.tree_map(lambda s: NamedSharding(mesh, s), sharding.param_specs(state, mesh, strategy))
    data = NamedSharding(mesh, P(sharding.DATA))
    one, one_losses = reference
    two, losses, secs = run(step, state, batches, shardings, data, mesh)
    report[f"{name}_state_diff"] = max_abs(one, two)
    report[f"{name}_loss_diff"] = max(abs(a - b) for a, b in zip(one_losses, losses))
    report[f"{name}_losses"] = losses
    report[f"{name}_seconds"] = secs
    return two


def checks() -> dict:
    report: dict = {"n_devices": len(jax.devices())}
    mesh = sharding.make_mesh(4, model=2)
    report["mesh"] = {k: int(v) for k, v in mesh.shape.items()}
    report["summary"] = sharding.summary(mesh)
    rng = np.random.default_rng(0)
    params = init_params(rng)
    batches = [rng.integers(0, CFG.vocab_size, (4, 9), dtype=np.int32)] * STEPS  # one batch: the loss must fall

    full = {"params": params, "opt": jax.jit(OPT.init)(params)}
    t0 = time.perf_counter()
    reference = run(full_step, full, batches)[:2]
    report["reference_seconds"] = time.perf_counter() - t0
    tp = compare("tp", full_step, full, batches, mesh, report, "tp", reference)
    lay = tp["params"]["layers"]
    report["tp_specs"] = {
        "q_kernel": spec_of(lay["q_proj"]["kernel"]), "q_bias": spec_of(lay["q_proj"]["bias"]),
        "o_kernel": spec_of(lay["o_proj"]["kernel"]), "down_kernel": spec_of(lay["down_proj"]["kernel"]),
        "embed": spec_of(tp["params"]["embed_tokens"]), "lm_head": spec_of(tp["params"]["lm_head"]["kernel"]),
        "norm": spec_of(lay["input_layernorm"]), "mu_q_kernel": spec_of(tp["opt"][0].mu["layers"]["q_proj"]["kernel"]),
        "nu_down_kernel": spec_of(tp["opt"][0].nu["layers"]["down_proj"]["kernel"]), "count": spec_of(tp["opt"][0].count),
    }
    report["tp_q_shards"] = shard_shapes(lay["q_proj"]["kernel"])  # [2, 32, 32] split to 16 columns
    report["tp_device_bytes"] = per_device_bytes(tp["params"])

    fsdp = compare("fsdp", full_step, full, batches, mesh, report, "fsdp", reference)
    report["fsdp_specs"] = {
        "q_kernel": spec_of(fsdp["params"]["layers"]["q_proj"]["kernel"]), "embed": spec_of(fsdp["params"]["embed_tokens"]),
        "norm": spec_of(fsdp["params"]["norm"]), "mu_up_kernel": spec_of(fsdp["opt"][0].mu["layers"]["up_proj"]["kernel"]),
    }
    report["fsdp_device_bytes"] = per_device_bytes(fsdp["params"])
    for strategy in ("tp", "fsdp"):
        est = estimate_memory(CFG, batch=4, seq_len=9, param_dtype_bytes=4, full_finetune=True, data=2, model=2, strategy=strategy)
        report[f"{strategy}_estimated_bytes"] = est.weights

    if LORA_RUN:
        lora = init_lora(rng, params)
        state = {"base": params, "lora": lora, "opt": jax.jit(OPT.init)(lora)}
        compare("lora_tp", lora_step, state, batches, mesh, report, "tp", run(lora_step, state, batches)[:2])

    t0 = time.perf_counter()
    report.update(trainer_checks())
    report["trainer_seconds"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    report.update(grpo_lm_checks())
    report["grpo_lm_seconds"] = time.perf_counter() - t0
    t0 = time.perf_counter()
    report.update(memory_checks())
    report["memory_seconds"] = time.perf_counter() - t0
    report.update(refusals(mesh, params))
    return report


def memory_checks() -> dict:
    """The GRPO LoRA recipe (Reverse with 8 digits, 8 prompts x 8 samples, 4 micro-batches)
    compiled as jaxrl train compiles its chunk on 2 devices (data): XLA's per-device argument +
    output + temporary - aliased bytes, and the program's own per-device estimate (the one
    the memory guard and the loss-pass plan read) for data 2 and for one device."""
    from jaxrl.run.build import build, seed_keys
    from jaxrl.run.config import load_config
    from jaxrl.run.guards import compiled_bytes
    from jaxrl.run.program import chunk_args, compile_chunk, make_chunk, make_layout

    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "configs", "grpo_lm_reverse.yaml")
    cfg = load_config(path, ["env.params.num_digits=8", "grpo.num_prompts=8", "grpo.group_size=8", "grpo.micro_batches=4",
                             "train.checkpoint_every=0", "devices=2"])
    built = build(cfg)
    keys = seed_keys(0, 1)
    layout = make_layout(cfg, built, keys)
    compiled = compile_chunk(make_chunk(built.program.update, 1, layout), *chunk_args(built, keys, layout), layout)
    estimate = built.program.lm.model_params.estimate
    return {"memory_devices": sharding.mesh_size(layout.mesh), "memory_xla": sum(compiled_bytes(compiled)),
            "memory_estimate": int(estimate(2, 1, "tp").total), "memory_estimate_one": int(estimate(1, 1, "tp").total)}


def trainer_checks() -> dict:
    """The run-config key through jaxrl.run.trainer.make_layout on a PPO state (nothing runs)."""
    from jaxrl.run import build, config as config_lib, trainer

    out = {}
    raw = {"algo": "ppo", "env": {"id": "CartPole-v1"}, "devices": 4, "mesh": {"model": 2, "strategy": "fsdp"},
           "ppo": {"num_envs": 4, "num_steps": 8, "total_env_steps": 64, "hidden": [16]}}
    cfg = config_lib.config_from_dict(raw)
    built = build.build(cfg)
    keys = trainer.seed_keys(0, 1)
    try:
        trainer.make_layout(cfg, built, keys)
    except config_lib.ConfigError as exc:
        out["undeclared_error"] = str(exc)
    declared = ModelParams(leaves=functools.partial(leaves_under, names=("params", "opt_state")))
    layout = trainer.make_layout(cfg, built._replace(program=dataclasses.replace(built.program, lm=LMHooks(model_params=declared))), keys)
    flat = {jax.tree_util.keystr(p): str(s.spec) for p, s in jax.tree_util.tree_flatten_with_path(layout.state)[0]}
    out["trainer_specs"] = flat
    return out


def grpo_lm_checks() -> dict:
    """GRPO with LoRA on the tiny Qwen2 fixture through jaxrl.run.trainer.run: two updates on
    ``devices: 4, mesh: {model: 2}`` (data 2 x model 2, tp) against one device."""
    import tempfile

    from jaxrl.run import config as config_lib, trainer
    from jaxrl.text import tokenized

    # A random model rarely writes a digit: read every id that is no symbol of the task as "1"
    # (instead of "="), so answers earn partial credit, groups differ and the update has a
    # gradient to compare (with none, Adam would only amplify rounding noise).
    tokenized.tokenize_task = functools.partial(tokenized.tokenize_task, unknown="1")
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "configs", "grpo_lm_reverse.yaml")
    # beta 0: an update whose groups all tie has an exactly zero gradient (with the KL term it
    # would be rounding noise, which Adam's normalisation turns into lr-sized steps either way).
    # Groups of 8: with 4 the tiny model's answers often tie in every group of all 3 updates.
    base = ["grpo.num_updates=3", "train.updates_per_chunk=3", "train.progress=false", "grpo.num_prompts=4",
            "grpo.group_size=8", "grpo.loss.beta=0"]
    states, specs, records = {}, {}, {}
    with tempfile.TemporaryDirectory() as tmp:
        for name, extra in (("one", ["devices=1"]), ("dm", ["devices=4", "mesh.model=2", "mesh.strategy=tp"])):
            cfg = config_lib.load_config(path, base + extra)
            result = trainer.run(cfg, run_dir=os.path.join(tmp, name), evaluate=False, out=open(os.devnull, "w"))
            states[name] = result.state
            with open(os.path.join(tmp, name, "metrics.jsonl")) as f:
                records[name] = [json.loads(line) for line in f]
            specs[name] = {jax.tree_util.keystr(p): spec_of(x) for p, x in jax.tree_util.tree_flatten_with_path(result.state)[0]}
    a, b = jax.device_get(states["one"]), jax.device_get(states["dm"])
    split = sorted(k for k, v in specs["dm"].items() if "model" in v)
    worst = max(((jax.tree_util.keystr(p), max_abs(x, y)) for (p, x), y in zip(
        jax.tree_util.tree_flatten_with_path(a)[0], jax.tree_util.tree_leaves(b))), key=lambda t: t[1])
    moved = max_abs(jax.device_get(states["one"].params), trainer_init_params(cfg))
    keys = ("loss", "grad_norm", "kl", "reward", "entropy", "frac_reward_zero_std")
    metrics = {name: [{k: r.get(k) for k in keys} for r in rows] for name, rows in records.items()}
    return {"grpo_lm_metrics": metrics, "grpo_lm_max_diff": max_abs(a, b), "grpo_lm_worst_leaf": worst[0], "grpo_lm_split": split,
            "grpo_lm_leaves": len(specs["dm"]), "grpo_lm_params_moved": moved}


def trainer_init_params(cfg):
    """Seed 0's initial trainable parameters of ``cfg`` (what the update moved away from)."""
    from jaxrl.run import build, trainer

    built = build.build(cfg)
    return jax.device_get(jax.vmap(built.program.init)(trainer.seed_keys(cfg.train.seed, 1)).params)


def refusals(mesh, params) -> dict:
    out = {}
    try:
        sharding.param_specs({"params": params}, mesh, "tp", heads=(14, 2))
        sharding.param_specs({"params": params}, sharding.make_mesh(4, model=4), "tp", heads=(14, 2))
    except ValueError as exc:
        out["heads_error"] = str(exc)
    try:
        sharding.make_mesh(4, model=3)
    except ValueError as exc:
        out["mesh_error"] = str(exc)
    odd = {"layers": {"up_proj": {"kernel": jax.ShapeDtypeStruct((2, 32, 47), np.float32)}}}
    try:
        sharding.param_specs(odd, mesh, "tp")
    except ValueError as exc:
        out["width_error"] = str(exc)
    out["odd_vocab_spec"] = str(sharding.param_specs({"embed_tokens": jax.ShapeDtypeStruct((63, 32), np.float32)}, mesh, "tp")["embed_tokens"])
    return out


if __name__ == "__main__":
    import fast_compile

    from jaxrl.algos.common import train

    # The trainer's programs at fast_compile's settings too (both sides of every comparison
    # compiled alike; XLA's memory figures come from buffer assignment, before the backend).
    train.COMPILER_OPTIONS.update(fast_compile.OPTIONS)
    t0 = time.perf_counter()
    result = checks()
    result["total_seconds"] = time.perf_counter() - t0
    print(json.dumps(result))
