"""``VectorEnv``: a batch of envs with exact, cheap auto-reset done at the *batch* level.

Per env ``i`` of the batch the semantics are exactly those of
``VmapEnv(EpisodeStatistics(AutoReset(env)))``:

* ``reset(key, params)`` splits ``key`` into ``num_envs`` keys and resets every env;
  ``info["final_obs"]`` equals ``obs``.
* ``step(key, state, action, params)`` steps every env. Where a step ends an episode
  (``terminated | truncated``) the TimeStep keeps that step's ``reward``, flags and
  ``info``; ``info["final_obs"]`` is the last observation of the finished episode (bootstrap
  truncated steps from it) and ``obs`` the first of a new episode, drawn fresh and
  independently from the env's own ``reset``. Elsewhere ``info["final_obs"]`` equals ``obs``.
* With ``episode_stats=True`` (default), ``info["episode_return"]`` (float32 ``[N]``),
  ``info["episode_length"]`` (int32 ``[N]``) and ``info["episode_done"]`` (bool ``[N]``)
  report the episodes that ended on this step, as :class:`~jaxrl.core.wrappers.EpisodeStatistics`.

Why batch level: a per-env auto-reset runs a full ``reset`` for every env at every step
and throws most draws away. Here a step ranks the finished envs (:func:`done_rank`) and a
``lax.while_loop`` draws fresh start states for them only, ``C = reset_chunk`` per
iteration, scattering each draw into the env of matching rank. Which draws are used
depends only on how many envs finished, never on the drawn values, and each comes from its
own key: the start distribution is exact, nothing is cached. ``C >= N`` gives the per-env
scheme. Under ``vmap`` every member runs as many iterations as the busiest one (still exact):
prefer one larger ``VectorEnv``. Scheme, alternatives and measurements: ``docs/autoreset.md``.
"""

from __future__ import annotations

import functools
import numbers
from typing import Any

import jax
import jax.numpy as jnp
from flax import struct

from jaxrl.core.env import Environment, TimeStep, Wrapper, batched_resets, positive_int, tree_select


@struct.dataclass
class VectorState:
    """State of a :class:`VectorEnv`.

    Attributes:
      env_state: the env's state pytree, every leaf with a leading ``[num_envs]`` axis.
      episode_return: float32 ``[num_envs]``, return of each running episode so far
        (``None`` when episode statistics are off).
      episode_length: int32 ``[num_envs]``, steps of each running episode so far
        (``None`` when episode statistics are off).
    """

    env_state: Any
    episode_return: jax.Array | None = None
    episode_length: jax.Array | None = None


