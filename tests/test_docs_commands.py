"""Every ``jaxrl ...`` command and every YAML snippet in docs/ (and the README) is checked, cheaply.

Commands (fenced ``sh``/``bash`` blocks and inline code spans) are parsed with the CLI's own
argparse parser, placeholders (``RUN``, ``CONFIG``, ``N``, ...) standing for real values; a
fenced ``train`` / ``serve --config`` naming a file of the repository is loaded with its
``--set`` overrides by the config loader (keys, types, ranges); ``check-env`` and ``serve``
ids must be registered; ``jaxrl list``, ``jaxrl config ALGO`` and ``jaxrl --version`` are
run. YAML snippets are read as the config loader reads YAML and, merged into a recipe of
their algorithm (or whole, when they name ``algo``), checked as a run config. What cannot be
checked is listed in :data:`NOT_RUNNABLE` / :data:`YAML_NOT_CHECKED` with why; an entry that no
longer occurs fails the test, so the lists only shrink with the docs.
"""

from __future__ import annotations

import copy
import os
import re
import shlex

import pytest

from jaxrl import cli
from jaxrl.run import config as config_lib
from jaxrl.run import yamlio

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DOCS = os.path.join(ROOT, "docs")
SHELL_LANGS = {"", "sh", "bash", "console", "shell"}

#: Placeholder words of the docs and what each stands for when parsed.
PLACEHOLDERS = {
    "RUN": "runs/example", "RUN_DIR": "runs/example", "X": "runs/example", "CONFIG": "configs/ppo_cartpole.yaml",
    "ALGO": "ppo", "ENV_ID": "CartPole-v1", "ID": "CartPole-v1", "URL": "ws://127.0.0.1:8000", "DIR": "out",
    "FILE.gif": "out.gif", "N": "8", "R": "8", "K": "1", "S": "0", "RUN...": "runs/example",
    "C": "tis",  # async_grpo.md: grpo.off_policy.correction=C
}
#: Files the docs write themselves before the command that reads them.
WRITTEN_BY_THE_DOC = {"my.yaml": "docs/writing_a_token_task.md writes it (a config of a task defined there)",
                      "reinforce_cartpole.yaml": "docs/writing_an_algorithm.md writes it (its algorithm is defined there)"}
#: Inline spans that are not commands, with why.
NOT_RUNNABLE = {
    "jaxrl serve: ENV on http://HOST:PORT ...": "the ready line serve prints, not a command",
    "jaxrl train / eval": "prose: two commands named together",
    "jaxrl train / eval / render": "prose: three commands named together",
}
#: Algorithm sections and the recipe a snippet of that section is merged into.
BASES = {"ppo": "configs/ppo_cartpole.yaml", "grpo": "configs/grpo_reverse.yaml", "sft": "configs/sft_word_problems.yaml",
         None: "configs/ppo_cartpole.yaml"}
#: YAML snippets that cannot be checked as a run config here, keyed by (doc, first line), with why.
YAML_NOT_CHECKED = {
    ("dialogues.md", "algo: grpo"): "demo/CountUp-v0 is the env the page writes and registers",
    ("writing_a_token_task.md", "algo: grpo"): "mytasks/MyTask-v0 is the task the page writes",
    ("writing_an_algorithm.md", "algo: reinforce"): "reinforce is the algorithm the page writes",
}
#: Paths the snippets name that stand for the reader's own files, and what stands in for them.
STAND_INS = {"path/to/model": "envs/assets/text_model", "/models/my-model": "envs/assets/text_model",
             "/models/my-base-model": "envs/assets/text_model", "data/train.jsonl": "TMP/train.jsonl",
             "data/rows.jsonl": "TMP/train.jsonl", "data/my_task_train": "TMP/train.jsonl",
             "data/my_task_test": "TMP/held_out.jsonl"}


def _docs():
    """``(name, text)`` of docs/*.md, then of the README (named ``../README.md``)."""
    for name in [*sorted(n for n in os.listdir(DOCS) if n.endswith(".md")), "../README.md"]:
        with open(os.path.join(DOCS, name), encoding="utf-8") as f:
            yield name, f.read()


def _fences(text):
    for m in re.finditer(r"^```([\w-]*)\n(.*?)^```", text, re.S | re.M):
        yield m.group(1), m.group(2), text[: m.start()].count("\n") + 2


