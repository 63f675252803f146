"""The Brax adapter (jaxrl.adapters.brax) against the environment contract.

CI subset (compile dominates, ~5-10 s of CPU per Brax program): ``check_env`` runs on
``brax/inverted_pendulum`` (reduced to 4 envs x 50 steps); one shared, jitted
``VmapEnv(AutoReset(.))`` rollout of inverted_pendulum (8 envs with per-env params, 1005
steps) carries the truncation / termination / diverse-reset / physics-param tests; one
raw-Brax program checks step-for-step parity. ``check_env`` over *every* registered Brax
env (10 envs, default backend, plus inverted_pendulum under each other backend) takes tens
of minutes of compile on a 2-core CPU and runs only when ``JAXRL_FULL_PHYSICS=1`` is set.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

pytest.importorskip("brax")

import jaxrl  # noqa: E402
from jaxrl.adapters import brax as jb  # noqa: E402
from jaxrl.core.env import first_timestep, transition  # noqa: E402
from jaxrl.core.wrappers import AutoReset, VmapEnv  # noqa: E402

pytestmark = [
    pytest.mark.physics,
    pytest.mark.filterwarnings("ignore:Brax System, piplines:UserWarning"),
]

N, T = 8, 1005
# A PD controller that balances brax's inverted_pendulum indefinitely (obs = [x, angle,
# x_dot, angle_dot]; found by a small sweep, kept for 1000 steps from every start state).
PD = np.array([0.1, 1.0, 0.1, 0.1], np.float32)
ZERO = np.zeros(4, np.float32)
# Per env: (gains, bias, max_steps, mass_scale, gravity_scale)
ROWS = [
    (PD, 0.0, 1000, 1.0, 1.0),  # 0: balanced for the whole episode -> truncated at 1000
    (ZERO, 1.0, 1000, 1.0, 1.0),  # 1: full push -> the pole falls -> terminated
    (PD, 0.0, 5, 1.0, 1.0),  # 2: short limit -> truncated every 5 steps, fresh resets
    (ZERO, 0.0, 1000, 1.0, 0.0),  # 3: no gravity, no force: the pole drifts, never falls fast
    (ZERO, 0.0, 1000, 1.0, 1.0),  # 4: gravity, no force: the pole falls
    (ZERO, 0.1, 1000, 1.0, 0.0),  # 5: small push, nominal mass, no gravity
    (ZERO, 0.1, 1000, 2.0, 0.0),  # 6: same push, twice the mass
    (PD, 0.0, 1000, 1.0, 1.0),  # 7: a second balanced env
]


def _policy_rollout(env, key, gains, bias, params):
    """``T`` steps of ``VmapEnv(AutoReset(env), N)`` (how PPO batches envs) with
    ``action = clip(gains . obs + bias)``.

    Returns per-step ``obs``, ``final_obs``, ``reward``, ``terminated``, ``truncated``
    (leading ``[T, N]``) and the reset observation ``[N, 4]``."""
    venv = VmapEnv(AutoReset(env), N, params_axis=0)
    reset_key, key = jax.random.split(key)
    state, ts = venv.reset(reset_key, params)

    def body(carry, step_key):
        state, obs = carry
        action = jnp.clip(jnp.sum(gains * obs, axis=-1, keepdims=True) + bias, -1.0, 1.0)
        state, ts = venv.step(step_key, state, action, params)
        out = (ts.obs, ts.info["final_obs"], ts.reward, ts.terminated, ts.truncated)
        return (state, ts.obs), out

    _, outs = jax.lax.scan(body, (state, ts.obs), jax.random.split(key, T))
    return ts.obs, outs


@pytest.fixture(scope="module")
def env():
    env, _ = jaxrl.make("brax/inverted_pendulum")
    return env


@pytest.fixture(scope="module")
def rollout(env):
    gains = jnp.asarray(np.stack([r[0] for r in ROWS]))
    bias = jnp.asarray([[r[1]] for r in ROWS], jnp.float32)
    params = jb.BraxParams(
        max_steps_in_episode=jnp.asarray([r[2] for r in ROWS], jnp.int32),
        mass_scale=jnp.asarray([r[3] for r in ROWS], jnp.float32),
        friction_scale=jnp.ones((N,), jnp.float32),
        gravity_scale=jnp.asarray([r[4] for r in ROWS], jnp.float32),
    )
    run = jax.jit(_policy_rollout, static_argnums=0)
    first_obs, (obs, final_obs, reward, term, trunc) = run(env, jax.random.PRNGKey(0), gains, bias, params)
    return tuple(np.asarray(x) for x in (first_obs, obs, final_obs, reward, term, trunc))


# --------------------------------------------------------------------------- registry


def test_every_brax_env_is_registered_under_every_backend():
    from brax import envs

    assert set(jb.BRAX_ENV_NAMES) | set(jb.EXCLUDED_BRAX_ENVS) == set(envs._envs)
    assert not set(jb.BRAX_ENV_NAMES) & set(jb.EXCLUDED_BRAX_ENVS)
    ids = {i for i in jaxrl.registered_ids() if i.startswith("brax/")}
    expected = {f"brax/{n}" for n in jb.BRAX_ENV_NAMES}
    expected |= {f"brax/{n}-{b}" for n in jb.BRAX_ENV_NAMES for b in jb.BACKENDS}
    assert ids == expected


def test_every_registered_brax_id_can_be_made():
    """Construction only (parses each model, nothing is traced or compiled): an id that
    Brax cannot build (e.g. ``swimmer`` under a backend other than ``generalized``) must
    never be registered."""
    ids = [i for i in jaxrl.registered_ids() if i.startswith("brax/")]
    assert len(ids) == 5 * len(jb.BRAX_ENV_NAMES)
    for env_id in ids:
        env, params = jaxrl.make(env_id)
        name, _, backend = env_id.removeprefix("brax/").partition("-")
        assert (env.env_name, env.backend) == (name, backend or jb.DEFAULT_BACKEND), env_id
        assert env.raw.backend == env.backend, env_id
        assert isinstance(params, jb.BraxParams)


def test_excluded_brax_envs_are_still_broken_upstream():
    """Each exclusion's reason still holds for the installed Brax; when one stops holding,
    this fails and the env should be registered again."""
    from brax import envs

    assert not hasattr(envs.get_environment("fast"), "sys")  # no physics system to adapt
    for backend in jb.BACKENDS[1:]:
        with pytest.raises(ValueError, match="Unsupported backend"):
            envs.get_environment("swimmer", backend=backend)
    swimmer = envs.get_environment("swimmer")
    state = jax.eval_shape(swimmer.reset, jax.random.PRNGKey(0))
    with pytest.raises(TypeError, match="a_min"):
        jax.eval_shape(swimmer.step, state, jnp.zeros((swimmer.action_size,)))
    for name in jb.EXCLUDED_BRAX_ENVS:
        with pytest.raises(ValueError, match=f"brax env '{name}' is not exposed by jaxrl: "):
            jb.BraxEnv(name)
    with pytest.raises(KeyError, match="unknown env id 'brax/swimmer-mjx'"):
        jaxrl.make("brax/swimmer-mjx")


def test_make_picks_backend_and_params_from_id_and_overrides():
    env, params = jaxrl.make("brax/inverted_pendulum-positional", max_steps_in_episode=200, mass_scale=1.5)
    assert env.backend == "positional" and env.raw.backend == "positional"
    assert env.name == "brax/inverted_pendulum-positional"
    assert (params.max_steps_in_episode, params.mass_scale) == (200, 1.5)
    default, _ = jaxrl.make("brax/inverted_pendulum")
    assert default.backend == jb.DEFAULT_BACKEND and default.name == "brax/inverted_pendulum"
    assert default == jb.BraxEnv("inverted_pendulum") and hash(default) == hash(jb.BraxEnv("inverted_pendulum"))


def test_spaces_come_from_the_brax_env():
    for name, obs_dim, act_dim in [("inverted_pendulum", 4, 1), ("reacher", 11, 2)]:
        env = jb.BraxEnv(name)
        p = env.default_params
        raw_obs = jax.eval_shape(env.raw.reset, jax.random.PRNGKey(0)).obs
        assert env.observation_space(p).shape == (obs_dim,) == raw_obs.shape
        space = env.action_space(p)
        assert space.shape == (act_dim,) == (env.raw.action_size,)
        assert float(space.low.min()) == -1.0 and float(space.high.max()) == 1.0


def test_bad_names_and_backends_are_rejected_clearly():
    with pytest.raises(ValueError, match="unknown brax env 'hoper'"):
        jb.BraxEnv("hoper")
    with pytest.raises(ValueError, match="unknown brax backend 'warp'"):
        jb.BraxEnv("ant", backend="warp")
    with pytest.raises(ValueError, match="not exposed"):
        jb.BraxEnv("fast")
    with pytest.raises(TypeError, match="unknown env parameter"):
        jaxrl.make("brax/ant", mass=2.0)


def test_scale_physics_scales_masses_friction_and_gravity(env):
    sys = env.raw.sys
    scaled = jb.scale_physics(sys, jb.BraxParams(mass_scale=2.0, friction_scale=0.5, gravity_scale=0.0))
    np.testing.assert_allclose(scaled.link.inertia.mass, 2.0 * np.asarray(sys.link.inertia.mass))
    np.testing.assert_allclose(scaled.link.inertia.i, 2.0 * np.asarray(sys.link.inertia.i))
    np.testing.assert_allclose(scaled.body_mass, 2.0 * np.asarray(sys.body_mass))
    np.testing.assert_allclose(scaled.geom_friction, 0.5 * np.asarray(sys.geom_friction))
    assert float(np.abs(scaled.gravity).max()) == 0.0 and float(np.abs(scaled.opt.gravity).max()) == 0.0


# --------------------------------------------------------------------------- contract


def test_check_env_inverted_pendulum(env):
    from jaxrl.core.check import check_env

    report = check_env(env, env.default_params, num_envs=4, num_steps=50, verbose=False)
    assert report.passed, str(report)


def test_balanced_pole_is_truncated_at_1000_not_terminated(rollout):
    _, _, _, reward, term, trunc = rollout
    for i in (0, 7):
        assert not term[:, i].any(), f"env {i}: the PD controller should never let the pole fall"
        assert np.flatnonzero(trunc[:, i]).tolist() == [999], "truncated exactly on the 1000th step"
    np.testing.assert_array_equal(reward[:, 0], 1.0)


def test_falling_over_is_terminated_not_truncated(rollout):
    _, obs, final_obs, _, term, trunc = rollout
    for i in (1, 4):
        ends = np.flatnonzero(term[:, i])
        assert len(ends) >= 2, f"env {i}: the pole should fall (and fall again after the reset)"
        assert not trunc[ends, i].any()
        # The final observation is the fallen pole (|angle| > 0.2); obs is a fresh start.
        assert np.all(np.abs(final_obs[ends, i, 1]) > 0.2)
        assert np.all(np.abs(obs[ends, i]) <= 0.01 + 1e-6)


def test_resets_are_fresh_draws_across_envs_and_episodes(rollout):
    first_obs, obs, final_obs, _, term, trunc = rollout
    assert len({tuple(o) for o in first_obs}) == N, "every env starts from its own state"
    ends = np.flatnonzero(trunc[:, 2])
    np.testing.assert_array_equal(ends, np.arange(4, T, 5))  # truncated every 5 steps
    starts = np.concatenate([first_obs[2:3], obs[ends, 2]])
    assert len({tuple(o) for o in starts}) == len(starts), "no cached start state reused"
    # Brax's reset distribution: q and qd uniform in [-0.01, 0.01].
    assert np.all(np.abs(starts) <= 0.01 + 1e-6)
    assert starts.std(axis=0).min() > 0.003
    # The final observation differs from the next episode's first one.
    assert not np.allclose(final_obs[ends, 2], obs[ends, 2])


def test_gravity_and_mass_params_change_the_physics(rollout):
    first_obs, obs, _, _, term, _ = rollout
    # Without gravity or force the pole keeps (damped) its tiny start velocity: no fall for
    # 100 steps, |angle_dot| never grows. With gravity it falls within 100 steps.
    assert not term[:100, 3].any()
    assert np.abs(obs[:100, 3, 3]).max() <= np.abs(first_obs[3, 3]) + 1e-4
    assert term[:100, 4].any()
    # F = m a: twice the mass, the same push -> about half the cart speed after 5 steps
    # (joint damping and the pole's swing make it approximate; the push tips the pole
    # backwards, so it falls after ~7 steps).
    assert not term[:5, 5:7].any()
    ratio = obs[4, 6, 2] / obs[4, 5, 2]
    assert 0.4 < ratio < 0.6, ratio


def test_adapter_matches_raw_brax_step_for_step(env, rollout):
    """With default params the adapter's physics is exactly Brax's own env."""
    first_obs, obs, _, _, _, _ = rollout
    raw = env.raw
    key = jax.random.split(jax.random.split(jax.random.PRNGKey(0))[0], N)[0]  # VmapEnv's env-0 key

    def raw_rollout(key):
        state = raw.reset(key)

        def body(state, _):
            action = jnp.clip(jnp.sum(jnp.asarray(PD) * state.obs), -1.0, 1.0)[None]
            state = raw.step(state, action)
            return state, state.obs

        return state.obs, jax.lax.scan(body, state, None, 30)[1]

    raw_first, raw_obs = jax.jit(raw_rollout)(key)
    np.testing.assert_allclose(first_obs[0], raw_first, rtol=0, atol=1e-6)
    np.testing.assert_allclose(obs[:30, 0], raw_obs, rtol=1e-4, atol=1e-5)


def test_render_draws_the_pendulum(env, rollout):
    state, _ = jax.jit(env.reset)(jax.random.PRNGKey(1), env.default_params)
    frame = env.render(state, env.default_params)
    assert frame.shape == (240, 320, 3) and frame.dtype == np.uint8
    assert len(np.unique(frame.reshape(-1, 3), axis=0)) >= 3  # background, ground, bodies
    # A tilted pole draws a different picture.
    ps = state.brax_state.pipeline_state
    tilted = ps.replace(x=ps.x.replace(pos=ps.x.pos.at[1, 0].add(0.3)))
    moved = state.replace(brax_state=state.brax_state.replace(pipeline_state=tilted))
    assert not np.array_equal(frame, env.render(moved, env.default_params))


# --------------------------------------------------------------------------- LAPACK-free reset


def test_spd_inverse_matches_numpy():
    rng = np.random.default_rng(0)
    for n in (1, 2, 3, 8, 23):  # 23: humanoid's dofs
        a = rng.normal(size=(n, n))
        m = (a @ a.T + 0.1 * np.eye(n)).astype(np.float32)
        got = np.asarray(jax.jit(jb.spd_inverse)(m))
        want = np.linalg.inv(m.astype(np.float64))
        np.testing.assert_allclose(got, want, rtol=0, atol=2e-5 * np.abs(want).max())
        np.testing.assert_allclose(got, got.T, atol=1e-6 * np.abs(want).max())


def test_generalized_reset_matches_brax_and_has_no_lapack_call(env):
    """Brax's own reset inverts the mass matrix with LAPACK (a batched custom call under
    vmap: see docs/results.md on the CPU deadlock); ours is the same state in plain XLA."""
    params = env.default_params
    keys = jax.random.split(jax.random.PRNGKey(3), 2)
    ours_lowered = jax.jit(jax.vmap(env.reset, in_axes=(0, None))).lower(keys, params)
    ref_lowered = jax.jit(jax.vmap(env.raw.reset)).lower(keys)
    assert "lapack" in ref_lowered.as_text().lower()  # the control: the check below can fail
    assert "lapack" not in ours_lowered.as_text().lower() and "custom_call" not in ours_lowered.as_text()
    ours = ours_lowered.compile()(keys, params)[0].brax_state.pipeline_state
    ref = ref_lowered.compile()(keys).pipeline_state
    np.testing.assert_allclose(ours.mass_mx_inv, ref.mass_mx_inv, rtol=1e-5, atol=1e-6)
    jax.tree_util.tree_map(lambda a, b: np.testing.assert_allclose(a, b, rtol=1e-5, atol=1e-6), ours, ref)


# --------------------------------------------------------------------------- reset pool
# ResetPoolVectorEnv is generic; CartPole (cheap to compile) exercises it. With a 3-step
# limit every env ends an episode every 3rd step or sooner, so the pool of 12 for 8 envs
# is refilled many times.

POOL_N, POOL_P, POOL_T = 8, 12, 60


def _pool_rollout(venv, env, params, key):
    """``POOL_T`` random-action steps of ``venv``; per step the pool's outputs and the
    reference: ``env.step`` applied to the same pre-step states and actions."""
    reset_key, key = jax.random.split(key)
    state, ts = venv.reset(reset_key, params)

    def body(state, k):
        act_key, step_key = jax.random.split(k)
        action = jax.random.randint(act_key, (POOL_N,), 0, 2)
        ref_state, ref_ts = jax.vmap(env.step, in_axes=(0, 0, 0, None))(
            jax.random.split(step_key, POOL_N), state.env_state, action, params
        )
        new, ts = venv.step(step_key, state, action, params)
        out = dict(ts=ts, ref_ts=ref_ts, ref_state=ref_state, env_state=new.env_state, cursor=state.cursor,
                   new_cursor=new.cursor, pool_obs=new.pool_obs, refills=new.refills)
        return new, out

    return ts.obs, jax.lax.scan(body, state, jax.random.split(key, POOL_T))[1]


@pytest.fixture(scope="module")
def pool_run():
    from jaxrl.core.reset_pool import ResetPoolVectorEnv

    env, params = jaxrl.make("CartPole-v1", max_steps_in_episode=3)
    venv = ResetPoolVectorEnv(env, POOL_N, pool_size=POOL_P)
    first_obs, out = jax.jit(_pool_rollout, static_argnums=(0, 1))(venv, env, params, jax.random.PRNGKey(0))
    return np.asarray(first_obs), jax.tree_util.tree_map(np.asarray, out)


def test_reset_pool_keeps_the_step_and_final_observation_exact(pool_run):
    _, out = pool_run
    ts, ref = out["ts"], out["ref_ts"]
    for field in ("reward", "terminated", "truncated"):
        np.testing.assert_array_equal(getattr(ts, field), getattr(ref, field))
    np.testing.assert_array_equal(ts.info["final_obs"], ref.obs)
    done = ref.terminated | ref.truncated
    assert done.any() and (~done).any()
    np.testing.assert_array_equal(ts.obs[~done], ref.obs[~done])  # running envs: the step itself
    np.testing.assert_array_equal(out["env_state"].x[~done], out["ref_state"].x[~done])
    # Finished env i starts from pool entry cursor + rank_i - 1 (cursor 0 after a refill).
    refilled = np.diff(np.concatenate([[0], out["refills"]])) > 0
    for t in range(POOL_T):
        cursor = 0 if refilled[t] else out["cursor"][t]
        rank = np.cumsum(done[t])
        for i in np.flatnonzero(done[t]):
            np.testing.assert_array_equal(ts.obs[t, i], out["pool_obs"][t, cursor + rank[i] - 1])
        assert out["new_cursor"][t] == cursor + done[t].sum()


def test_reset_pool_starts_every_episode_from_a_fresh_draw(pool_run):
    first_obs, out = pool_run
    ts, ref = out["ts"], out["ref_ts"]
    done = ref.terminated | ref.truncated
    starts = np.concatenate([first_obs, ts.obs[done]])  # every episode's first observation
    assert len(starts) > 4 * POOL_P and out["refills"][-1] >= 10  # many refills happened
    assert len({tuple(o) for o in starts}) == len(starts), "a start state was reused"
    # CartPole's reset distribution: each coordinate uniform in [-0.05, 0.05].
    assert np.all(np.abs(starts) <= 0.05)
    np.testing.assert_allclose(starts.mean(axis=0), 0.0, atol=0.01)
    np.testing.assert_allclose(starts.std(axis=0), 0.1 / np.sqrt(12), rtol=0.15)
    # A refill happens only when the pool runs short: cursor + count > P.
    count = done.sum(axis=1)
    need = out["cursor"] + count > POOL_P
    np.testing.assert_array_equal(np.diff(np.concatenate([[0], out["refills"]])) > 0, need)


@struct.dataclass
class _ScaledParams:
    scale: float = 1.0
    max_steps_in_episode: int = 2


class _ScaledStart(jaxrl.Environment):
    """Start observation ``scale * u``, ``u`` uniform in ``[1, 2)^2``; truncated after
    ``max_steps_in_episode`` steps. Its reset depends on params, unlike CartPole's."""

    default_params = _ScaledParams()

    def reset(self, key, params):
        obs = params.scale * jax.random.uniform(key, (2,), jnp.float32, 1.0, 2.0)
        return (obs, jnp.zeros((), jnp.int32)), first_timestep(obs)

    def step(self, key, state, action, params):
        obs, time = state[0], state[1] + 1
        return (obs, time), transition(obs, 0.0, False, time >= params.max_steps_in_episode)

    def __hash__(self):
        return hash(type(self))

    def __eq__(self, other):
        return type(other) is type(self)


