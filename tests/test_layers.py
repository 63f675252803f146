"""The architecture, enforced: import-linter's contracts (pyproject ``[tool.importlinter]``:
layers, the env contract below everything, algorithms apart from the env suite and from each
other, no cycles), the habits a grep can see, and one concept per module.

One concept per module (docs/architecture.md, "Modules"), in three checks read from the
source (parsed, never imported):

1. Every module's docstring opens with one sentence that states its concept (at most
   :data:`MAX_CONCEPT_CHARS` characters, ended within the first paragraph). Package
   ``__init__.py`` files that define nothing are exempt: their folder is the concept.
2. No module serves unrelated rooms with unrelated parts: its public names, grouped by what
   they reference inside the module and by the rooms (``jaxrl/<folder>``, the env suite)
   that import them, form one group. Two groups that share neither code nor an importing
   room are two concepts in one file (:func:`split_candidates`); :data:`REVIEWED` lists the
   ones judged to be one concept anyway, with why, and may only shrink.
3. A hard ceiling of :data:`MAX_LINES` lines, a backstop only: a module is split when it
   holds two concepts, not when it is long.
"""

from __future__ import annotations

import ast
import collections
import dataclasses
import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parent.parent
JAXRL = ROOT / "jaxrl"


def test_import_linter_contracts_hold():
    pytest.importorskip("importlinter")
    out = _lint_imports(ROOT)
    assert out.returncode == 0, out.stdout + out.stderr
    assert "0 broken" in out.stdout and "5 kept" in out.stdout, out.stdout


#: The packages whose modules may not import each other in a circle (pyproject's
#: ``acyclic_siblings`` contract).
ACYCLIC = ("jaxrl.run", "jaxrl.algos", "jaxrl.core", "jaxrl.models", "jaxrl.serve", "jaxrl.commands", "jaxrl.text")


def _lint_imports(cwd: pathlib.Path, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports_command; sys.exit(lint_imports_command())", *args],
        cwd=cwd, capture_output=True, text=True, timeout=300, env=env,
    )


def test_the_acyclic_contract_covers_the_packages():
    import tomllib

    contracts = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["importlinter"]["contracts"]
    (acyclic,) = [c for c in contracts if c["type"] == "acyclic_siblings"]
    assert sorted(acyclic["ancestors"]) == sorted(ACYCLIC)


def test_a_sibling_cycle_breaks_the_contract(tmp_path):
    """A copy of the package with two modules importing each other in each of
    :data:`ACYCLIC`'s newer packages fails ``lint-imports``, naming each package."""
    pytest.importorskip("importlinter")
    import os
    import shutil

    shutil.copytree(JAXRL, tmp_path / "jaxrl", ignore=shutil.ignore_patterns("__pycache__"))
    (tmp_path / "jaxrl_envs").symlink_to(ROOT / "envs")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    packages = ("jaxrl.models", "jaxrl.serve", "jaxrl.commands", "jaxrl.text")
    for package in packages:
        folder = tmp_path / package.replace(".", "/")
        (folder / "_cycle_a.py").write_text(f'"""A."""\nfrom {package} import _cycle_b\n')
        (folder / "_cycle_b.py").write_text(f'"""B."""\nfrom {package} import _cycle_a\n')
    out = _lint_imports(tmp_path, "--no-cache", env={**os.environ, "PYTHONPATH": str(tmp_path)})
    assert out.returncode != 0, out.stdout + out.stderr
    assert "Analyzed" in out.stdout and "1 broken" in out.stdout, out.stdout + out.stderr
    for package in packages:
        assert f"No cycles are allowed in {package}." in out.stdout, out.stdout


def _sources(folder: pathlib.Path):
    return [(p, p.read_text()) for p in sorted(folder.rglob("*.py"))]


def test_no_hook_lookup_by_module_and_no_hasattr_dispatch_on_token_tasks():
    for path, text in _sources(JAXRL):
        assert not re.search(r"sys\.modules\s*(?:\[|\.get\b)", text), f"{path}: an algorithm hook found by module lookup"
        for name in ("prompt_len", "vocab_size", "max_completion_len"):
            assert not re.search(rf"hasattr\([^)]*['\"]{name}['\"]", text), f"{path}: hasattr dispatch on {name}"


def test_the_run_builds_envs_without_asking_their_types():
    """``jaxrl/run/build.py`` asks no env its type: each kind of token task says how it is put
    into a tokenizer's ids (``TokenTask.in_tokenizer``), the wrappers refuse what they cannot wrap."""
    text = (JAXRL / "run" / "build.py").read_text()
    assert not re.search(r"\b(?:isinstance|getattr|hasattr)\(", text), "jaxrl/run/build.py dispatches on a type"


def test_algorithms_never_import_the_env_suite():
    for path, text in _sources(JAXRL / "algos"):
        assert "jaxrl_envs" not in text, f"{path} imports the env suite"


