"""Asynchronous GRPO (``grpo.off_policy``): the parameter-ring schedule, the TIS / MIS
importance weights against hand computations, the weighted loss and its gradient, staleness 0
equal to on-policy GRPO bit for bit, the overlapped schedule equal to the plain one, stale runs
that train with finite off-policy metrics, and ``jaxrl train --resume`` after kills continuing
bit for bit at k = 4 and at k = 1 overlapped (the ring and the batch in flight are in the state)."""

from __future__ import annotations

import json
import math
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl
from jaxrl.algos import grpo
from jaxrl.algos.contract import EnvSetup
from jaxrl.algos.grpo import offpolicy
from jaxrl.algos.grpo.config import GRPOHyper, LossConfig, ModelConfig, OffPolicyConfig, SamplingConfig
from jaxrl.run import config as config_lib
from jaxrl.run.checkpoint import Checkpoints

import fast_compile

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
LN = math.log


# --- the schedule -------------------------------------------------------------------------------

def test_ring_samples_update_t_with_the_parameters_of_update_t_minus_k():
    """The parameters at update s's start stand as the number s: update t samples with max(t - k, 0)."""
    for k in (1, 2, 3):
        ring = offpolicy.init_ring(jnp.float32(0.0), k)
        assert ring.shape == (k,)
        for t in range(8):
            step = jnp.int32(t)
            assert float(offpolicy.behaviour_slot(ring, step, k)) == max(t - k, 0), (k, t)
            assert int(offpolicy.version(step, k)) == max(t - k, 0)
            ring = offpolicy.push(ring, step, jnp.float32(t), k)  # the parameters at update t's start
    assert offpolicy.init_ring({"w": jnp.ones(3)}, 0) is None and offpolicy.push(None, jnp.int32(0), 1.0, 0) is None


def test_init_from_fills_every_ring_slot_with_the_loaded_parameters():
    """``jaxrl train --init-from`` (the program's ``load_params``): the ring restarts from the
    loaded parameters, not from the fresh random ones."""
    fresh_params = {"w": jnp.zeros((3,), jnp.float32), "b": jnp.zeros((), jnp.float32)}
    fresh = grpo.GRPOState(fresh_params, None, None, None, jax.random.PRNGKey(0), jnp.int32(0), jnp.int32(0), None,
                           offpolicy.init_ring(fresh_params, 3))
    trained = fresh.replace(params={"w": jnp.arange(3.0), "b": jnp.float32(5.0)}, behaviour=None)
    loaded = grpo.load_params(fresh, trained)
    np.testing.assert_array_equal(np.asarray(loaded.behaviour["w"]), np.tile(np.arange(3.0), (3, 1)))
    np.testing.assert_array_equal(np.asarray(loaded.behaviour["b"]), [5.0, 5.0, 5.0])
    assert grpo.load_params(fresh.replace(behaviour=None), trained).behaviour is None


# --- the weights --------------------------------------------------------------------------------

# two sequences: token ratios pi_old / pi_b of 0.5, 2, 4 (a fourth token masked out) and 1, 0.5
OLD = jnp.asarray([[LN(0.5), LN(2.0), LN(4.0), 5.0], [0.0, LN(0.5), 0.0, 0.0]], jnp.float32)
BEHAVIOUR = jnp.zeros((2, 4), jnp.float32)
MASK = jnp.asarray([[1, 1, 1, 0], [1, 1, 0, 0]], jnp.bool_)
R = np.array([0.5, 2.0, 4.0, 1.0, 0.5])  # the counted tokens' ratios
KL = float(np.mean(R - 1.0 - np.log(R)))


def _weights(correction, level, cap=3.0):
    w, m = offpolicy.importance_weights(OLD, BEHAVIOUR, MASK, correction, level, cap)
    return np.asarray(w), {k: float(v) for k, v in m.items()}


