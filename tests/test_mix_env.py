"""``env: {mix: [...]}``: several token tasks in one GRPO run, each episode tagged with its source.

The config's one-line errors (a member's keys, a token shape that does not agree); the draw
of an episode's member (by weight, a pure function of its reset key); per-source figures
and their records; a GRPO update mixing two on-device text tasks with a served one
(per-source metrics, groups of one source, sessions only for the served rows, the same
metrics from the same key); ``jaxrl eval``'s per-source lines; ``jaxrl serve --config``'s
one-line refusal of a mix.
"""

from __future__ import annotations

import math
import os
import sys

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl.run import build
from jaxrl.run import config as config_lib
from jaxrl.run.config import ConfigError
from jaxrl.text import mix

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "envs", "assets", "text_model")  # the project's CPU text model
SMALL = {"num_train": 32, "num_held_out": 8}
WP = {"id": "text/WordProblems-v0", "weight": 2, "text": SMALL}
SORT = {"id": "text/AlphabetSortText-v0", "name": "sort", "text": {**SMALL, "prompt_len": 40, "completion_len": 12}}


def _raw(members, **grpo):
    return {"algo": "grpo", "env": {"mix": members},
            "grpo": {"num_prompts": 4, "group_size": 2, "num_updates": 1, "eval_episodes": 4,
                     "model": {"policy": "hf", "path": MODEL}, **grpo},
            "train": {"seed": 0, "updates_per_chunk": 1, "checkpoint_every": 0, "progress": False}}


@pytest.fixture(scope="module")
def mixed():
    """The env side of WordProblems (weight 2) mixed with AlphabetSortText (weight 1)."""
    return build.env_setup(config_lib.config_from_dict(_raw([WP, SORT])).env)


def test_the_config_section_and_its_one_line_errors():
    """``env.mix`` implies ``env.id: mix`` and the model's tokenizer; each bad member is one
    line naming ``env.mix[i]`` and its key; a token shape that does not agree names the member
    and the part when the run is built."""
    cfg = config_lib.config_from_dict(_raw([WP, SORT]))
    assert cfg.env.id == "mix" and cfg.env.tokenizer.path == MODEL and [m.weight for m in cfg.env.mix] == [2.0, 1.0]
    for members, env, match in [
        ([], {}, None),  # an empty list is no mix: env.id is then missing
        ([{"weight": 1}], {}, r"env.mix\[0\]: give exactly one of id .*, remote .* and verifiers \(a taskset\)$"),
        ([{"id": "text/WordProblems-v0", "remote": {"url": "ws://h:1"}}], {}, r"env.mix\[0\]: give exactly one .*, not id and remote$"),
        ([WP, {"verifiers": {"id": "x", "prompt_len": 0}}], {}, r"env.mix\[1\].verifiers.prompt_len: must be >= 1"),
        ([WP, {**SORT, "weight": 0}], {}, r"env.mix\[1\].weight: must be a positive number, got 0"),
        ([WP, {**SORT, "name": "WordProblems-v0"}], {}, r"env.mix\[1\].name: source 'WordProblems-v0' is env.mix\[0\]'s too"),
        ([WP, {**SORT, "name": "a b"}], {}, r"env.mix\[1\].name: 'a b' is no source tag"),
        ([WP, {**SORT, "name": "gloss"}], {}, r"env.mix\[1\].name: 'gloss' would read as a loss metric"),
        ([WP, {"id": "text/Nope-v0"}], {}, r"env.mix\[1\].id: "),
        ([WP, {"remote": {"url": "ws://h:1"}, "text": SMALL}], {}, r"env.mix\[1\].text: a remote task takes its settings"),
        ([WP, {"remote": {"url": "ftp://x"}}], {}, r"env.mix\[1\].remote.url: .*expected ws://"),
        ([WP, {**SORT, "text": {"prompt_len": -1}}], {}, r"env.mix\[1\].text.prompt_len: must be >= 0"),
        ([WP, {**SORT, "tokenizer": {"path": "/elsewhere"}}], {}, r"env.mix\[1\].tokenizer.path: the tasks of a mix share"),
        ([WP, {**SORT, "params": {"held_out": 1}}], {}, r"env.mix\[1\].params.held_out: training on the held-out split"),
        ([WP], {"text": SMALL}, "env.text: not with env.mix; set it on the task in env.mix"),
        ([WP], {"id": "text/WordProblems-v0"}, "env.id: 'text/WordProblems-v0' with env.mix"),
        ([{**WP, "colour": 1}], {}, r"unknown key 'env.mix\[0\].colour'"),
    ]:
        raw = _raw(members)
        raw["env"].update(env)
        with pytest.raises(ConfigError, match=match or "env.id"):
            config_lib.config_from_dict(raw)
    longer = {**SORT, "text": {**SORT["text"], "prompt_len": 48}}
    with pytest.raises(ConfigError, match=r"^env.mix\[1\] \(sort\): prompt length 48 where env.mix\[0\] \(WordProblems-v0\) "
                                          r"has 40; set its prompt_len .* to match$"):
        build.env_setup(config_lib.config_from_dict(_raw([WP, longer])).env)
    with pytest.raises(ConfigError, match=r"^env.mix\[1\].text.completion_len: "):
        build.env_setup(config_lib.config_from_dict(_raw([WP, {**SORT, "text": {**SORT["text"], "completion_len": 10**9}}])).env)


