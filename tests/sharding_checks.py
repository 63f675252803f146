"""Multi-device checks of jaxrl.parallel.sharding, run in a subprocess by tests/test_sharding.py.

``XLA_FLAGS=--xla_force_host_platform_device_count=4`` must be set before JAX starts, so
these checks cannot run inside the pytest process. One process runs them all (start-up
and compiles dominate) and prints one JSON object on its last stdout line: measured
differences and flags, asserted on by the test.

Usage: ``python tests/sharding_checks.py`` (forces 4 CPU devices itself).
"""

from __future__ import annotations

import os

os.environ["XLA_FLAGS"] = os.environ.get("XLA_FLAGS", "") + " --xla_force_host_platform_device_count=4"
os.environ.setdefault("JAX_PLATFORMS", "cpu")

import functools  # noqa: E402
import json  # noqa: E402
import re  # noqa: E402
import sys  # noqa: E402

import jax  # noqa: E402
import jax.numpy as jnp  # noqa: E402
import numpy as np  # noqa: E402

from jaxrl.algos.common import batching
from jaxrl.core import registry  # noqa: E402
from jaxrl.parallel import sharding
from jaxrl.algos import ppo  # noqa: E402
from jaxrl.algos.common.train import program_on as program, train_on as train_fn

K = 3  # updates per chunk
CHUNKS = 2

PPO_CFG = ppo.PPOConfig(
    num_envs=8, num_steps=16, total_env_steps=8 * 16 * K * CHUNKS, update_epochs=2, num_minibatches=2,
    hidden=(16,), optim=ppo.config.PPOOptim(lr=3e-3),
)

def max_rel_diff(a, b) -> float:
    """Largest ``|a - b| / (1 + |b|)`` over every leaf of two pytrees."""
    worst = 0.0
    for x, y in zip(jax.tree_util.tree_leaves(a), jax.tree_util.tree_leaves(b)):
        x, y = np.asarray(x, np.float64), np.asarray(y, np.float64)
        if x.size:
            with np.errstate(invalid="ignore"):
                d = np.where(x == y, 0.0, np.abs(x - y) / (1.0 + np.abs(y)))  # equal infs are equal
            worst = max(worst, float(np.max(d)))
    return worst


def scan_chunk(update, state):
    """``K`` updates in a scan; metrics averaged over them."""
    state, metrics = jax.lax.scan(lambda s, _: update(s), state, None, length=K)
    return state, jax.tree_util.tree_map(jnp.mean, metrics)


def ppo_layout(env, env_params, mesh, key):
    algo = program(ppo, env, env_params, PPO_CFG)
    axes = algo.batch_axes(jax.eval_shape(algo.init, key))
    return algo, axes, sharding.make_layout(mesh, jax.eval_shape(algo.init, key), axes)


def run_ppo(algo, layout, state):
    """``CHUNKS`` chunks from ``state`` sharded by ``layout``.

    Returns ``(final state, [metrics per chunk], host copy of the state after the first
    chunk, the jitted chunk, how many times it was traced)``.
    """
    traces = []

    def counted(state):
        traces.append(1)
        return scan_chunk(algo.update, state)

    chunk = sharding.jit_chunk(counted, layout)
    history, first = [], None
    with sharding.use_mesh(layout.mesh):  # as the trainer: traced under the mesh
        for i in range(CHUNKS):
            state, metrics = chunk(state)
            history.append(jax.device_get(metrics))
            if i == 0:
                first = sharding.fetch(state)
    return state, history, first, chunk, len(traces)


