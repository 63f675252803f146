"""check_env: every registered env passes; deliberately broken envs fail the right check."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import pytest

import jaxrl
from jaxrl.core import check
from jaxrl.core.check import CheckReport, check_env
from jaxrl.core.env import transition
from jaxrl_envs.cartpole import CartPole

# Physics envs compile for tens of seconds each, the gymnax suite holds 22 ids, Jumanji's 20
# and JaxMARL's 8 (20-50 s each, with their own multi-agent checks); their owners' tests run
# check_env over a representative subset (tests/test_brax.py, tests/test_mjx.py,
# tests/test_gymnax.py, tests/test_jumanji.py, tests/test_multiagent.py), so the sweep skips them.
HEAVY_NAMESPACES = ("brax/", "mjx/", "gymnax/", "jumanji/", "jaxmarl/")
SWEEP_IDS = [i for i in jaxrl.registered_ids() if not i.startswith(HEAVY_NAMESPACES)]
# XLA's backend at -O0, as tests/conftest.py sets it for every test: it compiles ~25% faster
# than the default and the verdicts do not depend on it.
FAST = {"xla_backend_optimization_level": 0}
SMALL = dict(num_steps=48, num_envs=6, verbose=False, compiler_options=FAST)


@pytest.mark.parametrize("env_id", SWEEP_IDS)
def test_registered_env_passes(env_id):
    env, params = jaxrl.make(env_id)
    report = check_env(env, params, **SMALL)
    assert report.passed, str(report)
    assert [c.name for c in report.checks] == [name for name, _ in check.CHECKS]
    assert report.steps_per_second > 0


def test_report_prints_one_line_per_check(capsys):
    env, params = jaxrl.make("ProbeConstant-v0")
    report = check_env(env, params, num_steps=8, num_envs=2)
    out = capsys.readouterr().out
    for c in report.checks:
        assert f"{c.status}  {c.name}" in out
    assert "throughput:" in out and "env steps/s" in out
    assert "all checks passed" in str(report)
    assert report["jit"].status == "PASS"
    with pytest.raises(KeyError, match="no check named"):
        report["nope"]


def test_bad_sizes_rejected():
    env = CartPole()
    with pytest.raises(ValueError, match="num_steps > 0"):
        check_env(env, num_steps=0, verbose=False)


# ----------------------------------------------------------------- broken envs
# Each breaks one promise of the contract; the comment says which check must catch it.


class _Broken(CartPole):
    """CartPole subclasses compare equal by type (CartPole's __eq__ is exact-type)."""

    def __eq__(self, other):
        return type(other) is type(self)

    def __hash__(self):
        return hash(type(self))


class WeakTimeFlip(_Broken):
    """reset's step counter is a weakly typed int32, step's a strong one: a weak-type flip
    (a scan carry would change type; jit retraces on the second step)."""

    def reset(self, key, params):
        state, ts = super().reset(key, params)
        return state.replace(time=jnp.asarray(0)), ts

    def step(self, key, state, action, params):
        state, ts = super().step(key, state, action, params)
        return state.replace(time=state.time.astype(jnp.int32)), ts


class NanOnInvalidAction(_Broken):
    """Valid actions are fine; any other action gives a NaN reward."""

    def step(self, key, state, action, params):
        state, ts = super().step(key, state, action, params)
        valid = (action == 0) | (action == 1)
        return state, ts.replace(reward=jnp.where(valid, ts.reward, jnp.nan))


class WrongObsShape(_Broken):
    """Consistently returns 5 numbers while the space promises 4."""

    @staticmethod
    def _obs(state):
        return jnp.stack([state.x, state.x_dot, state.theta, state.theta_dot, state.time.astype(jnp.float32)])


class TruncationOffByOne(_Broken):
    """Truncates one step after the limit (``>`` instead of ``>=``)."""

    def step(self, key, state, action, params):
        new, ts = super().step(key, state, action, params)
        return new, ts.replace(truncated=new.time > params.max_steps_in_episode)


class HiddenTraceCounter(_Broken):
    """Reads a Python counter at trace time: each trace bakes in a different reward."""

    traces = 0

    def step(self, key, state, action, params):
        HiddenTraceCounter.traces += 1
        new, ts = super().step(key, state, action, params)
        return new, ts.replace(reward=ts.reward + HiddenTraceCounter.traces)


class IntReward(_Broken):
    """Returns an int32 reward from step."""

    def step(self, key, state, action, params):
        new, ts = super().step(key, state, action, params)
        return new, transition(ts.obs, 0.0, ts.terminated, ts.truncated).replace(reward=jnp.int32(1))


class InfoKeyOnlyAtStep(_Broken):
    """``info`` has a key at step that reset does not have."""

    def step(self, key, state, action, params):
        new, ts = super().step(key, state, action, params)
        return new, ts.replace(info={"speed": jnp.abs(new.x_dot)})


class ClipRuleLie(_Broken):
    """Claims "clip" but pushes left for action 5 (clipping would give 1: push right)."""

    invalid_action_rule = "clip"


# Every check runs: exactly the expected ones fail.
# (env class, checks that must fail, a fragment of the first failure's message)
BROKEN = [
    (WeakTimeFlip, {"stable_types", "no_retrace"}, "int32[] (weak) vs int32[]"),
    (TruncationOffByOne, {"truncation"}, "truncated missing when the step counter reached the limit"),
    # vmap fails too: the vmapped trace bakes in another counter value.
    (HiddenTraceCounter, {"vmap", "determinism"}, "differs from unbatched"),
]
# Cheaper: a few checks run (``only=``, no rollout compile); exactly the expected ones fail.
CORE = ["timestep_dtypes", "stable_types", "info_structure"]
BROKEN_ONLY = [
    (NanOnInvalidAction, {"invalid_actions"}, CORE + ["invalid_actions"], "gives a non-finite"),
    (WrongObsShape, {"observation_space"}, CORE + ["observation_space"], "obs is float32[5], space is float32[4]"),
    (IntReward, {"timestep_dtypes", "stable_types"}, CORE, "step TimeStep.reward is int32[]"),
    (InfoKeyOnlyAtStep, {"info_structure"}, CORE, "tree structure changed"),
    (ClipRuleLie, {"invalid_actions"}, CORE + ["invalid_actions"], "do not act like their clipped values"),
]


@pytest.mark.parametrize("env_cls,expected,fragment", BROKEN, ids=[c.__name__ for c, *_ in BROKEN])
def test_broken_env_fails_the_right_check(env_cls, expected, fragment):
    env = env_cls()
    report = check_env(env, env.default_params, num_steps=16, num_envs=4, compiler_options=FAST, verbose=False)
    assert not report.passed
    assert set(report.failed_names()) == expected, str(report)
    assert fragment in report[report.failed_names()[0]].message, str(report)
    assert "FAILED" in str(report)


@pytest.mark.parametrize("env_cls,expected,only,fragment", BROKEN_ONLY, ids=[c.__name__ for c, *_ in BROKEN_ONLY])
def test_broken_env_fails_the_right_check_only(env_cls, expected, only, fragment):
    report = check_env(env_cls(), only=only, compiler_options=FAST, verbose=False)
    assert [c.name for c in report.checks] == [n for n, _ in check.CHECKS if n == "jit" or n in only]
    assert set(report.failed_names()) == expected, str(report)
    assert fragment in report[report.failed_names()[0]].message, str(report)


def test_only_rejects_unknown_check_names():
    with pytest.raises(ValueError, match="unknown check name"):
        check_env(CartPole(), only=["jitt"], verbose=False)


def test_env_that_cannot_jit_fails_cleanly():
    class PythonIf(_Broken):
        def step(self, key, state, action, params):
            if action == 1:  # concretises a tracer: not jittable
                action = 1
            return super().step(key, state, action, params)

    report = check_env(PythonIf(), num_steps=4, num_envs=2, verbose=False)
    assert report["jit"].status == "FAIL" and "if action == 1" in report["jit"].message
    assert isinstance(report, CheckReport)


def test_check_report_counts_traces_once_for_a_good_env():
    # no_retrace reads counters shared by all checks: a good env traces step exactly once.
    env, params = jaxrl.make("ProbeTimeLimit-v0")
    ctx = check._Context(env, params, jax.random.PRNGKey(1), 2, 8)
    for _, fn in check.CHECKS:
        assert fn(ctx)[0] in ("PASS", "SKIP")
    assert ctx.reset_c.traces == 1 and ctx.step_c.traces == 1


def test_the_random_rollout_is_traced_twice_its_first_trace_and_one_fresh(monkeypatch):
    """check_determinism compares one fresh trace with the rollout's first (lowered again from
    jit's cache), and the small-limit rollout reuses the first trace's program."""
    traces = []
    real = check.rollout
    monkeypatch.setattr(check, "rollout", lambda *a, **k: traces.append(1) or real(*a, **k))
    env, params = jaxrl.make("ProbeTimeLimit-v0")
    report = check_env(env, params, num_steps=8, num_envs=2, verbose=False, compiler_options=FAST)
    assert report.passed and len(traces) == 2


# ----------------------------------------------------------------- tracer errors, fixed horizons


class PythonIfOnTracer(_Broken):
    """A Python ``if`` over a traced value: every traced call raises."""

    def step(self, key, state, action, params):
        state, ts = super().step(key, state, action, params)
        if state.x > 0:  # the line check_env must name
            return state, ts
        return state, ts


def test_tracer_error_reported_once_with_the_users_line_and_the_hint():
    report = check_env(PythonIfOnTracer(), **SMALL)
    failed = [c for c in report.checks if c.status == "FAIL"]
    assert len(failed) == 1 and failed[0].name == "jit"
    msg = failed[0].message
    assert "test_check_env.py:" in msg and "if state.x > 0" in msg and "jnp.where" in msg
    assert all(c.status == "SKIP" for c in report.checks if c.name != "jit")


from flax import struct  # noqa: E402

from jaxrl.core import spaces  # noqa: E402
from jaxrl.core.env import Environment, first_timestep  # noqa: E402


@struct.dataclass
class HorizonParams:
    horizon: int = 6  # every episode terminates after exactly this many steps


class FixedHorizon(Environment):
    """Catch-like: the episode always terminates at ``horizon``; no truncation limit."""

    invalid_action_rule = "clip into {0, 1}"
    overshoot = 0  # a broken variant terminates this many steps late

    def __eq__(self, other):
        return type(other) is type(self)

    def __hash__(self):
        return hash(type(self))

    @property
    def default_params(self):
        return HorizonParams()

    def episode_bound(self, params):
        return int(params.horizon)

    def reset(self, key, params):
        return jnp.int32(0), first_timestep(jnp.zeros((1,), jnp.float32))

    def step(self, key, state, action, params):
        t = state + 1
        obs = jnp.full((1,), t, jnp.float32) / params.horizon
        reward = (jnp.clip(action, 0, 1) == 0).astype(jnp.float32)
        return t, transition(obs, reward, t >= params.horizon + self.overshoot, False)

    def observation_space(self, params):
        return spaces.Box(0.0, 2.0, (1,))

    def action_space(self, params):
        return spaces.Discrete(2)


class LateHorizon(FixedHorizon):
    overshoot = 2


def test_fixed_horizon_env_needs_no_fake_time_limit():
    report = check_env(FixedHorizon(), **SMALL)
    assert report.passed, str(report)
    assert "fixed horizon" in report["truncation"].message and "max_steps_in_episode" not in report["truncation"].message
    late = check_env(LateHorizon(), only=["truncation"], **SMALL)
    assert late.failed_names() == ["truncation"] and "ran past episode_bound(params)=6" in late["truncation"].message


def test_ppo_evaluates_a_fixed_horizon_env_for_its_bound():
    """PPO's evaluation caps episodes at ``episode_bound`` (it used to demand
    ``max_steps_in_episode`` or ``ppo.eval_max_steps``)."""
    from jaxrl.algos import ppo
    from jaxrl.algos.contract import EnvSetup

    cfg = ppo.ENTRY.config_cls(num_envs=4, num_steps=8, total_env_steps=64, num_minibatches=2, eval_episodes=2)
    program = ppo.ENTRY.build(EnvSetup(FixedHorizon(), HorizonParams(), HorizonParams()), cfg)
    metrics = program.evaluate(program.init(jax.random.PRNGKey(0)), jax.random.PRNGKey(1))
    returns = [v for k, v in metrics.items() if "return" in k]
    assert returns and all(float(jnp.max(r)) <= 6 for r in returns)


def test_a_dialogue_task_is_bounded_by_its_turns_not_unbounded():
    """Token tasks have no max_steps_in_episode: their turns bound them (issue 26)."""
    env, params = jaxrl.make("text/GuessRange-v0")
    report = check_env(env, params, num_steps=40, num_envs=2, only=["truncation"], verbose=False,
                       compiler_options={"xla_backend_optimization_level": 1})
    assert report.passed
    (result,) = [r for r in report.checks if r.name == "truncation"]
    assert result.status == "PASS" and "bounded by its turns" in result.message


class MultiChoice(Environment):
    """One step, action MultiDiscrete([3, 2]); reward = the first component (clipped into range
    when ``clips``, else read raw)."""

    invalid_action_rule = "clip into the space"
    clips = True
    default_params = None

    def __eq__(self, other):
        return type(other) is type(self)

    def __hash__(self):
        return hash(type(self))

    def reset(self, key, params):
        return jnp.zeros((), jnp.int32), first_timestep(jnp.zeros((2,), jnp.float32), {})

    def step(self, key, state, action, params):
        action = jnp.clip(action, 0, jnp.array([2, 1])) if self.clips else action
        reward = action[0].astype(jnp.float32)
        return state, transition(action.astype(jnp.float32), reward, True, False, {})

    def observation_space(self, params):
        return spaces.Box(-1e12, 1e12, (2,), jnp.float32)

    def action_space(self, params):
        return spaces.MultiDiscrete([3, 2])


class MultiChoiceUnclipped(MultiChoice):
    clips = False


def test_multidiscrete_invalid_actions_are_checked_per_component():
    ok = check_env(MultiChoice(), only=CORE + ["invalid_actions"], compiler_options=FAST, verbose=False)
    assert ok["invalid_actions"].status == "PASS", str(ok)
    bad = check_env(MultiChoiceUnclipped(), only=CORE + ["invalid_actions"], compiler_options=FAST, verbose=False)
    assert bad.failed_names() == ["invalid_actions"], str(bad)
    assert "do not act like their clipped values" in bad["invalid_actions"].message
