"""The training env of every algorithm: ``batched_env(env, num_envs, path)``.

One helper builds the batched, auto-resetting env with episode statistics that PPO, DQN,
PQN and SAC step in training, so the path is chosen in one place (config key
``env.vector``):

* ``"vector"``: :class:`jaxrl.core.vector.VectorEnv`, batch-level auto-reset drawing fresh
  start states only for the envs that finished (the fast path);
* ``"autoreset"``: ``VmapEnv(EpisodeStatistics(AutoReset(env)))``, a full ``reset`` per
  env per step (the reference semantics, and the path of runs made before ``env.vector``);
* ``"pool"``: :class:`jaxrl.core.reset_pool.ResetPoolVectorEnv`, start states drawn
  ``2N`` at a time ahead of need (envs whose ``reset`` costs more than a step: physics,
  Craftax's world generation); best on one device with one seed (under ``vmap`` its refill
  runs every step; with envs split over devices the pool is replicated, see
  :func:`env_batch_axes`);
* ``"auto"``: :data:`AUTO_PATH`, the path the training benchmark found fastest.

Per env, every path has the same semantics: same rewards and flags, ``info["final_obs"]``,
``episode_return``/``episode_length``/``episode_done``, each new episode a fresh draw of
the env's ``reset``. They differ only in which keys draw the start states, so a run is
bit-exact (seeds, resume) for a given path. Measurements: ``docs/performance.md``
("Training env path").
"""

from __future__ import annotations

import jax

from jaxrl.core.reset_pool import ResetPoolState, ResetPoolVectorEnv
from jaxrl.core.env import Environment
from jaxrl.core.vector import VectorEnv
from jaxrl.core.wrappers import AutoReset, EpisodeStatistics, VmapEnv

#: The training env paths (``env.vector``), ``"auto"`` first.
ENV_PATHS = ("auto", "vector", "autoreset", "pool")

#: What ``"auto"`` resolves to.
AUTO_PATH = "vector"


def resolve_path(path: str) -> str:
    """The concrete path of ``path`` (``"auto"`` becomes :data:`AUTO_PATH`)."""
    if path not in ENV_PATHS:
        raise ValueError(f"env.vector: expected one of {', '.join(ENV_PATHS)}, got {path!r}")
    return AUTO_PATH if path == "auto" else path


def batched_env(env: Environment, num_envs: int, path: str = "auto") -> Environment:
    """``num_envs`` copies of ``env`` with auto-reset and episode statistics, on ``path``.

    Args:
      env: the single, unbatched env the agent acts in.
      num_envs: ``N``, the batch size.
      path: one of :data:`ENV_PATHS`.

    Returns:
      A batched env: ``reset(key, params)`` / ``step(key, state, action [N], params)`` with
      leading ``[N]`` axes on every output, ``info`` holding ``final_obs``,
      ``episode_return``, ``episode_length`` and ``episode_done``.
    """
    path = resolve_path(path)
    if path == "vector":
        return VectorEnv(env, num_envs)
    if path == "pool":
        return ResetPoolVectorEnv(EpisodeStatistics(env), num_envs)
    return VmapEnv(EpisodeStatistics(AutoReset(env)), num_envs)


def env_batch_axes(carry):
    """The env-batch axis of every leaf of a training env's carry (``rollout.EnvCarry``):
    ``0``, except the reset pool's own leaves (the pool, its cursor and params, ``-1``:
    replicated), which are not per env. An algorithm's ``batch_axes`` uses it for its
    ``env`` field."""
    axes = jax.tree_util.tree_map(lambda _: 0, carry)
    if isinstance(carry.env_state, ResetPoolState):
        pool = jax.tree_util.tree_map(lambda _: -1, carry.env_state)
        pool = pool.replace(env_state=jax.tree_util.tree_map(lambda _: 0, carry.env_state.env_state))
        axes = axes.replace(env_state=pool)
    return axes