def default_reset_chunk(num_envs: int) -> int:
    """Fresh start states drawn per loop iteration: ``max(min(N, 16), N // 32)``.

    A draw costs more than a loop iteration, so ``C`` is kept well below ``N`` (the draws
    wasted in a step's last chunk are up to ``C - 1``) but large enough that a typical step
    needs one or two iterations. The sweep that chose it is in ``docs/autoreset.md``.
    """
    n = int(num_envs)
    return max(min(n, 16), n // 32)


def _cumsum_int32(x: jax.Array) -> jax.Array:
    """Inclusive cumsum of int32 ``[L]`` in ``O(64 L)`` work for long inputs.

    ``jnp.cumsum`` is direct up to 1,024 elements; longer inputs are cut into rows of 64,
    summed within rows, and the row totals prefix-summed recursively.
    """
    n = x.shape[0]
    if n <= 1024:
        return jnp.cumsum(x, dtype=jnp.int32)
    rows = -(-n // 64)
    inner = jnp.cumsum(jnp.pad(x, (0, rows * 64 - n)).reshape(rows, 64), axis=1, dtype=jnp.int32)
    totals = inner[:, -1]
    offsets = _cumsum_int32(totals) - totals  # int32 [rows], sum of all earlier rows
    return (inner + offsets[:, None]).reshape(-1)[:n]


def done_rank(done: jax.Array) -> jax.Array:
    """Inclusive prefix count of ``done``: int32 ``[N]``, ``rank[i] = sum(done[:i + 1])``.

    Same values as ``jnp.cumsum(done)``, which XLA:CPU lowers to a full-width
    ``reduce_window`` whose cost grows as ``N^2``. Here the mask is packed 32 envs to a
    uint32 word, ``population_count`` counts each word, a (blocked) ``cumsum`` over the
    ``N / 32`` words gives the envs done before each word, and a popcount of each word masked
    to bits ``0..j`` gives the count inside it: all elementwise work. Timings:
    ``docs/performance.md`` ("Auto-reset").
    """
    n = done.shape[0]
    num_words = -(-n // 32)
    lane = jnp.arange(32, dtype=jnp.uint32)
    bits = jnp.pad(done, (0, num_words * 32 - n)).reshape(num_words, 32).astype(jnp.uint32)
    words = jnp.sum(bits << lane, axis=1, dtype=jnp.uint32)  # uint32 [W], bit j = done[32 w + j]
    per_word = jax.lax.population_count(words).astype(jnp.int32)  # int32 [W]
    before = _cumsum_int32(per_word) - per_word  # int32 [W], done before word w
    upto = (jnp.uint32(2) << lane) - jnp.uint32(1)  # uint32 [32], bits 0..j set (wraps at j=31)
    within = jax.lax.population_count(words[:, None] & upto[None, :]).astype(jnp.int32)
    return (before[:, None] + within).reshape(-1)[:n]


def _batch_reset(env: Environment, key, params, num: int, params_axis):
    """``num`` independent resets: ``(state, obs)`` with leaves ``[num, ...]``."""
    state, ts = batched_resets(env, jax.random.split(key, num), params, params_axis)
    return state, ts.obs


def _reset_all(env: Environment, params_axis, key_index, key, stepped, done, params):
    """``stepped`` with every finished env's ``(state, obs)`` replaced by its draw of a
    full-batch reset from ``key`` (or from ``split(key)[key_index]``, derived here so that
    a step with no finished env computes no key either)."""
    if key_index is not None:
        key = jax.random.split(key)[key_index]
    fresh = _batch_reset(env, key, params, done.shape[0], params_axis)
    return tree_select(done, fresh, stepped)


# Batches up to this size skip the reset draws on steps where no episode ended. Larger
# batches have a finished env on nearly every step, and the predicate over a batch sharded
# across devices would add a cross-device reduction to every step.
SKIP_RESET_MAX_ENVS = 4


def _reset_if_done(env: Environment, key, stepped, done, params, params_axis, key_index=None):
    """:func:`_reset_all` when some env finished, else ``stepped`` untouched (``lax.cond``).

    Same values as an unconditional full-batch reset and select; a small batch, where no
    episode ends on most steps, skips the random-number work of the draws. Under ``vmap``
    the ``cond`` becomes a select and both sides run.
    """
    reset = functools.partial(_reset_all, env, params_axis, key_index)
    return jax.lax.cond(jnp.any(done), reset, lambda k, s, d, p: s, key, stepped, done, params)


def _assign_chunk(env, chunk, params_axis, rank, key, params, carry):
    """One loop iteration: draw ``chunk`` fresh states for the finished envs of ranks
    ``j*chunk+1 .. (j+1)*chunk`` and scatter them in (``chunk`` rows, not a pass over N)."""
    j, state = carry
    targets = j * chunk + jnp.arange(1, chunk + 1, dtype=jnp.int32)  # int32 [C], 1-based ranks
    # Index of the env holding each rank; N (dropped by the scatter) past the last one.
    env_index = jnp.searchsorted(rank, targets, side="left", method="scan_unrolled").astype(jnp.int32)
    if params_axis is not None:  # each fresh draw uses the params of the env it goes to
        safe = jnp.minimum(env_index, rank.shape[0] - 1)
        params = jax.tree_util.tree_map(lambda p: jnp.take(p, safe, axis=0), params)
    fresh = _batch_reset(env, jax.random.fold_in(key, j), params, chunk, params_axis)
    state = jax.tree_util.tree_map(
        lambda old, new: old.at[env_index].set(new, mode="drop", indices_are_sorted=True, unique_indices=True),
        state,
        fresh,
    )
    return j + 1, state


def auto_reset_batch(
    env: Environment,
    key: jax.Array,
    stepped: tuple[Any, jax.Array],
    done: jax.Array,
    params,
    chunk: int,
    params_axis: int | None = None,
) -> tuple[Any, jax.Array]:
    """Replace the finished envs' ``(state, obs)`` with fresh, independent ``reset`` draws.

    Args:
      env: the (unbatched) env whose ``reset`` defines the start distribution.
      key: one key; chunk ``j`` draws from ``split(fold_in(key, j), chunk)``.
      stepped: ``(state, obs)`` after the step, leaves ``[N, ...]``.
      done: bool ``[N]``, envs whose episode ended on this step.
      params: env params (leading ``[N]`` axis iff ``params_axis == 0``).
      chunk: ``C``, fresh states drawn per loop iteration; ``ceil(count / C)`` iterations
        run, so a step draws fewer than ``count + C`` states (none when nothing finished).
      params_axis: ``None`` (shared params) or ``0``.

    Returns:
      ``(state, obs)``: ``stepped`` where ``done`` is false, fresh start states elsewhere.
    """
    num_envs = done.shape[0]
    if chunk >= num_envs:  # one chunk covers the batch: reset all, keep the finished
        fresh = _batch_reset(env, key, params, num_envs, params_axis)
        return tree_select(done, fresh, stepped)
    rank = done_rank(done)
    num_chunks = (rank[-1] + (chunk - 1)) // chunk
    body = functools.partial(_assign_chunk, env, chunk, params_axis, rank, key, params)
    _, state = jax.lax.while_loop(lambda c: c[0] < num_chunks, body, (jnp.zeros((), jnp.int32), stepped))
    return state


class VectorEnv(Wrapper):
    """``num_envs`` copies of ``env`` with exact, cheap batch-level auto-reset.

    See the module docstring for the semantics of ``info["final_obs"]``, the episode
    statistics and the reset scheme. Spaces are those of one env; every array carries a
    leading ``[N]`` axis. Pass a fresh ``key`` to every ``step``: a step's new episodes are
    drawn from it. Per-env step keys are split off it, and XLA removes that split when
    ``env.step`` ignores its key, so deterministic dynamics draw no random numbers.

    Args:
      env: the env to batch (unbatched ``reset``/``step``).
      num_envs: ``N``, the batch size.
      params_axis: ``None`` for params shared by every env, ``0`` for params with a
        leading ``[N]`` axis (domain randomisation; each fresh start state is drawn with
        the params of the env it goes to).
      reset_chunk: ``C``, fresh start states drawn per iteration of the reset loop (a
        step with ``c`` finished envs runs ``ceil(c / C)`` iterations). ``None`` picks
        :func:`default_reset_chunk`; ``C >= N`` gives the per-env scheme (a full-batch
        reset, like ``VmapEnv(AutoReset(env))``; up to ``SKIP_RESET_MAX_ENVS`` envs it runs
        only on steps where an episode ended).
      episode_stats: add ``episode_return``/``episode_length``/``episode_done`` to info.
    """

    def __init__(
        self,
        env: Environment,
        num_envs: int,
        *,
        params_axis: int | None = None,
        reset_chunk: int | None = None,
        episode_stats: bool = True,
    ):
        super().__init__(env)
        self.num_envs = positive_int("VectorEnv", "num_envs", num_envs)
        if params_axis not in (None, 0) or isinstance(params_axis, bool):
            raise ValueError(f"VectorEnv params_axis must be None or 0, got {params_axis!r}")
        self.params_axis = params_axis
        if reset_chunk is None:
            reset_chunk = default_reset_chunk(self.num_envs)
        if isinstance(reset_chunk, bool) or not isinstance(reset_chunk, numbers.Integral) or reset_chunk <= 0:
            raise ValueError(f"VectorEnv reset_chunk must be a positive int, got {reset_chunk!r}")
        self.reset_chunk = min(int(reset_chunk), self.num_envs)
        if not isinstance(episode_stats, bool):
            raise ValueError(f"VectorEnv episode_stats must be a bool, got {episode_stats!r}")
        self.episode_stats = episode_stats

    def reset(self, key, params) -> tuple[VectorState, TimeStep]:
        env_state, ts = batched_resets(self.env, jax.random.split(key, self.num_envs), params, self.params_axis)
        info = {**ts.info, "final_obs": ts.obs}
        state = VectorState(env_state)
        if self.episode_stats:
            zeros_f = jnp.zeros((self.num_envs,), jnp.float32)
            zeros_i = jnp.zeros((self.num_envs,), jnp.int32)
            state = VectorState(env_state, zeros_f, zeros_i)
            info.update(episode_return=zeros_f, episode_length=zeros_i, episode_done=ts.done)
        return state, ts.replace(info=info)

    def step(self, key, state: VectorState, action, params) -> tuple[VectorState, TimeStep]:
        # Step keys from split(key)[0], reset keys from split(key)[1]. The step keys are
        # unused (and removed by XLA) when env.step ignores its key; with one reset chunk
        # over a small batch the reset key is derived inside the cond that skips steps
        # where nothing ended.
        step_keys = jax.random.split(jax.random.split(key)[0], self.num_envs)
        env_state, ts = jax.vmap(self.env.step, in_axes=(0, 0, 0, self.params_axis))(
            step_keys, state.env_state, action, params
        )
        done = ts.done
        stepped = (env_state, ts.obs)
        if self.reset_chunk >= self.num_envs and self.num_envs <= SKIP_RESET_MAX_ENVS:
            env_state, obs = _reset_if_done(self.env, key, stepped, done, params, self.params_axis, key_index=1)
        else:
            reset_key = jax.random.split(key)[1]
            env_state, obs = auto_reset_batch(
                self.env, reset_key, stepped, done, params, self.reset_chunk, self.params_axis
            )
        info = {**ts.info, "final_obs": ts.obs}
        new_state = VectorState(env_state)
        if self.episode_stats:
            ret = state.episode_return + ts.reward
            length = state.episode_length + 1
            info.update(
                episode_return=jnp.where(done, ret, 0.0),
                episode_length=jnp.where(done, length, 0),
                episode_done=done,
            )
            new_state = VectorState(env_state, jnp.where(done, 0.0, ret), jnp.where(done, 0, length))
        return new_state, ts.replace(obs=obs, info=info)

    def render(self, state: VectorState, params):
        """Frame of the first env of the batch."""
        first = jax.tree_util.tree_map(lambda x: x[0], state.env_state)
        p = params if self.params_axis is None else jax.tree_util.tree_map(lambda x: x[0], params)
        return self.env.render(first, p)
