"""A loaded Hugging Face checkpoint as GRPO's policy: token tasks in its tokenizer's ids, the
cached rollout agreeing with the loss's one-pass log-probs (single turn and dialogues with
replies), LoRA and full fine-tuning updates, gradient accumulation, bit-exact resume, and
the run through the config machinery. The checkpoint is the tiny random Qwen2 fixture
(tests/fixtures/lm/qwen2, made by tests/fixtures/lm/make_fixtures.py)."""

import dataclasses
import functools
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl
from jaxrl.algos import grpo
from jaxrl.algos.contract import EnvSetup
from jaxrl.run import config as config_lib
from jaxrl.run.checkpoint import Checkpoints
from jaxrl.text.tokenized import tokenize_task, tokenized_symbols, tokenizer_task

ROOT = os.path.join(os.path.dirname(__file__), "..")
QWEN2 = os.path.join(ROOT, "tests", "fixtures", "lm", "qwen2")


def _task(env_id, **params):
    env, p = jaxrl.make(env_id, **params)
    return tokenizer_task(env, QWEN2), p


def _cfg(loss="dapo", beta=0.04, rank=4, micro=1, minibatches=1):
    model = grpo.config.ModelConfig(policy="hf", path=QWEN2, lora=grpo.config.LoRASection(rank=rank, alpha=8.0), head_chunk=8)
    loss_cfg = grpo.config.LossConfig(type=loss, beta=beta, eps_high=0.28)
    return grpo.GRPOConfig(
        num_prompts=2, group_size=4, num_minibatches=minibatches, micro_batches=micro, eval_episodes=4, model=model,
        loss=loss_cfg, optim=grpo.config.GRPOOptim(lr=1e-2),
    )


def _setup(task, params, cfg):
    return grpo.make_setup(EnvSetup(task, params, task.held_out_params(params)), cfg)


# ------------------------------------------------------------------------------- the task


def test_tokenized_task_speaks_the_tokenizers_ids_and_keeps_the_tasks_reward():
    task, params = _task("text/Reverse-v0", num_digits=3)
    symbols = tokenized_symbols(task)
    state, prompt, _ = task.start(jax.random.PRNGKey(0), params)
    text = task.decode(prompt)
    assert text.startswith("<|im_start|>user\n") and text.endswith("<|im_start|>assistant\n"), text
    digits = text.split("user\n")[1].split("=")[0]
    answer = [symbols[c] for c in digits[::-1]] + [task.end_of_turn]
    turn = jnp.asarray(answer + [task.pad_id] * (task.max_turn_tokens - len(answer)), jnp.int32)
    _, right = task.respond(jax.random.PRNGKey(1), state, turn, params)
    assert float(right.info["exact_match"]) == 1.0 and float(jnp.sum(right.rewards)) > 0.99
    wrong = turn.at[0].set(300)  # a tokenizer id that is no symbol of the task reads as "="
    _, bad = task.respond(jax.random.PRNGKey(1), state, wrong, params)
    assert float(bad.info["exact_match"]) == 0.0


def test_tokenized_task_refuses_a_symbol_that_is_not_one_token():
    env, _ = jaxrl.make("text/Reverse-v0")
    with pytest.raises(ValueError, match="symbol '7' .* is 2 tokens"):
        tokenize_task(env, lambda s: [1, 2] if s == "7" else [ord(s[0])], str, vocab_size=512, pad_id=400, end_of_turn_id=401)
    with pytest.raises(ValueError, match="map to the same tokenizer id"):
        tokenize_task(env, lambda s: [5], str, vocab_size=512, pad_id=400, end_of_turn_id=401)


def test_tokenizer_config_errors_name_the_directory(tmp_path):
    env, _ = jaxrl.make("text/Reverse-v0")
    with pytest.raises(ValueError, match="tokenizer.json: file not found"):
        tokenizer_task(env, str(tmp_path))


# ------------------------------------------------------------------------------- the policy
# Compiled programs are shared through module fixtures: each GRPO program of a loaded model
# costs seconds of XLA compile on the CI machine.


def _signed(batch):
    """``batch`` with advantages +1 / -1 (a random model's rewards may all tie: no gradient)."""
    return batch.replace(advantages=jnp.where(jnp.arange(batch.advantages.shape[0]) % 2 == 0, 1.0, -1.0))


