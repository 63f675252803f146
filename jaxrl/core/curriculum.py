"""A curriculum over one integer env parameter, raised as training succeeds.

The run config declares it beside the env (``env.curriculum``); the run machinery turns it
into a :class:`Curriculum` and hands it to the algorithm, whose update calls
:meth:`Curriculum.params_at` to get the current level's params and
:meth:`Curriculum.next_level` with the batch's success score. The level lives in the
algorithm's train state (checkpointed, so resume is exact).
"""

from __future__ import annotations

from typing import Any, NamedTuple

import jax
import jax.numpy as jnp

from jaxrl.core.env import replace_params


class Curriculum(NamedTuple):
    """Raise ``params.<param>`` from ``start`` to ``stop`` by ``step`` whenever the batch mean
    of the episodes' ``metric`` (an info key; the return if the episodes have none) reaches
    ``threshold``."""

    param: str
    start: int
    stop: int
    metric: str = "exact_match"
    threshold: float = 0.9
    step: int = 1

    def first_level(self) -> jax.Array:
        """int32 ``[]``: the level a run starts at."""
        return jnp.asarray(self.start, jnp.int32)

    def params_at(self, params: Any, level: jax.Array) -> Any:
        """``params`` at curriculum ``level`` (int32 ``[]``, traced)."""
        return replace_params(params, **{self.param: level})

    def next_level(self, level: jax.Array, info: dict, returns: jax.Array) -> jax.Array:
        """int32 ``[]``: ``level`` raised by ``step`` (capped at ``stop``) if the batch mean
        of ``info[metric]`` (else of ``returns``) is at least ``threshold``."""
        score = info.get(self.metric, returns)
        up = jnp.mean(score) >= self.threshold
        return jnp.where(up, jnp.minimum(level + self.step, self.stop), level).astype(jnp.int32)
