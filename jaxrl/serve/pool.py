"""The slot pool: every session's envs in one fixed-capacity batched state, stepped by rows.

A pool holds ``capacity`` sessions, each a :class:`~jaxrl.core.vector.VectorEnv` of
``slots`` envs, as one state pytree with leaves ``[capacity + 1, slots, ...]`` plus one PRNG
key per session (the last row is scratch). :meth:`SlotPool.run` applies one batch of
requests in ONE jitted call (:func:`tick`): the rows of the sessions that sent are gathered,
padded to a bucket size (1, 8, 64, ... up to the capacity; padding points at the scratch row),
reset or stepped, and scattered back into the donated state, so a tick costs the batch, not
the capacity, and every other session keeps its state bit for bit. Each bucket size is one
compiled program, plus one for a lone step (no reset computed: the one-session latency);
:meth:`SlotPool.compile` builds them all before serving. Only the bucket's rows come back to
the host, packed into one byte buffer: one transfer.

Seed rule (so a served session equals an in-process ``VectorEnv(env, slots)``)::

    key = PRNGKey(seed); key, reset_key = split(key); state, ts = venv.reset(reset_key, params)
    per step:           key, step_key = split(key);   state, ts = venv.step(step_key, state, action, params)

Auto-reset and ``info["final_obs"]`` are ``VectorEnv``'s (docs/autoreset.md): on the step
that ends an episode ``obs`` already starts the next one and ``final_obs`` is the last.
"""

from __future__ import annotations

import functools
import itertools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl.core import spaces
from jaxrl.core.env import Environment, tree_select
from jaxrl.core.vector import VectorEnv

MAX_SEED = 2**31 - 1  # seeds are PRNGKey(seed) with 0 <= seed <= MAX_SEED


class Carry(NamedTuple):
    """The pool's device state: ``state`` (leaves ``[C, N, ...]``), ``keys`` (``[C, 2]``)."""

    state: Any
    keys: jax.Array


def _reset_one(venv: VectorEnv, params, seed):
    key, reset_key = jax.random.split(jax.random.PRNGKey(seed))
    state, ts = venv.reset(reset_key, params)
    return key, state, ts


def _step_one(venv: VectorEnv, params, key, state, action):
    key, step_key = jax.random.split(key)
    state, ts = venv.step(step_key, state, action, params)
    return key, state, ts


def _outputs(ts) -> dict:
    info = ts.info
    return {
        "obs": ts.obs, "reward": ts.reward, "terminated": ts.terminated, "truncated": ts.truncated,
        "final_obs": info["final_obs"], "episode_return": info["episode_return"], "episode_length": info["episode_length"],
    }


def packed(out: dict) -> jax.Array:
    """The outputs as one uint8 buffer (each leaf's bytes in :func:`layout`'s order), so a
    tick's results come back to the host in one transfer instead of one per leaf."""
    parts = []
    for name in sorted(out):
        x = out[name].astype(jnp.uint8) if out[name].dtype == jnp.bool_ else out[name]
        parts.append((jax.lax.bitcast_convert_type(x, jnp.uint8) if x.dtype.itemsize > 1 else x).reshape(-1))
    return jnp.concatenate(parts)


def layout(venv: VectorEnv, params) -> tuple:
    """``((name, dtype, per-row shape, bytes per row), ...)`` of a tick's outputs, in :func:`packed`'s order."""
    keys = jax.ShapeDtypeStruct((1, 2), jnp.uint32)
    state = jax.eval_shape(jax.vmap(functools.partial(_reset_one, venv, params)), jax.ShapeDtypeStruct((1,), jnp.uint32))[1]
    actions = jax.ShapeDtypeStruct((1, venv.num_envs, *venv.action_space(params).shape), venv.action_space(params).dtype)
    out = jax.eval_shape(lambda k, s, a: _outputs(jax.vmap(functools.partial(_step_one, venv, params))(k, s, a)[2]),
                         keys, state, actions)
    spec = [(name, np.dtype(out[name].dtype), tuple(out[name].shape[1:])) for name in sorted(out)]
    return tuple((name, dtype, shape, int(np.prod(shape, dtype=np.int64)) * dtype.itemsize) for name, dtype, shape in spec)


def unpack(buffer: np.ndarray, spec: tuple, size: int) -> dict:
    """:func:`packed`'s buffer of a ``size``-row tick back to ``{name: [size, ...] array}`` (views)."""
    out, offset = {}, 0
    for name, dtype, shape, row_bytes in spec:
        count = size * row_bytes
        out[name] = buffer[offset: offset + count].view(dtype).reshape((size, *shape))
        offset += count
    return out


