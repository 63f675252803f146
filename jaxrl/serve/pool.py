"""The slot pool: every session's envs in one fixed-capacity batched state, stepped together.

A pool holds ``capacity`` sessions, each a :class:`~jaxrl.core.vector.VectorEnv` of
``slots`` envs, as one state pytree with leaves ``[capacity, slots, ...]`` plus one PRNG key
per session. :meth:`SlotPool.tick` applies one batch of requests in ONE jitted call
(:func:`tick`, compiled once: its shapes never depend on which sessions exist): sessions
whose ``reset`` mask is set start a fresh episode from their seed, those whose ``step`` mask
is set take one step, all others keep their state bit for bit (``where`` on the masks). The
outputs come back to the host in one transfer.

Seed rule (so a served session equals an in-process ``VectorEnv(env, slots)``)::

    key = PRNGKey(seed); key, reset_key = split(key); state, ts = venv.reset(reset_key, params)
    per step:           key, step_key = split(key);   state, ts = venv.step(step_key, state, action, params)

Auto-reset and ``info["final_obs"]`` are ``VectorEnv``'s (docs/autoreset.md): on the step
that ends an episode ``obs`` already starts the next one and ``final_obs`` is the last.
"""

from __future__ import annotations

import functools
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


def tick(venv: VectorEnv, params, trace_counter: list, carry: Carry, actions, step_mask, reset_mask, seeds):
    """One batch: fresh episodes where ``reset_mask``, one step where ``step_mask`` (and not
    reset), the old state elsewhere. Returns ``(carry, outputs)``; outputs have leaves
    ``[C, N, ...]`` (rows of untouched sessions are meaningless)."""
    trace_counter.append(1)  # runs at trace time only: the retrace guard counts these
    rkeys, rstate, rts = jax.vmap(functools.partial(_reset_one, venv, params))(seeds)
    skeys, sstate, sts = jax.vmap(functools.partial(_step_one, venv, params))(carry.keys, carry.state, actions)
    stepped = tree_select(step_mask, (skeys, sstate), (carry.keys, carry.state))
    keys, state = tree_select(reset_mask, (rkeys, rstate), stepped)
    out = tree_select(reset_mask, _outputs(rts), _outputs(sts))
    return Carry(state, keys), out


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
        self._tick = jax.jit(functools.partial(tick, self.venv, params, self.traces), donate_argnums=(0,))
        self.carry = self._placeholders()
        self.generation = 0  # bumped when a failed batch loses the states (sessions must reset)
        dtype = np.dtype(self.action_space.dtype)
        self._actions = np.zeros((self.capacity, self.slots, *self.action_space.shape), dtype)
        self._low = self._high = None
        if isinstance(self.action_space, spaces.Box):
            self._low = np.asarray(self.action_space.low)
            self._high = np.asarray(self.action_space.high)

    def _placeholders(self) -> Carry:
        """Zeros of the carry's shapes: every session resets before it steps."""
        seeds = jax.ShapeDtypeStruct((self.capacity,), jnp.uint32)
        shapes = jax.eval_shape(jax.vmap(functools.partial(_reset_one, self.venv, self.params)), seeds)[:2]
        keys, state = jax.tree_util.tree_map(lambda s: jnp.zeros(s.shape, s.dtype), shapes)
        return Carry(state, keys)

    def check_action(self, value: Any) -> np.ndarray:
        """``value`` (JSON: a number or nested lists) as one session's action array
        ``[slots, *shape]``; :class:`ActionError` if it is outside the action space."""
        space, shape, given = self.action_space, (self.slots, *self.action_space.shape), value
        if type(value) is int and self.slots == 1 and isinstance(space, spaces.Discrete) and 0 <= value < space.n:
            return np.full((1,), value, self._actions.dtype)  # the common case, without the general checks
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

    def run(self, steps: dict, resets: dict) -> dict:
        """Apply one batch: ``steps`` maps session -> checked action, ``resets`` session ->
        seed (a session in both is reset). Returns ``{session: outputs}``: per output (and
        ``done``) that session's values as Python lists over its slots, JSON-ready."""
        step_mask = np.zeros((self.capacity,), bool)
        reset_mask = np.zeros((self.capacity,), bool)
        seeds = np.zeros((self.capacity,), np.uint32)
        for i, action in steps.items():
            self._actions[i] = action
            step_mask[i] = True
        for i, seed in resets.items():
            seeds[i] = seed
            reset_mask[i] = True
        try:
            self.carry, out = self._tick(self.carry, self._actions, step_mask, reset_mask, seeds)
            out = jax.device_get(out)  # one transfer for the whole batch
        except Exception:
            if any(x.is_deleted() for x in jax.tree_util.tree_leaves(self.carry) if hasattr(x, "is_deleted")):
                self.carry, self.generation = self._placeholders(), self.generation + 1  # donated, then failed
            raise
        out["done"] = np.logical_or(out["terminated"], out["truncated"])
        rows = sorted(set(steps) | set(resets))
        lists = {k: v[rows].tolist() for k, v in out.items()}  # whole-batch conversions: cheap per session
        return {i: {k: v[j] for k, v in lists.items()} for j, i in enumerate(rows)}


def _short(value: Any, limit: int = 80) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."