@pytest.mark.parametrize("correction, want, clipped, masked", [
    ("tis", [[0.5, 2.0, 3.0, 0.0], [1.0, 0.5, 0.0, 0.0]], 0.2, 0.0),
    ("mis", [[0.5, 2.0, 0.0, 0.0], [1.0, 0.5, 0.0, 0.0]], 0.0, 0.2),
    ("none", [[1.0, 1.0, 1.0, 0.0], [1.0, 1.0, 0.0, 0.0]], 0.0, 0.0),
])
def test_token_level_weights_by_hand(correction, want, clipped, masked):
    w, m = _weights(correction, "token")
    np.testing.assert_allclose(w, want, rtol=1e-6)
    assert m["off_policy/clipped_frac"] == pytest.approx(clipped) and m["off_policy/masked_frac"] == pytest.approx(masked)
    assert m["off_policy/ess"] == pytest.approx(R.sum() ** 2 / (5 * (R**2).sum()), rel=1e-6)  # 64 / 107.5
    assert m["off_policy/kl"] == pytest.approx(KL, rel=1e-5)
    assert m["off_policy/weight_mean"] == pytest.approx(np.sum(want) / 5, rel=1e-6)


@pytest.mark.parametrize("correction, first, clipped, masked", [("tis", 3.0, 0.5, 0.0), ("mis", 0.0, 0.0, 0.5)])
def test_sequence_level_weights_by_hand(correction, first, clipped, masked):
    """Sequence weights are the products 0.5 * 2 * 4 = 4 (above the cap 3) and 1 * 0.5."""
    w, m = _weights(correction, "sequence")
    np.testing.assert_allclose(w, [[first] * 3 + [0.0], [0.5, 0.5, 0.0, 0.0]], rtol=1e-6)
    assert m["off_policy/clipped_frac"] == clipped and m["off_policy/masked_frac"] == masked
    assert m["off_policy/ess"] == pytest.approx(4.5**2 / (2 * 16.25), rel=1e-6)
    assert m["off_policy/kl"] == pytest.approx(KL, rel=1e-5)  # per token whatever the level


@pytest.mark.parametrize("correction", ["tis", "mis"])
@pytest.mark.parametrize("level", ["token", "sequence"])
def test_on_policy_weights_are_exactly_one_and_nothing_is_cut(correction, level):
    logp = jnp.asarray([[-0.3, -2.0, -7.5], [-1e-6, -30.0, -0.1]], jnp.float32)
    mask = jnp.asarray([[1, 1, 0], [1, 1, 1]], jnp.bool_)
    w, m = offpolicy.importance_weights(logp, logp, mask, correction, level, 1.0)  # the tightest cap
    assert np.array_equal(np.asarray(w), np.asarray(mask, np.float32))
    assert {k: float(v) for k, v in m.items()} == {
        "off_policy/ess": 1.0, "off_policy/kl": 0.0, "off_policy/clipped_frac": 0.0, "off_policy/masked_frac": 0.0,
        "off_policy/weight_mean": 1.0}


def test_the_weight_multiplies_each_tokens_surrogate_and_its_gradient_not_the_kl():
    """At ratio 1 the dapo loss is -sum_t w_t A m / sum m; its gradient in logp_t is -w_t A m / sum m."""
    hyper = GRPOHyper(*(jnp.float32(x) for x in (0.2, 0.28, 0.5, 1.0)))
    logp = jnp.asarray([[-1.0, -2.0, -0.5], [-0.7, -0.2, -3.0]], jnp.float32)
    adv = jnp.asarray([1.5, -2.0], jnp.float32)
    mask = jnp.asarray([[1, 1, 1], [1, 1, 0]], jnp.bool_)
    w = jnp.asarray([[0.5, 2.0, 3.0], [1.0, 0.0, 0.0]], jnp.float32)
    ref = logp - 0.1  # a non-zero KL term, not weighted

    def loss(lp, weight):
        return grpo.losses.policy_loss(lp, logp, ref, adv, mask, hyper, "dapo", is_weight=weight)[0]

    kl = float(np.sum(np.exp(-0.1) + 0.1 - 1.0) / 1.0)  # per counted token, the same on each
    pg = -(0.5 * 1.5 + 2.0 * 1.5 + 3.0 * 1.5 + 1.0 * -2.0) / 5
    assert float(loss(logp, w)) == pytest.approx(pg + 0.5 * kl, rel=1e-5)
    assert float(loss(logp, jnp.ones_like(w))) == float(loss(logp, None))
    g_w = np.asarray(jax.grad(loss)(logp, w)) - np.asarray(jax.grad(loss)(logp, jnp.zeros_like(w)))  # the KL part cancels
    want = -np.asarray(w) * np.asarray(adv)[:, None] * np.asarray(mask) / 5
    np.testing.assert_allclose(g_w, want, rtol=1e-5, atol=1e-7)