def tick(venv: VectorEnv, params, trace_counter: list, carry: Carry, rows, actions, is_reset, seeds):
    """One batch of ``B`` rows (a bucket size): the pool rows ``rows`` start a fresh episode
    from ``seeds`` where ``is_reset``, else take one step with ``actions``; their new state is
    scattered back. Returns ``(carry, outputs)``; outputs :func:`packed`, leaves ``[B, N, ...]``."""
    trace_counter.append(1)  # runs at trace time only: the retrace guard counts these
    keys, state = carry.keys[rows], jax.tree_util.tree_map(lambda x: x[rows], carry.state)
    rkeys, rstate, rts = jax.vmap(functools.partial(_reset_one, venv, params))(seeds)
    skeys, sstate, sts = jax.vmap(functools.partial(_step_one, venv, params))(keys, state, actions)
    keys, state = tree_select(is_reset, (rkeys, rstate), (skeys, sstate))
    out = tree_select(is_reset, _outputs(rts), _outputs(sts))
    scatter = lambda whole, part: whole.at[rows].set(part)  # noqa: E731
    return Carry(jax.tree_util.tree_map(scatter, carry.state, state), scatter(carry.keys, keys)), packed(out)


def step_tick(venv: VectorEnv, params, trace_counter: list, carry: Carry, row, actions):
    """:func:`tick` for one step of pool row ``row`` (a scalar; ``actions`` ``[1, N, ...]``):
    no reset is computed and the row is sliced and updated in place rather than gathered and
    scattered, so a lone session's step pays for the step alone."""
    trace_counter.append(1)
    take = lambda x: jax.lax.dynamic_index_in_dim(x, row, 0, keepdims=True)  # noqa: E731
    keys, state = take(carry.keys), jax.tree_util.tree_map(take, carry.state)
    keys, state, ts = jax.vmap(functools.partial(_step_one, venv, params))(keys, state, actions)
    put = lambda whole, part: jax.lax.dynamic_update_index_in_dim(whole, part[0], row, 0)  # noqa: E731
    return Carry(jax.tree_util.tree_map(put, carry.state, state), put(carry.keys, keys)), packed(_outputs(ts))


def buckets(capacity: int) -> tuple[int, ...]:
    """The compiled batch sizes: 1, 8, 64, ... and the first power of two >= ``capacity``
    (a batch pads to at most 8x its rows; few programs keep startup short)."""
    top = 1 << max(0, int(capacity) - 1).bit_length()
    sizes = [1]
    while sizes[-1] * 8 < top:
        sizes.append(sizes[-1] * 8)
    return tuple(sorted({*sizes, top}))


class ActionError(ValueError):
    """An action outside the env's action space (the message says how)."""


def space_spec(space: spaces.Space) -> dict:
    """A JSON-ready description of a jaxrl space (``x-jaxrl-space`` in ``/schema``)."""
    if isinstance(space, spaces.Discrete):
        return {"kind": "Discrete", "n": space.n, "dtype": space.dtype.name}
    if isinstance(space, spaces.Box):
        return {
            "kind": "Box", "shape": list(space.shape), "dtype": space.dtype.name,
            "low": np.asarray(space.low).tolist(), "high": np.asarray(space.high).tolist(),
        }
    return {"kind": type(space).__name__}


