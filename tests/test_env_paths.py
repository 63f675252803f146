"""The training env path (``env.vector``, :func:`jaxrl.algos.common.envs.batched_env`).

Specification:
* every path gives the same training, bit for bit, when start states do not depend on the
  reset key (a fixed-start env): same episode statistics, same rewards and flags, same
  params; for a recurrent torso too, so the carry is reset on the same done flags;
* with real random starts the paths differ only in which keys draw start states (resume
  and seeds stay bit-exact per path: tests/test_resume.py runs the default path);
* ``auto`` resolves to the measured fast path; bad values get a one-line error naming
  ``env.vector``, from the helper and from the config loader.
"""

from __future__ import annotations

import functools

import jax
import numpy as np
import pytest

import jaxrl
from jaxrl.algos import dqn, ppo
from jaxrl.algos.common import envs as env_paths
from jaxrl.algos.common.train import COMPILER_OPTIONS, program_on, train_on
from jaxrl.algos.ppo.config import NetworkConfig
from jaxrl.core import rollout
from jaxrl.core.env import Wrapper
from jaxrl.core.vector import VectorEnv
from jaxrl.core.wrappers import VmapEnv
from jaxrl.run import config as config_lib

class FixedStart(Wrapper):
    """Every episode starts from the same state: a run depends on the actions only."""

    def reset(self, key, params):
        return self.env.reset(jax.random.key(3), params)


def _ppo_cfg(**kw) -> ppo.PPOConfig:
    # 20 envs > the 16-env reset chunk: VectorEnv runs its ranked, chunked reset loop.
    base = dict(num_envs=20, num_steps=16, total_env_steps=20 * 16 * 2, update_epochs=1, num_minibatches=1,
                hidden=(8,))
    base.update(kw)
    return ppo.PPOConfig(**base)


def _fixed_cartpole():
    env, params = jaxrl.make("CartPole-v1")
    return FixedStart(env), params


@functools.lru_cache(maxsize=None)
def _train(path: str):
    """Two PPO updates on the fixed-start CartPole: ``(params, metrics [2])`` on the host."""
    env, params = _fixed_cartpole()
    run = jax.jit(train_on(ppo, env, params, _ppo_cfg(), vector=path), compiler_options=COMPILER_OPTIONS)
    state, metrics = run(jax.random.PRNGKey(0))
    return jax.device_get((state.agent.params, metrics))


@pytest.mark.parametrize("path", ["vector", "pool"])
def test_paths_train_identically_from_a_fixed_start(path):
    ref_params, ref = _train("autoreset")
    params, metrics = _train(path)
    # episodes did end, on many envs and steps: the auto-reset and the statistics were exercised
    assert ref["episode_count"].sum() > 20
    assert set(metrics) == set(ref)
    for k in ref:
        np.testing.assert_array_equal(metrics[k], ref[k], err_msg=k)
    jax.tree_util.tree_map(np.testing.assert_array_equal, params, ref_params)


def _recurrent_rollout(setup, key):
    state = ppo.update.init(setup, key)
    policy = functools.partial(ppo.acting.recurrent_policy_step, setup.network, setup.cfg, state.agent)
    out = rollout.collect_recurrent(policy, setup.env, setup.env_params, state.env, state.memory, key, 24)
    return state.memory, out


def test_recurrent_carry_sees_the_same_done_flags_on_every_path():
    env, params = _fixed_cartpole()
    cfg = _ppo_cfg(network=NetworkConfig(torso="gru", cell_size=8))
    out = {}
    for path in ("autoreset", "vector"):
        setup = ppo.make_setup(env, params, cfg, path)
        out[path] = jax.device_get(jax.jit(functools.partial(_recurrent_rollout, setup))(jax.random.PRNGKey(1)))
    memory0, (_, memory, traj, carries) = out["vector"]
    # the recurrent policy's start flags are the auto-reset's done flags, and episodes ended
    starts = np.asarray(rollout.start_flags(memory0, traj))
    assert starts[1:].sum() > 10
    np.testing.assert_array_equal(memory.start, traj.terminated[-1] | traj.truncated[-1])
    # values, actions, episode statistics, carries and observations equal the reference
    # path's, bit for bit (the env states differ in type only)
    same = lambda o: (o[0], o[1][0].obs, o[1][1:])  # noqa: E731
    jax.tree_util.tree_map(np.testing.assert_array_equal, same(out["vector"]), same(out["autoreset"]))


def test_auto_is_the_vector_path_and_algorithms_use_it():
    env, params = jaxrl.make("CartPole-v1")
    assert env_paths.resolve_path("auto") == "vector"
    assert isinstance(env_paths.batched_env(env, 4), VectorEnv)
    assert isinstance(env_paths.batched_env(env, 4, "autoreset"), VmapEnv)
    train_env = ppo.make_setup(env, params, _ppo_cfg()).env
    assert isinstance(train_env, VectorEnv) and train_env.num_envs == 20
    for path, kind in (("auto", VectorEnv), ("autoreset", VmapEnv)):
        program = program_on(dqn, env, params, dqn.DQNConfig(num_envs=4), vector=path)
        assert isinstance(program.init_with.args[0].env, kind)  # the Setup the program is bound to


