"""``grpo.eval_every``: the held-out evaluation inside training gives the numbers of the
end-of-run ``evaluate`` on the same parameters and key, changes no training bit (and adds
nothing when 0), logs NaN (never 0) between evaluations, lets ``train.stop_at`` fire on
``heldout_exact_match`` only at a chunk whose last update evaluated, and resumes bit for bit;
``stop_at`` on it without ``eval_every`` is refused before training."""

from __future__ import annotations

import dataclasses
import functools
import json
import math

import jax
import numpy as np
import pytest

from jaxrl.algos import grpo
from jaxrl.run import build as build_lib, config as config_lib, trainer
from jaxrl.run.checkpoint import Checkpoints
from jaxrl.run.files import CHECKPOINT_DIR

HELDOUT = ("heldout_reward", "heldout_exact_match", "heldout_token_accuracy", "heldout_has_eos")
TINY = [
    "grpo.num_prompts=2", "grpo.group_size=2", "grpo.num_minibatches=1", "grpo.eval_episodes=8", "grpo.loss.beta=0",
    "grpo.model.d_model=8", "grpo.model.n_layers=1", "grpo.model.n_heads=1", "env.params.num_digits=2",
    "train.progress=false",
]
# chunks of 3 updates, an evaluation every 2: updates 2 and 4 (mid-chunk) and 6 (a chunk's last)
EVERY = TINY + [
    "grpo.num_updates=6", "grpo.eval_every=2", "grpo.eval_every_episodes=8", "train.updates_per_chunk=3",
    "train.checkpoint_every=1",
]


class SimulatedKill(BaseException):
    """A crash nothing in the trainer handles (kill -9)."""