@pytest.fixture(scope="module")
def lora():
    """LoRA (rank 4), dapo with a KL term, on 2-digit reversal: setup, state, jitted collect and learn."""
    task, p = _task("text/Reverse-v0", num_digits=2)
    setup = _setup(task, p, _cfg())
    state = grpo.update.init(setup, jax.random.PRNGKey(0))
    collect = jax.jit(functools.partial(grpo.update.collect, setup))
    learn = jax.jit(functools.partial(grpo.update.learn, setup))
    ro, batch, metrics = collect(state, jax.random.PRNGKey(3))
    return dict(task=task, params=p, setup=setup, state=state, collect=collect, learn=learn, collected=(ro, _signed(batch), metrics))


@pytest.fixture(scope="module")
def dialogues():
    """Three groups of multi-turn alphabet-sort dialogues of the loaded model (the env replies
    with more names after every turn), with the loss pass's log-probs."""
    task, p = _task("text/AlphabetSortTurns-v0")
    setup = _setup(task, p, _cfg())
    state = grpo.update.init(setup, jax.random.PRNGKey(0))
    pp = grpo.update.acting_params(state)
    keys = jnp.repeat(jax.random.split(jax.random.PRNGKey(1), 3), 2, axis=0)
    ro = jax.jit(functools.partial(grpo.rollout.group_rollout, setup.policy, task, p, num_steps=setup.num_steps))(
        pp, keys, jax.random.PRNGKey(2), temperature=jnp.float32(1.0))
    logp, _ = jax.jit(setup.policy.token_logp)(pp, ro.obs, ro.actions, jnp.float32(1.0))
    return dict(task=task, state=state, ro=ro, logp=logp)


def _assert_rollout_logp_is_the_loss_pass(ro, logp):
    mask = np.asarray(ro.mask)
    assert mask.sum() > 0
    np.testing.assert_allclose(np.asarray(logp)[mask], np.asarray(ro.logp)[mask], atol=2e-4)


def test_rollout_logp_equals_the_loss_pass_single_turn(lora):
    """The cached rollout (prefill once, decode) and the loss's single forward pass see the
    same dialogue: same masks, same positions, same log-probs."""
    ro, _, _ = lora["collected"]
    logp, _ = jax.jit(lora["setup"].policy.token_logp)(grpo.update.acting_params(lora["state"]), ro.obs, ro.actions, jnp.float32(1.0))
    _assert_rollout_logp_is_the_loss_pass(ro, logp)


def test_a_groups_prompt_is_prefilled_once_and_shared(lora):
    """``start_grouped`` (one prefill per group, the cache repeated to its members) equals
    ``start`` on every member; the GRPO rollout uses it."""
    policy, pp = lora["setup"].policy, grpo.update.acting_params(lora["state"])
    prompt = lora["collected"][0].obs[:, : lora["task"].prompt_len]  # [P * G, Lp], groups of G equal prompts
    g = lora["setup"].cfg.group_size
    shared, logits_g = jax.jit(policy.start_grouped, static_argnums=2)(pp, prompt[::g], g)
    each, logits = jax.jit(policy.start)(pp, prompt)
    np.testing.assert_allclose(np.asarray(logits_g), np.asarray(logits), atol=1e-5)
    np.testing.assert_array_equal(np.asarray(shared.valid), np.asarray(each.valid))
    np.testing.assert_allclose(np.asarray(shared.k), np.asarray(each.k), atol=1e-5)


def test_rollout_logp_equals_the_loss_pass_with_env_replies(dialogues):
    """The same with environment replies prefilled into the cache between turns."""
    _assert_rollout_logp_is_the_loss_pass(dialogues["ro"], dialogues["logp"])
    assert int(np.max(np.asarray(dialogues["ro"].turns))) == dialogues["task"].max_turns > 1


def _max_diff(a, b) -> float:
    return max(float(jnp.max(jnp.abs(x - y))) for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)))


