"""``jaxrl.interop.gymnasium``: any registered jaxrl env as a Gymnasium ``Env`` or ``VectorEnv`` (NumPy in, NumPy out).

For tools built on Gymnasium's API (Stable-Baselines3, CleanRL, RLlib, evaluation scripts)::

    env = jaxrl.interop.GymnasiumEnv("CartPole-v1", render_mode="rgb_array")
    venv = jaxrl.interop.GymnasiumVectorEnv("CartPole-v1", num_envs=8)
    register_gymnasium("CartPole-v1")  # then gymnasium.make("jaxrl/CartPole-v1")
    register_gymnasium("gymnax/Breakout-MinAtar")  # gymnasium.make("jaxrl/gymnax.Breakout-MinAtar")

Both pass ``gymnasium.utils.env_checker.check_env`` (the vector env its vector-API checks in
``tests/test_interop.py``). ``reset``/``step`` are jitted once per object; JAX keys are drawn
from Gymnasium's own ``np_random`` (seeded by ``reset(seed=...)``), so a seed reproduces the
episode exactly. The vector env auto-resets in Gymnasium's ``SAME_STEP`` mode through
:class:`jaxrl.core.vector.VectorEnv`: where an episode ends, ``obs`` is the next episode's
first observation and ``info["final_obs"]`` (masked by ``info["_final_obs"]``) the last one.
Needs ``gymnasium`` (``pip install 'jaxrl[gymnasium]'``).
"""

from __future__ import annotations

from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

try:
    import gymnasium
    from gymnasium.vector import AutoresetMode
    from gymnasium.vector.utils import batch_space
except ModuleNotFoundError as exc:  # pragma: no cover - exercised only without gymnasium
    raise ModuleNotFoundError("jaxrl.interop.gymnasium needs gymnasium: pip install 'jaxrl[gymnasium]'") from exc

from jaxrl.core import registry, spaces
from jaxrl.core.vector import VectorEnv

_KEY_BOUND = 2**31 - 1


def to_gymnasium_space(space: spaces.Space) -> gymnasium.spaces.Space:
    """The Gymnasium space equal to a jaxrl ``Discrete`` or ``Box`` (concrete bounds)."""
    if isinstance(space, spaces.Discrete):
        return gymnasium.spaces.Discrete(space.n)
    if isinstance(space, spaces.Box):
        dtype = np.dtype(space.dtype)
        return gymnasium.spaces.Box(np.asarray(space.low, dtype), np.asarray(space.high, dtype), space.shape, dtype)
    raise TypeError(f"no Gymnasium space for {space!r} (Discrete and Box only)")


def _resolve(env: Any, params: Any, overrides: dict):
    """``(env, params)`` from an id (with param overrides) or an env object (and params)."""
    if isinstance(env, str):
        return registry.make(env, **overrides)
    if overrides:
        raise TypeError("param overrides need an env id; pass params= with an env object")
    return env, env.default_params if params is None else params


def _numpy(tree):
    """A fresh NumPy copy of every leaf (Gymnasium's checker refuses reused buffers)."""
    return jax.tree_util.tree_map(lambda x: np.array(x), tree)


class _Seeded:
    """What both faces share: the jaxrl env, its params, and keys drawn from ``np_random``."""

    def _next_key(self) -> jax.Array:
        return jax.random.PRNGKey(int(self.np_random.integers(_KEY_BOUND)))

    def _action(self, action, space: spaces.Space):
        return jnp.asarray(np.asarray(action), space.dtype)


