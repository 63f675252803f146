"""The counts a run config implies: updates, env steps and gradient steps, and the chunks they are run in.

:func:`derive` computes them from the config and its algorithm's
:class:`~jaxrl.algos.contract.Plan`; nothing is written back into the config.
"""

from __future__ import annotations

import dataclasses

from jaxrl.algos.contract import Plan
from jaxrl.run.sections import RunConfig


@dataclasses.dataclass(frozen=True, kw_only=True)
class Derived(Plan):
    """The program's :class:`~jaxrl.algos.contract.Plan` plus the run's chunking, from
    :func:`derive` (never written back into the config)."""

    updates_per_chunk: int  # K: updates scanned per jitted call
    num_chunks: int  # ceil(num_updates / K); the last chunk may run fewer than K
    seeds: int

    def describe(self) -> str:
        seeds = f" x {self.seeds} seeds" if self.seeds > 1 else ""
        unit = self.step_unit
        return (
            f"{self.num_updates} updates x {self.env_steps_per_update} {unit} = "
            f"{self.total_env_steps:,} {unit}{seeds}; "
            f"{self.total_grad_steps:,} gradient steps ({self.grad_steps_per_update} per update); "
            f"{self.num_chunks} chunk{'s' if self.num_chunks != 1 else ''} of <= {self.updates_per_chunk} updates"
        )


def derive(cfg: RunConfig, plan) -> Derived:
    """The derived counts of ``cfg`` given its algorithm's :class:`~jaxrl.algos.contract.Plan`."""
    k = min(cfg.train.updates_per_chunk, max(plan.num_updates, 1))
    return Derived(
        num_updates=int(plan.num_updates),
        env_steps_per_update=int(plan.env_steps_per_update),
        grad_steps_per_update=int(plan.grad_steps_per_update),
        step_unit=plan.step_unit,
        updates_per_chunk=int(k),
        num_chunks=-(-int(plan.num_updates) // k),
        seeds=cfg.train.seeds,
    )