@pytest.mark.parametrize("case", ["lora_single_turn", "full_dialogue"])
def test_the_shared_prefix_loss_pass_equals_the_unshared_one(lora, dialogues, case):
    """Each group's prompt computed once (``token_logp_shared``) gives the log-probs,
    entropies, loss and gradients of the pass over every whole row, LoRA and full weights,
    single turns and dialogues with env replies inside the completion (float32 rounding)."""
    if case == "lora_single_turn":
        setup, state = lora["setup"], lora["state"]
        ro, batch, _ = lora["collected"]
    else:  # full fine-tuning on the dialogues (3 groups of 2)
        setup = _setup(dialogues["task"], dialogues["task"].default_params, _cfg(loss="grpo", rank=0))._replace(
            cfg=_cfg(loss="grpo", rank=0).__class__(**{**_cfg(loss="grpo", rank=0).__dict__, "num_prompts": 3, "group_size": 2}))
        state = grpo.update.init(setup, jax.random.PRNGKey(0))
        ro = dialogues["ro"]
        batch = grpo.update.Batch(ro.obs, ro.actions, ro.logp, jnp.zeros_like(ro.logp), ro.mask,
                                  jnp.where(jnp.arange(6) % 2 == 0, 1.0, -1.0))
    g = setup.cfg.group_size
    assert grpo.update.shared_prefix_group(setup.policy, setup.cfg) == g
    pp = grpo.update.acting_params(state)

    @jax.jit
    def both(batch):  # one program for both passes (one compile)
        t = jnp.float32(1.0)
        grads = [grpo.update._micro_grads(setup._replace(prefix_group=k), state.hyper, state.frozen, state.params, batch)
                 for k in (1, g)]
        return (setup.policy.token_logp(pp, ro.obs, ro.actions, t),
                setup.policy.token_logp_shared(pp, ro.obs, ro.actions, t, g), *grads)

    full, shared, ((loss1, _), grads1), ((loss_g, _), grads_g) = both(batch)
    np.testing.assert_allclose(np.asarray(shared[0]), np.asarray(full[0]), atol=2e-5)
    np.testing.assert_allclose(np.asarray(shared[1]), np.asarray(full[1]), atol=2e-5)
    scale = max(float(jnp.max(jnp.abs(x))) for x in jax.tree_util.tree_leaves(grads1))
    assert scale > 0 and abs(float(loss1) - float(loss_g)) < 1e-5 * max(1.0, abs(float(loss1)))
    assert _max_diff(grads1, grads_g) < 1e-5 * max(1.0, scale)


@pytest.mark.parametrize("case", ["lora_single_turn", "full_dialogue"])
def test_the_loss_pass_at_a_shorter_length_equals_the_whole_one(lora, dialogues, case):
    """A micro-batch whose scored completions all end early runs the loss pass over fewer
    positions (``model.length_buckets``): the scored log-probs, the loss and the gradients are
    the whole pass's, with and without a shared prompt, single turns and dialogues."""
    if case == "lora_single_turn":
        setup, state = lora["setup"], lora["state"]
        ro, batch, _ = lora["collected"]
    else:
        cfg = _cfg(loss="grpo", rank=0).__class__(**{**_cfg(loss="grpo", rank=0).__dict__, "num_prompts": 3, "group_size": 2})
        setup = _setup(dialogues["task"], dialogues["task"].default_params, cfg)
        state = grpo.update.init(setup, jax.random.PRNGKey(0))
        ro = dialogues["ro"]
        batch = grpo.update.Batch(ro.obs, ro.actions, ro.logp, jnp.zeros_like(ro.logp), ro.mask,
                                  jnp.where(jnp.arange(6) % 2 == 0, 1.0, -1.0))
    t = ro.actions.shape[1]
    cut = max(2, t // 2)  # every row's scoring ends within the first half: the pass runs `cut` positions
    batch = batch.replace(mask=batch.mask & (jnp.arange(t) < cut - 1)[None])
    assert int(grpo.update.used_length(batch.mask)) <= cut and bool(jnp.any(batch.mask))
    pp = grpo.update.acting_params(state)
    g = setup.cfg.group_size

    @jax.jit
    def both(batch):
        temp = jnp.float32(1.0)
        out = []
        for lengths in ((), (cut, t)):
            s = setup._replace(loss_lengths=lengths)
            out.append((grpo.update._token_logp(s.policy, pp, batch.obs, batch.actions, temp, g, batch.mask, lengths),
                        grpo.update._micro_grads(s, state.hyper, state.frozen, state.params, batch)))
        return out

    (whole, ((loss1, _), grads1)), (short, ((loss2, _), grads2)) = both(batch)
    mask = np.asarray(batch.mask)
    np.testing.assert_allclose(np.asarray(short[0])[mask], np.asarray(whole[0])[mask], atol=2e-5)
    np.testing.assert_allclose(np.asarray(short[1])[mask], np.asarray(whole[1])[mask], atol=2e-5)
    assert np.all(np.asarray(short[0])[:, cut:] == 0)  # the positions after the cut were not computed
    scale = max(float(jnp.max(jnp.abs(x))) for x in jax.tree_util.tree_leaves(grads1))
    assert scale > 0 and abs(float(loss1) - float(loss2)) < 1e-5 * max(1.0, abs(float(loss1)))
    assert _max_diff(grads1, grads2) < 1e-5 * max(1.0, scale)


def test_length_buckets_follow_the_config():
    cfg = _cfg()
    assert grpo.update.loss_lengths(cfg, 32) == ()  # auto: short completions run whole
    assert grpo.update.loss_lengths(cfg, 320) == (80, 160, 320)
    assert grpo.update.loss_lengths(cfg, 100) == (32, 56, 100)  # rounded up to multiples of 8
    fixed = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, length_buckets=(8, 16, 999)))
    assert grpo.update.loss_lengths(fixed, 32) == (8, 16, 32)
    none = dataclasses.replace(cfg, model=dataclasses.replace(cfg.model, length_buckets=()))
    assert grpo.update.loss_lengths(none, 320) == ()
    small = dataclasses.replace(cfg, model=grpo.config.ModelConfig(policy="transformer"))
    assert grpo.update.loss_lengths(small, 320) == ()  # only a loaded (causal) model
    for bad in ("grpo.model.length_buckets=[0]", "grpo.model.length_buckets=often"):
        with pytest.raises(config_lib.ConfigError, match="model.length_buckets"):
            config_lib.load_config(os.path.join(ROOT, "configs", "grpo_lm_reverse.yaml"), [bad])


