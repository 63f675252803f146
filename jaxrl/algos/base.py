"""What the trainer needs from an algorithm: a small named tuple of pure functions.

PPO, the GRPO family and anything added later build one :class:`Algorithm`; the trainer
(:mod:`jaxrl.trainer`) scans ``update`` inside a jitted chunk, checkpoints the state that
``init`` built, and calls ``evaluate`` at the end. Nothing here touches the host.

Contract:

* ``init(key) -> state``: a pytree holding *everything* the run depends on (params,
  optimiser state, normaliser statistics, env states, last observations, RNG key,
  counters). Two runs from equal states continue identically (exact resume).
* ``update(state) -> (state, metrics)``: one full update (rollout, advantages, epochs x
  minibatches). ``metrics`` is a flat ``dict[str, float32[]]`` of scalars; the same keys
  every call.
* ``evaluate(state, key) -> metrics``: a flat dict of arrays; jittable; ``"return_mean"``
  is the headline figure for control tasks (``"exact_match"`` for token tasks).
* ``plan``: the static counts a user sees at start-up (:class:`Plan`).
"""

from __future__ import annotations

from typing import Any, Callable, NamedTuple

import jax


class Plan(NamedTuple):
    """Static counts derived from a config (never written back into it).

    Attributes:
      num_updates: updates in the whole run.
      env_steps_per_update: environment transitions collected per update (all envs).
      grad_steps_per_update: optimiser steps per update (epochs x minibatches).
    """

    num_updates: int
    env_steps_per_update: int
    grad_steps_per_update: int

    @property
    def total_env_steps(self) -> int:
        return self.num_updates * self.env_steps_per_update

    @property
    def total_grad_steps(self) -> int:
        return self.num_updates * self.grad_steps_per_update


class Algorithm(NamedTuple):
    """Pure functions of one configured algorithm (see the module docstring)."""

    init: Callable[[jax.Array], Any]
    update: Callable[[Any], tuple[Any, dict]]
    evaluate: Callable[[Any, jax.Array], dict]
    plan: Plan
