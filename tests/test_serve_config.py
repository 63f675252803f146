"""``jaxrl serve --config CONFIG`` / ``jaxrl serve RUN`` take the env section of the config
(no ``--set env.*`` repeated), ``--held-out`` serves the evaluation params, bad combinations are
one line (the language model's play of ``jaxrl eval RUN --remote`` is tested in
tests/test_serve_text.py, beside the served text task it plays)."""

from __future__ import annotations

import argparse
import os

import pytest
import yaml

from jaxrl import cli
from jaxrl.commands.serve import config_source, resolve_env
from jaxrl.run.config import ConfigError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
SFT = os.path.join(ROOT, "configs", "sft_word_problems.yaml")
SMALL = ["env.text.num_train=64", "env.text.num_held_out=8"]


def _args(*argv: str) -> argparse.Namespace:
    return cli.build_parser("serve").parse_args(["serve", *argv])


def test_the_env_section_of_a_config_or_a_run(tmp_path):
    env_id, env, params, description = resolve_env(_args("--config", SFT, *[a for s in SMALL for a in ("--set", s)]))
    assert env_id == "text/WordProblems-v0" and "word" in description.lower()
    assert env.rows(params) == 64   # the config's env section with the --set applied
    run = tmp_path / "run"
    run.mkdir()
    raw = yaml.safe_load(open(SFT, encoding="utf-8"))
    raw["env"]["text"] = {"num_train": 64, "num_held_out": 8}
    (run / "config.yaml").write_text(yaml.safe_dump(raw))
    _, env2, train, _ = resolve_env(_args(str(run)))
    _, _, held_out, _ = resolve_env(_args(str(run), "--held-out"))
    assert env2.rows(train) == 64 and env2.rows(held_out) == 8   # from config.yaml alone: no --set


@pytest.mark.parametrize("argv, message", [
    (("CartPole-v1", "--config", SFT), "not two of them"),
    ((), "give an env id"),
    (("--config", "missing.yaml"), "no such file"),
    ((ROOT + "/docs",), "not a run directory"),
    (("CartPole-v1", "--held-out"), "--held-out: serve a run directory"),
    (("--config", SFT, "--set", "sft.batch_size=8"), "reads only env.* keys"),
    (("--config", SFT, "--set", "env.id=CartPole-v1"), "--set env.id"),
])
def test_bad_combinations_are_one_line(argv, message):
    with pytest.raises(ConfigError, match=message.replace("*", r"\*").replace(".", r"\.")):
        args = _args(*argv)
        config_source(args)
        resolve_env(args)


def test_serve_help_names_config_and_run(capsys):
    with pytest.raises(SystemExit):
        cli.main(["serve", "--help"])
    out = capsys.readouterr().out
    assert "ENV_ID|RUN" in out and "--config CONFIG" in out and "--held-out" in out