def test_shared_prefix_needs_whole_groups_per_micro_batch(lora):
    """Minibatches shuffle whole groups; a split that would cut a group falls back to the unshared pass."""
    policy = lora["setup"].policy
    assert grpo.update.shared_prefix_group(policy, _cfg(micro=2)) == 4  # 2 prompts, 2 micro-batches of 1 group
    assert grpo.update.shared_prefix_group(policy, _cfg(micro=4)) == 1  # 2 rows per micro-batch: half a group
    assert grpo.update.shared_prefix_group(policy._replace(token_logp_shared=None), _cfg()) == 1


def _eager_to_stop(policy, end_of_turn: int, bias: float):
    """``policy`` whose logits favour ending the turn: rows stop at different steps."""
    def extend(params, cache, tokens, pos):
        cache, logits = policy.extend(params, cache, tokens, pos)
        return cache, logits.at[..., end_of_turn].add(bias)
    return policy._replace(extend=extend)


@pytest.mark.parametrize("env_id", ["text/Reverse-v0", "text/AlphabetSortTurns-v0"])
def test_decoding_stops_when_every_row_has_stopped_with_the_same_samples(lora, dialogues, env_id):
    """The decode loop that ends once every row has ended its turn samples the dialogues of
    the loop that runs every step, key for key (later turns and env draws included)."""
    task = lora["task"] if env_id == "text/Reverse-v0" else dialogues["task"]
    params = task.default_params if env_id != "text/Reverse-v0" else lora["params"]
    policy = _eager_to_stop(lora["setup"].policy, task.end_of_turn, 4.0)
    pp = grpo.update.acting_params(lora["state"])
    keys = jnp.repeat(jax.random.split(jax.random.PRNGKey(1), 4), 2, axis=0)
    fixed, ragged = jax.jit(lambda pp: [grpo.rollout.dialogue_rollout(  # one program, one compile
        policy, task, params, pp, keys, jax.random.PRNGKey(2), jnp.float32(1.0), stop_early=stop) for stop in (False, True)])(pp)
    mask = np.asarray(fixed.mask)
    lengths = np.asarray(fixed.length)
    assert lengths.min() < task.max_turn_tokens * task.max_turns  # some rows did stop early
    np.testing.assert_array_equal(np.asarray(ragged.obs), np.asarray(fixed.obs))
    np.testing.assert_array_equal(np.asarray(ragged.mask), mask)
    np.testing.assert_array_equal(np.asarray(ragged.logp)[mask], np.asarray(fixed.logp)[mask])
    np.testing.assert_array_equal(np.asarray(ragged.returns), np.asarray(fixed.returns))
    np.testing.assert_array_equal(np.asarray(ragged.length), lengths)
    if task.max_turns > 1:
        assert int(np.max(np.asarray(fixed.turns))) > 1


