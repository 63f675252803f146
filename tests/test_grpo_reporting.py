"""What a GRPO run tells its user: a stalled (collapsed) run is reported once on the console
and in the run, a healthy one not at all; the progress bar, the curve and the eval lines
name what they show (sampled reward vs held-out greedy exact match, tokens not env steps);
``jaxrl eval RUN -n -r`` samples held-out prompts and reports pass@k (unbiased estimator,
checked against enumeration)."""

import contextlib
import io
import itertools
import json
import os

import numpy as np
import pytest

from jaxrl import cli
from jaxrl.algos.contract import Alert, Curve
from jaxrl.run import alerts, config as config_lib, evaluate as eval_lib, logging as log_lib, sampled, trainer
from jaxrl.run.files import ALERTS_FILE, EVAL_FILE

TINY = [
    "grpo.num_prompts=4", "grpo.group_size=4", "grpo.num_updates=8", "grpo.num_minibatches=1", "grpo.eval_episodes=8",
    "grpo.model.d_model=16", "grpo.model.n_layers=1", "grpo.model.n_heads=2", "grpo.warn.patience=3",
    "env.params.num_digits=2", "train.updates_per_chunk=4", "train.checkpoint_every=0", "train.stop_at=null",
]


CARTPOLE = [
    "grpo.num_prompts=4", "grpo.group_size=4", "grpo.num_updates=6", "grpo.num_minibatches=1", "grpo.eval_episodes=4",
    "grpo.sampling.max_steps=64", "grpo.warn.patience=3", "train.updates_per_chunk=3", "train.checkpoint_every=0",
]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """A collapsed token-task run (temperature 0.01: every member of a group samples the same
    answer) and a healthy control run (GRPO on CartPole: returns always spread), both tiny
    with ``grpo.warn.patience`` 3."""
    tmp = tmp_path_factory.mktemp("reporting")
    out = {}
    for name, path, overrides in (
        ("collapsed", "configs/grpo_reverse.yaml", TINY + ["grpo.sampling.temperature=0.01"]),
        ("healthy", "configs/grpo_cartpole.yaml", CARTPOLE),
    ):
        cfg = config_lib.load_config(path, overrides)
        stdout, stderr = io.StringIO(), io.StringIO()
        with contextlib.redirect_stdout(stdout), contextlib.redirect_stderr(stderr):
            result = trainer.run(cfg, run_dir=str(tmp / name), out=stdout, evaluate=False)  # eval lines: below
        out[name] = (result, stdout.getvalue(), stderr.getvalue())
    return out


def test_collapsed_run_is_reported_once_on_the_console_and_in_the_run(runs):
    result, stdout, _ = runs["collapsed"]
    lines = [line for line in stdout.splitlines() if "warning: training looks stalled" in line]
    assert len(lines) == 1, stdout  # not one per chunk: the run has two chunks after the alert could fire
    assert "frac_reward_zero_std" in lines[0] and "group_size" in lines[0] and "temperature" in lines[0]
    recorded = alerts.read_alerts(result.run_dir)
    assert "frac_reward_zero_std" in {e["metric"] for e in recorded}
    assert all(e["update"] >= 3 and e["hint"] in lines[0] for e in recorded)


def test_healthy_run_gets_no_warning_and_counts_env_steps(runs):
    result, stdout, stderr = runs["healthy"]
    assert "stalled" not in stdout + stderr
    assert not os.path.exists(os.path.join(result.run_dir, ALERTS_FILE))
    records = log_lib.read_metrics(os.path.join(result.run_dir, "metrics.jsonl"))
    assert min(r["frac_reward_zero_std"] for r in records) < 0.5  # the watch had something to judge
    assert "sampled return" in stderr and "env steps" in stderr  # the progress bar


def test_token_labels_say_sampled_reward_tokens_and_held_out_greedy_exact_match(runs):
    result, stdout, stderr = runs["collapsed"]
    assert "sampled reward" in stderr and " tokens" in stderr and "step/s" not in stderr  # the progress bar
    assert "tokens" in stdout.splitlines()[0] and "env steps" not in stdout.splitlines()[0]
    built = trainer.build(config_lib.load_config(os.path.join(result.run_dir, "config.yaml")))
    scores = {"episode_returns": np.array([[0.5, 1.0, 0.25]]), "episode_returns_exact_match": np.array([[0.0, 1.0, 0.0]])}
    lines = eval_lib.format_summary(eval_lib.summarise(scores, built.program.report)).splitlines()
    assert lines[0].startswith("eval held-out greedy reward ") and "0.583" in lines[0]
    assert lines[1].startswith("eval held-out greedy exact match ") and "0.333" in lines[1]
    assert built.program.monitor.curve == Curve("return_mean", "sampled reward")
    records = log_lib.read_metrics(os.path.join(result.run_dir, "metrics.jsonl"))
    assert log_lib.curve_labels(records, built.program.monitor.curve, "tokens") == (
        "return_mean", "sampled reward (return_mean)", "tokens (per seed)")
    assert log_lib.curve_labels(records, None, "env steps")[2] == "env steps (per seed)"