def _records(run_dir) -> list[dict]:
    with open(run_dir / "metrics.jsonl", encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def _same(x, y) -> bool:
    """Equal, NaN equal to NaN (json reads each NaN as a new float)."""
    if isinstance(x, float) and isinstance(y, float) and math.isnan(x) and math.isnan(y):
        return True
    return x == y


def _one_seed(state):
    return jax.device_get(jax.tree_util.tree_map(lambda x: x[0], state))


@pytest.fixture(scope="module")
def stopped(tmp_path_factory):
    """The run every test reads: 6 updates, evaluating at 2, 4 and 6."""
    cfg = config_lib.load_config("configs/grpo_reverse.yaml", EVERY)
    run_dir = tmp_path_factory.mktemp("eval_every") / "straight"
    return cfg, trainer.run(cfg, run_dir=str(run_dir), evaluate=False), run_dir


def test_records_hold_held_out_figures_only_where_measured(stopped):
    _, result, run_dir = stopped
    assert result.updates == 6
    records = _records(run_dir)
    assert [r["update"] for r in records] == [1, 2, 3, 4, 5, 6]
    for r in records:
        evaluated = r["update"] % 2 == 0
        for name in HELDOUT:  # absent where not measured (NaN in the program), never a fake 0
            assert (name in r) == evaluated, (r["update"], name)
            assert not evaluated or math.isfinite(r[name])
        assert math.isfinite(r["reward"])


def test_stop_at_on_a_held_out_figure_fires_at_the_first_chunk_end_that_reached_it(tmp_path):
    """Chunks of 2 with an evaluation every 2: every chunk ends on a measured update; a
    threshold of 0 stops the run after its first chunk."""
    cfg = config_lib.load_config("configs/grpo_reverse.yaml", TINY + [
        "grpo.num_updates=6", "grpo.eval_every=2", "grpo.eval_every_episodes=8", "train.updates_per_chunk=2",
        "train.checkpoint_every=0", "train.stop_at.metric=heldout_exact_match", "train.stop_at.threshold=0.0",
    ])
    result = trainer.run(cfg, run_dir=str(tmp_path / "r"), evaluate=False)
    assert result.updates == 2
    with open(tmp_path / "r" / "stopped.json", encoding="utf-8") as f:
        stop = json.load(f)
    assert stop["update"] == 2 and stop["metric"] == "heldout_exact_match" and stop["value"] >= 0.0
    assert not trainer.stop_reached(cfg.train.stop_at, {"update": 3})  # a record without the figure never stops


def test_in_training_evaluation_equals_evaluate(stopped):
    cfg, result, run_dir = stopped
    final = _one_seed(result.state)  # after update 6, which evaluated
    # the greedy evaluation `jaxrl eval` runs, on eval_every_episodes prompts, with the state's key
    setup = grpo.make_setup(build_lib.env_setup(cfg.env), dataclasses.replace(cfg.algo_config, eval_episodes=8))
    ev = jax.jit(functools.partial(grpo.evaluate.evaluate, setup))(final, grpo.evaluate.heldout_key(final))
    last = _records(run_dir)[-1]
    assert ev["episode_returns"].shape == (8,)
    np.testing.assert_allclose(last["heldout_reward"], ev["return_mean"], rtol=1e-6)
    for name in ("exact_match", "token_accuracy", "has_eos"):
        np.testing.assert_allclose(last[f"heldout_{name}"], ev[name], rtol=1e-6, err_msg=name)


def test_eval_every_changes_no_training_bit(stopped):
    """Updates 4-6 of the run (evaluating at 4 and 6) equal the same updates of the program
    without evaluation from the checkpoint at update 3: the same keys and counters bit for bit
    (the evaluation draws no training randomness), floats to rounding (a jitted update alone
    is another XLA program than the trainer's chunk: entropy differs by one ulp)."""
    cfg, result, run_dir = stopped
    assert grpo.GRPOConfig().eval_every == 0
    plain = grpo.build(build_lib.env_setup(cfg.env), dataclasses.replace(cfg.algo_config, eval_every=0))
    assert plain.update.func is grpo.update.update  # 0: the program without evaluation, untouched
    with Checkpoints(str(run_dir / CHECKPOINT_DIR)) as ckpts:
        state = _one_seed(ckpts.restore(result.state, 3))
    update = jax.jit(plain.update)
    for record in _records(run_dir)[3:]:
        state, metrics = jax.device_get(update(state))
        assert not any(k.startswith("heldout") for k in metrics)
        assert {k for k in record if k.startswith("heldout")} == (set(HELDOUT) if record["update"] % 2 == 0 else set())
        for k, v in metrics.items():
            np.testing.assert_allclose(record[k], v, rtol=1e-5, atol=1e-7, err_msg=f"{record['update']} {k}")
    final = _one_seed(result.state)
    np.testing.assert_array_equal(state.key, final.key)
    np.testing.assert_array_equal(state.update_step, final.update_step)
    for x, y in zip(jax.tree_util.tree_leaves(state), jax.tree_util.tree_leaves(final), strict=True):
        np.testing.assert_allclose(x, y, rtol=1e-5, atol=1e-7)


def test_resume_with_eval_every_is_bit_exact(stopped, tmp_path):
    cfg, straight, straight_dir = stopped
    real_save, calls = Checkpoints.save, []

    def crashing_save(self, step, state):  # a kill at the final save (update 6): resume from 3
        calls.append(step)
        if step == 6:
            raise SimulatedKill
        return real_save(self, step, state)

    run_dir = tmp_path / "resumed"
    with pytest.MonkeyPatch.context() as mp, pytest.raises(SimulatedKill):
        mp.setattr(Checkpoints, "save", crashing_save)
        trainer.run(cfg, run_dir=str(run_dir), evaluate=False)
    assert calls == [3, 6]
    resumed = trainer.run(None, resume=str(run_dir), evaluate=False)
    assert resumed.updates == 6
    for x, y in zip(jax.tree_util.tree_leaves(resumed.state), jax.tree_util.tree_leaves(straight.state), strict=True):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    a, b = _records(run_dir), _records(straight_dir)
    assert len(a) == len(b) == 6
    for ra, rb in zip(a, b):
        assert ra.keys() == rb.keys()
        assert all(_same(ra[k], rb[k]) for k in ra if k != "wall_time"), (ra, rb)


def test_eval_every_is_validated():
    with pytest.raises(ValueError, match="eval_every: must be >= 0"):
        grpo.GRPOConfig(eval_every=-1).validate()
    with pytest.raises(ValueError, match="eval_every_episodes: must be >= 1"):
        grpo.GRPOConfig(eval_every=5, eval_every_episodes=0).validate()


def test_stop_at_on_heldout_without_eval_every_is_refused():
    with pytest.raises(config_lib.ConfigError, match="heldout_exact_match is logged only with grpo.eval_every > 0"):
        config_lib.load_config("configs/grpo_reverse.yaml", TINY + [
            "grpo.num_updates=2", "train.updates_per_chunk=1", "train.stop_at.metric=heldout_exact_match",
            "train.stop_at.threshold=0.9",
        ])


@pytest.mark.parametrize("sets, words", [
    (["grpo.eval_every=0"], "logged only with grpo.eval_every > 0"),
    (["train.updates_per_chunk=7"], "must be a multiple of grpo.eval_every=25"),
])
def test_a_held_out_stop_needs_evaluations_at_chunk_ends(sets, words):
    import os

    from jaxrl.run import config as config_lib

    root = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    with pytest.raises(config_lib.ConfigError, match=words):
        config_lib.load_config(os.path.join(root, "configs", "grpo_tool_addition.yaml"), sets)