class GymnasiumEnv(_Seeded, gymnasium.Env):
    """One jaxrl env as a ``gymnasium.Env``; it does not auto-reset (Gymnasium's convention).

    Args:
      env: a registered id (``"CartPole-v1"``, ``"gymnax/Breakout-MinAtar"``) or an env object.
      params: the env's params when ``env`` is an object (default: its ``default_params``).
      render_mode: ``None`` or ``"rgb_array"`` (``render()`` returns ``uint8[H, W, 3]``).
      **param_overrides: env params by name, with an id (``length=0.7``).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(self, env: Any, params: Any = None, render_mode: str | None = None, **param_overrides):
        self.env, self.params = _resolve(env, params, param_overrides)
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.render_mode = render_mode
        self._act_space = self.env.action_space(self.params)
        self.observation_space = to_gymnasium_space(self.env.observation_space(self.params))
        self.action_space = to_gymnasium_space(self._act_space)
        self._reset = jax.jit(self.env.reset)
        self._step = jax.jit(self.env.step)
        self._state = None

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        self._state, ts = self._reset(self._next_key(), self.params)
        return _numpy(ts.obs), _numpy(ts.info)

    def step(self, action):
        if self._state is None:
            raise RuntimeError("call reset() before step()")
        self._state, ts = self._step(self._next_key(), self._state, self._action(action, self._act_space), self.params)
        return _numpy(ts.obs), float(ts.reward), bool(ts.terminated), bool(ts.truncated), _numpy(ts.info)

    def render(self):
        if self.render_mode is None or self._state is None:
            return None
        return np.asarray(self.env.render(self._state, self.params), np.uint8)


class GymnasiumVectorEnv(_Seeded, gymnasium.vector.VectorEnv):
    """``num_envs`` copies of a jaxrl env as a ``gymnasium.vector.VectorEnv`` (auto-reset in
    ``SAME_STEP`` mode; see the module docstring). Arguments as :class:`GymnasiumEnv`."""

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30, "autoreset_mode": AutoresetMode.SAME_STEP}

    def __init__(self, env: Any, num_envs: int, params: Any = None, render_mode: str | None = None, **param_overrides):
        inner, self.params = _resolve(env, params, param_overrides)
        self.env = VectorEnv(inner, num_envs, episode_stats=False)
        if render_mode not in (None, "rgb_array"):
            raise ValueError(f"render_mode must be None or 'rgb_array', got {render_mode!r}")
        self.render_mode = render_mode
        self.num_envs = self.env.num_envs
        self._act_space = inner.action_space(self.params)
        self.single_observation_space = to_gymnasium_space(inner.observation_space(self.params))
        self.single_action_space = to_gymnasium_space(self._act_space)
        self.observation_space = batch_space(self.single_observation_space, self.num_envs)
        self.action_space = batch_space(self.single_action_space, self.num_envs)
        self._reset = jax.jit(self.env.reset)
        self._step = jax.jit(self.env.step)
        self._state = None

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        if seed is not None and not isinstance(seed, (int, np.integer)):
            raise TypeError(f"seed must be an int or None (one seed for the batch), got {type(seed).__name__}")
        super().reset(seed=seed)
        self._state, ts = self._reset(self._next_key(), self.params)
        return _numpy(ts.obs), self._info(ts, np.zeros(self.num_envs, bool))

    def step(self, actions):
        if self._state is None:
            raise RuntimeError("call reset() before step()")
        self._state, ts = self._step(self._next_key(), self._state, self._action(actions, self._act_space), self.params)
        terminated, truncated = np.array(ts.terminated), np.array(ts.truncated)
        info = self._info(ts, terminated | truncated)
        return _numpy(ts.obs), np.array(ts.reward), terminated, truncated, info

    def _info(self, ts, done: np.ndarray) -> dict:
        info = _numpy(ts.info)
        info["_final_obs"] = done
        return info

    def render(self):
        """One frame per env of the batch (``tuple`` of ``uint8[H, W, 3]``), or ``None``."""
        if self.render_mode is None or self._state is None:
            return None
        inner, states = self.env.env, self._state.env_state
        pick = lambda i: jax.tree_util.tree_map(lambda x: x[i], states)  # noqa: E731
        return tuple(np.asarray(inner.render(pick(i), self.params), np.uint8) for i in range(self.num_envs))


def register_gymnasium(env_id: str, **param_overrides) -> str:
    """Register ``env_id`` with Gymnasium as ``jaxrl/<env_id>`` (for ``gymnasium.make``) and
    return that id; idempotent. Gymnasium adds its own wrappers (order and passive checks)."""
    registry.spec(env_id)  # unknown ids fail here, with jaxrl's message
    name = "jaxrl/" + env_id.replace("/", ".")  # one namespace: gymnax/X -> jaxrl/gymnax.X
    if name not in gymnasium.registry:
        gymnasium.register(
            id=name,
            entry_point=GymnasiumEnv,
            kwargs={"env": env_id, **param_overrides},
            vector_entry_point=GymnasiumVectorEnv,
            disable_env_checker=True,
        )
    return name
