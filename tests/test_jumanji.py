"""The Jumanji adapter (jaxrl.adapters.jumanji) against the environment contract.

CI subset: ``check_env`` on two ids (a ``Discrete`` env whose time limit Jumanji folds into
a termination, and a multi-component action with a joint mask); every adapted id when
``JAXRL_FULL_JUMANJI=1`` is set (slow: each id compiles several programs). Flags,
rewards and observations are compared step by step with Jumanji's own ``step``.
"""

from __future__ import annotations

import functools
import os
import pathlib
import re
import socket

import jax
import jax.numpy as jnp
import numpy as np
import pytest

jumanji = pytest.importorskip("jumanji")

import jaxrl  # noqa: E402
from jaxrl.adapters import jumanji as jj  # noqa: E402
from jaxrl.core import registry, spaces  # noqa: E402
from jaxrl.core.check import check_env  # noqa: E402

FAST = {"xla_backend_optimization_level": 0}
SMALL = dict(num_steps=40, num_envs=3, verbose=False, compiler_options=FAST)
CI_IDS = ["Maze-v0", "Minesweeper-v0"]
IDS = list(jj.JUMANJI_IDS) if os.environ.get("JAXRL_FULL_JUMANJI") == "1" else CI_IDS


def test_id_lists_cover_the_installed_jumanji_exactly():
    assert set(jj.JUMANJI_IDS).isdisjoint(jj.EXCLUDED) and set(jj.REFUSED) <= set(jj.EXCLUDED)
    assert sorted((*jj.JUMANJI_IDS, *jj.EXCLUDED)) == sorted(jumanji.registered_environments())
    ids = jaxrl.registered_ids()
    assert all(f"jumanji/{i}" in ids for i in jj.JUMANJI_IDS)
    assert not any(f"jumanji/{i}" in ids for i in jj.EXCLUDED)


@pytest.mark.parametrize("env_id", IDS)
def test_check_env_passes(env_id):
    env, params = jaxrl.make(f"jumanji/{env_id}")
    report = check_env(env, params, **SMALL)
    assert report.passed, str(report)


@pytest.mark.parametrize("env_id", [i for i in jj.EXCLUDED if i not in jj.REFUSED])
def test_excluded_envs_still_break_the_adapter_as_stated(env_id):
    """Each reason still holds for the installed jumanji, and the adapter refuses the env
    with it where it is the adapter's limit (a change upstream shows up as a failure here)."""
    raw = jj.raw_jumanji_env(env_id)  # cached: the adapter below reuses it
    reason = jj.EXCLUDED[env_id]
    if "observation spec" in reason:  # Jumanji's own check of its reset observation fails
        _, ts = jax.jit(raw.reset)(jax.random.PRNGKey(0))
        with pytest.raises(ValueError, match="not all within bounds"):
            raw.observation_spec.validate(ts.observation)
        return
    if "reward per agent" in reason:
        shape = tuple(raw.reward_spec.shape)
        assert shape != () and f"shape {shape}" in reason
        match = "rewards of shape"
    else:
        n = int(np.prod(np.asarray(raw.action_spec.num_values)))
        assert n > jj.MAX_JOINT_ACTIONS and "joint action space" in reason
        match = "exceed MAX_JOINT_ACTIONS"
    with pytest.raises(ValueError, match=match):
        jj.JumanjiEnv(env_id)


def test_only_the_refused_envs_download():
    """Scanning jumanji's env sources for download calls finds exactly the refused envs."""
    root = pathlib.Path(jumanji.__file__).parent / "environments"
    pattern = re.compile(r"hf_hub_download|snapshot_download|requests\.(get|post)|urlopen|urlretrieve")
    found = set()
    for path in root.rglob("*.py"):
        if "test" not in path.name and pattern.search(path.read_text()):
            found.add(path.parent.name)
    assert found == {"sokoban"} and jj.REFUSED == ("Sokoban-v0",)


def test_sokoban_is_refused_without_any_network_call(monkeypatch):
    def no_network(*args, **kwargs):
        raise AssertionError("a network call was attempted")

    monkeypatch.setattr(socket.socket, "connect", no_network)
    monkeypatch.setattr(jumanji, "make", no_network)
    jj.raw_jumanji_env.cache_clear()
    with pytest.raises(ValueError, match="downloads its levels from the Hugging Face hub"):
        jj.JumanjiEnv("Sokoban-v0")
    with pytest.raises(KeyError, match="unknown env id"):
        jaxrl.make("jumanji/Sokoban-v0")