def fenced_commands():
    """``(doc, line, command)`` of every ``jaxrl`` command in a shell block (continuations
    joined, comments, ``&``, pipes and ``&&`` chains cut, ``for`` loops' bodies)."""
    out = []
    for doc, text in _docs():
        for lang, body, first in _fences(text):
            if lang not in SHELL_LANGS:
                continue
            lines = body.replace("\\\n", " ").splitlines()
            for i, line in enumerate(lines):
                for part in re.split(r"&&|;|\bdo\b", line):
                    part = re.sub(r"\s#.*$", "", part).strip().removeprefix("$ ").rstrip("&").strip()
                    part = part.split(" | ")[0].strip()
                    if part.startswith("jaxrl ") or part == "jaxrl":
                        out.append((doc, first + i, part))
    return out


def inline_commands():
    out = []
    for doc, text in _docs():
        prose = re.sub(r"^```.*?^```", "", text, flags=re.S | re.M)
        for m in re.finditer(r"`(jaxrl(?: [^`]*)?)`", prose):
            out.append((doc, m.group(1).split(" | ")[0].strip()))
    return out


def _argv(command: str) -> list[str]:
    words = shlex.split(re.sub(r"<[^>]*>", "example", command).replace("[", "").replace("]", ""))[1:]  # [--opt N]: usage
    words = [w for w in words if w != "..."]
    out = []
    for w in words:
        key, eq, value = w.partition("=")
        w = f"{key}={PLACEHOLDERS.get(value, value)}" if eq and not w.startswith("-") else PLACEHOLDERS.get(w, w)
        out.append(re.sub(r"\$\w+", "cartpole", w))  # a shell loop's variable: one of its values
    return out


COMMANDS = set(cli.build_parser("list")._subparsers._group_actions[0].choices)
#: The positional argument an inline span that names only options stands on.
MISSING = {"eval": "runs/example", "render": "runs/example", "check-env": "CartPole-v1", "config": "ppo",
           "serve": "CartPole-v1"}


def _parse(argv):
    return cli.build_parser(cli.command_word(argv)).parse_args(argv)


def _parses(argv) -> bool:
    try:
        _parse(argv)
    except SystemExit:
        return False
    return True


def _where(doc, line=None) -> str:
    return f"docs/{doc}" + (f":{line}" if line else "")


def test_fenced_commands_parse_and_their_configs_load():
    from jaxrl.core import registry

    commands = fenced_commands()
    assert len(commands) > 40
    ran = set()
    for doc, line, command in commands:
        argv = _argv(command)
        try:
            args = _parse(argv)
        except SystemExit:
            pytest.fail(f"{_where(doc, line)}: `{command}` does not parse")
        name = args.command
        config = getattr(args, "config", None) if name in ("train", "serve") else None
        if config and not os.path.exists(os.path.join(ROOT, config)):
            assert config in WRITTEN_BY_THE_DOC or config.startswith("configs/ppo_cartpole"), \
                f"{_where(doc, line)}: `{command}` names {config}, which is not in the repository"
        elif config:
            sets = list(args.set or ())
            if name == "serve":
                assert all(s.startswith("env.") for s in sets), f"{_where(doc, line)}: serve takes env.* keys only"
            try:
                config_lib.load_config(os.path.join(ROOT, config), sets)
            except config_lib.ConfigError as exc:
                pytest.fail(f"{_where(doc, line)}: `{command}`: {exc}")
        if name in ("check-env", "serve") and getattr(args, "env_id", None) and not args.env_id.startswith("runs/"):
            assert args.env_id in registry.registered_ids(), f"{_where(doc, line)}: `{command}`: {args.env_id} is not registered"
        if name in ("list", "config") or (name is None and argv == ["--version"]):
            ran.add(tuple(argv))
    for argv in sorted(ran):
        assert cli.main(list(argv)) == 0, argv