# --- the update ---------------------------------------------------------------------------------

def _states_after(*off_policies, updates=2, beta=0.0):
    """GRPO on CartPole (the smallest program: an MLP, 16 steps) with each of ``off_policies``:
    ``[(state, metrics of the last update)]`` after ``updates`` updates, every run in one program
    (one compile) at -O0 (tests/fast_compile.py): the comparisons keep their meaning."""
    env, params = jaxrl.make("CartPole-v1")
    setups = [grpo.make_setup(EnvSetup(env, params, params), grpo.GRPOConfig(
        num_prompts=2, group_size=2, sampling=SamplingConfig(max_steps=16), model=ModelConfig(hidden=(8,)), off_policy=op,
        loss=LossConfig(beta=beta))) for op in off_policies]

    def runs(key):
        out = []
        for setup in setups:
            state, metrics = jax.lax.scan(lambda s, _: grpo.update.update(setup, s), grpo.update.init(setup, key), None,
                                          length=updates)
            out.append((state, jax.tree_util.tree_map(lambda m: m[-1], metrics)))
        return out

    return jax.jit(runs, compiler_options=fast_compile.OPTIONS)(jax.random.PRNGKey(3))


def test_staleness_0_is_on_policy_grpo_bit_for_bit():
    (plain, plain_m), (zero, zero_m) = _states_after(
        OffPolicyConfig(), OffPolicyConfig(staleness=0, correction="mis", level="sequence", cap=1.0))
    assert zero.behaviour is None
    assert jax.tree_util.tree_structure(plain) == jax.tree_util.tree_structure(zero)
    for x, y in zip(jax.tree_util.tree_leaves(plain), jax.tree_util.tree_leaves(zero)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert {k: float(v) for k, v in plain_m.items()} == {k: float(v) for k, v in zero_m.items()}
    assert not any(k.startswith("off_policy/") for k in zero_m)


def test_the_overlapped_schedule_equals_the_plain_one_bit_for_bit():
    """``off_policy.overlap`` on one device (generation and learning one after the other; on
    two, tests/test_algo_conformance.py's grpo_async case holds them equal to one): the same
    parameters, ring and records as the plain schedule at the same staleness, with a KL term
    (beta > 0: the reference pass of the batch in flight runs beside its generation)."""
    (plain, plain_m), (overlapped, overlapped_m) = _states_after(
        OffPolicyConfig(staleness=1), OffPolicyConfig(staleness=1, overlap=True), updates=3, beta=0.04)
    assert plain.pending is None and overlapped.pending is not None and overlapped.pending_ref is not None
    assert overlapped.pending_ref.shape == overlapped.pending.logp.shape
    assert float(plain_m["kl"]) > 0
    for x, y in zip(jax.tree_util.tree_leaves(plain),
                    jax.tree_util.tree_leaves(overlapped.replace(pending=None, pending_ref=None))):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    assert {k: float(v) for k, v in plain_m.items()} == {k: float(v) for k, v in overlapped_m.items()}


@pytest.mark.parametrize("epochs", [1, 2])
def test_the_first_minibatch_step_gives_its_rows_pi_old(epochs):
    """A stale batch's pi_old (the ratio's denominator, the weights' numerator) comes, for the
    rows of an update's first minibatch step, from that step's own loss pass (it runs at the
    update's start parameters), and for the other rows from one pass of their own (all rows,
    with more than one epoch): the update equals one on the same batch with every row's pi_old
    computed beforehand, to float rounding, and logs the whole batch's off-policy metrics."""
    env, params = jaxrl.make("CartPole-v1")
    setup = grpo.make_setup(EnvSetup(env, params, params), grpo.GRPOConfig(
        num_prompts=4, group_size=2, num_minibatches=2, num_epochs=epochs, sampling=SamplingConfig(max_steps=16),
        model=ModelConfig(hidden=(8,)), off_policy=OffPolicyConfig(staleness=1, correction="tis", cap=1.02),
        loss=LossConfig(beta=0.04), optim=grpo.config.GRPOOptim(lr=0.05)))
    update = grpo.update

    def both(key):
        state = jax.lax.scan(lambda s, _: update.update(setup, s), update.init(setup, key), None, length=2)[0]
        _, k_collect, _ = jax.random.split(state.key, 3)
        ro, batch, metrics = update.collect(setup, state, k_collect)
        old = update._old_logp(setup, state.hyper, update.acting_params(state), batch, setup.cfg.group_size)
        ours = update.learn(setup, state, (ro, batch, dict(metrics)))
        ahead = update.learn(setup, state, (ro, batch.replace(old_logp=old, fresh=None), dict(metrics)))
        _, want = offpolicy.importance_weights(old, batch.behaviour_logp, batch.mask, "tis", "token", 1.02)
        return ours, ahead, want, batch

    (ours, ours_m), (ahead, ahead_m), want, batch = jax.jit(both, compiler_options=fast_compile.OPTIONS)(
        jax.random.PRNGKey(3))
    assert bool(jnp.all(batch.fresh)) and batch.behaviour_logp is not None  # pi_old is left to learn
    assert float(want["off_policy/kl"]) > 0 and float(want["off_policy/clipped_frac"]) > 0  # a stale batch, some cut
    for x, y in zip(jax.tree_util.tree_leaves(ours), jax.tree_util.tree_leaves(ahead)):
        np.testing.assert_allclose(np.asarray(x), np.asarray(y), rtol=1e-5, atol=1e-6)
    assert not any(k.startswith("_") for k in ours_m)
    for k, v in want.items():
        assert float(ours_m[k]) == pytest.approx(float(v), rel=1e-5, abs=1e-7), k
        assert float(ahead_m[k]) == pytest.approx(float(v), rel=1e-5, abs=1e-7), k
    for k in ("loss", "kl", "clip_ratio/region_mean", "grad_norm"):
        assert float(ours_m[k]) == pytest.approx(float(ahead_m[k]), rel=1e-5, abs=1e-7), k


def test_overlap_refuses_a_mesh_it_cannot_split_in_two():
    env, params = jaxrl.make("CartPole-v1")
    cfg = grpo.GRPOConfig(num_prompts=4, group_size=2, sampling=SamplingConfig(max_steps=4), model=ModelConfig(hidden=(8,)),
                          off_policy=OffPolicyConfig(staleness=1, overlap=True))
    setup = grpo.make_setup(EnvSetup(env, params, params), cfg)
    state = jax.eval_shape(lambda k: grpo.update.init(setup, k), jax.random.PRNGKey(0))
    with jax.sharding.use_abstract_mesh(jax.sharding.AbstractMesh((4,), ("data",))), pytest.raises(ValueError) as err:
        jax.eval_shape(lambda s: grpo.update.update(setup, s), state)
    assert str(err.value).startswith("off_policy.overlap: generation and learning take one device each of a 2-device")
    assert "this run's mesh is data=4" in str(err.value)


# --- through jaxrl train: stale runs train, are killed, resume bit for bit -------------------------

class _Kill(BaseException):
    """A crash nothing in the trainer handles (kill -9)."""


#: GRPO on CartPole (an MLP: the cheapest program through ``jaxrl train``), a checkpoint per update.
OVERRIDES = ["train.updates_per_chunk=1", "train.checkpoint_every=1", "train.keep_checkpoints=6", "train.progress=false",
             "grpo.num_prompts=4", "grpo.group_size=4", "grpo.num_epochs=1", "grpo.num_minibatches=1",
             "grpo.model.hidden=[8]", "grpo.sampling.max_steps=16", "grpo.off_policy.correction=tis",
             "grpo.off_policy.cap=1.02"]
#: Per run: its overrides and the checkpoint writes (counted over the whole sequence of runs) that
#: crash. k = 4: 6 updates, so updates 4 and 5 sample with the parameters of updates 0 and 1 from a
#: ring that has wrapped; killed writing the checkpoint after update 2, resumed from the one after
#: update 1, killed again writing the one after update 4, resumed from the one after update 3 (its
#: ring: the parameters at the starts of updates 0-3) to the end. k = 1 with overlap: killed writing
#: the checkpoint after update 2, resumed from the one after update 1, which holds update 1's batch
#: in flight (sampled during update 0).
STALE_RUNS = {
    "k4": (["grpo.num_updates=6", "grpo.off_policy.staleness=4"], (2, 5)),
    "k1_overlap": (["grpo.num_updates=3", "grpo.off_policy.staleness=1", "grpo.off_policy.overlap=true"], (2,)),
}


@pytest.fixture(scope="module")
def stale_runs(tmp_path_factory):
    """CartPole's GRPO recipe at each of :data:`STALE_RUNS`, straight and killed then resumed (one
    compiled chunk per run, shared through the session's compilation cache; every run compiled
    alike, at -O0: tests/fast_compile.py)."""
    from jaxrl.algos.common import train
    from jaxrl.run import trainer

    tmp = tmp_path_factory.mktemp("async")
    saved = dict(train.COMPILER_OPTIONS)
    train.COMPILER_OPTIONS.update(fast_compile.OPTIONS)  # in place: the modules that read it hold the dict
    try:
        return {name: _stale_runs(trainer, config_lib.load_config(os.path.join(ROOT, "configs", "grpo_cartpole.yaml"),
                                                                  OVERRIDES + sets), tmp / name, kills)
                for name, (sets, kills) in STALE_RUNS.items()}
    finally:
        train.COMPILER_OPTIONS.clear()
        train.COMPILER_OPTIONS.update(saved)


def _stale_runs(trainer, cfg, tmp, kills):
    straight = trainer.run(cfg, run_dir=str(tmp / "straight"), evaluate=False)
    real_save, calls = Checkpoints.save, []

    def crashing_save(self, step, state):
        calls.append(step)
        if len(calls) in kills:
            raise _Kill
        return real_save(self, step, state)

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(Checkpoints, "save", crashing_save)
        for i in range(len(kills)):
            with pytest.raises(_Kill):
                if i == 0:
                    trainer.run(cfg, run_dir=str(tmp / "resumed"), evaluate=False)
                else:
                    trainer.run(resume=str(tmp / "resumed"), evaluate=False)
    resumed = trainer.run(resume=str(tmp / "resumed"), evaluate=False)
    read = lambda d: [json.loads(line) for line in open(tmp / d / "metrics.jsonl")]  # noqa: E731
    return dict(straight=straight, resumed=resumed, log=read("straight"), resumed_log=read("resumed"), calls=calls,
                checkpoints=str(tmp / "straight" / "checkpoints"))


def test_a_stale_run_trains_and_logs_finite_off_policy_metrics(stale_runs):
    for name, k in (("k4", 4), ("k1_overlap", 1)):
        log = stale_runs[name]["log"]
        assert [r["off_policy/staleness"] for r in log] == [float(min(t, k)) for t in range(len(log))]
        for r in log:
            for key in ("off_policy/ess", "off_policy/kl", "off_policy/clipped_frac", "off_policy/masked_frac", "loss",
                        "grad_norm"):
                assert math.isfinite(r[key]), (key, r)
            assert r["off_policy/masked_frac"] == 0.0 and 0.0 < r["off_policy/ess"] <= 1.0
        assert log[0]["off_policy/ess"] == 1.0 and log[0]["off_policy/kl"] == 0.0  # update 0 samples with its own start
        assert log[0]["off_policy/clipped_frac"] == 0.0
        assert all(r["off_policy/kl"] > 0 for r in log[1:])  # update 0 moved the parameters: every later batch is stale
        assert any(r["off_policy/clipped_frac"] > 0 for r in log[1:])  # a cap of 1.02 truncates some


def test_the_ring_holds_the_parameters_of_the_last_k_updates_starts(stale_runs):
    """After 6 updates at k = 4 the ring's slot s mod 4 holds the parameters at update s's start,
    s = 2..5: the states checkpointed after s updates."""
    final = stale_runs["k4"]["straight"].state  # [seeds, ...]
    with Checkpoints(stale_runs["k4"]["checkpoints"], read_only=True) as ckpts:
        for step in (2, 3, 4, 5):
            saved = ckpts.restore(final, step)
            ring = jax.tree_util.tree_map(lambda r: r[:, step % 4], final.behaviour)
            for x, y in zip(jax.tree_util.tree_leaves(ring), jax.tree_util.tree_leaves(saved.params)):
                np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    leaf = np.asarray(jax.tree_util.tree_leaves(final.behaviour)[0])
    assert all(not np.array_equal(leaf[:, i], leaf[:, j]) for i in range(4) for j in range(i))


@pytest.mark.parametrize("name, calls", [("k4", [1, 2, 2, 3, 4]), ("k1_overlap", [1, 2])])
def test_jaxrl_train_with_staleness_resumes_bit_for_bit_after_kills(stale_runs, name, calls):
    """k = 4 killed twice, k = 1 with overlap (the batch in flight in the checkpoint) once: the
    final state, the batch in flight included, and every record equal the straight run's."""
    run = stale_runs[name]
    straight, resumed = run["straight"], run["resumed"]
    assert run["calls"] == calls  # the checkpoint writes up to the last kill: each resume rewrites the one its kill cut
    assert resumed.updates == straight.updates == len(run["log"])
    assert (straight.state.pending is not None) == (name == "k1_overlap")
    for x, y in zip(jax.tree_util.tree_leaves(straight.state), jax.tree_util.tree_leaves(resumed.state)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    drop = lambda log: [{k: v for k, v in r.items() if "time" not in k} for r in log]  # noqa: E731
    assert drop(run["resumed_log"]) == drop(run["log"])


def test_off_policy_keys_are_checked_with_one_line_errors():
    path = os.path.join(ROOT, "configs", "grpo_reverse.yaml")
    for override, words in [("grpo.off_policy.staleness=-1", "grpo.off_policy.staleness: must be an integer >= 0"),
                            ("grpo.off_policy.cap=0.5", "grpo.off_policy.cap: must be a finite number >= 1"),
                            ("grpo.off_policy.correction=is", "grpo.off_policy.correction"),
                            ("grpo.off_policy.level=tokens", "grpo.off_policy.level"),
                            ("grpo.off_policy.overlap=true", "grpo.off_policy.overlap: needs staleness >= 1"),
                            ("grpo.off_policy.overlap=2", "grpo.off_policy.overlap")]:
        with pytest.raises(config_lib.ConfigError) as err:
            config_lib.load_config(path, [override])
        assert words in str(err.value) and "\n" not in str(err.value), override


# --- against TRL ----------------------------------------------------------------------------------

def trl_is_ratio(old, sampling, mask, mode, cap):
    """TRL's vLLM importance-sampling ratio (``_generate_and_score_completions``), transcribed."""
    diff = (old - sampling) * mask
    if mode.startswith("sequence"):
        diff = diff.sum(-1, keepdims=True)
    ratio = np.exp(diff)
    return np.minimum(ratio, cap) if mode.endswith("truncate") else np.where(ratio > cap, 0.0, ratio)


def trl_loss_is(logp, old, ref, adv, mask, loss_type, eps_low, eps_high, beta, is_ratio, level="token", max_len=None,
                detached=None):
    """TRL's ``_compute_loss`` with ``vllm_importance_sampling_correction`` (float64): the ratio
    multiplies the per-token loss after the surrogate, before the KL term is added. ``detached``:
    the log-probs cispo's clamped weight is taken at (TRL's ``.detach()``), default ``logp``."""
    m = mask.astype(np.float64)
    log_ratio = logp - old
    log_w = log_ratio if level == "token" else ((log_ratio * m).sum(-1) / np.maximum(m.sum(-1), 1.0))[:, None]
    coef_1 = np.exp(log_w)
    if loss_type == "cispo":
        detached_coef = coef_1 if detached is None else np.exp(detached - old)
        per_token_loss = -np.minimum(detached_coef, eps_high) * adv[:, None] * logp
    else:
        coef_2 = np.clip(coef_1, 1 - eps_low, 1 + eps_high)
        per_token_loss = -np.minimum(coef_1 * adv[:, None], coef_2 * adv[:, None])
    per_token_loss = per_token_loss * is_ratio
    if beta != 0.0:
        per_token_loss = per_token_loss + beta * (np.exp(ref - logp) - (ref - logp) - 1)
    if loss_type == "grpo":
        return ((per_token_loss * m).sum(-1) / np.maximum(m.sum(-1), 1.0)).mean()
    if loss_type == "dr_grpo":
        return (per_token_loss * m).sum() / (per_token_loss.shape[0] * max_len)
    return (per_token_loss * m).sum() / m.sum()


# (our loss type, TRL's loss_type, TRL's importance_sampling_level, TRL's vllm_importance_sampling_mode):
# every mode with dapo, every other variant with one mode
TRL_CASES = [("dapo", "dapo", "token", m) for m in ("token_truncate", "token_mask", "sequence_truncate", "sequence_mask")] + [
    ("grpo", "grpo", "token", "token_mask"), ("dr_grpo", "dr_grpo", "token", "sequence_truncate"),
    ("cispo", "cispo", "token", "token_truncate"), ("gspo", "grpo", "sequence", "sequence_mask")]


@pytest.mark.parametrize("ours, theirs, level, mode", TRL_CASES)
def test_tis_and_mis_loss_and_gradient_equal_trls_in_float64(ours, theirs, level, mode):
    from test_grpo_trl import ADV, LOGP, MASK, OLD, REF, T, numeric_grad

    rng = np.random.default_rng(7)
    sampling = OLD + rng.uniform(-0.6, 0.4, OLD.shape)  # token weights in [0.67, 1.8], some sequences above the cap
    cap, beta = 1.5, 0.04
    eps_low, eps_high = (3e-2, 4e-2) if ours == "gspo" else (0.2, 0.28)
    correction, w_level = ("tis" if mode.endswith("truncate") else "mis"), mode.split("_")[0]
    with jax.enable_x64(True):
        hyper = GRPOHyper(*(jnp.float64(v) for v in (eps_low, eps_high, beta, 1.0)))
        w, _ = offpolicy.importance_weights(jnp.asarray(OLD), jnp.asarray(sampling), jnp.asarray(MASK), correction, w_level, cap)

        def mine(lp):
            return grpo.losses.policy_loss(lp, jnp.asarray(OLD), jnp.asarray(REF), jnp.asarray(ADV), jnp.asarray(MASK), hyper,
                                           ours, is_weight=w)[0]

        value, grad = jax.value_and_grad(mine)(jnp.asarray(LOGP))
        value, grad = float(value), np.asarray(grad)
    ratio = trl_is_ratio(OLD, sampling, MASK, mode, cap)
    raw = trl_is_ratio(OLD, sampling, MASK, mode, np.inf)
    assert np.any(raw > cap) and np.any((raw < cap) & (raw != 1.0))  # the cap bites somewhere, not everywhere
    trl_eps_high = 1 + eps_high if ours == "cispo" else eps_high  # TRL's cispo caps at epsilon_high itself
    theirs_fn = lambda lp: trl_loss_is(lp, OLD, REF, ADV, MASK, theirs, eps_low, trl_eps_high, beta, ratio, level, T,  # noqa: E731
                                       LOGP)
    assert value == pytest.approx(theirs_fn(LOGP), rel=1e-6)
    np.testing.assert_allclose(grad, numeric_grad(theirs_fn, LOGP), rtol=1e-6, atol=1e-9)
