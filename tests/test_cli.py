"""The ``jaxrl`` command line: the sub-command table, ``list`` and ``check-env``.

In-process through ``jaxrl.cli.main`` (no interpreter start-up), plus one subprocess run of
the installed console script.
"""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import jax.numpy as jnp
import pytest

import jaxrl
from jaxrl import cli
from jaxrl.core import registry
from jaxrl_envs.cartpole import CartPole


def test_check_env_passes_for_cartpole(capsys):
    assert cli.main(["check-env", "CartPole-v1", "--steps", "16", "--envs", "4"]) == 0
    out = capsys.readouterr().out
    assert "check_env(CartPole-v1): 4 envs x 16 steps" in out
    assert "PASS  truncation" in out and "FAIL" not in out
    assert "throughput:" in out and "all checks passed" in out


def test_check_env_unknown_id_fails_with_suggestion(capsys):
    assert cli.main(["check-env", "CartPole-v0"]) != 0
    err = capsys.readouterr().err
    assert "unknown env id 'CartPole-v0'" in err and "did you mean 'CartPole-v1'" in err


class IntRewardPole(CartPole):
    """step returns an int32 reward: check-env must fail."""

    def __eq__(self, other):
        return type(other) is IntRewardPole

    def __hash__(self):
        return hash(IntRewardPole)

    def step(self, key, state, action, params):
        state, ts = super().step(key, state, action, params)
        return state, ts.replace(reward=jnp.ones((), jnp.int32))


def test_check_env_exits_1_on_a_failed_check(capsys):
    registry.register("IntRewardPole-v0", IntRewardPole)
    try:
        assert cli.main(["check-env", "IntRewardPole-v0", "--only", "timestep_dtypes, render"]) == 1
    finally:
        registry.deregister("IntRewardPole-v0")
    out = capsys.readouterr().out
    assert "FAIL  timestep_dtypes" in out and "FAILED: timestep_dtypes" in out
    assert "PASS  render" in out and "truncation" not in out  # only the named checks (and jit)


def test_check_env_unknown_check_name_exits_2(capsys):
    assert cli.main(["check-env", "CartPole-v1", "--only", "finit"]) == 2
    assert "unknown check name(s) ['finit']" in capsys.readouterr().err


def test_list_shows_envs_with_descriptions(capsys):
    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    line = next(l for l in out.splitlines() if l.strip().startswith("CartPole-v1"))
    assert registry.spec("CartPole-v1").description in line
    assert f"environments ({len(jaxrl.registered_ids())}):" in out


def test_list_shows_algorithms_with_descriptions(capsys):
    from jaxrl.algos import registry as algo_registry

    assert cli.main(["list"]) == 0
    out = capsys.readouterr().out
    algos = algo_registry.algorithms()
    assert f"algorithms ({len(algos)}):" in out
    for name in ("ppo", "grpo"):
        line = next(l for l in out.splitlines() if l.strip().startswith(name + " "))
        assert algos[name].description in line


def test_list_shows_configs(tmp_path, monkeypatch, capsys):
    (tmp_path / "configs").mkdir()
    (tmp_path / "configs" / "zz_my_recipe.yaml").write_text("algo: ppo\n")
    monkeypatch.chdir(tmp_path)
    assert cli.main(["list"]) == 0
    assert "zz_my_recipe.yaml" in capsys.readouterr().out


def test_no_command_prints_help_and_fails(capsys):
    assert cli.main([]) == 2
    assert "check-env" in capsys.readouterr().err


def test_bad_arguments_exit_with_usage():
    with pytest.raises(SystemExit) as exc:
        cli.main(["check-env", "CartPole-v1", "--steps", "many"])
    assert exc.value.code == 2


def test_every_command_has_a_handler():
    parser = cli.build_parser()
    sub = next(a for a in parser._actions if a.dest == "command")
    assert {"list", "check-env"} <= set(sub.choices)
    for name, p in sub.choices.items():
        assert callable(p.get_default("func")), name


def test_installed_console_script():
    script = Path(sys.executable).with_name("jaxrl")
    assert script.exists(), f"console script not installed next to {sys.executable}"
    proc = subprocess.run([str(script), "list"], capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "CartPole-v1" in proc.stdout
