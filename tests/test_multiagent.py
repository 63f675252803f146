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


@dataclasses.dataclass(frozen=True)
class MAMemoryProbe(MultiAgentEnv):
    """Two agents, two steps: a cue (0 or 1) is shown at the first step only, and at the
    second each agent is rewarded 1 for playing ``cue + 1`` (action 0 is never available).
    Only a policy that remembers the first observation can do better than 1 of 2 on average:
    the memory test of ``torso: gru``."""

    num_agents = 2
    agent_names = ("a0", "a1")

    @property
    def default_params(self):
        return ProbeParams(max_steps_in_episode=2)

    def observation_space(self, params):
        return spaces.Box(0.0, 1.0, (4,), jnp.float32)

    def action_space(self, params):
        return spaces.Discrete(3)

    def state_space(self, params):
        return spaces.Box(0.0, 1.0, (2,), jnp.float32)

    def _ts(self, cue, t, reward, done):
        shown = jnp.where(t == 0, jax.nn.one_hot(cue, 2), 0.0)
        obs = jnp.concatenate([jnp.eye(2), jnp.broadcast_to(shown, (2, 2))], axis=1)
        avail = jnp.array([[False, True, True]] * 2)
        return ma_timestep(obs, jnp.stack([t, 0]).astype(jnp.float32), avail, reward, jnp.full((2,), done), done, False)

    def reset(self, key, params):
        cue = jax.random.bernoulli(key).astype(jnp.int32)
        return (cue, jnp.zeros((), jnp.int32)), self._ts(cue, 0, jnp.zeros((2,)), False)

    def step(self, key, state, actions, params):
        cue, t = state
        reward = jnp.where(t == 1, (actions == cue + 1).astype(jnp.float32), 0.0)
        return (cue, t + 1), self._ts(cue, t + 1, reward, t == 1)


def _probe_cfg(algo="mappo", **over) -> dict:
    optim = {"lr": 1e-2, **over.pop("optim", {})}
    section = {"num_envs": 8, "num_steps": 4, "total_env_steps": 8 * 4 * 40, "num_minibatches": 2, "update_epochs": 2,
               "optim": optim, "hidden": [16], "eval_episodes": 8, **over}
    return {"algo": algo, "env": {"id": PROBE_ID}, algo: section, "train": {"progress": False}}


@pytest.fixture(scope="module", autouse=True)
def probe_registered():
    if PROBE_ID not in registry._REGISTRY:
        registry.register(PROBE_ID, MAProbe)
    yield
    registry.deregister(PROBE_ID)


#: The memory probe: a GRU MAPPO that should learn it.
MEMORY_CFG = {"num_envs": 8, "num_steps": 4, "total_env_steps": 8 * 4 * 60, "num_minibatches": 4, "update_epochs": 2,
              "hidden": [16], "torso": "gru", "cell_size": 16, "clip_per_network": True}


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
    _, _, traj = jax.jit(update.collect, static_argnums=0)(setup, state.params, state.env, jax.random.PRNGKey(1))
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


# ------------------------------------------------------------------ torso: gru, clip_per_network


def _program(env, algo="mappo", **over):
    return program_on(mappo, env, env.default_params, C.config_from_dict(_probe_cfg(algo, **over)).algo_config)


@pytest.fixture(scope="module")
def memory_program():
    return _program(MAMemoryProbe(), **MEMORY_CFG)


def test_gru_replays_the_rollout_from_its_stored_carries(memory_program):
    """The learner's sequences (agent-major, reset at episode starts, from the carries the
    rollout began with) give back the rollout's own log-probabilities and values: the first
    ratio of every update is 1. Two rollouts, so the second starts mid-run from carried state."""
    from jaxrl.algos.mappo import update

    setup = memory_program.update.args[0]
    state = jax.jit(memory_program.init)(jax.random.PRNGKey(0))
    state, _ = jax.jit(memory_program.update)(state)  # the next rollout starts from a non-zero carry
    assert float(jnp.max(jnp.abs(state.memory.carry[0]))) > 0.0
    _, _, traj = jax.jit(update.collect, static_argnums=0)(setup, state.params, state.env, state.key, state.memory)
    batch = update._learning_batch(setup, state.params, state.hyper, traj, state.memory)
    steps = jax.tree_util.tree_map(lambda x: jnp.swapaxes(x, 0, 1), batch.steps)
    _, logits, values = setup.network.apply(state.params, batch.carry, steps.actor_in, steps.critic_in,
                                            jnp.swapaxes(batch.start, 0, 1))
    log_prob = mappo.network.masked(logits, steps.avail).log_prob(steps.action)
    np.testing.assert_allclose(np.asarray(log_prob), np.asarray(steps.log_prob), atol=1e-5)
    np.testing.assert_allclose(np.asarray(values), np.asarray(steps.value), atol=1e-5)
    # sequence n is agent n % 2 of env n // 2; episodes are two steps, so starts alternate
    np.testing.assert_array_equal(np.asarray(batch.steps.action[3]), np.asarray(traj.action[:, 1, 1]))
    assert batch.start.shape == (16, 4) and bool(jnp.all(batch.start[:, ::2])) and not bool(jnp.any(batch.start[:, 1::2]))
    # a carry that leaked across an episode start would change the replay
    wrong = setup.network.apply(state.params, batch.carry, steps.actor_in, steps.critic_in,
                                jnp.zeros_like(jnp.swapaxes(batch.start, 0, 1)))[1]
    assert float(jnp.max(jnp.abs(wrong - logits))) > 1e-3