def test_every_loss_variant_on_a_loaded_models_dialogue_batch(dialogues):
    """The six losses on the log-probs of a loaded model's dialogues: finite, with a
    gradient, none of it from env reply slots or a turn's unused slots."""
    ro, logp, hyper = dialogues["ro"], dialogues["logp"], dialogues["state"].hyper
    adv = jnp.where(jnp.arange(ro.mask.shape[0]) % 2 == 0, 1.0, -1.0)
    mask = np.asarray(ro.mask)
    for loss_type in ("grpo", "dr_grpo", "dapo", "rloo", "cispo", "gspo"):
        def loss(lp, loss_type=loss_type):
            return grpo.losses.policy_loss(lp, ro.logp, None, adv, ro.mask, hyper, loss_type)[0]

        value, grad = jax.value_and_grad(loss)(logp)
        grad = np.asarray(grad)
        assert np.isfinite(float(value)) and np.all(np.isfinite(grad)), loss_type
        assert np.abs(grad[mask]).sum() > 0 and np.all(grad[~mask] == 0), loss_type


def test_lora_update_trains_adapters_only_and_kl_reference_is_the_base(lora):
    state = lora["state"]
    assert state.ref_params is None and state.frozen is not None  # no copy of the model
    new, metrics = lora["learn"](state, lora["collected"])
    assert all(np.isfinite(float(v)) for v in metrics.values()), metrics
    moved = [float(jnp.max(jnp.abs(a - b))) for a, b in zip(jax.tree_util.tree_leaves(new.params), jax.tree_util.tree_leaves(state.params))]
    assert max(moved) > 0
    for a, b in zip(jax.tree_util.tree_leaves(new.frozen), jax.tree_util.tree_leaves(state.frozen)):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))
    # the first update starts at the reference (adapters' B = 0): KL is exactly 0
    assert abs(float(metrics["kl"])) < 1e-6


def test_full_finetune_update_moves_the_weights(lora):
    setup = _setup(lora["task"], lora["params"], _cfg(loss="grpo", beta=0.0, rank=0))
    state = grpo.update.init(setup, jax.random.PRNGKey(0))
    assert state.frozen is None and state.params["embed_tokens"].dtype == jnp.float32
    new, metrics = jax.jit(functools.partial(grpo.update.learn, setup))(state, lora["collected"])  # same dialogues
    assert np.isfinite(float(metrics["loss"])) and float(metrics["grad_norm"]) > 0
    assert float(jnp.max(jnp.abs(new.params["layers"]["q_proj"]["kernel"] - state.params["layers"]["q_proj"]["kernel"]))) > 0


def test_micro_batches_accumulate_the_same_gradient(lora):
    """Two micro-batches of 4 sequences give the gradient of the whole minibatch of 8
    (per-sequence loss and KL: equal slices average exactly)."""
    _, batch, _ = lora["collected"]
    grads = []
    for micro in (1, 2):
        setup = _setup(lora["task"], lora["params"], _cfg(loss="grpo", micro=micro))
        fn = jax.jit(lambda b, setup=setup: grpo.update._micro_grads(setup, lora["state"].hyper, lora["state"].frozen, lora["state"].params, b))
        grads.append(fn(batch)[1])
    assert max(float(jnp.max(jnp.abs(g))) for g in jax.tree_util.tree_leaves(grads[0])) > 0
    for a, b in zip(jax.tree_util.tree_leaves(grads[0]), jax.tree_util.tree_leaves(grads[1])):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), atol=1e-6)


def test_the_lm_recipe_builds_through_the_config_machinery():
    from jaxrl.run import trainer

    cfg = config_lib.load_config(os.path.join(ROOT, "configs", "grpo_lm_reverse.yaml"))
    built = trainer.build(cfg)
    assert built.envs.env.name == "text/Reverse-v0@tokenizer"
    with pytest.raises(config_lib.ConfigError, match="env.tokenizer: .*tokenizer.json: file not found"):
        trainer.build(config_lib.load_config(os.path.join(ROOT, "configs", "grpo_lm_reverse.yaml"), ["env.tokenizer.path=/nonexistent"]))
    with pytest.raises(config_lib.ConfigError, match="vocabulary"):  # the task still in its own ids
        trainer.build(config_lib.load_config(os.path.join(ROOT, "configs", "grpo_lm_reverse.yaml"), ["env.tokenizer=null"]))
    forced = trainer.build(config_lib.load_config(os.path.join(ROOT, "configs", "grpo_lm_reverse.yaml"),
                                                  ["grpo.model.remat=true", "grpo.model.head_chunk=4", "grpo.micro_batches=2"]))
    assert forced.program.lm.notes == ("loss pass: remat on, LM head in chunks of 4 positions, 2 micro-batches (as configured)",)
    assert forced.program.lm.chosen == ()  # nothing left to the machine: nothing for a resume to keep
    for bad in ("grpo.model.remat=sometimes", "grpo.model.head_chunk=-1"):
        with pytest.raises(config_lib.ConfigError, match=bad.split("=")[0].removeprefix("grpo.")):
            config_lib.load_config(os.path.join(ROOT, "configs", "grpo_lm_reverse.yaml"), [bad])


