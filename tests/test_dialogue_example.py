"""The complete dialogue task of docs/dialogues.md runs as written: its Python block (a task,
its registration, check_env and a perfect player scoring 1.0) and its YAML config (built
into a GRPO program, nothing compiled)."""

from __future__ import annotations

import os
import re
import sys
import types

import yaml

from jaxrl.core import registry

DOC = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "docs", "dialogues.md")


def _blocks():
    text = open(DOC, encoding="utf-8").read()
    section = text.split("## A complete dialogue task, from scratch", 1)[1].split("\n## ", 1)[0]
    return dict(re.findall(r"```(python|yaml)\n(.*?)```", section, re.S))


def test_the_dialogue_example_in_the_docs_runs(capsys):
    blocks = _blocks()
    module = types.ModuleType("dialogue_example")  # dataclasses look their module up
    sys.modules[module.__name__] = module
    try:
        exec(compile(blocks["python"], DOC, "exec"), module.__dict__)
        printed = capsys.readouterr().out
        assert printed.rstrip().endswith("| return 1.0 | correct 1.0"), printed  # the perfect player

        from jaxrl.run import build, config as config_lib

        cfg = config_lib.config_from_dict(yaml.safe_load(blocks["yaml"]))
        built = build.build(cfg)
        env = built.envs.env
        assert (env.name, env.dialogue_len) == ("demo/CountUp-v0", 1 + 3 * (2 + 1))
        assert bool(built.envs.eval_params.held_out) and not bool(built.envs.params.held_out)
    finally:
        registry.deregister("demo/CountUp-v0")
        del sys.modules[module.__name__]
