"""The training loop every algorithm shares: ``init`` then ``update`` scanned, and epochs.

:func:`train` is what :func:`jaxrl.run.trainer.make_train` returns bound to a program; the
chunked host loop of ``jaxrl train`` runs the same ``update`` in the same order, so both
give the same states.
"""

from __future__ import annotations

import functools
from typing import Any, Callable

import jax

from jaxrl.algos.contract import Program


def _scan_update(update: Callable, state, _):
    return update(state)


def train(program: Program, num_updates: int, key: jax.Array, hyper: dict | None = None) -> tuple[Any, dict]:
    """``init`` (with traced ``hyper`` if given) then ``num_updates`` updates in one scan.

    Returns ``(final state, metrics)`` with every metric stacked ``[num_updates]``.
    """
    state = program.init(key) if hyper is None else program.init_with(key, hyper)
    return jax.lax.scan(functools.partial(_scan_update, program.update), state, None, length=num_updates)


def epochs(epoch: Callable, carry: Any, key: jax.Array, num_epochs: int) -> tuple[Any, Any]:
    """``num_epochs`` passes ``carry, metrics = epoch(carry, key_i)`` in a scan, one key each."""
    return jax.lax.scan(epoch, carry, jax.random.split(key, num_epochs))


#: XLA options for the training programs of every algorithm (the trainer and the benchmarks
#: pass them to ``jax.jit``): LLVM optimisation level 1 instead of the default, because the
#: programs are many small launch-bound kernels; ``docs/performance.md`` has the figures.
COMPILER_OPTIONS = {"xla_backend_optimization_level": 1}


def program_on(module, env, env_params, cfg, eval_params=None, curriculum=None, vector="auto") -> Program:
    """``module.build`` (an algorithm package such as ``jaxrl.algos.ppo``) on an env object,
    without a run config: for notebooks, tests and benchmarks. ``vector`` is the training
    env path (``env.vector``)."""
    from jaxrl.algos.contract import EnvSetup

    eval_params = env_params if eval_params is None else eval_params
    return module.build(EnvSetup(env, env_params, eval_params, curriculum, vector), cfg)


def train_on(module, env, env_params, cfg, num_updates: int | None = None, **kw) -> Callable:
    """A pure ``train(key, hyper=None)`` of ``module`` on ``env`` (the whole run by default)."""
    program = program_on(module, env, env_params, cfg, **kw)
    n = program.plan.num_updates if num_updates is None else int(num_updates)
    return functools.partial(train, program, n)


def over_seeds(fn: Callable) -> Callable:
    """``fn(state, *rest)`` over a ``[S, ...]`` batch of seed states (``rest`` shared).

    ``vmap`` for several seeds; one seed runs unbatched, so a ``lax.cond`` inside stays a
    cond (under ``vmap`` both branches run: a reset pool's refill at every step).
    """
    def run(states, *rest):
        if jax.tree_util.tree_leaves(states)[0].shape[0] != 1:
            return jax.vmap(lambda s: fn(s, *rest))(states)
        out = fn(jax.tree_util.tree_map(lambda x: x[0], states), *rest)
        return jax.tree_util.tree_map(lambda x: x[None], out)

    return run