def test_reset_pool_redraws_when_params_change():
    from jaxrl.core.reset_pool import ResetPoolVectorEnv

    env = _ScaledStart()
    venv = ResetPoolVectorEnv(env, 4, pool_size=64)  # room for 16 steps of 4 resets

    def run(key):
        state, _ = venv.reset(key, _ScaledParams(1.0))

        def body(state, xs):
            k, scale = xs
            state, ts = venv.step(k, state, jnp.zeros((4,)), _ScaledParams(scale))
            return state, (ts.obs, ts.done, state.refills)

        scales = jnp.asarray([1.0] * 6 + [100.0] * 6, jnp.float32)
        return jax.lax.scan(body, state, (jax.random.split(key, 12), scales))[1]

    obs, done, refills = (np.asarray(x) for x in jax.jit(run)(jax.random.PRNGKey(0)))
    np.testing.assert_array_equal(refills, [0] * 6 + [1] * 6)  # the pool had room: only the change refills
    new_starts = [obs[t][done[t]] for t in range(12)]
    assert all(np.all((s >= 1.0) & (s < 2.0)) for s in new_starts[:6])
    assert all(np.all((s >= 100.0) & (s < 200.0)) for s in new_starts[6:])
    assert sum(len(s) for s in new_starts[6:]) == 12


