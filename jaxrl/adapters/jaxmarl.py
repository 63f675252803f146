"""JaxMARL environments behind the multi-agent contract: ``jaxrl.make("jaxmarl/<id>")``.

JaxMARL speaks dicts keyed by agent name; the adapter stacks them on a leading agent axis
in the env's own ``agents`` order (``agent_0, agent_1, ...`` for MPE, ``ally_0, ...`` for
SMAX), which :attr:`JaxMARLEnv.agent_names` records. It drives JaxMARL's raw
``step_env`` (never ``step``, which auto-resets and hides the final observation);
:class:`~jaxrl.core.multiagent.MAAutoReset` does that job.

* MPE (``jaxmarl/MPE_simple_spread_v3``, ...): episodes end only at the time limit
  (``max_steps``, 25 by default: JaxMARL's ``done`` comes on the 26th step), so
  ``truncated = done`` and ``terminated`` is never set. All actions are always available.
  The global state is every agent's observation concatenated (JaxMARL's own
  ``MPEWorldStateWrapper``).
* SMAX (``jaxmarl/SMAX-<map>``: ``HeuristicEnemySMAX`` on a SMAC map preset with the
  keyword arguments of JaxMARL's IPPO/MAPPO SMAX configs): ``terminated`` when one team is
  dead, ``truncated`` at the time limit; ``agent_done`` marks dead units; the global state
  is SMAX's ``world_state``; ``avail_actions`` is ``get_avail_actions``.
* Actions are clipped into ``[0, n - 1]`` before JaxMARL sees them.

JaxMARL keeps every setting on its env object, so ``params`` is empty: a variant is a
different id (``register_jaxmarl_envs``). Install with ``pip install 'jaxrl[jaxmarl]'``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import importlib.util
import io
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxrl.adapters.params import strong_types
from jaxrl.core import raster
from jaxrl.core import spaces
from jaxrl.core.multiagent import MultiAgentEnv, ma_timestep

INSTALL_HINT = "pip install 'jaxrl[jaxmarl]'"
#: MPE scenarios with one observation size and action space for every agent (homogeneous).
MPE_IDS = ("MPE_simple_spread_v3", "MPE_simple_v3", "MPE_simple_reference_v3")
#: SMAC map presets registered as ``jaxmarl/SMAX-<map>`` (homogeneous ally observations).
SMAX_MAPS = ("3m", "2s3z", "8m", "5m_vs_6m", "3s_vs_5z")
#: The keyword arguments of JaxMARL's IPPO/MAPPO SMAX configs (``ippo_rnn_smax.yaml``).
SMAX_KWARGS = (("attack_mode", "closest"), ("see_enemy_actions", True), ("walls_cause_death", True))


def jaxmarl_available() -> bool:
    """True when jaxmarl is importable (checked without importing it)."""
    return importlib.util.find_spec("jaxmarl") is not None


@contextlib.contextmanager
def _quiet_stdout():
    """File descriptor 1 to /dev/null (jaxmarl's import prints; a module it imports swaps
    ``sys.stdout``, so ``contextlib.redirect_stdout`` alone does not catch it)."""
    sys.stdout.flush()
    saved, devnull = os.dup(1), os.open(os.devnull, os.O_WRONLY)
    try:
        os.dup2(devnull, 1)
        with contextlib.redirect_stdout(io.StringIO()):
            yield
    finally:
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
        os.close(devnull)


@functools.lru_cache(maxsize=None)
def raw_jaxmarl_env(env_id: str, env_kwargs: tuple = ()):
    """JaxMARL's env object for ``env_id`` (``"SMAX-<map>"`` builds ``HeuristicEnemySMAX``)."""
    if not jaxmarl_available():
        raise ModuleNotFoundError(f"jaxmarl/{env_id} needs jaxmarl: {INSTALL_HINT}")
    with _quiet_stdout():  # jaxmarl prints about optional submodules on import
        import jaxmarl
        from jaxmarl.environments.smax import map_name_to_scenario
    if env_id.startswith("SMAX-"):
        name = env_id[len("SMAX-"):]
        try:
            scenario = map_name_to_scenario(name)
        except KeyError:
            raise ValueError(f"unknown SMAX map {name!r}") from None
        return jaxmarl.make("HeuristicEnemySMAX", scenario=scenario, **dict(env_kwargs))
    return jaxmarl.make(env_id, **dict(env_kwargs))


