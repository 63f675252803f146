"""The trainer: chunked host loop, logging, NaN stop, retrace guard, no host callback in the
chunk's jaxpr, transfer guard.

Most tests drive a tiny but real algorithm defined here (``fake``: Adam fitting a noisy
linear target, with a typed PRNG key and a NaN switch) so that they compile in a second;
the jaxpr inspection uses the real PPO chunk (tracing only, no compile).
"""

from __future__ import annotations

import dataclasses
import functools
import json
import os

import jax
import jax.numpy as jnp
import numpy as np
import optax
import pytest
from flax import struct

from jaxrl.run import config as C
from jaxrl.run import trainer
from jaxrl.algos import registry as algo_registry
from jaxrl.algos.contract import AlgoConfig, AlgoEntry, EvalReport, Plan, Program, replicated_axes

# ------------------------------------------------------------------------------------------
# The fake algorithm (imported by test_resume.py and test_checkpoint.py)
# ------------------------------------------------------------------------------------------

TARGET = (1.0, -2.0, 0.5, 3.0)


@dataclasses.dataclass(frozen=True)
class FakeConfig(AlgoConfig):
    num_updates: int = 8
    lr: float = 0.05
    batch: int = 8  # must be even: the "impossible combination" validate rejects
    nan_at: int = -1  # the update at which the loss turns NaN (-1: never)
    eval_episodes: int = 4

    def validate(self) -> None:
        fake_validate(self)


@struct.dataclass
class FakeState:
    w: jax.Array  # float32 [4], the fitted weights
    opt_state: optax.OptState
    key: jax.Array  # typed PRNG key []
    count: jax.Array  # int32 [], updates done


def fake_validate(cfg: FakeConfig) -> None:
    if cfg.batch % 2:
        raise ValueError(f"batch: must be even, got {cfg.batch}")


def _fake_loss(w, x, scale):
    y = x @ jnp.array(TARGET)
    return jnp.mean((x @ w - y) ** 2) * scale


def _fake_init(cfg: FakeConfig, key) -> FakeState:
    w = jnp.zeros(4, jnp.float32)
    return FakeState(w, optax.adam(cfg.lr).init(w), jax.random.wrap_key_data(key), jnp.zeros((), jnp.int32))


def _fake_update(cfg: FakeConfig, state: FakeState):
    key, sub = jax.random.split(state.key)
    x = jax.random.normal(sub, (cfg.batch, 4))
    scale = jnp.where(state.count == cfg.nan_at, jnp.nan, 1.0)
    loss, grads = jax.value_and_grad(_fake_loss)(state.w, x, scale)
    updates, opt_state = optax.adam(cfg.lr).update(grads, state.opt_state)
    new = FakeState(optax.apply_updates(state.w, updates), opt_state, key, state.count + 1)
    return new, {"loss": loss, "episode_return": -loss, "count": state.count.astype(jnp.float32)}


def _fake_evaluate(cfg: FakeConfig, state: FakeState, key):
    err = -jnp.sum(jnp.abs(state.w - jnp.array(TARGET)))
    noise = jax.random.normal(key, (cfg.eval_episodes,))
    return {"episode_returns": err + 0.0 * noise, "episode_returns_stochastic": err + 0.1 * noise}


def _fake_init_with(cfg: FakeConfig, key, hyper) -> FakeState:
    return _fake_init(cfg, key)


def make_fake(envs, cfg: FakeConfig) -> Program:
    return Program(
        update=functools.partial(_fake_update, cfg),
        evaluate=functools.partial(_fake_evaluate, cfg),
        plan=Plan(num_updates=cfg.num_updates, env_steps_per_update=16, grad_steps_per_update=1),
        batch_axes=replicated_axes,
        report=EvalReport({"episode_returns": "deterministic", "episode_returns_stochastic": "stochastic"}),
        hyperparams=dict,
        init_with=functools.partial(_fake_init_with, cfg),  # init(key) = init_with(key, hyperparams())
    )


FAKE = AlgoEntry(name="fake", config_cls=FakeConfig, build=make_fake)