def test_missing_jumanji_gives_the_install_hint(monkeypatch):
    import importlib.util

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "jumanji" else real(name, *a))
    with pytest.raises(ModuleNotFoundError, match=r"pip install 'jaxrl\[jumanji\]'"):
        jj.raw_jumanji_env("Snake-v1", (("time_limit", 123),))
    assert "install jaxrl[jumanji]" in registry._missing_extra("jumanji/Snake-v1")


def test_spaces_layout_and_joint_actions_of_minesweeper():
    env, params = jaxrl.make("jumanji/Minesweeper-v0")
    assert isinstance(params, jj.NoParams) and env.episode_bound(params) is None
    assert env.action_space(params) == spaces.Discrete(100)
    assert [s.name for s in env.obs_layout] == ["board", "action_mask", "num_mines", "step_count"]
    np.testing.assert_array_equal(np.asarray(env.decode_action(jnp.int32(23))), [2, 3])
    np.testing.assert_array_equal(np.asarray(env.decode_action(jnp.int32(500))), [9, 9])  # clipped
    (_, raw_ts), (_, ts) = jax.jit(lambda k: (env.raw.reset(k), env.reset(k, params)))(jax.random.PRNGKey(0))
    back = env.unflatten_obs(ts.obs)
    for name in ("board", "action_mask", "num_mines"):
        theirs = getattr(raw_ts.observation, name)
        np.testing.assert_array_equal(np.asarray(back[name]), np.asarray(theirs))
        assert back[name].dtype == theirs.dtype
    np.testing.assert_array_equal(np.asarray(ts.info["action_mask"]), np.asarray(raw_ts.observation.action_mask).ravel())


def test_per_agent_masks_become_a_joint_mask_and_extras_reach_info():
    """Cleaner masks each agent's 4 moves apart; joint action (a, b, c) is allowed iff each
    agent's move is. Its ``TimeStep.extras`` are ``info["extras"]``."""
    env, params = jaxrl.make("jumanji/Cleaner-v0")
    assert env.action_space(params) == spaces.Discrete(64)

    @jax.jit
    def run(key):
        state, first = env.reset(key, params)
        return first, env.step(key, state, jnp.int32(0), params)[1]

    first, ts = run(jax.random.PRNGKey(1))
    per_agent = np.asarray(env.unflatten_obs(first.obs)["action_mask"])
    joint = np.asarray(first.info["action_mask"]).reshape(4, 4, 4)
    expected = per_agent[0][:, None, None] & per_agent[1][None, :, None] & per_agent[2][None, None, :]
    np.testing.assert_array_equal(joint, expected)
    assert 0 < joint.sum() < 64
    assert set(ts.info["extras"]) == {"num_dirty_tiles", "ratio_dirty_tiles"}
    assert 0 < int(ts.info["extras"]["num_dirty_tiles"]) < 100


@functools.partial(jax.jit, static_argnums=(0, 3))
def _parity(env, params, key, steps):
    """Jumanji's own ``step`` and the adapter's on the same states (reset by hand when an
    episode ends). Returns Jumanji's (obs, reward, discount, last) and the adapter's
    (obs, reward, terminated, truncated, steps into the episode), each ``[T, ...]``."""
    n = env.action_space(params).n

    def body(state, key):
        k_act, k_reset = jax.random.split(key)
        action = jax.random.randint(k_act, (), 0, n)
        _, theirs = env.raw.step(state.inner, env.decode_action(action))
        state, ours = env.step(key, state, action, params)
        elapsed = state.elapsed
        fresh, _ = env.reset(k_reset, params)
        state = jax.tree_util.tree_map(lambda a, b: jnp.where(ours.done, a, b), fresh, state)
        t = (env.flatten_obs(theirs.observation), theirs.reward, theirs.discount, theirs.last())
        return state, (t, (ours.obs, ours.reward, ours.terminated, ours.truncated, elapsed))

    state, _ = env.reset(key, params)
    return jax.lax.scan(body, state, jax.random.split(key, steps))[1]


