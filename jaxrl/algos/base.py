"""What the trainer needs from an algorithm: a small named tuple of pure functions.

PPO, the GRPO family and anything added later build one :class:`Algorithm`; the trainer
(:mod:`jaxrl.run.trainer`) scans ``update`` inside a jitted chunk, checkpoints the state that
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


#: XLA options for the training programs of every algorithm on CPU (the trainer and the
#: benchmarks pass them to ``jax.jit``): LLVM optimisation level 1 instead of the default.
#: The programs are many small, launch-bound kernels, so on the 2-core CPU this cut the
#: compile time of a 16-seed CartPole PPO program by ~40% and of a GRPO chunk by ~20%,
#: with no measurable change in run time (bench/results/ppo_cartpole.json,
#: bench/results/grpo_summary.md).
COMPILER_OPTIONS = {"xla_backend_optimization_level": 1}


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