@pytest.fixture
def fake_algo(monkeypatch):
    """``algo: fake`` is known for the duration of a test."""
    algo_registry.register_algorithm(FAKE, overwrite=True)
    yield
    algo_registry.deregister_algorithm("fake")


def fake_config(algo: FakeConfig | None = None, **train) -> C.RunConfig:
    """A checked fake run config (``fake_algo`` must be active)."""
    raw = {
        "algo": "fake",
        "env": {"id": "CartPole-v1"},
        "fake": C.to_dict(algo or FakeConfig()),
        "train": {"progress": False, **train},
    }
    return C.config_from_dict(raw)


def leaves_equal(a, b) -> bool:
    """Bit-for-bit equality of two states (PRNG keys compared by their key data)."""
    from jaxrl.run.checkpoint import to_storable

    la, lb = jax.tree_util.tree_leaves(to_storable(a)), jax.tree_util.tree_leaves(to_storable(b))
    return len(la) == len(lb) and all(
        x.dtype == y.dtype and np.array_equal(np.asarray(x), np.asarray(y), equal_nan=True) for x, y in zip(la, lb)
    )


def read_jsonl(path) -> list[dict]:
    with open(path) as f:
        return [json.loads(line) for line in f]


def without_wall_time(records: list[dict]) -> list[dict]:
    return [{k: v for k, v in r.items() if k != "wall_time"} for r in records]


# ------------------------------------------------------------------------------------------
# Tests
# ------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def fake_table():
    """``algo: fake`` known for this module's shared runs."""
    algo_registry.register_algorithm(FAKE, overwrite=True)
    yield
    algo_registry.deregister_algorithm("fake")


@pytest.fixture(scope="module")
def run_a(fake_table, tmp_path_factory):
    """7 updates in chunks of 3 (3 + 3 + 1), a checkpoint every chunk, keep 2, eval."""
    cfg = fake_config(FakeConfig(num_updates=7), updates_per_chunk=3, checkpoint_every=1, keep_checkpoints=2)
    run_dir = tmp_path_factory.mktemp("a") / "run"
    return cfg, run_dir, trainer.run(cfg, run_dir=str(run_dir))


def test_run_writes_run_directory(run_a):
    cfg, run_dir, result = run_a
    assert result.updates == 7
    assert C.load_config(run_dir / "config.yaml") == cfg  # the resolved config loads back equal
    records = read_jsonl(run_dir / "metrics.jsonl")
    assert [r["update"] for r in records] == list(range(1, 8))  # 3 + 3 + 1: last chunk shorter
    assert [r["env_steps"] for r in records] == [16 * u for u in range(1, 8)]
    assert [r["count"] for r in records] == list(range(7))  # every update ran exactly once
    assert all(r["wall_time"] >= 0 for r in records)
    assert sorted(os.listdir(run_dir / "checkpoints")) == ["6", "7"]  # periodic 3, 6 + final 7, keep 2
    assert (run_dir / "learning_curve.png").stat().st_size > 1000
    summary = json.loads((run_dir / "eval.json").read_text())
    assert set(summary["policies"]) == {"deterministic", "stochastic"}
    assert summary["policies"]["deterministic"]["episodes"] == 4
    assert int(result.state.count[0]) == 7


def test_chunk_size_does_not_change_the_math(run_a, tmp_path):
    cfg_a, dir_a, result_a = run_a
    cfg = C.with_overrides(cfg_a, ["train.updates_per_chunk=1", "train.checkpoint_every=0"])
    result = trainer.run(cfg, run_dir=str(tmp_path / "k1"), evaluate=False)
    assert leaves_equal(result.state, result_a.state)
    a = without_wall_time(read_jsonl(dir_a / "metrics.jsonl"))
    assert without_wall_time(read_jsonl(tmp_path / "k1" / "metrics.jsonl")) == a


