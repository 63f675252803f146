"""The multi-agent contract, the JaxMARL adapter and MAPPO / IPPO.

References are independent of the code under test: JaxMARL's own ``reset`` / ``step_env``
on the same keys (the adapter), a two-agent matrix game whose best joint action is known
(learning), and an uninterrupted run (kill-and-resume, bit for bit).
"""

from __future__ import annotations

import dataclasses
import importlib.util

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

import jaxrl.algos.mappo as mappo
from jaxrl.algos.common.train import program_on
from jaxrl.core import registry, spaces
from jaxrl.core.check import check_env
from jaxrl.core.multiagent import MultiAgentEnv, ma_timestep, training_env
from jaxrl.run import config as C
from jaxrl.run import trainer
from jaxrl.run.checkpoint import Checkpoints
from test_trainer import leaves_equal, read_jsonl, without_wall_time

HAS_JAXMARL = importlib.util.find_spec("jaxmarl") is not None
needs_jaxmarl = pytest.mark.skipif(not HAS_JAXMARL, reason="needs the [jaxmarl] extra")
PROBE_ID = "test/MAProbe-v0"
#: The probe's rewarded joint action: agent 0 plays 1, agent 1 plays 2 (action 0 is masked).
TARGET = (1, 2)


@struct.dataclass
class ProbeParams:
    max_steps_in_episode: int = 1


@dataclasses.dataclass(frozen=True)
class MAProbe(MultiAgentEnv):
    """Two agents, one step: each is rewarded 1 when the joint action is :data:`TARGET`.

    Observations are the agents' one-hot ids (a shared policy can tell them apart); action
    0 is never available (``avail_actions``), and playing it costs -10 each.
    """

    num_agents = 2
    agent_names = ("a0", "a1")

    @property
    def default_params(self):
        return ProbeParams()

    def observation_space(self, params):
        return spaces.Box(0.0, 1.0, (2,), jnp.float32)

    def action_space(self, params):
        return spaces.Discrete(3)

    def state_space(self, params):
        return spaces.Box(0.0, 1.0, (4,), jnp.float32)

    def _ts(self, reward, done):
        obs = jnp.eye(2, dtype=jnp.float32)
        avail = jnp.array([[False, True, True]] * 2)
        return ma_timestep(obs, obs.reshape(-1), avail, reward, jnp.full((2,), done), done, False)

    def reset(self, key, params):
        return jnp.zeros((), jnp.int32), self._ts(jnp.zeros((2,)), False)

    def step(self, key, state, actions, params):
        hit = jnp.all(actions == jnp.array(TARGET))
        reward = jnp.where(hit, 1.0, 0.0) - 10.0 * jnp.any(actions == 0)
        return state + 1, self._ts(jnp.full((2,), reward), True)


def _probe_cfg(algo="mappo", **over) -> dict:
    section = {"num_envs": 8, "num_steps": 4, "total_env_steps": 8 * 4 * 40, "num_minibatches": 2, "update_epochs": 2,
               "lr": 1e-2, "hidden": [16], "eval_episodes": 8, **over}
    return {"algo": algo, "env": {"id": PROBE_ID}, algo: section, "train": {"progress": False}}


@pytest.fixture(scope="module", autouse=True)
def probe_registered():
    if PROBE_ID not in registry._REGISTRY:
        registry.register(PROBE_ID, MAProbe)
    yield
    registry.deregister(PROBE_ID)


# ---------------------------------------------------------------- the JaxMARL adapter


@needs_jaxmarl
def test_adapter_stacks_jaxmarl_own_step_on_the_same_keys():
    from jaxrl.adapters.jaxmarl import raw_jaxmarl_env

    env, params = registry.make("jaxmarl/MPE_simple_spread_v3")
    raw = raw_jaxmarl_env("MPE_simple_spread_v3")
    assert env.agent_names == ("agent_0", "agent_1", "agent_2")
    key = jax.random.PRNGKey(3)
    reset, step = jax.jit(env.reset), jax.jit(env.step)
    obs_r, st_r = raw.reset(key)
    st, ts = reset(key, params)
    for t in range(30):  # past the 26-step time limit
        k = jax.random.fold_in(key, t)
        acts = jax.random.randint(k, (3,), 0, 5)
        obs_r, st_r, rew_r, done_r, _ = raw.step_env(k, st_r, {a: acts[i] for i, a in enumerate(raw.agents)})
        st, ts = step(k, st, acts, params)
        for i, a in enumerate(raw.agents):
            np.testing.assert_array_equal(np.asarray(ts.obs[i]), np.asarray(obs_r[a]))
            assert float(ts.reward[i]) == float(rew_r[a])
        assert bool(ts.truncated) == bool(done_r["__all__"]) and not bool(ts.terminated)
        np.testing.assert_array_equal(np.asarray(ts.state), np.concatenate([np.asarray(obs_r[a]) for a in raw.agents]))
        if bool(done_r["__all__"]):
            obs_r, st_r = raw.reset(k)
            st, ts = reset(k, params)
    frame = env.render(st, params)  # agents drawn in blue (60, 90, 200) where they are
    assert frame.shape == (256, 256, 3) and frame.dtype == np.uint8
    x, y = np.asarray(st.inner.p_pos[0])
    assert tuple(frame[int((1.5 - y) / 3 * 256), int((x + 1.5) / 3 * 256)]) == (60, 90, 200)