def main() -> dict:
    out = {"n_devices": len(jax.devices())}
    env, env_params = registry.make("CartPole-v1")
    key = jax.random.PRNGKey(7)

    # --- reference: plain jit, one device, no mesh --------------------------------------
    algo = program(ppo, env, env_params, PPO_CFG)
    ref_chunk = jax.jit(functools.partial(scan_chunk, algo.update))
    state = jax.jit(algo.init)(key)
    ref_init = jax.device_get(state)
    ref_hist = []
    for _ in range(CHUNKS):
        state, m = ref_chunk(state)
        ref_hist.append(jax.device_get(m))
    ref_state = jax.device_get(state)

    # --- the same program over 4 devices --------------------------------------------------
    mesh4 = sharding.make_mesh(4)
    algo, axes, layout4 = ppo_layout(env, env_params, mesh4, key)
    out["batch_axes"] = {jax.tree_util.keystr(p): a for p, a in jax.tree_util.tree_leaves_with_path(axes) if a >= 0}
    init4 = sharding.init_sharded(algo.init, layout4)
    s0, s0_again = init4(key), init4(key)
    obs_shards = [np.asarray(s.data) for s in sorted(s0.env.obs.addressable_shards, key=lambda s: s.index[0].start)]
    out["obs_shard_shapes"] = [list(o.shape) for o in obs_shards]
    out["obs_shards_distinct"] = all(
        not np.allclose(obs_shards[i], obs_shards[j]) for i in range(4) for j in range(i + 1, 4)
    )
    out["init_reproducible"] = max_rel_diff(sharding.fetch(s0), sharding.fetch(s0_again)) == 0.0
    out["init_equals_single_device"] = max_rel_diff(sharding.fetch(s0), ref_init) == 0.0
    del s0_again

    state4, hist4, after_first, chunk4, traces = run_ppo(algo, layout4, s0)
    out["obs_spec"] = str(state4.env.obs.sharding.spec)
    out["params_replicated"] = all(
        x.sharding.is_fully_replicated for x in jax.tree_util.tree_leaves(state4.agent.params)
    )
    out["metrics_diff"] = max_rel_diff(hist4, ref_hist)
    out["state_diff"] = max_rel_diff(sharding.fetch(state4), ref_state)
    out["params_diff"] = max_rel_diff(sharding.fetch(state4.agent.params), ref_state.agent.params)
    out["episode_count"] = float(sum(h["episode_count"] for h in hist4))
    out["traces"] = traces
    out["cache_size"] = chunk4._cache_size()
    with sharding.use_mesh(mesh4):
        out["host_traffic"] = sharding.host_traffic(chunk4, state4)
        text = chunk4.lower(state4).as_text()
    out["n_eqns"] = len(jax.make_jaxpr(chunk4)(state4).eqns)
    # PPO's minibatches are pinned to the data axis (each device steps on its slice)
    out["ppo_constrained"] = "sdy.sharding_constraint" in text and '[{}, {"data"}' in text

    # --- change layout mid-run: 4 devices -> 2 devices -------------------------------------
    mesh2 = sharding.make_mesh(2)
    layout2 = sharding.make_layout(mesh2, jax.eval_shape(algo.init, key), axes)
    moved = sharding.put(after_first, jax.eval_shape(algo.init, key), layout2.state)
    out["moved_spec"] = [str(moved.env.obs.sharding.spec), len(moved.env.obs.sharding.device_set)]
    chunk2 = sharding.jit_chunk(functools.partial(scan_chunk, algo.update), layout2)
    with sharding.use_mesh(mesh2):
        moved, m2 = chunk2(moved)
    out["resume_other_layout_diff"] = max_rel_diff(
        [jax.device_get(m2), sharding.fetch(moved)], [ref_hist[1], ref_state]
    )

    # --- bad input ----------------------------------------------------------------------
    try:
        sharding.check_divisible(6, mesh4)
        out["indivisible_error"] = None
    except ValueError as exc:
        out["indivisible_error"] = str(exc)
    try:
        bad_cfg = ppo.PPOConfig(num_envs=6, num_steps=16, total_env_steps=6 * 16, num_minibatches=2, hidden=(8,))
        bad = program(ppo, env, env_params, bad_cfg)
        ax = bad.batch_axes(jax.eval_shape(bad.init, key))
        sharding.make_layout(mesh4, jax.eval_shape(bad.init, key), ax)
        out["indivisible_layout_error"] = None
    except ValueError as exc:
        out["indivisible_layout_error"] = str(exc)
    out["summary"] = sharding.summary(mesh4, PPO_CFG.num_envs)
    out.update(grpo_checks(env, env_params, mesh4))
    with sharding.use_mesh(mesh4):  # the program the run used (traced under the mesh)
        compiled_text = chunk4.lower(state4).compile().as_text()
    out["env_split_all_reduce"] = "all-reduce" in compiled_text
    # (result shape, op) of every collective in the compiled PPO chunk
    out["ppo_collectives"] = re.findall(
        r"= (\(?[a-z0-9]+\[[^=]*?) (all-reduce|all-gather|all-to-all|collective-permute|reduce-scatter)(?:-start)?\(",
        compiled_text,
    )
    out.update(packing_checks(mesh4))
    out.update(seed_split_checks())
    return out


