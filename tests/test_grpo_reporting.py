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


# -- the held-out set scored whole ------------------------------------------------------------


def _scripted_policy(script, vocab):
    """A GRPO token policy that writes ``script`` (token ids) whatever the prompt: its carry is
    the position in the script, its logits one-hot on the next scripted token."""
    import jax.numpy as jnp

    from jaxrl.algos.common.lm.policy import TokenPolicy

    table = jnp.asarray(script, jnp.int32)
    logits = lambda pos: 10.0 * jax.nn.one_hot(table[jnp.minimum(pos, len(script) - 1)], vocab)  # noqa: E731
    import jax

    def start(params, prompt):
        pos = jnp.zeros((prompt.shape[0],), jnp.int32)
        return pos, logits(pos)

    def extend(params, pos, tokens, at):
        pos = pos + tokens.shape[1]
        return pos, logits(pos)[:, None]

    unused = lambda *a: None  # noqa: E731
    return TokenPolicy(init=unused, start=start, step=unused, sequence_logits=unused, extend=extend)


@pytest.fixture(scope="module")
def held_out_200():
    """A text task with 200 held-out rows whose answers are ``"7" * (i % 9) + "x" * (i % 4)``
    (similarity rubric: the reward of a completion "7" differs between rows), and a GRPO
    setup whose policy writes "7" then the end-of-turn on every prompt."""
    from jaxrl.algos.grpo.config import GRPOConfig
    from jaxrl.algos.grpo.update import Setup
    from jaxrl.models.lm import load_tokenizer
    from jaxrl.text.task import text_task
    from jaxrl_envs.text.text_file import TOKENIZER

    answers = ["7" * (i % 9) + "x" * (i % 4) or "y" for i in range(200)]
    held = [{"prompt": f"row {i}", "answer": a} for i, a in enumerate(answers)]
    train = [{"prompt": f"train {i}", "answer": "1"} for i in range(4)]
    task = text_task("held200", train, held, tokenizer_path=TOKENIZER, prompt_len=16, completion_len=4,
                     answer_bytes=16, reward={"answer": "similarity", "extract": "whole"}, completions=False)
    script = load_tokenizer(TOKENIZER).encode("7") + [task.end_of_turn]
    policy = _scripted_policy(script, task.vocab_size)
    params = task.default_params

    def setup(**cfg):
        return Setup(GRPOConfig(**cfg), task, params, task.held_out_params(params), policy, 0, None, None, None)

    return task, answers, setup


def test_evaluation_scores_every_held_out_row_once_and_the_exact_mean(held_out_200):
    import difflib

    import jax

    from jaxrl.algos.grpo import evaluate as grpo_eval
    from jaxrl.text.task import evaluation_starts

    task, answers, setup = held_out_200
    s = setup(eval_episodes=512)  # more than the rows: every row once, no more
    run = jax.jit(lambda key: grpo_eval.eval_rollout(s, None, key))
    first, again = run(jax.random.PRNGKey(0)), run(jax.random.PRNGKey(1))
    prompts = np.asarray(first.obs[:, : task.prompt_len])
    assert prompts.shape[0] == 200
    assert (prompts == task.arrays("held_out")["prompts"]).all()  # row i is episode i: each row once
    expected = np.mean([difflib.SequenceMatcher(None, b"7", a.encode()).ratio() for a in answers])
    assert float(np.mean(np.asarray(first.returns, np.float64))) == pytest.approx(expected, abs=1e-6)
    assert np.array_equal(np.asarray(first.returns), np.asarray(again.returns))  # same weights, same figure
    starts = lambda **cfg: evaluation_starts(task, task.held_out_params(task.default_params), key=jax.random.PRNGKey(0), **cfg)  # noqa: E731
    assert np.asarray(starts(episodes=50)).tolist() == list(range(50))  # eval_episodes caps it: the first rows
    drawn = starts(episodes=200, held_out="sample")  # asked for: 200 keys, each episode's row drawn
    assert drawn.shape == (200, 2) and drawn.dtype == jax.numpy.uint32
    rows = jax.vmap(lambda k: task._draw(k, task.held).prompt)(drawn)  # reset's draw, without tracing the rubric
    assert len({np.asarray(r).tobytes() for r in rows}) < 200  # with replacement: rows repeat


def test_eval_summary_reports_the_rows_and_the_interval():
    from jaxrl.algos.contract import EvalReport

    report = EvalReport({"episode_returns": "greedy"}, metric="reward", phrases={"episode_returns": "held-out greedy reward"})
    whole = {"episode_returns": np.array([[0.0, 1.0, 1.0, 0.0]]), "held_out_rows": np.array([4])}
    summary = eval_lib.summarise(whole, report)
    assert summary["held_out_rows"] == {"scored": 4, "of": 4} and summary["policies"]["greedy"]["episodes"] == 4
    lines = eval_lib.format_summary(summary).splitlines()
    assert "95% CI" in lines[0] and lines[1] == "eval held-out rows: 4 of 4 scored, each once"
    capped = eval_lib.format_summary(eval_lib.summarise({**whole, "held_out_rows": np.array([9])}, report))
    assert "4 of 9 scored, each once (the first 4: eval_episodes or --episodes caps it)" in capped
    assert "held_out_rows" not in eval_lib.summarise({"episode_returns": whole["episode_returns"]}, report)


def test_eval_held_out_is_validated():
    from jaxrl.algos.grpo.config import GRPOConfig
    from jaxrl.algos.sft.config import SFTConfig

    with pytest.raises(ValueError, match="eval_held_out: expected all or sample, got 'some'"):
        GRPOConfig(eval_held_out="some").validate()
    with pytest.raises(ValueError, match="eval_held_out: expected all or sample"):
        SFTConfig(eval_held_out="every", model=SFTConfig().model.__class__(path="x")).validate()