def test_flags_follow_discount_and_time_limit_step_by_step():
    """Snake with a 6-step limit: it dies on walls (discount 0: terminated) and hits the
    limit, which Jumanji folds into a termination; the adapter reports that as truncated.
    With ``max_steps_in_episode=3`` (same compiled program) it truncates at 3."""
    env = jj.JumanjiEnv("Snake-v1", (("time_limit", 6),))
    assert env.default_params.max_steps_in_episode == 6
    params = env.default_params.replace(max_steps_in_episode=jnp.int32(6))  # one compile for both runs
    theirs, ours = jax.tree_util.tree_map(np.asarray, _parity(env, params, jax.random.PRNGKey(0), 300))
    (obs_t, rew_t, disc_t, last_t), (obs_o, rew_o, term, trunc, elapsed) = theirs, ours
    np.testing.assert_array_equal(obs_t, obs_o)
    np.testing.assert_array_equal(rew_t.astype(np.float32), rew_o)
    assert rew_o.dtype == np.float32
    np.testing.assert_array_equal(last_t, term | trunc)
    assert not (term & trunc).any() and term.sum() > 0 and trunc.sum() > 0
    np.testing.assert_array_equal(trunc, last_t & (elapsed == 6))  # Jumanji's limit, its discount 0
    assert (disc_t[trunc] == 0).all() and (elapsed[term] < 6).all()

    short = params.replace(max_steps_in_episode=jnp.int32(3))
    _, (_, _, term, trunc, elapsed) = jax.tree_util.tree_map(np.asarray, _parity(env, short, jax.random.PRNGKey(0), 300))
    assert trunc.sum() > 0 and (elapsed[trunc] == 3).all() and (elapsed <= 3).all()


def test_snake_recipe_loads_and_cuts_episodes_at_500():
    from jaxrl.run.config import load_config

    cfg = load_config(pathlib.Path(__file__).resolve().parents[1] / "configs" / "ppo_jumanji_snake.yaml")
    env, params = jaxrl.make(cfg.env.id, **cfg.env.params)
    assert isinstance(env, jj.JumanjiEnv) and env.time_limit == 4000 and env.episode_bound(params) == 500
    assert cfg.algo == "ppo" and env.action_space(params) == spaces.Discrete(4)


# ---------------------------------------- an explicit truncation, a plain array obs, a Box


class _WalkEnv(jumanji.Environment):
    """Moves by the action (float in [-1, 1]); reaching x >= 2 is a termination (discount
    0), step 4 a ``jumanji.types.truncation`` (discount 1). No ``time_limit`` attribute."""

    def __init__(self):
        super().__init__()

    def reset(self, key):
        state = {"x": jnp.zeros(()), "t": jnp.zeros((), jnp.int32)}
        return state, jumanji.types.restart(jnp.stack([state["x"], 0.0]))

    def step(self, state, action):
        state = {"x": state["x"] + action[0], "t": state["t"] + 1}
        obs = jnp.stack([state["x"], state["t"].astype(jnp.float32)])
        reward = jnp.asarray(1.0)
        return state, jax.lax.cond(
            state["x"] >= 2.0,
            lambda: jumanji.types.termination(reward, obs),
            lambda: jax.lax.cond(state["t"] >= 4, lambda: jumanji.types.truncation(reward, obs),
                                 lambda: jumanji.types.transition(reward, obs)),
        )

    @functools.cached_property
    def observation_spec(self):
        return jumanji.specs.Array((2,), jnp.float32, "position")

    @functools.cached_property
    def action_spec(self):
        return jumanji.specs.BoundedArray((1,), jnp.float32, -1.0, 1.0, "move")


def test_discount_one_is_truncation_and_plain_specs_map(monkeypatch):
    walk = _WalkEnv()
    monkeypatch.setattr(jj, "raw_jumanji_env", lambda env_id, kw=(): walk)
    env = jj.JumanjiEnv("Walk-v0")
    params = env.default_params
    assert isinstance(params, jj.NoParams) and [s.name for s in env.obs_layout] == [""]
    act = env.action_space(params)
    assert isinstance(act, spaces.Box) and act.shape == (1,) and float(act.high[0]) == 1.0

    def episode(move):
        state, _ = env.reset(jax.random.PRNGKey(0), params)
        out = []
        for _ in range(4):
            state, ts = env.step(None, state, jnp.array([move]), params)
            out.append((bool(ts.terminated), bool(ts.truncated)))
        return out, ts

    flags, ts = episode(5.0)  # clipped to 1: x = 2 at step 2, terminated
    assert flags[1] == (True, False)
    flags, ts = episode(0.0)  # x stays 0: the env's own truncation (discount 1) at step 4
    assert flags == [(False, False)] * 3 + [(False, True)]
    np.testing.assert_array_equal(np.asarray(ts.obs), [0.0, 4.0])
    assert ts.info["action_mask"].shape == ()
    with pytest.raises(ValueError, match=r"action has shape \(2, 1\), expected \(1,\)"):
        env.step(None, env.reset(jax.random.PRNGKey(0), params)[0], jnp.zeros((2, 1)), params)