def test_seeds_vmapped_equal_make_train(fake_table, tmp_path):
    cfg = fake_config(FakeConfig(num_updates=4), seeds=3, updates_per_chunk=2)
    result = trainer.run(cfg, run_dir=str(tmp_path / "mean"), evaluate=False)
    assert result.state.w.shape == (3, 4)
    assert not np.array_equal(result.state.w[0], result.state.w[1])  # different seeds
    records = read_jsonl(tmp_path / "mean" / "metrics.jsonl")
    assert all(r["loss/min"] <= r["loss"] <= r["loss/max"] for r in records)
    # Seed i of a run is exactly make_train's train(fold_in(PRNGKey(seed), i)), vmapped or not.
    train = trainer.make_train(cfg)
    state, metrics = jax.jit(jax.vmap(train), compiler_options=trainer.COMPILER_OPTIONS)(trainer.seed_keys(0, 3))
    assert leaves_equal(state, result.state)
    assert metrics["loss"].shape == (3, 4)
    np.testing.assert_allclose(np.asarray(metrics["loss"], np.float64).mean(axis=0), [r["loss"] for r in records], rtol=1e-12)


def test_chunk_records_per_seed_and_mean():
    metrics = {"loss": np.array([[1.0, 2.0], [3.0, 6.0]])}  # [S=2, K=2]
    mean = trainer.log_lib.chunk_records(metrics, 10, 2, 16, 1.5, "mean")
    assert mean == [
        {"update": 11, "env_steps": 176, "wall_time": 1.5, "loss": 2.0, "loss/min": 1.0, "loss/max": 3.0},
        {"update": 12, "env_steps": 192, "wall_time": 1.5, "loss": 4.0, "loss/min": 2.0, "loss/max": 6.0},
    ]
    per_seed = trainer.log_lib.chunk_records(metrics, 10, 1, 16, 1.5, "per_seed")
    assert per_seed == [{"update": 11, "env_steps": 176, "wall_time": 1.5, "loss": [1.0, 3.0]}]
    # Per-episode averages only count seeds in which an episode ended (no fake zeros).
    episodes = {"episode_return": np.array([[0.0, 5.0], [7.0, 9.0]]), "episode_count": np.array([[0.0, 1.0], [2.0, 3.0]])}
    first, second = trainer.log_lib.chunk_records(episodes, 0, 2, 16, 1.0, "mean")
    assert (first["episode_return"], first["episode_return/min"], first["episode_return/max"]) == (7.0, 7.0, 7.0)
    assert second["episode_return"] == 7.0
    lists = trainer.log_lib.chunk_records(episodes, 0, 1, 16, 1.0, "per_seed")[0]
    assert lists["episode_return"] == [None, 7.0]
    none = trainer.log_lib.chunk_records({k: v[:1] for k, v in episodes.items()}, 0, 1, 16, 1.0, "mean")[0]
    assert "episode_return" not in none and none["episode_count"] == 0.0
    # The progress bar's "recent return" skips updates without a finished episode.
    assert trainer._recent_return([first, none]) == 7.0
    assert trainer._recent_return([lists]) == 7.0 and trainer._recent_return([none]) is None


def test_nan_stops_run_and_keeps_last_good_checkpoint(fake_table, tmp_path):
    cfg = fake_config(FakeConfig(num_updates=12, nan_at=5), updates_per_chunk=2, checkpoint_every=1)
    run_dir = tmp_path / "nan"
    with pytest.raises(trainer.NonFiniteError) as info:
        trainer.run(cfg, run_dir=str(run_dir))
    msg = str(info.value)
    ckpt = run_dir / "checkpoints" / "4"
    assert msg == f"non-finite loss at update 6 (seed 0); last good checkpoint kept at {ckpt} (update 4)"
    assert sorted(os.listdir(run_dir / "checkpoints")) == ["2", "4"]  # nothing saved after the NaN
    from jaxrl.run.checkpoint import Checkpoints

    template = jax.eval_shape(jax.vmap(trainer.build(cfg).program.init), trainer.seed_keys(0, 1))
    with Checkpoints(run_dir / "checkpoints") as ckpts:
        good = ckpts.restore(template)
    assert np.all(np.isfinite(np.asarray(good.w))) and int(good.count[0]) == 4
    assert not (run_dir / "eval.json").exists()


