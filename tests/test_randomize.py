"""Domain randomisation (jaxrl.core.randomize): per-episode draws match the declared
distribution, each env of a batch and each new episode draws its own, the dynamics use
the draw, and the run config (env.randomize) is checked before anything compiles."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl
from jaxrl.core.randomize import DomainRandomization, Distribution, parse_distribution
from jaxrl.core.vector import VectorEnv
from jaxrl.run.build import build
from jaxrl.run.config import ConfigError, config_from_dict

N = 4096
KS_99 = 1.63 / np.sqrt(N)  # Kolmogorov-Smirnov critical distance at the 1% level


def _draws(randomize, n=N, seed=0):
    env, params = jaxrl.make("CartPole-v1")
    venv = VectorEnv(DomainRandomization(env, randomize), n, episode_stats=False)
    _, ts = jax.jit(venv.reset)(jax.random.PRNGKey(seed), params)
    return {k: np.asarray(v) for k, v in ts.info["randomized"].items()}


def _ks(samples, cdf) -> float:
    x = np.sort(samples)
    empirical = np.arange(1, len(x) + 1) / len(x)
    return float(np.max(np.abs(empirical - cdf(x))))


def test_uniform_and_loguniform_draws_follow_their_distributions():
    d = _draws({"length": "uniform(0.4, 0.8)", "masspole": "loguniform(0.05, 0.2)"})
    length, mass = d["length"], d["masspole"]
    assert length.min() >= 0.4 and length.max() <= 0.8
    assert _ks(length, lambda x: (x - 0.4) / 0.4) < KS_99
    assert _ks(np.log(mass), lambda x: (x - np.log(0.05)) / (np.log(0.2) - np.log(0.05))) < KS_99
    # The two params are drawn independently of each other.
    assert abs(np.corrcoef(length, mass)[0, 1]) < 0.05
    # A wrong distribution fails the same test (the test can fail).
    assert _ks(length, lambda x: np.clip((x - 0.4) / 0.5, 0, 1)) > KS_99


def test_choice_draws_each_value_equally_often():
    d = _draws({"length": "choice(0.3, 0.5, 0.9)"})["length"]
    values, counts = np.unique(d, return_counts=True)
    np.testing.assert_allclose(values, [0.3, 0.5, 0.9], rtol=1e-6)
    assert np.all(np.abs(counts / N - 1 / 3) < 0.03)


def test_each_env_and_each_episode_draws_its_own_and_the_dynamics_use_it():
    env, params = jaxrl.make("CartPole-v1", max_steps_in_episode=3)
    dr = DomainRandomization(env, {"length": "uniform(0.4, 0.8)"})
    venv = VectorEnv(dr, 8, episode_stats=False)
    state, ts = venv.reset(jax.random.PRNGKey(1), params)
    first = np.asarray(ts.info["randomized"]["length"])
    assert len(set(first.tolist())) == 8
    step = jax.jit(venv.step)
    for t in range(3):
        state, ts = step(jax.random.PRNGKey(10 + t), state, jnp.ones(8, jnp.int32), params)
    assert np.asarray(ts.truncated).all()
    # The finished step reports the old episode's draw; the new episodes drew afresh.
    np.testing.assert_array_equal(np.asarray(ts.info["randomized"]["length"]), first)
    second = np.asarray(state.env_state.values["length"])
    assert not np.any(second == first)
    # One env's step equals the plain env's step at that env's drawn length.
    one = jax.tree_util.tree_map(lambda x: x[0], state.env_state)
    _, ours = dr.step(jax.random.PRNGKey(0), one, 1, params)
    p0 = params.replace(length=one.values["length"])
    _, plain = env.step(jax.random.PRNGKey(0), one.env_state, 1, p0)
    np.testing.assert_array_equal(np.asarray(ours.obs), np.asarray(plain.obs))


@pytest.mark.parametrize(
    "text, message",
    [
        ("uniform(0.8, 0.4)", "low <= high"),
        ("gauss(0, 1)", "unknown distribution"),
        ("uniform(0.4)", "takes 2 numbers"),
        ("loguniform(0, 1)", "0 < low"),
        ("uniform(a, b)", "must be numbers"),
        ("uniform(0.4, nan)", "finite"),
        ("__import__('os')", "expected a distribution"),
        (0.5, "expected a distribution"),
    ],
)
def test_bad_distributions_are_one_line_errors(text, message):
    with pytest.raises(ValueError, match=message):
        parse_distribution(text)


def test_wrapper_checks_names_and_ranges_against_the_params():
    env, _ = jaxrl.make("CartPole-v1")
    with pytest.raises(TypeError, match="randomize.nope"):
        DomainRandomization(env, {"nope": "uniform(0, 1)"})
    with pytest.raises(ValueError, match="randomize.length: uniform.*length"):
        DomainRandomization(env, {"length": "uniform(-0.1, 0.5)"})
    assert DomainRandomization(env, {"length": Distribution("uniform", (0.4, 0.8))}) == DomainRandomization(
        env, {"length": "uniform(0.4, 0.8)"}
    )


def _cfg(randomize):
    return config_from_dict({"algo": "ppo", "env": {"id": "CartPole-v1", "randomize": randomize}})


def test_run_config_randomize_is_checked_and_wraps_the_env():
    built = build(_cfg({"length": "uniform(0.4, 0.8)"}))
    assert isinstance(built.envs.env, DomainRandomization)
    with pytest.raises(ConfigError, match=r"^env.randomize.length: .*low <= high"):
        _cfg({"length": "uniform(0.9, 0.4)"})
    with pytest.raises(ConfigError, match=r"^env.randomize.lenght: .*unknown env parameter"):
        build(_cfg({"lenght": "uniform(0.4, 0.8)"}))
    with pytest.raises(ConfigError, match="token tasks"):
        build(config_from_dict({"algo": "grpo", "env": {"id": "text/Reverse-v0", "randomize": {"num_digits": "choice(2, 3)"}}}))