def test_gru_learns_what_only_memory_can_tell(memory_program):
    """The cue is seen one step before it pays: the GRU policy scores both agents every
    episode; the feed-forward one cannot beat chance (1 of 2 agents on average)."""
    from jaxrl.algos.common.train import train

    def final_eval(program):
        state, _ = jax.jit(lambda k: train(program, program.plan.num_updates, k))(jax.random.PRNGKey(0))
        return np.asarray(jax.jit(program.evaluate)(state, jax.random.PRNGKey(1))["episode_returns"])

    np.testing.assert_array_equal(final_eval(memory_program), 2.0)
    mlp = {**MEMORY_CFG, "torso": "mlp"}
    assert final_eval(_program(MAMemoryProbe(), **mlp)).mean() < 1.5


def test_clip_per_network_is_two_optimisers():
    """One Adam over the flat params with each network's gradient clipped by its own norm
    equals JaxMARL's two optimisers (clip by global norm, Adam), one per network."""
    import optax
    from flax import traverse_util
    from jax.flatten_util import ravel_pytree

    optim = {"lr": 0.05, "max_grad_norm": 0.5, "lr_end_frac": 1.0}
    program = _program(MAProbe(), optim=optim, clip_per_network=True)
    setup = program.update.args[0]
    params = program.init(jax.random.PRNGKey(0)).params
    flat_params, unravel = ravel_pytree(params)
    groups = mappo.network.param_groups(params)
    tops = {path[1] for path in traverse_util.flatten_dict(params)}
    assert tops == {"actor", "critic", "policy_head", "value_head"}
    grads = unravel(jax.random.normal(jax.random.PRNGKey(1), flat_params.shape) * jnp.where(groups == 1, 3.0, 0.1))
    opt = setup.optimizer
    state = opt.init(flat_params)
    ours = flat_params
    for _ in range(3):
        step, state = opt.update(ravel_pytree(grads)[0], state, ours)
        ours = ours + step
    split = lambda tree, critic: {k: v for k, v in tree["params"].items() if (k in ("critic", "value_head")) == critic}  # noqa: E731
    expect = {}
    for critic in (False, True):
        tx = optax.chain(optax.clip_by_global_norm(0.5), optax.adam(0.05, eps=1e-5))
        p, g = split(params, critic), split(grads, critic)
        s = tx.init(p)
        for _ in range(3):
            u, s = tx.update(g, s, p)
            p = optax.apply_updates(p, u)
        expect.update(p)
    np.testing.assert_allclose(np.asarray(ours), np.asarray(ravel_pytree({"params": expect})[0]), rtol=1e-6, atol=1e-7)
    one = _program(MAProbe(), optim=optim).update.args[0].optimizer
    differs = one.update(ravel_pytree(grads)[0], one.init(flat_params), flat_params)[0]
    assert float(jnp.max(jnp.abs(differs - opt.update(ravel_pytree(grads)[0], opt.init(flat_params), flat_params)[0]))) > 1e-4


def test_gru_needs_minibatches_that_divide_the_sequences():
    cfg = C.config_from_dict(_probe_cfg(**{**MEMORY_CFG, "num_envs": 3, "num_minibatches": 4, "num_steps": 4})).algo_config
    with pytest.raises(ValueError, match="num_minibatches: 4 does not divide num_envs \\* agents = 6"):
        program_on(mappo, MAMemoryProbe(), ProbeParams(2), cfg)