def test_an_episodes_source_is_drawn_by_weight_from_its_reset_key(mixed):
    """The member is a pure function of the reset key (the same keys, the same sources), and
    over many keys each member's share is its weight's (2 : 1); the mix's token shape is its
    members'; its info names each episode's source."""
    task = mixed.env
    assert isinstance(task, mix.MixTask) and task.names == ("WordProblems-v0", "sort") and task.weights == (2.0, 1.0)
    assert (task.prompt_len, task.max_turn_tokens, task.vocab_size) == (40, 12, task.members[1].vocab_size)
    keys = jax.random.split(jax.random.PRNGKey(3), 6000)
    draw = jax.jit(jax.vmap(task.draw))
    sources = np.asarray(draw(keys))
    assert (sources == np.asarray(draw(keys))).all()
    share = np.bincount(sources, minlength=2) / len(sources)
    assert abs(share[0] - 2 / 3) < 0.025, share  # 4 sigma of 6000 draws: 0.024
    start = jax.jit(jax.vmap(task.start, in_axes=(0, None)))
    state, prompts, info = start(keys[:16], mixed.params)
    assert (np.asarray(state.source) == sources[:16]).all()
    assert np.asarray(info["source/sort"]).tolist() == (sources[:16] == 1).astype(float).tolist()
    for i, (member, params) in enumerate(zip(task.members, mixed.params.members)):  # each prompt is its member's own
        _, own, _ = jax.jit(jax.vmap(member.start, in_axes=(0, None)))(keys[:16], params)
        assert (np.asarray(own)[sources[:16] == i] == np.asarray(prompts)[sources[:16] == i]).all()


def test_source_metrics_are_means_over_each_sources_episodes():
    info = {"source/a": jnp.array([1.0, 1.0, 0.0, 0.0]), "source/b": jnp.array([0.0, 0.0, 1.0, 1.0]),
            "a/correct": jnp.array([1.0, 0.0, 0.0, 0.0]), "b/remote_failed": jnp.array([0.0, 0.0, 1.0, 0.0]),
            "correct": jnp.array([1.0, 0.0, 1.0, 0.0])}
    plain, figures = mix.source_metrics(info, jnp.array([1.0, 0.0, 3.0, 5.0]))
    assert set(plain) == {"correct"}
    assert {k: float(v) for k, v in figures.items()} == {
        "source/a/frac": 0.5, "source/b/frac": 0.5, "reward/a/mean": 0.5, "reward/b/mean": 4.0, "reward/a/std": 0.5,
        "reward/b/std": 1.0, "reward/a/correct/mean": 0.5, "reward/b/remote_failed/mean": 0.5}
    _, none = mix.source_metrics({"source/a": jnp.zeros(2), "source/b": jnp.ones(2)}, jnp.ones(2))
    assert math.isnan(float(none["reward/a/mean"])) and float(none["reward/b/mean"]) == 1.0  # no episode: no figure, not 0
    from jaxrl.run.logging import _aggregate

    assert _aggregate("reward/a/mean", np.array([np.nan]), None, "mean") == {}  # ... and no key in the record
    assert _aggregate("reward/b/mean", np.array([1.0]), None, "mean") == {"reward/b/mean": 1.0}
    alone = {"correct": jnp.ones(2)}
    assert mix.source_metrics(alone, jnp.ones(2)) == (alone, {})  # no mix: the info as it is, no figures


