"""PPO really learns a physics env: Brax inverted_pendulum through the adapter.

A random policy keeps the pole up for ~5-25 steps (return 5-25 of 1000). The recipe's
hyperparameters (configs/ppo_brax_inverted_pendulum.yaml) trained for half its budget
(102,400 env steps, ~25 s of CPU including compile) must already hold the pole for hundreds
of steps with the deterministic policy; the full recipe reaches 1000 (docs/physics.md).
"""

from __future__ import annotations

import dataclasses

import jax
import pytest

pytest.importorskip("brax")

import jaxrl  # noqa: E402
from jaxrl.run import config  # noqa: E402
from jaxrl.algos import ppo  # noqa: E402
from conftest import TRAINER_COMPILE  # the trainer's own options: this run's execution counts
from jaxrl.algos.common.train import program_on as program, train_on as train_fn

pytestmark = [pytest.mark.physics, pytest.mark.slow]


def test_ppo_balances_brax_inverted_pendulum():
    run = config.load_config("configs/ppo_brax_inverted_pendulum.yaml")
    cfg = dataclasses.replace(run.algo_config, total_env_steps=64 * 16 * 100, eval_episodes=8)
    env, params = jaxrl.make(run.env.id, **run.env.params)
    algo = program(ppo, env, params, cfg)
    train = jax.jit(train_fn(ppo, env, params, cfg), compiler_options=TRAINER_COMPILE)
    state, metrics = train(jax.random.key(0))
    evaluation = jax.jit(algo.evaluate)(state, jax.random.key(1))
    assert float(evaluation["return_mean"]) >= 400, evaluation
    # Training episodes got longer too. The metric is the mean over the episodes that ended
    # in an update, 0 where none did: once the pole stays up for 1000 steps (16 updates of
    # 64 steps) a run of updates can end no episode at all, so look at the whole second half.
    returns = metrics["episode_return"]
    assert float(returns[len(returns) // 2 :].max()) > 10 * float(returns[:5].mean() + 1), returns