def packing_checks(mesh) -> dict:
    """``batching.replicate`` (bit-exact packing) and ``batching.batch_mean`` on 4 devices."""
    tree = {
        "big_int": jnp.arange(8 * 6, dtype=jnp.int32).reshape(8, 6) * 1_000_003 + (1 << 30),  # > 2**24: bitcast
        "flag": (jnp.arange(8 * 6) % 3 == 0).reshape(8, 6),
        "small": (jnp.arange(8 * 6 * 2) % 251).astype(jnp.uint8).reshape(8, 6, 2),
        "x": jnp.linspace(-3.0, 3.0, 8 * 6 * 4, dtype=jnp.float32).reshape(8, 6, 4),
    }
    split = jax.device_put(tree, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(sharding.DATA)))

    def whole(t):
        return batching.replicate(t, ndim=1)

    with sharding.use_mesh(mesh):
        got = jax.jit(whole)(split)
        gathers = jax.jit(whole).lower(split).compile().as_text().count(" all-gather(")

    def fn(w, b):  # means over the batch axis: a gradient and a metric
        loss = lambda w: jnp.mean((b["x"] @ w) ** 2)  # noqa: E731
        return jax.grad(loss)(w), {"m": jnp.mean(b["x"][..., 0])}

    w = jnp.arange(4 * 3, dtype=jnp.float32).reshape(4, 3) / 10
    batch = {"x": jax.random.normal(jax.random.PRNGKey(0), (16, 4))}
    ref = fn(w, batch)
    with sharding.use_mesh(mesh):
        par = jax.jit(lambda w, b: batching.batch_mean(fn, w, b))(
            w, jax.device_put(batch, jax.sharding.NamedSharding(mesh, jax.sharding.PartitionSpec(sharding.DATA)))
        )
    return {
        "replicate_exact": all(
            np.array_equal(np.asarray(a), np.asarray(b)) and a.dtype == b.dtype
            for a, b in zip(jax.tree_util.tree_leaves(got), jax.tree_util.tree_leaves(tree))
        ),
        "replicate_is_replicated": all(x.sharding.is_fully_replicated for x in jax.tree_util.tree_leaves(got)),
        "replicate_all_gathers": gathers,
        "batch_mean_diff": max_rel_diff(jax.device_get(par), jax.device_get(ref)),
    }


