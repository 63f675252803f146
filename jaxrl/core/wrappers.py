"""Wrappers: each one is an :class:`~jaxrl.core.env.Environment` around another, with one job.

=================== ===========================================================================
``AutoReset``       When a step ends the episode (terminated or truncated), the returned
                    TimeStep keeps that step's reward and flags, ``obs`` is the first
                    observation of a new episode drawn by the env's own ``reset`` with a fresh
                    key, and ``info["final_obs"]`` is the last observation of the finished
                    episode (equal to ``obs`` on ordinary steps). Exact and per-env; for large
                    batches :class:`jaxrl.core.vector.VectorEnv` does the same job cheaper.
``EpisodeStatistics`` Tracks the running return and length; ``info["episode_return"]`` and
                    ``info["episode_length"]`` hold the totals of an episode that ended on this
                    step (0 elsewhere) and ``info["episode_done"]`` marks those steps.
                    Scan-friendly: averaging ``episode_return`` over ``episode_done`` gives the
                    mean return of the episodes completed in a rollout.
``TimeLimit``       Truncates after ``max_steps`` steps (on top of any limit the env has).
``ClipAction``      Clips continuous actions into the action space's box.
``RescaleAction``   Exposes a ``[low, high]`` action box (default ``[-1, 1]``) and maps it
                    affinely onto the env's box (then clips).
``FrameStack``      Observations are the last ``K`` ones concatenated along the last
                    (channel) axis, oldest first; put it inside the auto-reset, so the final
                    observation is the ending episode's stack and a new episode starts afresh.
``VmapEnv``         A batch of ``num_envs`` independent copies: one key in, per-env keys split
                    inside; params shared, or batched along axis 0 with ``params_axis=0``.
=================== ===========================================================================
"""

from __future__ import annotations

import math
import numbers

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl.core import spaces
from jaxrl.core.env import Environment, TimeStep, Wrapper, batched_resets, positive_int, tree_select
from jaxrl.core.multiagent import MultiAgentEnv
from jaxrl.core.tokens import TokenTask


class AutoReset(Wrapper):
    """Reset on episode end, keeping the final observation in ``info["final_obs"]``."""

    def reset(self, key, params):
        state, ts = self.env.reset(key, params)
        return state, ts.replace(info={**ts.info, "final_obs": ts.obs})

    def step(self, key, state, action, params):
        step_key, reset_key = jax.random.split(key)
        state, ts = self.env.step(step_key, state, action, params)
        reset_state, reset_ts = self.env.reset(reset_key, params)
        done = ts.done
        state = tree_select(done, reset_state, state)
        obs = tree_select(done, reset_ts.obs, ts.obs)
        return state, ts.replace(obs=obs, info={**ts.info, "final_obs": ts.obs})


@struct.dataclass
class EpisodeStatisticsState:
    env_state: object
    episode_return: jax.Array  # float32 [], return of the running episode so far
    episode_length: jax.Array  # int32 [], steps of the running episode so far


class EpisodeStatistics(Wrapper):
    """Adds ``episode_return``, ``episode_length`` and ``episode_done`` to ``info``."""

    @staticmethod
    def _info(ts: TimeStep, ret, length, done) -> dict:
        return {**ts.info, "episode_return": ret, "episode_length": length, "episode_done": done}

    def reset(self, key, params):
        env_state, ts = self.env.reset(key, params)
        zero_f, zero_i = jnp.zeros((), jnp.float32), jnp.zeros((), jnp.int32)
        state = EpisodeStatisticsState(env_state, zero_f, zero_i)
        return state, ts.replace(info=self._info(ts, zero_f, zero_i, jnp.zeros((), jnp.bool_)))

    def step(self, key, state, action, params):
        env_state, ts = self.env.step(key, state.env_state, action, params)
        ret = state.episode_return + ts.reward
        length = state.episode_length + 1
        done = ts.done
        info = self._info(ts, jnp.where(done, ret, 0.0), jnp.where(done, length, 0), done)
        state = EpisodeStatisticsState(env_state, jnp.where(done, 0.0, ret), jnp.where(done, 0, length))
        return state, ts.replace(info=info)

    def render(self, state, params):
        return self.env.render(state.env_state, params)


@struct.dataclass
class TimeLimitState:
    env_state: object
    time: jax.Array  # int32 [], steps taken in this episode


class TimeLimit(Wrapper):
    """Sets ``truncated`` once ``max_steps`` steps have been taken in an episode.

    Put it *inside* :class:`AutoReset` so that the counter restarts with the episode.
    """

    def __init__(self, env: Environment, max_steps: int):
        super().__init__(env)
        self.max_steps = positive_int("TimeLimit", "max_steps", max_steps)

    def reset(self, key, params):
        env_state, ts = self.env.reset(key, params)
        return TimeLimitState(env_state, jnp.zeros((), jnp.int32)), ts

    def step(self, key, state, action, params):
        env_state, ts = self.env.step(key, state.env_state, action, params)
        time = state.time + 1
        truncated = jnp.logical_or(ts.truncated, time >= self.max_steps)
        return TimeLimitState(env_state, time), ts.replace(truncated=truncated)

    def render(self, state, params):
        return self.env.render(state.env_state, params)