def test_nan_in_state_is_caught_even_when_losses_are_finite():
    metrics = {"loss": np.ones((1, 3))}

    class NoCkpt:
        directory = "/x"

        def verified_step(self):
            return None

    with pytest.raises(trainer.NonFiniteError, match=r"NaN in the parameters or state at update 13 \(seed 1\); no checkpoint"):
        trainer.check_finite(metrics, np.array([True, False]), 10, 3, NoCkpt())
    trainer.check_finite(metrics, np.array([True, True]), 10, 3, NoCkpt())  # all good: no error
    assert bool(trainer.no_nan({"a": jnp.array([1.0, jnp.inf]), "b": jnp.arange(3)}))  # inf is legal
    assert not bool(trainer.no_nan({"a": jnp.array([1.0, jnp.nan])}))


def test_chunk_compiles_once_and_runs_under_transfer_guard():
    traces = []

    def counting_update(state):
        traces.append(1)
        return _fake_update(FakeConfig(), state)

    chunk = trainer.make_chunk(counting_update, 3)
    state = jax.vmap(functools.partial(_fake_init, FakeConfig()))(trainer.seed_keys(0, 2))
    n = {i: jax.device_put(np.int32(i)) for i in (1, 2, 3)}
    state, metrics, ok = chunk(state, n[3])
    count_after_first = len(traces)
    assert count_after_first == 1  # the update is traced once: the skipped branch reuses its jaxpr
    with jax.transfer_guard("disallow"):
        for i in (3, 1, 2):
            state, metrics, ok = chunk(state, n[i])
        assert chunk._cache_size() == 1
        assert len(traces) == count_after_first  # no retrace
        with pytest.raises(Exception, match="[Dd]isallowed"):  # the control: a host scalar is caught
            chunk(state, np.int32(2))
    assert int(state.count[0]) == 3 + 3 + 1 + 2
    np.testing.assert_array_equal(np.asarray(metrics["count"]), [[7, 8, 0], [7, 8, 0]])  # zeros past n_active


def _primitive_names(jaxpr) -> set[str]:
    names = set()
    for eqn in jaxpr.eqns:
        names.add(eqn.primitive.name)
        for sub in _subjaxprs(eqn):
            names |= _primitive_names(sub)
    return names


def _subjaxprs(eqn):
    for value in eqn.params.values():
        values = value if isinstance(value, (list, tuple)) else [value]
        for v in values:
            if hasattr(v, "jaxpr") and hasattr(v.jaxpr, "eqns"):
                yield v.jaxpr
            elif hasattr(v, "eqns"):
                yield v


def test_ppo_chunk_jaxpr_has_no_host_callback():
    raw = {"algo": "ppo", "env": {"id": "CartPole-v1"}, "ppo": {"num_envs": 4, "num_steps": 8, "total_env_steps": 64, "num_minibatches": 2}}
    cfg = C.config_from_dict(raw)
    built = trainer.build(cfg)
    state = jax.eval_shape(jax.vmap(built.program.init), trainer.seed_keys(0, 2))
    per_seed = functools.partial(trainer.chunk_fn, built.program.update, 2)
    jaxpr = jax.make_jaxpr(jax.vmap(per_seed, in_axes=(0, None)))(state, jnp.int32(2))
    names = _primitive_names(jaxpr.jaxpr)
    assert {"scan", "cond", "dot_general", "random_bits"} <= names  # really walked into the sub-jaxprs
    assert not _host_primitives(names), names

    # The controls: the same walk finds a debug print and a pure_callback nested in the chunk.
    def noisy(state, n):
        jax.debug.print("{}", n)
        n = jax.pure_callback(lambda v: v, jax.ShapeDtypeStruct((), jnp.int32), n)
        return per_seed(state, n)

    noisy_names = _primitive_names(jax.make_jaxpr(jax.vmap(noisy, in_axes=(0, None)))(state, jnp.int32(2)).jaxpr)
    assert _host_primitives(noisy_names) == {"debug_print", "pure_callback"}


def _host_primitives(names: set[str]) -> set[str]:
    """Primitives that talk to the host: callbacks (pure/io/debug), prints, in/outfeed."""
    return {n for n in names if "callback" in n or "debug" in n or n in ("infeed", "outfeed")}