def test_grpo_updates_on_mixed_on_device_and_served_tasks_with_metrics_per_source(fault_server):
    """A GRPO update on two on-device text tasks (WordProblems at two generator seeds,
    weights 2 and 1) and a served one (a bare OpenEnv WebSocket server on loopback, reward
    len(text) / 10; seeds ending in 6-9 fail on purpose), weight 1: its metrics hold each
    source's share (whole groups, summing to 1), reward and info; only the rows drawn from
    the server reset a session on it; the same update again (the same key) gives the same
    metrics, bit for bit (one compiled program, run twice)."""
    url, server = fault_server
    served = {"remote": {"url": url, "prompt_len": 40, "turn_tokens": 12, "timeout_s": 30, "max_failure_frac": 1.0,
                         "check_schema": False}, "name": "served"}
    other = {"id": "text/WordProblems-v0", "name": "wp_seed1", "text": {**SMALL, "seed": 1}}
    built = build.build(config_lib.config_from_dict(_raw([WP, other, served], num_prompts=6)))
    state = jax.jit(built.program.init)(jax.random.PRNGKey(0))
    update = jax.jit(built.program.update)
    runs, resets = [], []
    for _ in range(2):
        before = server.resets
        runs.append(jax.device_get(update(state)[1]))
        resets.append(server.resets - before)
    metrics = {k: float(v) for k, v in runs[0].items()}
    names = ("WordProblems-v0", "wp_seed1", "served")
    shares = [metrics[f"source/{n}/frac"] for n in names]
    assert sum(shares) == pytest.approx(1.0) and all(abs(s * 6 - round(s * 6)) < 1e-5 for s in shares), shares  # whole groups
    assert all(s > 0 for s in shares), shares  # this key draws every source
    for n in names:
        assert math.isfinite(metrics[f"reward/{n}/mean"])
    assert resets == [round(shares[2] * 12)] * 2  # 6 groups of 2: a session per served row, none for the others
    assert {"reward/WordProblems-v0/correct/mean", "reward/wp_seed1/correct/mean", "reward/served/remote_failed/mean"} <= set(metrics)
    assert "rewards/correct/mean" not in metrics  # the served task reports no `correct`: no batch-wide mean of it
    assert math.isfinite(metrics["loss"])
    assert {k: np.asarray(v).tobytes() for k, v in runs[1].items()} == {k: np.asarray(v).tobytes() for k, v in runs[0].items()}


@pytest.fixture
def fault_server():
    pytest.importorskip("websockets")
    pytest.importorskip("openenv")
    sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
    from remote_envs.servers import FaultServer

    server = FaultServer(slow_s=0.01)
    with server as url:
        yield url, server


def test_jaxrl_eval_reports_the_score_of_each_source():
    """``jaxrl eval``'s summary of a mixed run: the headline score over each source's
    episodes (its share of them), and a source no episode was drawn from said so."""
    from jaxrl.algos.contract import EvalReport
    from jaxrl.run.evaluate import format_summary, summarise

    metrics = {"episode_returns": np.array([[1.0, 0.0, 0.5, 0.5]]), "episode_source/a": np.array([[1.0, 1.0, 0.0, 0.0]]),
               "episode_source/b": np.array([[0.0, 0.0, 1.0, 1.0]]), "episode_source/c": np.zeros((1, 4))}
    summary = summarise(metrics, EvalReport({"episode_returns": "greedy"}, "reward"))
    a, b, c = (summary["sources"][n] for n in "abc")
    assert (a["mean"], a["episodes"], a["share"], b["mean"], b["std"], c) == (0.5, 2, 0.5, 0.5, 0.0, {"episodes": 0, "share": 0.0})
    lines = format_summary(summary).splitlines()
    assert lines[1].startswith("eval source a ") and "over 2 episodes (50% of them)" in lines[1]
    assert lines[3] == "eval source c              no episode drawn"


def test_jaxrl_serve_refuses_a_mix_with_one_line(tmp_path, capsys):
    """A server holds one compiled task: ``jaxrl serve --config`` of an ``env.mix`` (or a
    remote / verifiers) config stops with one line saying what to do, before anything is built."""
    import yaml

    from jaxrl import cli

    for env, line in ((_raw([WP, SORT])["env"], "env.mix: jaxrl serve serves one task; serve each on-device member"),
                      ({"remote": {"url": "ws://127.0.0.1:9"}}, "env.remote: already a served environment"),
                      ({"verifiers": "my-words"}, "env.verifiers: a verifiers taskset is scored on the host")):
        path = tmp_path / "run.yaml"
        path.write_text(yaml.safe_dump({**_raw([WP]), "env": env}))
        assert cli.main(["serve", "--config", str(path), "--port", "0"]) == 2
        err = capsys.readouterr().err.strip()
        assert len(err.splitlines()) == 1 and line in err, err