@needs_jaxmarl
def test_check_env_runs_the_multiagent_checks_on_simple_spread():
    env, params = registry.make("jaxmarl/MPE_simple_spread_v3")
    report = check_env(env, params, num_steps=27, num_envs=2, verbose=False)
    assert report.passed, str(report)
    assert {c.name for c in report.checks} >= {"shapes", "avail_actions", "episode_end", "determinism"}


def test_missing_jaxmarl_gives_an_install_hint(monkeypatch):
    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec", lambda name, *a: None if name == "jaxmarl" else real(name, *a))
    assert "pip install 'jaxrl[jaxmarl]'" in registry._missing_extra("jaxmarl/MPE_simple_spread_v3")


def test_team_return_is_the_sum_of_every_agents_rewards():
    env = training_env(MAProbe())
    params = env.default_params
    state, _ = env.reset(jax.random.PRNGKey(0), params)
    state, ts = env.step(jax.random.PRNGKey(1), state, jnp.array(TARGET), params)
    assert bool(ts.info["episode_done"]) and float(ts.info["episode_return"]) == 2.0  # two agents, 1 each
    np.testing.assert_array_equal(np.asarray(ts.info["final_obs"]), np.eye(2))


# ------------------------------------------------------------------------ MAPPO / IPPO


def test_single_agent_env_is_refused_with_the_key():
    cfg = C.config_from_dict({"algo": "ippo", "env": {"id": "CartPole-v1"}, "train": {"progress": False}})
    with pytest.raises(C.ConfigError, match="env: CartPole-v1 is a single-agent env"):
        trainer.build(cfg)


@pytest.fixture(scope="module")
def probe_program():
    cfg = C.config_from_dict(_probe_cfg()).algo_config
    env = MAProbe()
    return program_on(mappo, env, env.default_params, cfg)


def test_masked_actions_are_never_taken(probe_program):
    from jaxrl.algos.mappo import update

    state = jax.jit(probe_program.init)(jax.random.PRNGKey(0))
    setup = probe_program.update.args[0]
    _, traj = jax.jit(update.collect, static_argnums=0)(setup, state.params, state.env, jax.random.PRNGKey(1))
    assert traj.action.size == 4 * 8 * 2 and not bool(jnp.any(traj.action == 0))
    assert bool(jnp.all(traj.log_prob > jnp.log(0.3)))  # two actions left, near-uniform at init


def test_mappo_learns_the_rewarded_joint_action(probe_program):
    from jaxrl.algos.common.train import train

    state, metrics = jax.jit(lambda k: train(probe_program, probe_program.plan.num_updates, k))(jax.random.PRNGKey(0))
    out = jax.jit(probe_program.evaluate)(state, jax.random.PRNGKey(1))
    np.testing.assert_array_equal(np.asarray(out["episode_returns"]), 2.0)  # both agents rewarded, greedy
    assert float(metrics["episode_return"][0]) < 1.0  # it did have something to learn


def test_kill_and_resume_is_bit_exact(tmp_path):
    class SimulatedKill(BaseException):
        """A crash nothing in the trainer handles (kill -9)."""

    raw = _probe_cfg("ippo", total_env_steps=8 * 4 * 6)
    raw["train"].update(updates_per_chunk=2, checkpoint_every=1)
    cfg = C.config_from_dict(raw)
    straight = trainer.run(cfg, run_dir=str(tmp_path / "straight"), evaluate=False)
    real_save, calls = Checkpoints.save, []

    def crashing_save(self, step, state):
        calls.append(step)
        if len(calls) == 2:
            raise SimulatedKill
        return real_save(self, step, state)

    with pytest.MonkeyPatch.context() as mp, pytest.raises(SimulatedKill):
        mp.setattr(Checkpoints, "save", crashing_save)
        trainer.run(cfg, run_dir=str(tmp_path / "resumed"), evaluate=False)
    resumed = trainer.run(None, resume=str(tmp_path / "resumed"), evaluate=False)
    assert resumed.updates == 6 and leaves_equal(resumed.state, straight.state)
    assert without_wall_time(read_jsonl(tmp_path / "resumed" / "metrics.jsonl")) == \
        without_wall_time(read_jsonl(tmp_path / "straight" / "metrics.jsonl"))
