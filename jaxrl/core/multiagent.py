"""The multi-agent env contract: a homogeneous agent axis, stacked.

A :class:`MultiAgentEnv` is an :class:`~jaxrl.core.env.Environment` whose ``A`` agents share
one observation space and one ``Discrete(n)`` action space, and whose arrays carry the agents
on a leading axis (agent ``i`` is row ``i`` in :attr:`MultiAgentEnv.agent_names` order)::

    reset(key, params)                 -> (state, MATimeStep)
    step(key, state, actions[A], params) -> (state, MATimeStep)

:class:`MATimeStep` holds per-agent ``obs [A, ...]``, ``reward [A]``, ``agent_done [A]`` (the
agent is out: dead, finished), the global ``state`` a centralised critic reads, the
``avail_actions [A, n]`` mask of the *next* decision, and the episode's ``terminated`` /
``truncated`` flags with the single-agent meaning (never merged; truncated bootstraps).

Auto-reset and episode statistics are wrappers, as for single agents: :class:`MAAutoReset`
(a full ``reset`` when an episode ends; the final obs and state stay in
``info["final_obs"]`` / ``info["final_state"]``) and :class:`MAEpisodeStatistics` (team
return = the sum of the agents' returns, and length). :func:`check_multiagent_env` is
``check_env`` for this contract (``check_env`` and ``jaxrl check-env`` route to it). ``docs/multi_agent.md``
has the whole story.
"""

from __future__ import annotations

import dataclasses
import time
from typing import Any, Sequence

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxrl.core import spaces
from jaxrl.core.env import Environment, Wrapper, tree_select


@struct.dataclass
class MATimeStep:
    """What a multi-agent env returns from ``reset`` and ``step`` (``A`` agents).

    Attributes:
      obs: float ``[A, *obs_shape]``, each agent's own observation.
      state: float ``[*state_shape]``, the global state (a centralised critic's input).
      avail_actions: bool ``[A, n]``, the actions each agent may take next (at least one).
      reward: float32 ``[A]``, each agent's reward for the transition (0 at reset).
      agent_done: bool ``[A]``, the agent is out of the episode (dead or finished).
      terminated: bool ``[]``, the episode's MDP ended: do not bootstrap.
      truncated: bool ``[]``, a limit cut the episode: bootstrap from the final observation.
      info: dict of arrays, the same structure at reset and at every step.
    """

    obs: jax.Array
    state: jax.Array
    avail_actions: jax.Array
    reward: jax.Array
    agent_done: jax.Array
    terminated: jax.Array
    truncated: jax.Array
    info: dict = dataclasses.field(default_factory=dict)

    @property
    def done(self) -> jax.Array:
        """``terminated | truncated``: the episode is over."""
        return jnp.logical_or(self.terminated, self.truncated)


def ma_timestep(obs, state, avail_actions, reward, agent_done, terminated, truncated, info=None) -> MATimeStep:
    """An :class:`MATimeStep` with the contract's dtypes enforced."""
    return MATimeStep(
        obs=obs, state=state, avail_actions=jnp.asarray(avail_actions, jnp.bool_),
        reward=jnp.asarray(reward, jnp.float32), agent_done=jnp.asarray(agent_done, jnp.bool_),
        terminated=jnp.asarray(terminated, jnp.bool_), truncated=jnp.asarray(truncated, jnp.bool_),
        info={} if info is None else info,
    )


class MultiAgentEnv(Environment):
    """Base of multi-agent envs (see the module docstring).

    Subclasses set :attr:`num_agents` and :attr:`agent_names` and implement ``reset``,
    ``step``, ``observation_space`` (one agent's), ``action_space`` (one agent's
    ``Discrete``) and :meth:`state_space` (the global state's).
    """

    num_agents: int = 0
    agent_names: tuple = ()

    def state_space(self, params) -> spaces.Space:
        raise NotImplementedError

    def check_contract(self, params=None, **kwargs):
        """:func:`check_multiagent_env` on this env (what ``check_env`` runs for it)."""
        return check_multiagent_env(self, params, **kwargs)


