"""The config reference (jaxrl.run.reference, `jaxrl config ALGO`, docs/config_reference.md)
and the CLI's newcomer fixes: --version, a quiet exit on a closed pipe, train --help."""

from __future__ import annotations

import os
import subprocess
import sys
from importlib import metadata
from pathlib import Path

import pytest

from jaxrl import cli
from jaxrl.run import reference

ROOT = Path(__file__).resolve().parent.parent


def test_docs_page_is_current():
    page = (ROOT / "docs" / "config_reference.md").read_text()
    assert page == reference.markdown(), "regenerate: python -m jaxrl.run.reference > docs/config_reference.md"


@pytest.mark.parametrize("algo", reference.DOCUMENTED_ALGOS)
def test_every_key_has_a_type_a_default_and_a_meaning(algo):
    rows = reference.run_rows(algo)
    keys = [r.key for r in rows]
    assert len(keys) == len(set(keys))
    for r in rows:
        assert r.type and r.default and r.meaning, r
    for key in ("env.id", "env.randomize", "train.loggers", "train.stop_at.metric", f"{algo}.eval_episodes"):
        assert key in keys


def test_comments_are_read_from_the_source():
    rows = {r.key: r for r in reference.run_rows("ppo")}
    assert rows["train.seeds"] == reference.Row("train.seeds", "int", "1", "independent seeds trained together in one vmapped program")
    assert rows["shard"].meaning.startswith("What the devices split")  # the comment block above the field
    assert rows["train.log_seeds"].type == "'mean' | 'per_seed'"


def test_jaxrl_config_prints_every_key(capsys):
    assert cli.main(["config", "grpo"]) == 0
    out = capsys.readouterr().out
    for r in reference.run_rows("grpo"):
        assert r.key in out
    assert cli.main(["config", "nope"]) == 2
    assert "unknown algorithm 'nope'" in capsys.readouterr().err


def test_train_help_points_to_the_reference(capsys):
    with pytest.raises(SystemExit):
        cli.main(["train", "--help"])
    out = capsys.readouterr().out
    assert "jaxrl config ALGO" in out and "docs/config_reference.md" in out


def test_version(capsys):
    with pytest.raises(SystemExit) as exit_:
        cli.main(["--version"])
    assert exit_.value.code == 0
    import jaxrl

    assert capsys.readouterr().out.strip() == f"jaxrl {jaxrl.__version__}"
    pyproject = (Path(__file__).resolve().parent.parent / "pyproject.toml").read_text()
    assert f'\nversion = "{jaxrl.__version__}"\n' in pyproject  # one version, two places


def test_closed_pipe_exits_quietly():
    """``jaxrl list | head -1``: the reader closes early; no BrokenPipeError traceback."""
    proc = subprocess.Popen(
        [sys.executable, "-c", "import sys, jaxrl.cli; sys.exit(jaxrl.cli.main(['list']))"],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    proc.stdout.close()  # nobody reads: the first write fails with EPIPE
    err = proc.stderr.read().decode()
    assert proc.wait(timeout=120) == 0, err
    assert "Traceback" not in err and "BrokenPipe" not in err, err


def test_every_builtin_algorithm_is_documented():
    from jaxrl.algos import registry as algo_registry

    builtin = {name for name, e in algo_registry.algorithms().items() if e.build.__module__.startswith("jaxrl.")}
    assert builtin == set(reference.DOCUMENTED_ALGOS)