@struct.dataclass
class JaxMARLParams:
    """Empty: JaxMARL keeps its settings on the env object (a variant is another id)."""


@struct.dataclass
class JaxMARLState:
    """One adapted env's state: JaxMARL's own (it holds the step counter)."""

    inner: object


@dataclasses.dataclass(frozen=True)
class JaxMARLEnv(MultiAgentEnv):
    """A JaxMARL env with homogeneous agents behind the multi-agent contract.

    Attributes:
      env_id: JaxMARL's id (``"MPE_simple_spread_v3"``) or ``"SMAX-<map>"``.
      env_kwargs: sorted ``(name, value)`` pairs passed to JaxMARL's constructor.
    """

    env_id: str
    env_kwargs: tuple = ()

    invalid_action_rule = "clip into [0, n - 1]"

    def __post_init__(self):
        raw = self.raw
        shapes = {tuple(raw.observation_space(a).shape) for a in raw.agents}
        acts = {getattr(raw.action_space(a), "n", None) for a in raw.agents}
        if len(shapes) != 1 or len(acts) != 1 or None in acts:
            raise ValueError(f"jaxmarl/{self.env_id}: agents differ in observation or action space "
                             "(the contract needs homogeneous agents with Discrete actions)")

    @property
    def raw(self):
        return raw_jaxmarl_env(self.env_id, self.env_kwargs)

    @property
    def is_smax(self) -> bool:
        return self.env_id.startswith("SMAX-")

    @property
    def name(self) -> str:
        return f"jaxmarl/{self.env_id}"

    @property
    def num_agents(self) -> int:  # type: ignore[override]
        return int(self.raw.num_agents)

    @property
    def agent_names(self) -> tuple:  # type: ignore[override]
        return tuple(self.raw.agents)

    @property
    def default_params(self) -> JaxMARLParams:
        return JaxMARLParams()

    def episode_bound(self, params) -> int:
        # MPE's done comes when the pre-step counter reaches max_steps (max_steps + 1 steps);
        # SMAX's likewise (is_terminal reads the counter before it is incremented).
        return int(self.raw.max_steps) + 1

    def observation_space(self, params):
        space = self.raw.observation_space(self.raw.agents[0])
        return spaces.Box(-jnp.inf, jnp.inf, tuple(space.shape), jnp.float32)

    def action_space(self, params):
        return spaces.Discrete(int(self.raw.action_space(self.raw.agents[0]).n), jnp.int32)

    def state_space(self, params):
        n = self.num_agents * self.observation_space(params).shape[0]
        if self.is_smax:
            n = int(jax.eval_shape(lambda k: self.raw.reset(k)[0]["world_state"], jax.random.PRNGKey(0)).shape[-1])
        return spaces.Box(-jnp.inf, jnp.inf, (n,), jnp.float32)

    def stack(self, values: dict) -> jax.Array:
        """``{agent: x}`` -> ``[A, ...]`` in :attr:`agent_names` order."""
        return jnp.stack([jnp.asarray(values[a]) for a in self.raw.agents])

    def _avail(self, inner) -> jax.Array:
        if self.is_smax:
            return self.stack(self.raw.get_avail_actions(inner)).astype(bool)
        return jnp.ones((self.num_agents, self.action_space(None).n), bool)

    def _timestep(self, obs_dict, inner, reward, agent_done, terminated, truncated):
        obs = self.stack(obs_dict).astype(jnp.float32)
        state = obs_dict["world_state"] if self.is_smax else jnp.reshape(obs, (-1,))
        return ma_timestep(obs, jnp.asarray(state, jnp.float32), self._avail(inner), reward, agent_done,
                           terminated, truncated)

    def reset(self, key, params):
        obs, inner = self.raw.reset(key)
        zeros_a = jnp.zeros((self.num_agents,), jnp.float32)
        ts = self._timestep(obs, inner, zeros_a, zeros_a.astype(bool), False, False)
        return JaxMARLState(strong_types(inner)), ts

    def step(self, key, state, actions, params):
        n = self.action_space(params).n
        actions = jnp.clip(jnp.asarray(actions), 0, n - 1).astype(jnp.int32)
        obs, inner, reward, dones, _ = self.raw.step_env(key, state.inner, {a: actions[i] for i, a in enumerate(self.raw.agents)})
        done = jnp.asarray(dones["__all__"], bool)
        if self.is_smax:
            alive = inner.state.unit_alive
            a = self.raw.num_allies
            terminated = jnp.logical_and(done, jnp.logical_or(~jnp.any(alive[:a]), ~jnp.any(alive[a:])))
        else:
            terminated = jnp.zeros((), bool)
        truncated = jnp.logical_and(done, ~terminated)
        ts = self._timestep(obs, inner, self.stack(reward), self.stack({a: dones[a] for a in self.raw.agents}),
                            terminated, truncated)
        return JaxMARLState(strong_types(inner)), ts

    def render(self, state, params, size: int = 256):
        """``uint8[size, size, 3]``: MPE agents (blue) and landmarks (grey) in ``[-1.5, 1.5]^2``;
        SMAX units (allies blue, enemies red; dead ones left out) on the map."""
        canvas = raster.blank(size, size)
        if self.is_smax:
            inner = state.inner.state
            pos, alive = np.asarray(inner.unit_positions), np.asarray(inner.unit_alive)
            scale, allies = size / float(self.raw.map_width), self.raw.num_allies
            for i in np.flatnonzero(alive):
                colour = (60, 90, 200) if i < allies else (200, 60, 60)
                raster.circle(canvas, (pos[i, 0] * scale, size - pos[i, 1] * scale), max(2.0, 0.5 * scale), colour)
            return canvas
        pos, rad, a = np.asarray(state.inner.p_pos), np.asarray(self.raw.rad), self.num_agents
        to_px = lambda p: ((p[0] + 1.5) / 3.0 * size, (1.5 - p[1]) / 3.0 * size)  # noqa: E731
        for i in range(pos.shape[0]):
            colour = (60, 90, 200) if i < a else (150, 150, 150)
            raster.circle(canvas, to_px(pos[i]), max(1.5, rad[i] / 3.0 * size), colour)
        return canvas

    def __repr__(self) -> str:
        return f"JaxMARLEnv({self.env_id!r})"


def register_jaxmarl_envs() -> list[str]:
    """Register ``jaxmarl/<id>`` for :data:`MPE_IDS` and ``jaxmarl/SMAX-<map>`` for
    :data:`SMAX_MAPS` if jaxmarl is installed (without importing it); returns the ids added."""
    from jaxrl.core import registry

    if not jaxmarl_available():
        return []
    added = []
    entries = [(i, {"env_id": i}, f"JaxMARL {i} (multi-agent adapter)") for i in MPE_IDS]
    entries += [(f"SMAX-{m}", {"env_id": f"SMAX-{m}", "env_kwargs": SMAX_KWARGS},
                 f"JaxMARL SMAX {m} vs the heuristic enemy (multi-agent adapter)") for m in SMAX_MAPS]
    for env_id, kwargs, description in entries:
        full = f"jaxmarl/{env_id}"
        if full not in registry._REGISTRY:
            registry.register(full, JaxMARLEnv, kwargs=kwargs, description=description)
            added.append(full)
    return added
