"""The Craftax adapter (jaxrl.adapters.craftax) against the environment contract.

craftax is not in the ``[dev]`` extra (one Craftax step compiles for tens of seconds on a
2-core CPU), so CI runs only the install-hint test; the rest skip without craftax and run
with ``pip install 'jaxrl[craftax]'``.
"""

from __future__ import annotations

import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl
from jaxrl.adapters import craftax as jc
from jaxrl.core import registry, spaces

needs_craftax = pytest.mark.skipif(not jc.craftax_available(), reason="craftax is not installed (jaxrl[craftax])")
FAST = {"xla_backend_optimization_level": 0}
CLASSIC = "Craftax-Classic-Symbolic-v1"


def test_missing_craftax_names_the_extra(monkeypatch):
    jaxrl.registered_ids()  # load the plugins first, with the real find_spec
    monkeypatch.setattr(registry.importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(KeyError, match=r"needs the optional package 'craftax': install jaxrl\[craftax\]"):
        registry.spec("craftax/Not-There-v1")
    monkeypatch.setattr(jc.importlib.util, "find_spec", lambda name, *a: None)
    jc.raw_craftax_env.cache_clear()
    with pytest.raises(ModuleNotFoundError, match=r"pip install 'jaxrl\[craftax\]'"):
        jc.raw_craftax_env(CLASSIC)
    jc.raw_craftax_env.cache_clear()


def test_unknown_craftax_id_lists_the_adapted_ones():
    with pytest.raises(ValueError, match="Craftax-Classic-Symbolic-v1"):
        jc.raw_craftax_env("Craftax-Classic-v0")


@needs_craftax
def test_ids_register_and_spaces_map():
    ids = jaxrl.registered_ids()
    assert all(f"craftax/{i}" in ids for i in jc.CRAFTAX_IDS)
    env, params = jaxrl.make(f"craftax/{CLASSIC}", max_steps_in_episode=50)
    assert params.max_steps_in_episode == 50 and params.inner.max_timesteps == 10_000
    assert env.action_space(params) == spaces.Discrete(17)
    obs = env.observation_space(params)
    assert obs.shape == (1345,) and obs.dtype == jnp.float32
    with pytest.raises(ValueError, match="takes no env_kwargs"):
        jc.CraftaxEnv(CLASSIC, env_kwargs=(("map_size", 32),))


@needs_craftax
def test_flags_death_terminates_the_limit_truncates_and_obs_match_craftax():
    """One step from a live state, from a dead one (health 0) and on the limit's step: the
    adapter's flags, and its obs/reward against Craftax's own ``step_env``."""
    env, params = jaxrl.make(f"craftax/{CLASSIC}", max_steps_in_episode=3)
    raw, raw_params = env.raw, env.raw_params(params)

    def steps(key):
        state, _ = env.reset(key, params)
        dead = state.replace(inner=state.inner.replace(player_health=jnp.zeros_like(state.inner.player_health)))
        late = state.replace(inner=state.inner.replace(timestep=jnp.asarray(2, state.inner.timestep.dtype)))
        ours = [env.step(key, s, jnp.int32(5), params)[1] for s in (state, dead, late)]
        theirs = raw.step_env(key, state.inner, jnp.int32(5), raw_params)
        return [(t.terminated, t.truncated) for t in ours], (ours[0].obs, ours[0].reward), theirs[0], theirs[2]

    flags, (obs, reward), raw_obs, raw_reward = jax.jit(steps, compiler_options=FAST)(jax.random.PRNGKey(0))
    assert [(bool(a), bool(b)) for a, b in flags] == [(False, False), (True, False), (False, True)]
    np.testing.assert_array_equal(np.asarray(obs), np.asarray(raw_obs))
    assert float(reward) == float(raw_reward)


@needs_craftax
def test_recipe_loads():
    from jaxrl.run import config

    root = os.path.join(os.path.dirname(__file__), "..", "configs")
    cfg = config.load_config(os.path.join(root, "ppo_craftax_classic.yaml"))
    assert cfg.env.id == f"craftax/{CLASSIC}" and cfg.algo_config.hidden == (512, 512, 512)
    cpu = config.load_config(os.path.join(root, "ppo_craftax_classic_1m.yaml"))
    assert cpu.env.id == cfg.env.id and cpu.env.vector == "pool" and cpu.algo_config.total_env_steps == 2**20


@needs_craftax
def test_check_env_passes_classic_symbolic():
    from jaxrl.core.check import check_env

    env, params = jaxrl.make(f"craftax/{CLASSIC}")
    report = check_env(env, params, num_steps=40, num_envs=2, verbose=False, compiler_options=FAST)
    assert report.passed, str(report)