#: The backstop: no module reaches this many lines, whatever it holds.
MAX_LINES = 1000
#: The longest concept sentence a module docstring may open with.
MAX_CONCEPT_CHARS = 300

#: Split candidates (see :func:`split_candidates`) judged to hold one concept: module -> why.
#: An entry that is no longer a candidate must go; the list may only shrink.
REVIEWED: dict[str, str] = {
    "jaxrl/core/wrappers.py": "FrameStack is read by jaxrl.run.build (env.frame_stack), the other wrappers by "
    "the algorithms: one concept, environments around environments, each with one job",
}


def _module_name(path: pathlib.Path, root: pathlib.Path) -> str:
    parts = list(path.relative_to(root).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _top_level_definitions(tree: ast.Module) -> dict[str, ast.AST]:
    """Name -> the module-level statement that binds it (functions, classes, assignments)."""
    out = {}
    for node in tree.body:
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            out[node.name] = node
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            for target in node.targets if isinstance(node, ast.Assign) else [node.target]:
                out.update((n.id, node) for n in ast.walk(target) if isinstance(n, ast.Name))
    return out


def _imported_names(trees: dict[str, ast.Module]) -> dict[str, dict[str, set[str]]]:
    """module -> name -> the modules that use ``module.name`` (``from m import name``, or
    ``from pkg import m`` / ``import pkg.m as m`` and then ``m.name``)."""
    uses: dict[str, dict[str, set[str]]] = collections.defaultdict(lambda: collections.defaultdict(set))
    for importer, tree in trees.items():
        aliases = {}
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
                for alias in node.names:
                    if f"{node.module}.{alias.name}" in trees:
                        aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
                    elif node.module in trees:
                        uses[node.module][alias.name].add(importer)
            elif isinstance(node, ast.Import):
                aliases.update((a.asname, a.name) for a in node.names if a.asname and a.name in trees)
        for node in ast.walk(tree):
            if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id in aliases:
                uses[aliases[node.value.id]][node.attr].add(importer)
    return uses


def _room(module: str) -> str:
    """The room a module lives in: its folder under ``jaxrl/`` (or file), or the env suite."""
    return ".".join(module.split(".")[:2]) if module.startswith("jaxrl.") else module.split(".")[0]


def split_candidates(packages: dict[str, pathlib.Path], root: pathlib.Path) -> dict[str, list[list[str]]]:
    """Modules of ``packages`` (top-level name -> folder) whose externally imported public
    names fall into two or more groups, each group's names ``sorted``.

    Names are joined when one references the other inside the module (transitively, private
    helpers included) or when one room imports both; ``jaxrl/__init__.py`` (the public list)
    is not a room. Modules are read as the ``(path, module name)`` pairs found under the
    folders; ``root`` is the folder the module names are relative to."""
    paths = {_module_name(p, root): p for folder in packages.values() for p in sorted(folder.rglob("*.py"))}
    trees = {name: ast.parse(path.read_text()) for name, path in paths.items()}
    uses = _imported_names(trees)
    found = {}
    for module, tree in trees.items():
        defs = _top_level_definitions(tree)
        parent = {name: name for name in defs}

        def find(x):
            while parent[x] != x:
                x = parent[x]
            return x

        for name, node in defs.items():
            for ref in ast.walk(node):
                if isinstance(ref, ast.Name) and ref.id in defs:
                    parent[find(ref.id)] = find(name)
        rooms = collections.defaultdict(list)
        for name, importers in uses[module].items():
            if name in defs and not name.startswith("_"):
                for importer in importers - {module, "jaxrl"}:
                    rooms[_room(importer)].append(name)
        for names in rooms.values():
            for name in names[1:]:
                parent[find(name)] = find(names[0])
        groups = collections.defaultdict(set)
        for name in {n for names in rooms.values() for n in names}:
            groups[find(name)].add(name)
        if len(groups) > 1:
            found[paths[module].relative_to(root).as_posix()] = sorted(sorted(g) for g in groups.values())
    return found


def concept_problems(folder: pathlib.Path, root: pathlib.Path) -> list[str]:
    """One line per module under ``folder`` whose docstring does not open with a concept
    sentence (package ``__init__.py`` files that define nothing are exempt)."""
    problems = []
    for path in sorted(folder.rglob("*.py")):
        tree = ast.parse(path.read_text())
        rel = path.relative_to(root).as_posix()
        if path.name == "__init__.py" and not _top_level_definitions(tree):
            continue
        doc = (ast.get_docstring(tree) or "").strip()
        first = " ".join(doc.split("\n\n")[0].split())
        # a sentence ends at . ! ? before a space and a capital, a quote, a role (:mod:) or the end
        end = re.search(r"[.!?](?=\s+[A-Z`:*(]|$)", first)
        if not doc:
            problems.append(f"{rel}: no module docstring; open it with one sentence stating the module's concept")
        elif end is None:
            problems.append(f"{rel}: the docstring's first paragraph is not a sentence; open with one stating the concept")
        elif end.end() > MAX_CONCEPT_CHARS:
            problems.append(f"{rel}: the opening sentence has {end.end()} characters (max {MAX_CONCEPT_CHARS}); "
                            "one concept fits one short sentence")
    return problems


def oversize(folder: pathlib.Path, root: pathlib.Path) -> list[str]:
    return [
        f"{p.relative_to(root).as_posix()} has {n} lines (ceiling {MAX_LINES}): split it by concept"
        for p in sorted(folder.rglob("*.py")) if (n := p.read_text().count("\n")) >= MAX_LINES
    ]


def test_every_module_opens_with_its_concept():
    problems = concept_problems(JAXRL, ROOT)
    assert not problems, "\n".join(problems)


def test_no_module_serves_unrelated_rooms_with_unrelated_parts():
    found = split_candidates({"jaxrl": JAXRL, "jaxrl_envs": ROOT / "envs"}, ROOT)
    new = {m: groups for m, groups in found.items() if m not in REVIEWED}
    stale = sorted(set(REVIEWED) - set(found))
    assert not new, "modules whose parts serve unrelated rooms and share no code; split them, or say in " \
        "REVIEWED why each is one concept:\n" + "\n".join(f"{m}: {g}" for m, g in new.items())
    assert not stale, f"no longer split candidates, remove from REVIEWED: {stale}"


def test_modules_stay_under_the_ceiling():
    assert not oversize(JAXRL, ROOT), "\n".join(oversize(JAXRL, ROOT))


def _write(root: pathlib.Path, files: dict[str, str]) -> None:
    for rel, text in files.items():
        path = root / rel
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)