class MAWrapper(Wrapper, MultiAgentEnv):
    """A :class:`~jaxrl.core.env.Wrapper` of a multi-agent env (delegates the agent fields)."""

    @property
    def num_agents(self) -> int:  # type: ignore[override]
        return self.env.num_agents

    @property
    def agent_names(self) -> tuple:  # type: ignore[override]
        return self.env.agent_names

    def state_space(self, params):
        return self.env.state_space(params)


class MAAutoReset(MAWrapper):
    """Reset when the episode ends; ``info["final_obs"]`` / ``info["final_state"]`` keep the
    last observation and global state (what a truncated step bootstraps from).

    The new episode starts from a full ``reset`` with a fresh key (every episode drawn from
    the env's own start distribution; a multi-agent reset is cheap next to a step's policy).
    """

    def reset(self, key, params):
        state, ts = self.env.reset(key, params)
        return state, ts.replace(info={**ts.info, "final_obs": ts.obs, "final_state": ts.state})

    def step(self, key, state, actions, params):
        step_key, reset_key = jax.random.split(key)
        state, ts = self.env.step(step_key, state, actions, params)
        state_re, ts_re = self.env.reset(reset_key, params)
        done = ts.done
        info = {**ts.info, "final_obs": ts.obs, "final_state": ts.state}
        ts = ts.replace(
            obs=tree_select(done, ts_re.obs, ts.obs), state=tree_select(done, ts_re.state, ts.state),
            avail_actions=tree_select(done, ts_re.avail_actions, ts.avail_actions),
            agent_done=jnp.where(done, ts_re.agent_done, ts.agent_done), info=info,
        )
        return tree_select(done, state_re, state), ts


@struct.dataclass
class StatsState:
    """:class:`MAEpisodeStatistics`' state: the inner env's and the running episode's sums."""

    inner: Any
    ret: jax.Array  # float32 [], team return so far (sum over agents)
    length: jax.Array  # int32 [], steps so far


class MAEpisodeStatistics(MAWrapper):
    """``info["episode_return"]`` (team return: the sum of every agent's rewards),
    ``info["episode_length"]`` and ``info["episode_done"]`` of the episode a step ended
    (zeros on other steps); wrap *inside* :class:`MAAutoReset`'s view, i.e.
    ``MAAutoReset(MAEpisodeStatistics(env))``."""

    def reset(self, key, params):
        inner, ts = self.env.reset(key, params)
        zero_f, zero_i = jnp.zeros((), jnp.float32), jnp.zeros((), jnp.int32)
        info = {**ts.info, "episode_return": zero_f, "episode_length": zero_i, "episode_done": jnp.zeros((), bool)}
        return StatsState(inner, zero_f, zero_i), ts.replace(info=info)

    def step(self, key, state, actions, params):
        inner, ts = self.env.step(key, state.inner, actions, params)
        ret, length, done = state.ret + jnp.sum(ts.reward), state.length + 1, ts.done
        info = {**ts.info, "episode_return": jnp.where(done, ret, 0.0), "episode_length": jnp.where(done, length, 0),
                "episode_done": done}
        new = StatsState(inner, jnp.where(done, 0.0, ret), jnp.where(done, 0, length).astype(jnp.int32))
        return new, ts.replace(info=info)


def training_env(env: MultiAgentEnv) -> MultiAgentEnv:
    """``env`` with episode statistics and auto-reset (vmap it over the batch)."""
    return MAAutoReset(MAEpisodeStatistics(env))


# ------------------------------------------------------------------ check_multiagent_env


def _expect(ok: bool, message: str) -> None:
    if not ok:
        raise AssertionError(message)


def _shape_checks(env: MultiAgentEnv, params, ts: MATimeStep) -> str:
    a, obs_space, act_space = env.num_agents, env.observation_space(params), env.action_space(params)
    state_space = env.state_space(params)
    _expect(isinstance(act_space, spaces.Discrete), f"action_space must be Discrete, got {act_space!r}")
    _expect(len(env.agent_names) == a > 0, f"agent_names {env.agent_names!r} must list num_agents={a} agents")
    n = act_space.n
    want = {"obs": (a, *obs_space.shape), "state": tuple(state_space.shape), "avail_actions": (a, n),
            "reward": (a,), "agent_done": (a,), "terminated": (), "truncated": ()}
    dtypes = {"avail_actions": jnp.bool_, "reward": jnp.float32, "agent_done": jnp.bool_,
              "terminated": jnp.bool_, "truncated": jnp.bool_}
    for name, shape in want.items():
        got = getattr(ts, name)
        _expect(tuple(got.shape) == shape, f"{name} has shape {tuple(got.shape)}, expected {shape}")
        if name in dtypes:
            _expect(got.dtype == dtypes[name], f"{name} has dtype {got.dtype}, expected {jnp.dtype(dtypes[name])}")
    return f"A={a} agents, obs {want['obs']}, state {want['state']}, Discrete({n})"


