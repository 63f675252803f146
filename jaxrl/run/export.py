"""Policy export: ``jaxrl.load_policy(run_dir)`` -> a pure, jittable ``act(obs, key)``.

The run's newest verified checkpoint is restored read-only (safe while it still trains),
the algorithm's acting :class:`~jaxrl.algos.contract.Policy` picks one seed's agent out of
it, and ``act`` maps one observation (the env's observation shape; ``vmap`` it for a batch)
and a PRNG key to one action::

    act = jaxrl.load_policy("runs/ppo_CartPole-v1_...")
    action = jax.jit(act)(obs, key)

``act`` closes over the agent's arrays only (``act.agent``); it holds no Python state, so
``jit``, ``vmap`` and ``grad`` apply. Observation normalisation, action squashing and
rescaling are the policy's own, as at evaluation. Policies with a recurrent carry have none
today; when they do, ``act`` will take and return it.
"""

from __future__ import annotations

import functools
from typing import Any

import jax

from jaxrl.algos.contract import Policy
from jaxrl.run.config import ConfigError


def act_with(policy: Policy, agent: Any, deterministic: bool, obs: jax.Array, key: jax.Array) -> jax.Array:
    """One action of ``policy`` with ``agent`` for one observation (stateless policies)."""
    _, action = policy.act(agent, policy.init_carry(agent), obs, key, deterministic)
    return action


class ExportedPolicy:
    """``act(obs, key) -> action`` plus what it was made from (``agent``, ``env``, ``step``)."""

    def __init__(self, policy: Policy, agent: Any, deterministic: bool, step: int):
        self.policy, self.agent, self.deterministic, self.step = policy, agent, deterministic, step
        self.env = policy.env
        self._act = functools.partial(act_with, policy, agent, deterministic)

    def __call__(self, obs: jax.Array, key: jax.Array) -> jax.Array:
        return self._act(obs, key)


def load_policy(run_dir: str, seed: int = 0, deterministic: bool = True) -> ExportedPolicy:
    """The trained policy of seed ``seed`` of the run in ``run_dir`` (see the module docstring).

    ``deterministic`` acts greedily (the distribution's mode); ``False`` samples with ``key``.
    Raises :class:`ConfigError` for a directory that is not a run, a run without a
    checkpoint, a seed it did not train, or an algorithm that cannot act alone.
    """
    from jaxrl.run.evaluate import load_run

    cfg, built, states, step = load_run(run_dir)
    policy = built.program.policy
    if policy is None:
        raise ConfigError(f"{run_dir!r}: {cfg.algo} on {cfg.env.id} has no acting policy to export")
    if not 0 <= int(seed) < cfg.train.seeds:
        raise ConfigError(f"seed: the run trained seeds 0..{cfg.train.seeds - 1}, got {seed}")
    state = jax.tree_util.tree_map(lambda x: x[int(seed)], states)
    agent = policy.params(state)
    if jax.tree_util.tree_leaves(policy.init_carry(agent)):
        raise ConfigError(f"{run_dir!r}: the policy carries a recurrent state; export of carries is not supported yet")
    return ExportedPolicy(policy, agent, bool(deterministic), step)
