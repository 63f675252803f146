"""The commands that only read (``--version``, ``--help``, ``list``, ``config``) never import
JAX: checked on ``sys.modules`` in a fresh interpreter (timings live in
bench/cli_latency.py, never in tests)."""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from jaxrl.run import answers

NO_JAX = textwrap.dedent(
    """
    import contextlib, io, sys
    from jaxrl import cli
    out = io.StringIO()
    with contextlib.redirect_stdout(out):
        try:
            code = cli.main()  # as the console script calls it (reads sys.argv)
        except SystemExit as exc:
            code = exc.code
    assert code == 0, code
    heavy = sorted(m for m in ("jax", "orbax", "flax", "matplotlib", "jaxrl.run.trainer") if m in sys.modules)
    assert not heavy, heavy
    print(out.getvalue())
    """
)


def _run(args, env):
    return subprocess.run([sys.executable, "-c", NO_JAX, *args], env=env, capture_output=True, text=True)


@pytest.fixture
def cache_env(tmp_path, monkeypatch):
    monkeypatch.setenv("JAXRL_CACHE_DIR", str(tmp_path))
    monkeypatch.delenv("JAXRL_NO_CACHE", raising=False)
    return {**os.environ, "JAXRL_CACHE_DIR": str(tmp_path)}


@pytest.mark.parametrize("args", [["--version"], ["--help"], ["config", "--help"], ["list", "--help"]])
def test_answers_without_jax(args, cache_env):
    proc = _run(args, cache_env)
    assert proc.returncode == 0, proc.stderr


def test_list_and_config_answer_from_the_cache_without_jax(cache_env):
    digest = answers.fingerprint()
    for key, text in (("list", "algorithms (0):\nenvironments (0):\n"), ("config-ppo", "key  type\n")):
        with open(answers._path(key, digest), "w") as f:
            f.write(text)
    proc = _run(["list"], cache_env)
    assert proc.returncode == 0, proc.stderr
    assert "algorithms (0):" in proc.stdout
    proc = _run(["config", "ppo"], cache_env)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.startswith("key  type")


def test_answer_is_remembered_per_installation(cache_env, tmp_path, monkeypatch):
    calls = []

    def compute():
        calls.append(1)
        return "text\n"

    assert answers.answer("k", compute) == answers.answer("k", compute) == "text\n"
    assert len(calls) == 1
    answers.answer("k", compute, remember=False)  # an in-process caller: always computed
    assert len(calls) == 2
    monkeypatch.setattr(answers, "fingerprint", lambda: "another-installation")
    assert answers.answer("k", compute) == "text\n"
    assert len(calls) == 3
    assert sorted(os.listdir(tmp_path)) == ["k@another-installation.txt"]  # the stale one went


def test_a_warning_is_never_remembered(cache_env):
    import warnings

    def compute():
        warnings.warn("plugin 'x' failed to load")
        return "partial\n"

    with pytest.warns(UserWarning):
        answers.answer("w", compute)
    with pytest.warns(UserWarning):  # computed (and reported) again
        answers.answer("w", compute)


def test_fingerprint_follows_an_edit(cache_env, tmp_path, monkeypatch):
    pkg = tmp_path / "fp_probe_pkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.setattr(answers, "_package_dirs", lambda top: [str(pkg)] if top == "jaxrl" else [])
    before = answers.fingerprint()
    (pkg / "__init__.py").write_text("X = 22\n")
    assert answers.fingerprint() != before