def test_inline_commands_parse_or_say_why_not(capsys):
    seen = set()
    for doc, command in inline_commands():
        if command in NOT_RUNNABLE:
            seen.add(command)
            continue
        argv = _argv(command)
        if not argv:  # the program itself
            continue
        if len(argv) == 1:  # a command named in prose: it must exist
            assert argv[0] in COMMANDS or argv[0] == "--version", f"{_where(doc)}: `{command}`: no such command"
            continue
        tries = [argv, argv + ["runs/example"]] + ([[argv[0], MISSING[argv[0]], *argv[1:]]] if argv[0] in MISSING else [])
        if not any(_parses(a) for a in tries):  # (an option named in prose stands on a stand-in RUN / ID)
            pytest.fail(f"{_where(doc)}: `{command}` does not parse (fix it, or add it to NOT_RUNNABLE with why)")
    assert seen == set(NOT_RUNNABLE), f"no longer in the docs: {set(NOT_RUNNABLE) - seen}"


def _merge(base: dict, snippet: dict) -> dict:
    out = copy.deepcopy(base)
    for key, value in snippet.items():
        out[key] = _merge(out[key], value) if isinstance(value, dict) and isinstance(out.get(key), dict) else value
    return out


def _stand_ins(value, tmp: str):
    if isinstance(value, dict):
        return {k: _stand_ins(v, tmp) for k, v in value.items()}
    if isinstance(value, str) and value in STAND_INS:
        return STAND_INS[value].replace("TMP", tmp) if value.startswith("data/") else os.path.join(ROOT, STAND_INS[value])
    return value.replace("tests/fixtures", os.path.join(ROOT, "tests/fixtures")) if isinstance(value, str) else value


def _reader_files(tmp: str) -> None:
    """The reader's files the snippets name: rows (the shipped sample, split 8 / 4) and the
    Python modules the docs show (a ``python`` block opening with ``# name.py``)."""
    with open(os.path.join(ROOT, "envs", "assets", "text_sample.jsonl"), encoding="utf-8") as f:
        rows = f.read().splitlines()
    for name, part in (("train.jsonl", rows[:8]), ("held_out.jsonl", rows[8:])):
        with open(os.path.join(tmp, name), "w", encoding="utf-8") as f:
            f.write("\n".join(part) + "\n")
    for _, text in _docs():
        for lang, body, _ in _fences(text):
            m = re.match(r"# (\w+\.py)\n", body)
            if lang == "python" and m:
                with open(os.path.join(tmp, m.group(1)), "w", encoding="utf-8") as f:
                    f.write(body)


def yaml_snippets():
    for doc, text in _docs():
        for lang, body, first in _fences(text):
            if lang in ("yaml", "yml"):
                yield doc, first, body


def test_yaml_snippets_load_as_run_configs(monkeypatch, tmp_path):
    """Each snippet, merged into a recipe of its algorithm, loads as a run config; one with
    an ``env.text`` or ``env.tokenizer`` section also builds its env (rows, tokenizer, rubric)."""
    from jaxrl.run import build

    monkeypatch.chdir(ROOT)
    monkeypatch.syspath_prepend(str(tmp_path))
    _reader_files(str(tmp_path))
    snippets = list(yaml_snippets())
    assert len(snippets) > 10
    skipped, built = set(), 0
    for doc, line, body in snippets:
        raw = yamlio.load(body)
        assert isinstance(raw, dict), f"{_where(doc, line)}: not a mapping"
        head = next(ln for ln in body.splitlines() if ln.strip() and not ln.startswith("#"))
        if (doc, head.strip()) in YAML_NOT_CHECKED:
            skipped.add((doc, head.strip()))
            continue
        text_env = "text" in (raw.get("env") or {}) or "tokenizer" in (raw.get("env") or {})
        if "algo" in raw:
            whole = raw
        else:
            algo = next((k for k in raw if k in BASES), "sft" if text_env else None)
            whole = _merge(config_lib.read_yaml(os.path.join(ROOT, BASES[algo])), raw)
            if "env" in raw and raw["env"].get("id") != whole["env"].get("id"):
                whole["env"] = raw["env"]
        try:
            cfg = config_lib.config_from_dict(_stand_ins(whole, str(tmp_path)))
            if text_env and "algo" not in raw:
                build.env_setup(cfg.env)
                built += 1
        except config_lib.ConfigError as exc:
            pytest.fail(f"{_where(doc, line)}: the snippet does not load as a run config: {exc}")
    assert skipped == set(YAML_NOT_CHECKED), f"no longer in the docs: {set(YAML_NOT_CHECKED) - skipped}"
    assert built >= 4
