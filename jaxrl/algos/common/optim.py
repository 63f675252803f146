"""The one optimiser path of every algorithm: global-norm clipping, Adam, a learning-rate
schedule, with the learning rate and the clipping threshold *traced*.

:class:`OptimConfig` is the ``optim:`` section of every algorithm's config (``ppo.optim.lr``,
``grpo.optim.warmup_updates``, ...): each algorithm subclasses it only to give its own
defaults, so the keys, their meaning and their checks are the same everywhere.
:func:`from_config` builds the optimiser of a section and :func:`schedule` its rate schedule.

:func:`adam` wraps the chain in ``optax.inject_hyperparams``, so ``learning_rate`` and
``max_grad_norm`` live in the optimiser state as arrays: an algorithm's ``init`` can take
them from a sweep (``vmap`` over seeds x values is one compiled program) and ``update``
reads them back from the state. The schedule's shape (:class:`Schedule`) is static.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
import optax

from jaxrl.algos.contract import check

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


@dataclasses.dataclass(frozen=True)
class OptimConfig:
    """The optimiser (``<algo>.optim``): clip by global norm, Adam, a linear rate schedule."""

    lr: float = 1e-3  # Adam learning rate (traced); the schedule's peak
    max_grad_norm: float = 1.0  # global-norm gradient clipping threshold (traced)
    adam_eps: float = 1e-8  # Adam's epsilon (static)
    adam_b1: float = 0.9  # Adam's first-moment decay (static)
    adam_b2: float = 0.999  # Adam's second-moment decay (static)
    warmup_updates: int = 0  # linear warm-up of the rate over this many updates (0: none)
    lr_end_frac: float = 1.0  # linear decay to lr * lr_end_frac at the last update (1: constant, 0: to zero)

    def validate(self, prefix: str = "optim") -> None:
        """``ValueError("<prefix>.<key>: ...")`` for the first impossible value."""
        for name in ("lr", "max_grad_norm", "adam_eps"):
            value = getattr(self, name)
            check(value > 0.0, f"{prefix}.{name}", f"expected > 0, got {value}")
        for name in ("adam_b1", "adam_b2"):
            value = getattr(self, name)
            check(0.0 <= value < 1.0, f"{prefix}.{name}", f"expected 0 <= {name} < 1, got {value}")
        w = self.warmup_updates
        check(isinstance(w, int) and not isinstance(w, bool) and w >= 0, f"{prefix}.warmup_updates",
              f"expected an integer >= 0, got {w!r}")
        check(0.0 <= self.lr_end_frac <= 1.0, f"{prefix}.lr_end_frac",
              f"expected 0 <= lr_end_frac <= 1, got {self.lr_end_frac}")


def schedule(o: OptimConfig, num_updates: int, steps_per_update: int, per_step: bool = False) -> Schedule:
    """``o``'s warm-up and decay over a run of ``num_updates`` updates of ``steps_per_update``
    optimiser steps: the rate moves once per update, or at every step with ``per_step``
    (PPO's schedule; the warm-up still lasts ``o.warmup_updates`` updates)."""
    if per_step:
        return Schedule(total=num_updates * steps_per_update, end_frac=o.lr_end_frac,
                        warmup=o.warmup_updates * steps_per_update)
    return Schedule(total=num_updates, end_frac=o.lr_end_frac, warmup=o.warmup_updates, every=steps_per_update)


def from_config(o: OptimConfig, sched: Schedule, lr=None, max_grad_norm=None,
                groups: np.ndarray | None = None) -> optax.GradientTransformation:
    """:func:`adam` of section ``o`` on ``sched``; ``lr`` / ``max_grad_norm`` (may be
    traced: a sweep's values) replace the section's; ``groups`` as for :func:`adam`."""
    return adam(o.lr if lr is None else lr, o.max_grad_norm if max_grad_norm is None else max_grad_norm, sched,
                b1=o.adam_b1, b2=o.adam_b2, eps=o.adam_eps, groups=groups)


def clip_by_group_norm(max_norm, groups: np.ndarray) -> optax.GradientTransformation:
    """``optax.clip_by_global_norm`` applied to each group of a flat gradient vector on its
    own: coordinate ``i`` belongs to group ``groups[i]`` (int ``[P]``, static), and a group
    whose norm exceeds ``max_norm`` is scaled down to it. With one optimiser per group of
    parameters (JaxMARL's MAPPO: one for the actor, one for the critic) and the same Adam
    and schedule in each, this is the only step that differs from one optimiser over all."""
    ids = np.asarray(groups, np.int32)
    count = int(ids.max()) + 1 if ids.size else 0

    def update(updates, state, params=None):
        del params
        norms = jnp.sqrt(jax.ops.segment_sum(jnp.square(updates), ids, count))
        scale = jnp.where(norms < max_norm, 1.0, max_norm / norms).astype(updates.dtype)
        return updates * scale[ids], state

    return optax.GradientTransformation(lambda params: optax.EmptyState(), update)


def _rate(schedule: Schedule, learning_rate: jax.Array, count: jax.Array) -> jax.Array:
    if schedule.end_frac == 1.0 and schedule.warmup == 0:
        return learning_rate
    return learning_rate * schedule.factor(count)


def _chain(learning_rate, max_grad_norm, *, b1: float, b2: float, eps: float, schedule: Schedule, groups=None):
    clip = optax.clip_by_global_norm(max_grad_norm) if groups is None else clip_by_group_norm(max_grad_norm, groups)
    return optax.chain(
        clip,
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
    groups: np.ndarray | None = None,
) -> optax.GradientTransformation:
    """Clip by global norm, Adam, scheduled learning rate; see the module docstring.

    ``learning_rate`` and ``max_grad_norm`` may be traced (they are stored by ``init``);
    ``b1``, ``b2``, ``eps``, ``schedule`` and ``groups`` are static. ``groups`` (int
    ``[P]``, for params kept as one flat vector) clips each group by its own norm
    (:func:`clip_by_group_norm`) instead of all by one.
    """
    factory = optax.inject_hyperparams(_chain, static_args=("b1", "b2", "eps", "schedule", "groups"))
    return factory(learning_rate=learning_rate, max_grad_norm=max_grad_norm, b1=b1, b2=b2, eps=eps, schedule=schedule,
                   groups=groups)


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
