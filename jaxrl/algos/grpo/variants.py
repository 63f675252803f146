"""The GRPO-family loss variants as one table: what each one centres, scales and averages.

Each :class:`Variant` names the advantage's centring (the group mean, or leave-one-out for
RLOO), the reward scaling that ``scale_rewards: auto`` picks (TRL's: the group's std, or
none), the surrogate (PPO's clipped ratio, CISPO's clipped-weight REINFORCE, or GSPO's
sequence-level ratio) and how per-token terms become the loss (each sequence's token mean
then the mean over sequences; the mean over all valid tokens; or a constant divisor,
Dr. GRPO's). :data:`LOSS_TYPES` (the config's ``grpo.loss.type`` values) are its keys.
Papers and TRL conventions: ``docs/grpo_losses.md``.
"""

from __future__ import annotations

import dataclasses
from typing import Callable, Literal

import jax
import jax.numpy as jnp

Array = jax.Array


def seq_mean(x: Array, mask: Array) -> Array:
    """Mean over sequences that have a valid token of each one's token mean. ``[N, T] -> []``."""
    m = mask.astype(jnp.float32)
    per_seq = jnp.sum(x * m, axis=1) / jnp.maximum(jnp.sum(m, axis=1), 1.0)
    has = (jnp.sum(m, axis=1) > 0).astype(jnp.float32)
    return jnp.sum(per_seq * has) / jnp.maximum(jnp.sum(has), 1.0)


def token_mean(x: Array, mask: Array) -> Array:
    """Mean over every valid token of the batch. ``[N, T] -> []``."""
    m = mask.astype(jnp.float32)
    return jnp.sum(x * m) / jnp.maximum(jnp.sum(m), 1.0)


def constant_mean(x: Array, mask: Array) -> Array:
    """Sum over valid tokens divided by the buffer's ``N * T`` (Dr. GRPO). ``[N, T] -> []``."""
    return jnp.sum(x * mask.astype(jnp.float32)) / (x.shape[0] * x.shape[1])


@dataclasses.dataclass(frozen=True)
class Variant:
    """One loss variant (see the module docstring)."""

    centring: Literal["mean", "loo"]
    auto_scale: Literal["group", "none"]
    surrogate: Literal["clip", "cispo", "sequence"]
    reduce: Callable[[Array, Array], Array]


VARIANTS: dict[str, Variant] = {
    "grpo": Variant("mean", "group", "clip", seq_mean),
    "dr_grpo": Variant("mean", "none", "clip", constant_mean),
    "dapo": Variant("mean", "group", "clip", token_mean),
    "rloo": Variant("loo", "none", "clip", seq_mean),
    "cispo": Variant("mean", "group", "cispo", token_mean),
    "gspo": Variant("mean", "group", "sequence", seq_mean),
}
LOSS_TYPES = tuple(VARIANTS)


def variant(loss_type: str) -> Variant:
    """The table's entry for ``loss_type``; ``ValueError`` naming the known ones otherwise."""
    if loss_type not in VARIANTS:
        raise ValueError(f"unknown loss_type {loss_type!r}: expected one of {LOSS_TYPES}")
    return VARIANTS[loss_type]
