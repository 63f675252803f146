"""Sharding over a data mesh (jaxrl.parallel.sharding) and multi-process settings (jaxrl.parallel.distributed).

The multi-device checks need ``--xla_force_host_platform_device_count=4`` before JAX
starts, so they run once in a subprocess (tests/sharding_checks.py) whose JSON report the
tests below assert on; the rest runs in-process on the single CPU device.
"""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl
from jaxrl.algos.common import batching
from jaxrl.parallel import distributed, sharding

HERE = os.path.dirname(os.path.abspath(__file__))
F32_TOL = 1e-5  # relative, float32 summation order differs between layouts


@pytest.fixture(scope="module")
def report() -> dict:
    from fast_compile import subprocess_env  # XLA at -O0: both sides of each comparison compiled alike

    proc = subprocess.run(
        [sys.executable, os.path.join(HERE, "sharding_checks.py")],
        capture_output=True, text=True, env=subprocess_env(), timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-4000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


# ------------------------------------------------------------------- 4 forced CPU devices


def test_env_batch_is_split_and_params_replicated(report):
    assert report["n_devices"] == 4
    # every env-batch leaf of PPO's state (env state, observations, reward accumulator)
    # and nothing else is split along its leading axis
    assert set(report["batch_axes"]) == {
        ".env.env_state.env_state.x", ".env.env_state.env_state.x_dot", ".env.env_state.env_state.theta",
        ".env.env_state.env_state.theta_dot", ".env.env_state.env_state.time",
        ".env.env_state.episode_return", ".env.env_state.episode_length", ".env.obs", ".return_acc",
    }
    assert set(report["batch_axes"].values()) == {0}
    assert report["obs_spec"] == "P('data',)"
    assert report["obs_shard_shapes"] == [[2, 4]] * 4  # 8 envs / 4 devices
    assert report["params_replicated"]


def test_whole_seeds_per_device_without_collectives(report):
    # shard: auto with 4 seeds on 4 devices puts one whole seed on each device: every state
    # leaf split on the seed axis (params too), no gradient all-reduce (the env split has
    # one), and the same numbers as one device
    assert report["seed_split_mode"] == "seeds" and report["seed_split_env_mode"] == "envs"
    assert report["seed_split_obs_spec"] == "P('data',)"
    assert report["seed_split_params_spec"] == "P('data',)"
    assert report["env_split_all_reduce"] and not report["seed_split_all_reduce"]
    assert report["seed_split_metrics_diff"] < F32_TOL
    assert report["seed_split_state_diff"] < F32_TOL
    assert report["seed_split_bad_seeds_error"].startswith("shard: seeds: train.seeds=6 is not divisible by the number of devices (4)")


def test_sharded_ppo_matches_single_device(report):
    # same global batch (8 envs), 2 chunks x 3 updates: metrics, params and the whole
    # state equal the plain single-device jit up to float32 summation order
    assert report["metrics_diff"] < F32_TOL
    assert report["params_diff"] < F32_TOL
    assert report["state_diff"] < F32_TOL
    assert report["episode_count"] > 0  # episodes did end: the auto-reset path was exercised


def test_sharded_ppo_has_two_flat_collectives(report):
    # The env-split PPO chunk talks across devices exactly twice per update: one all-gather
    # of the whole rollout (every field packed into one array) and, in the SGD loop, one
    # all-reduce of the flat gradient and the metrics. Neither is a tuple: XLA's CPU
    # collectives pay a rendezvous per tuple element (1.29 ms vs 0.04 ms for 17 pieces on
    # 4 forced devices), which was most of the sharding overhead in bench/scaling.py.
    ops = sorted(op for _, op in report["ppo_collectives"])
    assert ops == ["all-gather", "all-reduce"], report["ppo_collectives"]
    assert not any(shape.startswith("(") for shape, _ in report["ppo_collectives"])


def test_replicate_packs_exactly_and_batch_mean_matches(report):
    # int32 above 2**24 (bitcast), bool and uint8 leaves survive the float32 packing bit
    # for bit, in one all-gather; batch_mean (per-device slices + one psum) equals the
    # plain computation
    assert report["replicate_exact"] and report["replicate_is_replicated"]
    assert report["replicate_all_gathers"] == 1
    assert report["batch_mean_diff"] < F32_TOL


def test_rng_streams_distinct_per_shard_and_reproducible(report):
    assert report["obs_shards_distinct"]
    assert report["init_reproducible"]
    assert report["init_equals_single_device"]  # bit-identical: layout does not change the streams


def test_sharded_chunk_compiles_once_without_host_traffic(report):
    assert report["traces"] == 1 and report["cache_size"] == 1
    assert report["host_traffic"] == []
    assert report["n_eqns"] > 0
    assert report["ppo_constrained"]


def test_resume_on_another_layout(report):
    # state after chunk 1 on 4 devices, moved to a 2-device mesh, continues like the reference
    assert report["moved_spec"] == ["P('data',)", 2]
    assert report["resume_other_layout_diff"] < F32_TOL


def test_indivisible_num_envs_is_rejected(report):
    assert report["indivisible_error"].startswith("num_envs=6 is not divisible by the number of devices (4)")
    assert "num_envs=4 or 8" in report["indivisible_error"]
    assert "num_envs=6 is not divisible" in report["indivisible_layout_error"]
    assert "envs per device: 2 of 8" in report["summary"]


def test_sharded_grpo_matches_single_device(report):
    # the prompt groups are split over the 4 devices inside update (a sharding constraint in
    # the program), with the single-device program's numbers
    assert report["grpo_constrained"]
    assert report["grpo_metrics_diff"] < F32_TOL
    assert report["grpo_state_diff"] < F32_TOL
    assert report["grpo_reward"] > 0


# ------------------------------------------------------------------- in-process units


def test_host_traffic_detector_sees_callbacks():
    """The check used on the sharded chunk does flag programs that talk to the host."""
    x = jnp.arange(4.0)
    assert sharding.host_traffic(jax.jit(lambda x: jnp.sin(x) * 2), x) == []
    printing = jax.jit(lambda x: jax.lax.scan(lambda c, _: (jax.debug.print("{}", c) or c + 1, None), x, None, 2)[0])
    assert any(f.startswith("primitive:") for f in sharding.host_traffic(printing, x))
    called = jax.jit(lambda x: jax.pure_callback(np.sin, jax.ShapeDtypeStruct(x.shape, x.dtype), x))
    found = sharding.host_traffic(called, x)
    assert "primitive:pure_callback" in found and "hlo:callback" in found


def test_resolve_devices_and_mesh():
    mesh = sharding.make_mesh("all")
    assert mesh.axis_names == (sharding.DATA,) and sharding.mesh_size(mesh) == len(jax.devices())
    assert sharding.mesh_size(sharding.make_mesh(1)) == 1
    for bad, msg in ((0, "devices=0"), (99, "devices=99"), ("some", "'all' or a positive integer"), (True, "positive")):
        with pytest.raises(ValueError, match=msg):
            sharding.resolve_devices(bad)


def test_check_divisible_and_summary():
    mesh = sharding.make_mesh(1)
    assert sharding.check_divisible(6, mesh) == 6
    assert "envs per device: 6 of 6" in sharding.summary(mesh, 6)
    assert "processes: 1" in sharding.summary(mesh)


def _changed_axes(small, large):
    """Per leaf, the one axis whose size differs between two abstract states (-1: none)."""
    def axis(a, b):
        changed = [i for i, (x, y) in enumerate(zip(a.shape, b.shape)) if x != y]
        assert len(changed) <= 1, (a.shape, b.shape)
        return changed[0] if changed else -1
    return jax.tree_util.tree_map(axis, small, large)


def test_ppo_declares_exactly_the_leaves_that_follow_num_envs():
    """PPO's ``batch_axes`` marks axis 0 of every leaf whose size follows ``num_envs`` (checked
    against the state built with twice the envs), and nothing else."""
    from jaxrl.algos import ppo
    from jaxrl.algos.common.train import program_on

    env, params = jaxrl.make("CartPole-v1")
    cfg = ppo.PPOConfig(num_envs=4, num_steps=8, total_env_steps=64, num_minibatches=2, hidden=(4,))
    key = jax.random.PRNGKey(0)
    small = program_on(ppo, env, params, cfg)
    large = program_on(ppo, env, params, dataclasses.replace(cfg, num_envs=8, total_env_steps=128))
    shapes = jax.eval_shape(small.init, key)
    assert small.batch_axes(shapes) == _changed_axes(shapes, jax.eval_shape(large.init, key))
    layout = sharding.make_layout(sharding.make_mesh(1), shapes, small.batch_axes(shapes))
    assert layout.state.env.obs.spec == jax.sharding.PartitionSpec(sharding.DATA)
    assert layout.state.key.spec == jax.sharding.PartitionSpec()


def test_constrain_batch_is_a_noop_without_a_mesh():
    x = jnp.arange(8.0)
    np.testing.assert_array_equal(jax.jit(batching.constrain_batch)(x), x)
    with sharding.use_mesh(sharding.make_mesh(1)):
        np.testing.assert_array_equal(jax.jit(batching.constrain_batch)({"a": x})["a"], x)


def test_fetch_put_round_trip_with_typed_keys():
    mesh = sharding.make_mesh(1)
    state = {"obs": jnp.arange(6.0).reshape(2, 3), "key": jax.random.key(3), "n": jnp.int32(5)}
    layout = sharding.make_layout(mesh, state, {"obs": 0, "key": -1, "n": -1})
    host = sharding.fetch(state)
    assert isinstance(host["obs"], np.ndarray) and host["key"].dtype == np.uint32
    back = sharding.put(host, state, layout.state)
    np.testing.assert_array_equal(back["obs"], state["obs"])
    np.testing.assert_array_equal(jax.random.key_data(back["key"]), jax.random.key_data(state["key"]))
    assert back["n"].dtype == jnp.int32
    with pytest.raises(ValueError, match="shape"):
        sharding.put({"obs": np.zeros((3, 3)), "key": host["key"], "n": host["n"]}, state, layout.state)


# ------------------------------------------------------------------- jaxrl.parallel.distributed


def test_resolve_spec_flags_over_env():
    env = {distributed.ENV_ADDRESS: "10.0.0.1:1234", distributed.ENV_NUM_PROCESSES: "4", distributed.ENV_PROCESS_ID: "2"}
    spec = distributed.resolve_spec(environ=env)
    assert spec == distributed.DistributedSpec("10.0.0.1:1234", 4, 2) and spec.explicit
    spec = distributed.resolve_spec(process_id=3, environ=env)
    assert spec.process_id == 3
    assert distributed.resolve_spec(environ={}) == distributed.DistributedSpec()
    assert distributed.resolve_spec(environ={"JAX_COORDINATOR_ADDRESS": "h:1", distributed.ENV_NUM_PROCESSES: "2",
                                             distributed.ENV_PROCESS_ID: "0"}).coordinator_address == "h:1"


@pytest.mark.parametrize(
    "kwargs, msg",
    [
        ({"coordinator_address": "h:1"}, r"missing \['num_processes', 'process_id'\]"),
        ({"coordinator_address": "h", "num_processes": 2, "process_id": 0}, "host:port"),
        ({"coordinator_address": "h:1", "num_processes": 2, "process_id": 2}, r"process_id must be in \[0, 2\)"),
        ({"coordinator_address": "h:1", "num_processes": "two", "process_id": 0}, "num_processes must be an integer"),
    ],
)
def test_resolve_spec_rejects_partial_or_bad(kwargs, msg):
    with pytest.raises(ValueError, match=msg):
        distributed.resolve_spec(environ={}, **kwargs)


def test_cluster_detection(monkeypatch):
    for var in ("SLURM_JOB_ID", "SLURM_STEP_NODELIST", "SLURM_NTASKS", "SLURM_PROCID", "SLURM_LOCALID", "OMPI_MCA_orte_hnp_uri"):
        monkeypatch.delenv(var, raising=False)
    assert distributed.detected_cluster() is None
    assert distributed.initialize(distributed.DistributedSpec()) is False  # single process: nothing to do
    slurm = {"SLURM_JOB_ID": "7", "SLURM_STEP_NODELIST": "node[1-2]", "SLURM_NTASKS": "2", "SLURM_PROCID": "0",
             "SLURM_LOCALID": "0"}
    for k, v in slurm.items():
        monkeypatch.setenv(k, v)
    assert distributed.detected_cluster() == "SlurmCluster"
    monkeypatch.setenv("SLURM_NTASKS", "1")  # a one-task allocation has nobody to join
    assert distributed.detected_cluster() is None


def test_argparse_flags():
    import argparse

    parser = argparse.ArgumentParser()
    distributed.add_arguments(parser)
    args = parser.parse_args(["--coordinator-address", "h:9", "--num-processes", "2", "--process-id", "1"])
    assert distributed.resolve_spec(args.coordinator_address, args.num_processes, args.process_id, environ={}) == (
        distributed.DistributedSpec("h:9", 2, 1)
    )
    assert distributed.is_primary()


def test_replicate_and_batch_mean_are_plain_without_a_mesh():
    tree = {"a": jnp.arange(6, dtype=jnp.int32).reshape(2, 3), "b": jnp.ones((2, 3, 2))}
    assert batching.replicate(tree, ndim=2) is tree
    fn = lambda w, b: (jnp.mean(b * w), {"n": jnp.mean(b)})  # noqa: E731
    got = batching.batch_mean(fn, jnp.float32(2.0), jnp.arange(4.0))
    assert float(got[0]) == 3.0 and float(got[1]["n"]) == 1.5
    with pytest.raises(TypeError, match="cannot pack"):
        batching._to_f32_bits(jnp.zeros((2,), jnp.complex64))  # 8 bytes: no exact float32 form