def test_watch_fires_once_after_patience_and_not_while_solved():
    alert = Alert("z", True, 0.8, 3, "stuck", "try more", unless=("solved", 0.95))
    watch = alerts.Watch([alert], None)
    recs = [{"update": i + 1, "z": z, "solved": s} for i, (z, s) in enumerate(
        [(0.9, 0.0), (0.9, 0.0), (0.5, 0.0), (0.9, 1.0), (0.9, 1.0), (0.9, 1.0), (0.9, 0.0), (0.9, 0.0)])]
    assert watch.observe(recs[:6]) == []  # broken streak, then solved: never 3 in a row
    (event,) = watch.observe(recs[6:] + [{"update": 9, "z": [0.85, 0.95], "solved": [0.0, None]}])
    assert event["update"] == 9 and event["value"] == pytest.approx(0.9)
    assert watch.console_line([event]).count("stuck") == 1
    assert watch.observe([{"update": 10, "z": 1.0, "solved": 0.0}] * 5) == [] and watch.console_line([event]) is None


def test_pass_at_k_matches_enumeration():
    for n, c in [(5, 0), (5, 2), (6, 3), (4, 4), (7, 1)]:
        samples = [1] * c + [0] * (n - c)
        for k in range(1, n + 1):
            subsets = list(itertools.combinations(samples, k))
            exact = sum(any(s) for s in subsets) / len(subsets)
            assert sampled.pass_at_k(n, c, k) == pytest.approx(exact, abs=1e-12)
    assert sampled.ks(8) == [1, 2, 4, 8] and sampled.ks(6) == [1, 2, 4, 6]
    with pytest.raises(ValueError, match="1 <= k <= n"):
        sampled.pass_at_k(4, 1, 5)
    s = sampled.summarise({"rewards": np.array([[1.0, 0.0], [0.5, 0.5]]), "correct": np.array([[True, False], [False, False]]),
                           "greedy": np.array([1.0, 0.5]), "greedy_correct": np.array([True, False])})
    assert s["pass_at_k"] == {"1": 0.25, "2": 0.5} and s["per_prompt_mean"] == [0.5, 0.5] and s["greedy_correct"] == 0.5


def test_eval_n_r_samples_held_out_prompts_and_writes_the_eval_file(runs, capsys):
    result = runs["collapsed"][0]
    with open(os.path.join(result.run_dir, EVAL_FILE), "w") as f:
        json.dump({"kept": 1}, f)
    capsys.readouterr()
    assert cli.main(["eval", result.run_dir, "-n", "5", "-r", "3"]) == 0
    out = capsys.readouterr().out
    assert "5 prompts x 3 rollouts" in out and "pass@1" in out and "pass@3" in out and "[prompt]" in out and "[policy]" in out
    with open(os.path.join(result.run_dir, EVAL_FILE)) as f:
        saved = json.load(f)
    assert saved["kept"] == 1  # the file's other entries stay
    s = saved["sampled"]
    assert len(s["per_prompt_mean"]) == 5 and set(s["pass_at_k"]) == {"1", "2", "3"} and len(s["transcripts"]) == 3
    assert s["pass_at_k"]["1"] <= s["pass_at_k"]["2"] <= s["pass_at_k"]["3"]
    assert cli.main(["eval", result.run_dir, "-n", "5"]) == 2
    assert "go together" in capsys.readouterr().err


def test_parity_task_answers_and_held_out_split():
    import jax

    from jaxrl.core import registry
    from jaxrl_envs.text.parity import held_out_patterns
    from jaxrl_envs.text.vocab import DIGIT0

    env, params = registry.make("text/Parity-v0")
    held = np.asarray(held_out_patterns(env.num_bits))
    assert 0 < held.sum() < held.size
    keys = jax.random.split(jax.random.PRNGKey(0), 256)
    generate = jax.jit(jax.vmap(env.generate, in_axes=(0, None)))  # one compile for both splits
    for split in (False, True):
        tasks = generate(keys, params.replace(held_out=split))
        bits = np.asarray(tasks.prompt[:, : env.num_bits]) - DIGIT0
        index = (bits << np.arange(env.num_bits)).sum(axis=1)
        assert np.all(held[index] == split)  # training never draws a held-out pattern, eval only those
        assert np.all(np.asarray(tasks.answer[:, 0]) == DIGIT0 + bits.sum(axis=1) % 2)
    task = jax.tree_util.tree_map(lambda x: x[0], tasks)
    right, wrong = (np.array([t, 1], np.int32) for t in (task.answer[0], 2 * DIGIT0 + 1 - task.answer[0]))
    assert float(env.verifier(task, right)[0]) == 1.0 and float(env.verifier(task, wrong)[0]) == 0.25
