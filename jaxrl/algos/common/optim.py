"""The one optimiser path of every algorithm: global-norm clipping, Adam, a learning-rate
schedule, with the learning rate and the clipping threshold *traced*.

:func:`adam` wraps the chain in ``optax.inject_hyperparams``, so ``learning_rate`` and
``max_grad_norm`` live in the optimiser state as arrays: an algorithm's ``init`` can take
them from a sweep (``vmap`` over seeds x values is one compiled program) and ``update``
reads them back from the state. The schedule's shape (:class:`Schedule`) is static.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax

#: The traced optimiser hyperparameters as algorithms' configs name them (``lr`` is stored
#: as ``learning_rate`` in the ``optax.inject_hyperparams`` state).
TRACED = ("lr", "max_grad_norm")


class Schedule(NamedTuple):
    """A static learning-rate schedule over optimiser steps, in units of ``every`` steps.

    With ``u = count // every`` (the update index when ``every`` is the number of optimiser
    steps per update), the rate is ``lr * decay(u) * warmup(u)`` where
    ``decay(u) = 1 - (1 - end_frac) * min(u / total, 1)`` (a linear decay to
    ``lr * end_frac`` at ``total``; off when ``end_frac == 1``) and
    ``warmup(u) = min((u + 1) / warmup, 1)`` (off when ``warmup == 0``).
    """

    total: int
    end_frac: float = 1.0
    warmup: int = 0
    every: int = 1

    def factor(self, count: jax.Array) -> jax.Array:
        """float32 ``[]``: the multiplier of the base rate at optimiser step ``count``."""
        u = (jnp.asarray(count) // self.every).astype(jnp.float32)
        out = jnp.ones((), jnp.float32)
        if self.end_frac < 1.0:
            out = 1.0 - (1.0 - self.end_frac) * jnp.minimum(u / self.total, 1.0)
        if self.warmup > 0:
            out = out * jnp.minimum((u + 1.0) / self.warmup, 1.0)
        return out


def per_update(num_updates: int, steps_per_update: int, anneal: bool) -> Schedule:
    """Linear decay to 0 over ``num_updates`` updates (``anneal``), else constant."""
    return Schedule(total=num_updates, end_frac=0.0 if anneal else 1.0, every=steps_per_update)


def _rate(schedule: Schedule, learning_rate: jax.Array, count: jax.Array) -> jax.Array:
    if schedule.end_frac == 1.0 and schedule.warmup == 0:
        return learning_rate
    return learning_rate * schedule.factor(count)


def _chain(learning_rate, max_grad_norm, *, b1: float, b2: float, eps: float, schedule: Schedule):
    return optax.chain(
        optax.clip_by_global_norm(max_grad_norm),
        optax.scale_by_adam(b1=b1, b2=b2, eps=eps),
        optax.scale_by_learning_rate(functools.partial(_rate, schedule, learning_rate)),
    )


def adam(
    learning_rate: float | jax.Array,
    max_grad_norm: float | jax.Array,
    schedule: Schedule,
    *,
    b1: float = 0.9,
    b2: float = 0.999,
    eps: float = 1e-8,
) -> optax.GradientTransformation:
    """Clip by global norm, Adam, scheduled learning rate; see the module docstring.

    ``learning_rate`` and ``max_grad_norm`` may be traced (they are stored by ``init``);
    ``b1``, ``b2``, ``eps`` and ``schedule`` are static.
    """
    factory = optax.inject_hyperparams(_chain, static_args=("b1", "b2", "eps", "schedule"))
    return factory(learning_rate=learning_rate, max_grad_norm=max_grad_norm, b1=b1, b2=b2, eps=eps, schedule=schedule)


def current_lr(opt_state: Any, schedule: Schedule) -> jax.Array:
    """float32 ``[]``: the rate the next optimiser step of ``opt_state`` (from :func:`adam`) uses."""
    return _rate(schedule, opt_state.hyperparams["learning_rate"], opt_state.count).astype(jnp.float32)


def split_traced(hyper: dict) -> tuple[dict, dict]:
    """``hyper`` split into (optimiser hyperparameters of :data:`TRACED`, the rest)."""
    optim = {k: v for k, v in hyper.items() if k in TRACED}
    return optim, {k: v for k, v in hyper.items() if k not in TRACED}


def traced_values(defaults: dict, overrides: dict, algo: str) -> dict:
    """``{name: float32 array}``: ``defaults`` with ``overrides`` applied, every value
    broadcast to one common shape (so a batch of values ``vmap`` s as a whole). An override
    not in ``defaults`` raises ``ValueError`` naming ``algo``'s traced hyperparameters."""
    unknown = sorted(set(overrides) - set(defaults))
    if unknown:
        raise ValueError(f"unknown {algo} hyperparameter(s) {unknown}; traced ones are {list(defaults)}")
    arrays = {n: jnp.asarray(v, jnp.float32) for n, v in {**defaults, **overrides}.items()}
    shape = jnp.broadcast_shapes(*(a.shape for a in arrays.values()))
    return {n: jnp.broadcast_to(a, shape) for n, a in arrays.items()}