def test_the_module_rule_fails_on_bad_modules(tmp_path):
    """Each check flags a deliberately bad module (and spares its good twin)."""
    _write(tmp_path, {
        "jaxrl/__init__.py": "",
        "jaxrl/a/__init__.py": "",
        "jaxrl/b/__init__.py": "",
        "jaxrl/mixed.py": '"""Two things in one file."""\ndef draw():\n    pass\ndef save():\n    pass\n',
        "jaxrl/joined.py": '"""One thing with two doors."""\ndef draw():\n    save()\ndef save():\n    pass\n',
        "jaxrl/a/use.py": '"""Draws."""\nfrom jaxrl.mixed import draw\nfrom jaxrl.joined import draw as d\n',
        "jaxrl/b/use.py": '"""Saves."""\nfrom jaxrl import joined, mixed\nmixed.save()\njoined.save()\n',
        "jaxrl/silent.py": "x = 1\n",
        "jaxrl/word.py": '"""word"""\nx = 1\n',
        "jaxrl/rambling.py": '"""' + "and also " * 40 + 'the rest."""\n',
        "jaxrl/long.py": '"""Long."""\n' + "x = 1\n" * MAX_LINES,
    })
    folder = tmp_path / "jaxrl"
    assert split_candidates({"jaxrl": folder}, tmp_path) == {"jaxrl/mixed.py": [["draw"], ["save"]]}
    problems = concept_problems(folder, tmp_path)
    assert [line.split(":")[0] for line in problems] == ["jaxrl/rambling.py", "jaxrl/silent.py", "jaxrl/word.py"]
    assert [line.split(" ")[0] for line in oversize(folder, tmp_path)] == ["jaxrl/long.py"]


@pytest.mark.parametrize("room", ["run", "commands", "algos/common/lm", "text"])
def test_architecture_page_lists_every_module_of_the_room(room):
    """docs/architecture.md has a one-line row for each module of ``jaxrl/<room>/``."""
    page = (ROOT / "docs" / "architecture.md").read_text()
    heading = f"(`jaxrl/{room}/`)"
    assert heading in page, f"docs/architecture.md has no module table for jaxrl/{room}/"
    table = page[page.index(heading):].split("\n### ")[0].split("\n## ")[0]
    rows = set(re.findall(r"^\| `([a-z_0-9]+\.py)` \|", table, re.M))
    modules = {p.name for p in (JAXRL / room).glob("*.py") if p.name != "__init__.py"}
    assert not modules - rows, f"docs/architecture.md: jaxrl/{room}/ modules without a row: {sorted(modules - rows)}"


def test_the_trainer_body_takes_a_context_object():
    """``_run_locked`` takes the run config, one :class:`jaxrl.run.trainer.RunContext` and the
    output stream, not a dozen positional values (at most six parameters)."""
    import inspect

    from jaxrl.run import trainer

    params = inspect.signature(trainer._run_locked).parameters
    assert len(params) <= 6 and list(params) == ["cfg", "ctx", "out"]
    assert {f.name for f in dataclasses.fields(trainer.RunContext)} >= {"built", "chunk", "run_dir", "resume", "init_from"}