def test_bad_path_is_rejected_in_one_line():
    env, _ = jaxrl.make("CartPole-v1")
    with pytest.raises(ValueError, match=r"^env.vector: expected one of auto, vector, autoreset, pool, got 'fast'$"):
        env_paths.batched_env(env, 4, "fast")
    raw = {"algo": "ppo", "env": {"id": "CartPole-v1", "vector": "fast"}}
    with pytest.raises(config_lib.ConfigError) as exc:
        config_lib.config_from_dict(raw)
    msg = str(exc.value)
    assert "env.vector" in msg and "'fast'" in msg and "\n" not in msg


def test_pool_path_declares_only_the_running_envs_as_the_batch():
    """The pool's own leaves ([P] draws, cursor, params) are not per env: every algorithm's
    ``batch_axes`` marks them replicated (a run's layout splits only axes of size N)."""
    from jaxrl.core.reset_pool import ResetPoolState
    from jaxrl.algos import pqn, sac

    cases = [(ppo, "CartPole-v1", ppo.PPOConfig(num_envs=4, num_steps=8, total_env_steps=64, hidden=(8,))),
             (dqn, "CartPole-v1", dqn.DQNConfig(num_envs=4)), (pqn, "CartPole-v1", pqn.PQNConfig(num_envs=4)),
             (sac, "Pendulum-v1", sac.SACConfig(num_envs=4))]
    for module, env_id, cfg in cases:
        env, params = jaxrl.make(env_id)
        program = program_on(module, env, params, cfg, vector="pool")
        state = jax.eval_shape(program.init, jax.random.PRNGKey(0))
        assert isinstance(state.env.env_state, ResetPoolState)
        pool_axes = program.batch_axes(state).env.env_state
        for axis, leaf in zip(jax.tree_util.tree_leaves(pool_axes.env_state), jax.tree_util.tree_leaves(state.env.env_state.env_state)):
            assert axis == 0 and leaf.shape[0] == 4
        others = (pool_axes.pool_state, pool_axes.pool_obs, pool_axes.cursor, pool_axes.params, pool_axes.refills)
        assert set(jax.tree_util.tree_leaves(others)) == {-1}, module.__name__
        assert set(jax.tree_util.tree_leaves(program.batch_axes(state).env.obs)) == {0}


def test_pool_path_runs_through_jaxrl_train_and_resumes_bit_for_bit(tmp_path):
    """``env.vector: pool`` from a config, through the trainer (layout, chunks, checkpoints):
    a run killed after its first checkpoint resumes to the straight run's state, bit for bit
    (the pool, its cursor and the running episodes are in the checkpoint)."""
    from jaxrl.run import trainer
    from jaxrl.run.checkpoint import Checkpoints

    class Kill(BaseException):
        pass

    cfg = config_lib.config_from_dict({
        "algo": "ppo", "env": {"id": "CartPole-v1", "vector": "pool"},
        "ppo": {"num_envs": 8, "num_steps": 16, "total_env_steps": 512, "num_minibatches": 2, "update_epochs": 1,
                "hidden": [8], "eval_episodes": 2},
        "train": {"updates_per_chunk": 2, "checkpoint_every": 1, "progress": False},
    })
    straight = trainer.run(cfg, run_dir=str(tmp_path / "straight"), evaluate=False)
    assert straight.updates == 4 and int(straight.state.env.env_state.refills[0]) > 0
    real_save = Checkpoints.save

    def crashing_save(self, step, state):
        real_save(self, step, state)
        raise Kill

    with pytest.MonkeyPatch.context() as mp, pytest.raises(Kill):
        mp.setattr(Checkpoints, "save", crashing_save)
        trainer.run(cfg, run_dir=str(tmp_path / "resumed"), evaluate=False)
    resumed = trainer.run(None, resume=str(tmp_path / "resumed"), evaluate=False)
    assert resumed.updates == 4
    jax.tree_util.tree_map(np.testing.assert_array_equal, resumed.state, straight.state)


def test_one_seed_chunk_keeps_the_pools_refill_conditional():
    """With one seed the trainer's chunk runs unbatched: the pool's refill stays a
    ``lax.cond`` (drawn only when the pool runs short); under ``vmap`` over seeds it becomes
    a select whose both sides, the refill included, run at every step."""
    from jaxrl.run import trainer

    env, params = jaxrl.make("CartPole-v1")
    program = program_on(ppo, env, params, _ppo_cfg(), vector="pool")

    def conds(num_seeds):
        states = jax.eval_shape(jax.vmap(program.init), jax.random.split(jax.random.PRNGKey(0), num_seeds))
        chunk = trainer.make_chunk(program.update, 1)
        return str(chunk.trace(states, np.int32(1)).jaxpr).count("cond[")

    assert conds(1) > conds(2)