def _random_rollout(env: MultiAgentEnv, params, key, num_envs: int, num_steps: int):
    """Random *available* actions in ``training_env(env)`` (vmapped): the timesteps ``[T, B]``."""
    wrapped = training_env(env)

    def step(carry, k):
        state, ts = carry
        ka, ks = jax.random.split(k)
        logits = jnp.where(ts.avail_actions, 0.0, -jnp.inf)
        actions = jax.random.categorical(ka, logits).astype(jnp.int32)
        state, ts = jax.vmap(wrapped.step, in_axes=(0, 0, 0, None))(jax.random.split(ks, num_envs), state, actions, params)
        return (state, ts), (ts, actions)

    def run(key):
        rk, sk = jax.random.split(key)
        first = jax.vmap(wrapped.reset, in_axes=(0, None))(jax.random.split(rk, num_envs), params)
        return jax.lax.scan(step, first, jax.random.split(sk, num_steps))[1]

    return jax.jit(run)


def check_multiagent_env(env: MultiAgentEnv, params: Any = None, *, num_steps: int = 200, num_envs: int = 8,
                         key: jax.Array | None = None, only: Sequence[str] | None = None, verbose: bool = True):
    """Check ``env`` against the multi-agent contract; a :class:`~jaxrl.core.check.CheckReport`.

    Checks: ``jit`` (reset and step compile), ``shapes`` (every field's shape and dtype against
    ``num_agents`` and the spaces), ``vmap``, ``stable_types`` (reset's and step's timesteps
    have the same structure, dtypes and weak types), ``observation_space`` and ``finite``
    (over a random rollout of available actions), ``avail_actions`` (every agent always has
    one), ``episode_end`` (episodes end within ``episode_bound``), ``determinism`` (same key,
    same rollout) and ``invalid_actions`` (out-of-range actions give finite outputs).
    """
    from jaxrl.core.check import FAIL, PASS, SKIP, CheckReport, CheckResult

    params = env.default_params if params is None else params
    key = jax.random.PRNGKey(0) if key is None else key
    ctx: dict = {}

    def jit_check():
        state, ts = jax.jit(env.reset)(key, params)
        ctx["step"] = jax.jit(env.step)  # compiled once, reused by invalid_actions
        ctx["first"], ctx["reset_state"] = ts, state
        ctx["second"] = ctx["step"](key, state, jnp.zeros((env.num_agents,), jnp.int32), params)[1]
        return PASS, "reset and step compile and run"

    def shapes():
        _shape_checks(env, params, ctx["second"])
        return PASS, _shape_checks(env, params, ctx["first"])

    def vmap_check():
        keys = jax.random.split(key, 3)
        states, _ = jax.vmap(env.reset, in_axes=(0, None))(keys, params)
        acts = jnp.zeros((3, env.num_agents), jnp.int32)
        _, ts2 = jax.vmap(env.step, in_axes=(0, 0, 0, None))(keys, states, acts, params)
        _expect(ts2.reward.shape == (3, env.num_agents), f"vmapped reward has shape {ts2.reward.shape}")
        return PASS, "reset and step vmap over 3 envs"

    def stable_types():
        a, b = (jax.tree_util.tree_map(lambda x: (x.shape, x.dtype, getattr(x, "weak_type", False)), t)
                for t in (ctx["first"], ctx["second"]))
        _expect(jax.tree_util.tree_structure(a) == jax.tree_util.tree_structure(b), "reset's and step's info differ in structure")
        _expect(a == b, "reset's and step's timesteps differ in shape, dtype or weak type")
        return PASS, "reset and step return the same types"

    def rollout():
        if "rollout" not in ctx:
            run = _random_rollout(env, params, key, num_envs, num_steps)
            t0 = time.perf_counter()
            jax.block_until_ready(run(key))
            ctx["compile"] = time.perf_counter() - t0
            t0 = time.perf_counter()
            ctx["rollout"] = jax.tree_util.tree_map(np.asarray, jax.block_until_ready(run(key)))
            ctx["sps"] = num_envs * num_steps / max(time.perf_counter() - t0, 1e-9)
            ctx["again"] = jax.tree_util.tree_map(np.asarray, run(key))
        return ctx["rollout"]

    def observation_space():
        ts, _ = rollout()
        space = env.observation_space(params)
        flat = ts.obs.reshape((-1,) + tuple(space.shape))
        inside = np.asarray(jax.vmap(space.contains)(jnp.asarray(flat, space.dtype)))
        _expect(bool(inside.all()), f"{int((~inside).sum())} of {inside.size} agent observations leave {space!r}")
        return PASS, f"{inside.size} agent observations inside the space"

    def finite():
        ts, _ = rollout()
        for name in ("obs", "state", "reward"):
            _expect(bool(np.isfinite(getattr(ts, name)).all()), f"{name} holds NaN or inf")
        return PASS, "obs, state and reward finite"

    def avail_actions():
        ts, _ = rollout()
        _expect(bool(ts.avail_actions.any(-1).all()), "some agent has no available action")
        return PASS, f"every agent has an available action at each of {ts.reward.shape[0]} steps"

    def episode_end():
        ts, _ = rollout()
        bound = env.episode_bound(params)
        if bound is None:
            return SKIP, "no episode bound"
        if num_steps <= bound:
            return SKIP, f"rollout ({num_steps} steps) not longer than the bound {bound}"
        lengths = ts.info["episode_length"][ts.info["episode_done"]]
        _expect(lengths.size > 0, f"no episode ended within {num_steps} steps (bound {bound})")
        _expect(int(lengths.max()) <= bound, f"an episode lasted {int(lengths.max())} steps, bound {bound}")
        return PASS, f"{lengths.size} episodes ended, longest {int(lengths.max())} <= {bound} steps"

    def determinism():
        rollout()
        same = jax.tree_util.tree_all(jax.tree_util.tree_map(np.array_equal, ctx["rollout"], ctx["again"]))
        _expect(same, "two rollouts with the same key differ")
        return PASS, "same key, same rollout"

    def invalid_actions():
        bad = jnp.full((env.num_agents,), env.action_space(params).n + 3, jnp.int32)
        outs = [ctx["step"](key, ctx["reset_state"], a, params)[1] for a in (bad, -bad)]
        for ts in outs:
            _expect(bool(np.isfinite(np.asarray(ts.obs)).all() and np.isfinite(np.asarray(ts.reward)).all()),
                    "an out-of-range action gave NaN or inf")
        return PASS, f"out-of-range actions give finite outputs ({env.invalid_action_rule})"

    checks = [("jit", jit_check), ("shapes", shapes), ("vmap", vmap_check), ("stable_types", stable_types),
              ("observation_space", observation_space), ("finite", finite), ("avail_actions", avail_actions),
              ("episode_end", episode_end), ("determinism", determinism), ("invalid_actions", invalid_actions)]
    unknown = sorted(set(only or ()) - {n for n, _ in checks})
    if unknown:
        raise ValueError(f"unknown check name(s) {unknown}; checks: {[n for n, _ in checks]}")
    results = []
    if verbose:
        print(f"check_multiagent_env({env.name}): {num_envs} envs x {num_steps} steps", flush=True)
    for name, fn in checks:
        if only is not None and name not in ("jit", *only):
            continue
        if results and results[0].status == FAIL:
            status, message = SKIP, "jit failed"
        else:
            try:
                status, message = fn()
            except Exception as exc:  # noqa: BLE001 - a failing check is reported, the others run
                first = str(exc).strip().splitlines()[0] if str(exc).strip() else ""
                status, message = FAIL, f"{type(exc).__name__}: {first}"[:300]
        results.append(CheckResult(name, status, message))
        if verbose:
            print(f"  {status}  {name:<17}  {message}", flush=True)
    report = CheckReport(env.name, results, ctx.get("sps", 0.0), ctx.get("compile", 0.0), num_envs, num_steps)
    if verbose:
        print("\n".join(str(report).splitlines()[-2:]), flush=True)
    return report