class ClipAction(Wrapper):
    """Clips actions into the (Box) action space before stepping."""

    def step(self, key, state, action, params):
        space = self.env.action_space(params)
        return self.env.step(key, state, jnp.clip(action, space.low, space.high), params)


class RescaleAction(Wrapper):
    """Takes actions in ``[low, high]`` and maps them affinely onto the env's Box."""

    def __init__(self, env: Environment, low: float = -1.0, high: float = 1.0):
        super().__init__(env)
        for name, value in (("low", low), ("high", high)):
            if isinstance(value, bool) or not isinstance(value, numbers.Real) or not math.isfinite(value):
                raise ValueError(f"RescaleAction needs a finite number for {name}, got {value!r}")
        if not low < high:
            raise ValueError(f"RescaleAction needs low < high, got {low}, {high}")
        self.low, self.high = float(low), float(high)

    def action_space(self, params):
        inner = self.env.action_space(params)
        return spaces.Box(self.low, self.high, inner.shape, inner.dtype)

    def step(self, key, state, action, params):
        inner = self.env.action_space(params)
        action = jnp.clip(action, self.low, self.high)
        frac = (action - self.low) / (self.high - self.low)
        scaled = inner.low + frac * (inner.high - inner.low)
        return self.env.step(key, state, jnp.clip(scaled, inner.low, inner.high), params)


class NotStackable(ValueError):
    """:class:`FrameStack` refuses the env: a token or multi-agent task (its message reads
    after the env's id: ``"<id> is " + message``)."""


@struct.dataclass
class FrameStackState:
    env_state: object
    frames: jax.Array  # [*obs_shape[:-1], K * C]: the last K observations, oldest first


class FrameStack(Wrapper):
    """Stacks the last ``num_frames`` observations along the last axis, oldest first.

    ``[..., C]`` observations become ``[..., K * C]`` (an image ``(H, W, C)`` becomes
    ``(H, W, K * C)``, a vector ``(F,)`` becomes ``(K * F,)``); at ``reset`` every slot holds
    the first observation (Gymnasium's ``FrameStackObservation`` padding ``"reset"``). Wrap
    the env *inside* the auto-reset (:class:`AutoReset`, ``VectorEnv``): a finished
    episode's final observation is then its own stack, and the next one starts from a
    fresh one.
    """

    def __init__(self, env: Environment, num_frames: int):
        if isinstance(env, (TokenTask, MultiAgentEnv)):
            raise NotStackable("a token or multi-agent task; frame stacking is for single-agent observations")
        super().__init__(env)
        self.num_frames = positive_int("FrameStack", "num_frames", num_frames)

    def observation_space(self, params):
        inner = self.env.observation_space(params)
        if not isinstance(inner, spaces.Box) or len(inner.shape) == 0:
            raise ValueError(f"FrameStack stacks Box observations with at least one axis, got {inner!r}")
        k = self.num_frames
        shape = inner.shape[:-1] + (inner.shape[-1] * k,)
        tile = lambda b: jnp.concatenate([b] * k, axis=-1)  # noqa: E731
        return spaces.Box(tile(inner.low), tile(inner.high), shape, inner.dtype)

    def reset(self, key, params):
        env_state, ts = self.env.reset(key, params)
        frames = jnp.concatenate([ts.obs] * self.num_frames, axis=-1)
        return FrameStackState(env_state, frames), ts.replace(obs=frames)

    def step(self, key, state, action, params):
        env_state, ts = self.env.step(key, state.env_state, action, params)
        channels = ts.obs.shape[-1]
        frames = jnp.concatenate([state.frames[..., channels:], ts.obs], axis=-1)
        return FrameStackState(env_state, frames), ts.replace(obs=frames)

    def action_mask(self, obs):
        """The inner env's legal actions, read from the newest frame (``None`` if it has none)."""
        fn = getattr(self.env, "action_mask", None)
        if not callable(fn):
            return None
        return fn(obs[..., obs.shape[-1] - obs.shape[-1] // self.num_frames:])

    def render(self, state, params):
        return self.env.render(state.env_state, params)


class VmapEnv(Wrapper):
    """``num_envs`` independent copies of ``env`` stepped together.

    ``reset(key, params)`` and ``step(key, state, action, params)`` take a *single* key and
    split it into one key per env, so no two envs share a random stream. With
    ``params_axis=0`` the params pytree carries a leading batch axis (domain randomisation).
    """

    def __init__(self, env: Environment, num_envs: int, params_axis: int | None = None):
        super().__init__(env)
        self.num_envs = positive_int("VmapEnv", "num_envs", num_envs)
        if params_axis not in (None, 0) or isinstance(params_axis, bool):
            raise ValueError(f"VmapEnv params_axis must be None or 0, got {params_axis!r}")
        self.params_axis = params_axis

    def reset(self, key, params):
        return batched_resets(self.env, jax.random.split(key, self.num_envs), params, self.params_axis)

    def step(self, key, state, action, params):
        keys = jax.random.split(key, self.num_envs)
        return jax.vmap(self.env.step, in_axes=(0, 0, 0, self.params_axis))(keys, state, action, params)

    def render(self, state, params):
        first = jax.tree_util.tree_map(lambda x: x[0], state)
        p = params if self.params_axis is None else jax.tree_util.tree_map(lambda x: x[0], params)
        return self.env.render(first, p)
