"""The GRPO curriculum: one integer env param raised by one level whenever a batch's mean of
the curriculum metric reaches the threshold, capped at ``curriculum_stop``, and applied to
the env params the next rollout uses."""

import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl.algos import grpo
from jaxrl.algos.common import optim
from jaxrl.algos.contract import EnvSetup
from jaxrl.core.curriculum import Curriculum
from jaxrl_envs.text import Addition


def _make_setup(env, params, cfg, curriculum=None):
    return grpo.make_setup(EnvSetup(env, params, params, curriculum), cfg)


def _setup(**kw):
    env = Addition(max_digits=3)
    cfg = grpo.GRPOConfig(num_prompts=2, group_size=2, **kw)
    return _make_setup(env, env.default_params.replace(min_digits=1), cfg, Curriculum("num_digits", 1, 3, "exact_match", 0.5))


def _rollout(exact, returns=None):
    n = len(exact if exact is not None else returns)
    z = jnp.zeros((n, 1))
    info = {"exact_match": jnp.asarray(exact, jnp.float32)} if exact is not None else {}
    returns = jnp.asarray(returns if returns is not None else np.zeros(n), jnp.float32)
    return grpo.rollout.Rollout(z, z.astype(jnp.int32), z, z.astype(bool), z, z, returns, jnp.ones((n,), jnp.int32),
                        jnp.zeros((n,), bool), info)


@pytest.mark.parametrize("exact, level, expected", [
    ([1, 0, 0, 0], 1, 1),  # batch success 0.25 < 0.5: stay
    ([1, 1, 0, 0], 1, 2),  # 0.5 reaches the threshold: one level up
    ([1, 1, 1, 1], 1, 2),  # one level per update, never a jump
    ([1, 1, 1, 1], 3, 3),  # capped at curriculum_stop
])
def test_curriculum_advances_on_the_measured_success_rate(exact, level, expected):
    setup = _setup()
    new = grpo.update._next_level(setup, jnp.int32(level), _rollout(exact))
    assert int(new) == expected and new.dtype == jnp.int32


@pytest.mark.parametrize("level, expected", [(1, 3), (2, 4), (4, 5), (5, 5)])
def test_curriculum_step_raises_by_that_much_capped_at_the_stop(level, expected):
    env = Addition(max_digits=3)
    cfg = grpo.GRPOConfig(num_prompts=2, group_size=2)
    setup = _make_setup(env, env.default_params, cfg, Curriculum("num_digits", 1, 5, threshold=0.5, step=2))
    assert int(grpo.update._next_level(setup, jnp.int32(level), _rollout([1, 1]))) == expected
    assert int(grpo.update._next_level(setup, jnp.int32(level), _rollout([0, 0]))) == level  # below the threshold


def test_curriculum_uses_the_return_without_the_metric_and_sets_the_env_param():
    setup = _setup()
    assert int(grpo.update._next_level(setup, jnp.int32(1), _rollout(None, [0.2, 0.9]))) == 2  # mean return 0.55
    assert int(grpo.update._next_level(setup, jnp.int32(1), _rollout(None, [0.2, 0.3]))) == 1
    params = grpo.update._env_params_at(setup, jnp.int32(2))
    assert int(params.num_digits) == 2 and int(params.min_digits) == 1  # only the curriculum field changes


def test_no_curriculum_keeps_the_params():
    env = Addition(max_digits=2)
    setup = _make_setup(env, env.default_params, grpo.GRPOConfig(num_prompts=2, group_size=2))
    assert int(grpo.update._next_level(setup, jnp.int32(0), _rollout([1, 1]))) == 0
    assert grpo.update._env_params_at(setup, jnp.int32(5)) is setup.env_params


@pytest.mark.parametrize("warmup, end_frac, step, expected", [
    (0, 1.0, 500, 1.0),  # constant (the default)
    (0, 0.0, 0, 1.0),  # linear decay to 0 at num_updates = 1000
    (0, 0.0, 250, 0.75),
    (0, 0.2, 500, 0.6),  # 1 - 0.8 * 0.5
    (0, 0.0, 1500, 0.0),  # past num_updates: stays at the end value
    (10, 1.0, 4, 0.5),  # warm-up (step + 1) / 10
    (10, 0.0, 4, 0.5 * 0.996),  # both
])
def test_learning_rate_warmup_and_linear_decay(warmup, end_frac, step, expected):
    env = Addition(max_digits=2)
    o = grpo.config.GRPOOptim(lr=1.0, warmup_updates=warmup, lr_end_frac=end_frac)
    cfg = grpo.GRPOConfig(num_prompts=2, group_size=2, num_updates=1000, num_minibatches=2, optim=o)
    schedule = grpo.update.schedule(cfg)  # 2 optimiser steps per update share one rate
    state = grpo.update.make_optimizer(cfg).init(jnp.zeros(2))
    for count in (2 * step, 2 * step + 1):
        state = state._replace(count=jnp.int32(count))
        assert float(optim.current_lr(state, schedule)) == pytest.approx(expected, rel=1e-6)


def test_a_curriculum_end_outside_the_params_range_is_refused_up_front():
    """The last level is checked like the first: a stop the env would clip is a config error."""
    import os

    from jaxrl.run import config as config_lib
    from jaxrl.run.build import build

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    cfg = config_lib.load_config(os.path.join(root, "configs", "grpo_addition.yaml"), ["env.curriculum.stop=100"])
    with pytest.raises(config_lib.ConfigError, match=r"env.curriculum.stop: .*num_digits: must be <= 2"):
        build(cfg)