def seed_split_checks() -> dict:
    """The trainer's ``shard: auto`` with 4 seeds on 4 devices: whole seeds per device."""
    from jaxrl.run import config as config_lib
    from jaxrl.run import trainer

    raw = {
        "algo": "ppo", "env": {"id": "CartPole-v1"},
        "ppo": {"num_envs": 4, "num_steps": 8, "total_env_steps": 4 * 8 * K, "update_epochs": 2,
                "num_minibatches": 2, "hidden": [16]},
        "train": {"seeds": 4, "updates_per_chunk": K}, "devices": 4,
    }
    cfg = config_lib.config_from_dict(raw)
    built = trainer.build(cfg)
    keys = trainer.seed_keys(0, 4)
    layout = trainer.make_layout(cfg, built, keys)
    state = sharding.init_sharded(jax.vmap(built.program.init), layout)(keys)
    chunk = trainer.make_chunk(built.program.update, K, layout)
    n = jax.device_put(np.int32(K), layout.replicated)
    hlo = chunk.lower(state, n).compile().as_text()
    state, metrics, _ = chunk(state, n)

    ref_state = jax.jit(jax.vmap(built.program.init))(keys)
    ref_state, ref_metrics, _ = trainer.make_chunk(built.program.update, K)(ref_state, np.int32(K))
    env_cfg = config_lib.config_from_dict({**raw, "shard": "envs"})
    try:
        trainer.make_layout(config_lib.config_from_dict({**raw, "shard": "seeds", "train": {"seeds": 6}}), built,
                            trainer.seed_keys(0, 6))
        bad_seeds_error = None
    except config_lib.ConfigError as exc:
        bad_seeds_error = str(exc)
    return {
        "seed_split_mode": layout.mode,
        "seed_split_env_mode": trainer.make_layout(env_cfg, built, keys).mode,
        "seed_split_obs_spec": str(state.env.obs.sharding.spec),
        "seed_split_params_spec": str(jax.tree_util.tree_leaves(state.agent.params)[0].sharding.spec),
        "seed_split_metrics_diff": max_rel_diff(jax.device_get(metrics), jax.device_get(ref_metrics)),
        "seed_split_state_diff": max_rel_diff(sharding.fetch(state), jax.device_get(ref_state)),
        "seed_split_all_reduce": "all-reduce" in hlo,
        "seed_split_bad_seeds_error": bad_seeds_error,
    }


def grpo_checks(env, env_params, mesh) -> dict:
    """GRPO: no env batch in its state; the prompt groups born inside ``update`` are pinned
    to the data axis by ``constrain_batch`` (active under the mesh). Same numbers as the
    single-device program."""
    from jaxrl.algos import grpo

    cfg = grpo.GRPOConfig(num_prompts=8, group_size=2, num_updates=K * CHUNKS, num_minibatches=2, model=grpo.config.ModelConfig(hidden=(16,)))
    algo = program(grpo, env, env_params, cfg)
    key = jax.random.PRNGKey(3)
    chunk = functools.partial(scan_chunk, algo.update)
    state = jax.jit(algo.init)(key)
    ref_chunk, ref_hist = jax.jit(chunk), []
    for _ in range(CHUNKS):
        state, m = ref_chunk(state)
        ref_hist.append(jax.device_get(m))
    ref_state = jax.device_get(state)

    shapes = jax.eval_shape(algo.init, key)
    layout = sharding.make_layout(mesh, shapes, jax.tree_util.tree_map(lambda _: -1, shapes))
    sharded = sharding.jit_chunk(lambda s: scan_chunk(algo.update, s), layout)  # a new function: a fresh trace
    state, hist = sharding.init_sharded(algo.init, layout)(key), []
    with sharding.use_mesh(mesh):
        text = sharded.lower(state).as_text()
        for _ in range(CHUNKS):
            state, m = sharded(state)
            hist.append(jax.device_get(m))
    return {
        "grpo_constrained": 'sdy.sharding_constraint' in text and '[{"data"}' in text,
        "grpo_metrics_diff": max_rel_diff(hist, ref_hist),
        "grpo_state_diff": max_rel_diff(sharding.fetch(state), ref_state),
        "grpo_reward": float(np.mean([h["reward"] for h in hist])),
    }


if __name__ == "__main__":
    result = main()
    sys.stdout.write("\n" + json.dumps(result) + "\n")