def test_reset_pool_rejects_bad_sizes():
    from jaxrl.core.reset_pool import ResetPoolVectorEnv

    env, _ = jaxrl.make("CartPole-v1")
    with pytest.raises(ValueError, match="positive int num_envs"):
        ResetPoolVectorEnv(env, 0)
    with pytest.raises(ValueError, match="pool_size must be an int >= num_envs \\(8\\)"):
        ResetPoolVectorEnv(env, 8, pool_size=4)
    assert ResetPoolVectorEnv(env, 8).pool_size == 16


def test_reset_pool_on_brax_starts_fresh_episodes(env):
    """The pool over Brax inverted_pendulum (what bench/physics_throughput.py times): a
    3-step limit, 8 envs, 40 steps; every episode's first observation is a distinct draw
    from Brax's reset distribution (q, qd uniform in +-0.01)."""
    from jaxrl.core.reset_pool import ResetPoolVectorEnv

    params = env.default_params.replace(max_steps_in_episode=3)
    venv = ResetPoolVectorEnv(env, 8)

    def run(key):
        state, ts = venv.reset(key, params)

        def body(state, k):
            state, ts = venv.step(k, state, jnp.zeros((8, 1)), params)
            return state, (ts.obs, ts.done)

        state, (obs, done) = jax.lax.scan(body, state, jax.random.split(key, 40))
        return ts.obs, obs, done, state.refills

    first, obs, done, refills = (np.asarray(x) for x in jax.jit(run)(jax.random.PRNGKey(0)))
    starts = np.concatenate([first, obs[done]])
    assert len(starts) >= 8 * 40 // 3 and refills >= 5
    assert len({tuple(o) for o in starts}) == len(starts)
    assert np.all(np.abs(starts) <= 0.01 + 1e-6) and starts.std(axis=0).min() > 0.004


# --------------------------------------------------------------------------- full sweep


@pytest.mark.skipif(os.environ.get("JAXRL_FULL_PHYSICS") != "1", reason="set JAXRL_FULL_PHYSICS=1 (tens of minutes)")
@pytest.mark.parametrize(
    "env_id",
    [f"brax/{n}" for n in jb.BRAX_ENV_NAMES] + [f"brax/inverted_pendulum-{b}" for b in jb.BACKENDS[1:]],
)
def test_check_env_every_brax_env(env_id):
    from jaxrl.core.check import check_env

    env, params = jaxrl.make(env_id)
    report = check_env(env, params, num_envs=2, num_steps=20, verbose=False)
    assert report.passed, str(report)