class SlotPool:
    """``capacity`` sessions of ``slots`` envs each, stepped by one compiled program.

    Args:
      env: the unbatched env.
      params: its params (shared by every slot).
      capacity: sessions the pool holds (``--max-sessions``).
      slots: envs per session (``--slots-per-session``).
    """

    def __init__(self, env: Environment, params: Any, capacity: int, slots: int = 1):
        self.env, self.params = env, params
        self.capacity, self.slots = int(capacity), int(slots)
        self.venv = VectorEnv(env, self.slots)
        self.action_space = env.action_space(params)
        self.observation_space = env.observation_space(params)
        self.traces: list = []
        self.buckets = buckets(self.capacity)
        self._tick = jax.jit(functools.partial(tick, self.venv, params, self.traces), donate_argnums=(0,))
        self._step_tick = jax.jit(functools.partial(step_tick, self.venv, params, self.traces), donate_argnums=(0,))
        self._layout = layout(self.venv, params)
        self.carry = self._placeholders()
        self.generation = 0  # bumped when a failed batch loses the states (sessions must reset)
        dtype = np.dtype(self.action_space.dtype)
        top = self.buckets[-1]
        self._actions = np.zeros((top, self.slots, *self.action_space.shape), dtype)
        self._rows = np.full((top,), self.capacity, np.int32)  # padding: the scratch row
        self._is_reset = np.ones((top,), bool)
        self._seeds = np.zeros((top,), np.uint32)
        self._low = self._high = None
        if isinstance(self.action_space, spaces.Box):
            self._low = np.asarray(self.action_space.low)
            self._high = np.asarray(self.action_space.high)

    def _placeholders(self) -> Carry:
        """Zeros of the carry's shapes (``capacity`` rows and the scratch row): every session
        resets before it steps."""
        seeds = jax.ShapeDtypeStruct((self.capacity + 1,), jnp.uint32)
        shapes = jax.eval_shape(jax.vmap(functools.partial(_reset_one, self.venv, self.params)), seeds)[:2]
        keys, state = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
        return Carry(state, keys)

    def check_action(self, value: Any) -> np.ndarray:
        """``value`` (JSON: a number or nested lists) as one session's action array
        ``[slots, *shape]`` (or the plain int itself for one Discrete slot: :meth:`run`
        broadcasts it); :class:`ActionError` if it is outside the action space."""
        space, shape, given = self.action_space, (self.slots, *self.action_space.shape), value
        if type(value) is int and self.slots == 1 and isinstance(space, spaces.Discrete) and 0 <= value < space.n:
            return value  # the common case, without the general checks
        if self.slots == 1 and np.shape(value) == tuple(space.shape):
            value = [value]
        try:
            raw = np.asarray(value)
        except (ValueError, TypeError):
            raise ActionError("the action is not a rectangular array of numbers") from None
        if raw.dtype == object or raw.dtype.kind not in "iuf":
            raise ActionError(f"the action must be numbers, got {_short(given)}")
        if raw.shape != shape:
            want = "one int" if isinstance(space, spaces.Discrete) and self.slots == 1 else f"shape {list(shape)}"
            raise ActionError(f"the action must be {want} (action space {space!r}), got shape {list(raw.shape)}")
        if isinstance(space, spaces.Discrete):
            if raw.dtype.kind == "f" and not np.all(np.isfinite(raw) & (raw == np.round(raw))):
                raise ActionError(f"a Discrete({space.n}) action must be an integer, got {_short(given)}")
            if np.any((raw < 0) | (raw >= space.n)):
                raise ActionError(f"the action must lie in 0..{space.n - 1} (Discrete({space.n})), got {_short(given)}")
            return raw.astype(self._actions.dtype)
        if not np.all(np.isfinite(raw)):
            raise ActionError(f"the action must be finite, got {_short(given)}")
        cast = raw.astype(self._actions.dtype)
        if np.any((cast < self._low) | (cast > self._high)):
            raise ActionError(f"the action lies outside the box [{_short(self._low.tolist())}, {_short(self._high.tolist())}]")
        return cast

    def compile(self) -> None:
        """Compile (and run once, on the scratch row) every bucket's program and the
        one-row step program, so serving never compiles."""
        for size in self.buckets:
            self._call(size)
        self._call(1, steps_only=True)

    def _call(self, size: int, steps_only: bool = False) -> dict:
        """Run the first ``size`` rows of the staging buffers (``steps_only``: a batch with no
        reset, one row: :func:`step_tick`); host outputs ``[size, ...]``."""
        try:
            if steps_only:
                self.carry, out = self._step_tick(self.carry, self._rows[0], self._actions[:1])
            else:
                args = (self._rows[:size], self._actions[:size], self._is_reset[:size], self._seeds[:size])
                self.carry, out = self._tick(self.carry, *args)
            return unpack(np.asarray(out), self._layout, size)  # one transfer: the batch's rows only
        except Exception:
            if any(x.is_deleted() for x in jax.tree_util.tree_leaves(self.carry) if hasattr(x, "is_deleted")):
                self.carry, self.generation = self._placeholders(), self.generation + 1  # donated, then failed
            raise

    def run(self, steps: dict, resets: dict) -> dict:
        """Apply one batch: ``steps`` maps session -> checked action, ``resets`` session ->
        seed (a session in both is reset). Returns ``{session: outputs}``: per output (and
        ``done``) that session's values as Python lists over its slots, JSON-ready, and
        ``finite`` (no NaN or infinity in the batch's float outputs)."""
        order = [*resets, *(i for i in steps if i not in resets)]
        n = len(order)
        if n == 0:
            return {}
        size = next(b for b in self.buckets if b >= n)
        rows, is_reset, seeds, actions = self._rows, self._is_reset, self._seeds, self._actions
        rows[:n] = order
        k = len(resets)
        is_reset[:k], is_reset[k:n] = True, False
        seeds[:k] = list(resets.values())
        for j in range(k, n):
            actions[j] = steps[order[j]]
        try:
            out = self._call(size, steps_only=n == 1 and k == 0)
        finally:
            rows[:n], is_reset[:n] = self.capacity, True  # padding again: the scratch row, reset
        out["done"] = np.logical_or(out["terminated"], out["truncated"])
        lists = {key: v[:n].tolist() for key, v in out.items()}  # whole-batch conversions: cheap per session
        finite = all(np.isfinite(v[:n]).all() for v in out.values() if v.dtype.kind == "f")
        keys = [*lists, "finite"]
        return {i: dict(zip(keys, values)) for i, values in zip(order, zip(*lists.values(), itertools.repeat(finite)))}


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