class _Kill(BaseException):
    """A crash nothing in the trainer handles (kill -9)."""


def test_jaxrl_train_with_lora_resumes_bit_for_bit_after_a_kill(tmp_path, capsys):
    """The LM recipe through the run machinery (jaxrl train): killed at its second checkpoint
    and resumed, it ends bit for bit where the uninterrupted run ends. The run's log says how
    the loss pass runs (a tiny model fits: no remat, the head whole, one micro-batch); the
    resume keeps those choices on a machine where the plan would choose others."""
    from jaxrl.run import trainer

    overrides = ["grpo.num_updates=3", "train.updates_per_chunk=1", "train.checkpoint_every=1", "train.progress=false",
                 "grpo.num_prompts=2"]
    cfg = config_lib.load_config(os.path.join(ROOT, "configs", "grpo_lm_reverse.yaml"), overrides)
    straight = trainer.run(cfg, run_dir=str(tmp_path / "straight"), evaluate=False)
    assert "jaxrl: loss pass: remat off, LM head whole, 1 micro-batch (estimate " in capsys.readouterr().out
    real_save, calls = Checkpoints.save, []

    def crashing_save(self, step, state):
        calls.append(step)
        if len(calls) == 2:
            raise _Kill
        return real_save(self, step, state)

    with pytest.MonkeyPatch.context() as mp, pytest.raises(_Kill):
        mp.setattr(Checkpoints, "save", crashing_save)
        trainer.run(cfg, run_dir=str(tmp_path / "resumed"), evaluate=False)
    chosen = {"grpo.micro_batches": 1, "grpo.model.remat": False, "grpo.model.head_chunk": 0}
    assert Checkpoints(str(tmp_path / "resumed" / "checkpoints"), read_only=True).record(1)["meta"]["chosen"] == chosen
    from jaxrl.models.lm import memory

    with pytest.MonkeyPatch.context() as mp:  # a smaller machine: its own plan would remat and slice the batch
        mp.setattr(memory, "available_bytes", lambda: (2**20, "a small device"))
        assert dict(trainer.build(cfg).program.lm.chosen) != chosen
        resumed = trainer.run(resume=str(tmp_path / "resumed"), evaluate=False)
    out = capsys.readouterr().out
    assert ("jaxrl: grpo.micro_batches=1, grpo.model.remat=False, grpo.model.head_chunk=0: as chosen when the run "
            "started (recorded in its checkpoint)") in out
    assert resumed.updates == straight.updates == 3
    for x, y in zip(jax.tree_util.tree_leaves(straight.state), jax.tree_util.tree_leaves(resumed.state)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    # the trained model out as a Hugging Face directory: merged LoRA equals base + adapters
    from jaxrl.models import lm
    from jaxrl.run.export import export_hf

    out = export_hf(str(tmp_path / "resumed"), str(tmp_path / "hf"))
    model, merged = lm.load_lm(out)
    state = jax.tree_util.tree_map(lambda x: x[0], resumed.state)
    ids = jnp.asarray([[397, 397, 398, 20, 21, 28, 399], [398, 15, 16, 17, 18, 28, 399]], jnp.int32)
    mask = ids != 397
    want = model.apply(state.frozen, ids, mask, lora=state.params)
    np.testing.assert_allclose(np.asarray(model.apply(merged, ids, mask))[np.asarray(mask)], np.asarray(want)[np.asarray(mask)], atol=1e-4)
    peft = export_hf(str(tmp_path / "resumed"), str(tmp_path / "peft"), adapters_only=True)
    assert sorted(os.listdir(peft)) == ["adapter_config.json", "adapter_model.safetensors"]
