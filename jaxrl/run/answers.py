"""Remembered answers of the read-only commands (``jaxrl list``, ``jaxrl config ALGO``).

Listing algorithms and env ids needs their plugins imported, and every plugin imports JAX
(seconds); the answer changes only when the installation does. So a command's text is kept
in a small file under the user's cache directory, keyed by a fingerprint of the
installation: the Python installation and version, jaxrl's version, every entry point of the
``jaxrl.envs`` and ``jaxrl.algos`` groups (name, target, distribution and its version), the
size and modification time of every source file of the packages those entry points name
(an edit in an editable install counts), and the modification times of the
site-packages directories (an install or uninstall counts). Computing it imports nothing heavy.

An answer is stored only when the command succeeded without a warning (a plugin that failed
to load is reported every time). ``JAXRL_CACHE_DIR`` moves the cache; ``JAXRL_NO_CACHE=1``
turns it off. Any failure to read or write the cache just means computing the answer.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib.util
import io
import os
import sys
import warnings
from importlib import metadata
from typing import Callable

GROUPS = ("jaxrl.envs", "jaxrl.algos")


def cache_dir(environ=os.environ) -> str:
    """jaxrl's cache directory: ``$JAXRL_CACHE_DIR``, else ``$XDG_CACHE_HOME/jaxrl``, else
    ``~/.cache/jaxrl`` (the compilation cache lives under it too)."""
    explicit = environ.get("JAXRL_CACHE_DIR")
    if explicit:
        return explicit
    base = environ.get("XDG_CACHE_HOME") or os.path.join(os.path.expanduser("~"), ".cache")
    return os.path.join(base, "jaxrl")


def _package_dirs(top: str) -> list[str]:
    try:
        spec = importlib.util.find_spec(top)  # a top-level name: imports nothing
    except (ImportError, ValueError):
        return []
    if spec is None:
        return []
    if spec.submodule_search_locations:
        return list(spec.submodule_search_locations)
    return [spec.origin] if spec.origin else []


def _tree_stats(h, root: str) -> None:
    if os.path.isfile(root):
        st = os.stat(root)
        h.update(f"{root}:{st.st_size}:{st.st_mtime_ns}\n".encode())
        return
    for dirpath, dirnames, names in os.walk(root):
        dirnames[:] = sorted(d for d in dirnames if d != "__pycache__")
        for name in sorted(names):
            if name.endswith((".py", ".yaml", ".json", ".txt")):
                st = os.stat(os.path.join(dirpath, name))
                h.update(f"{dirpath}/{name}:{st.st_size}:{st.st_mtime_ns}\n".encode())


def fingerprint() -> str:
    """A hex digest that changes whenever what ``list`` or ``config`` prints could."""
    from jaxrl._version import __version__

    h = hashlib.sha256(f"{sys.prefix}\n{sys.version}\n{__version__}\n".encode())
    tops = {"jaxrl"}
    for group in GROUPS:
        for ep in sorted(metadata.entry_points(group=group), key=lambda e: (e.name, e.value)):
            dist = getattr(ep, "dist", None)
            where = f"{dist.metadata['Name']}=={dist.version}" if dist is not None else "?"
            h.update(f"{group}:{ep.name}={ep.value}@{where}\n".encode())
            tops.add(ep.value.split(":")[0].split(".")[0])
    for top in sorted(tops):
        for root in _package_dirs(top):
            _tree_stats(h, root)
    import site

    for entry in [*site.getsitepackages(), site.getusersitepackages()]:
        with contextlib.suppress(OSError):  # an install or uninstall changes the directory
            h.update(f"{entry}:{os.stat(entry).st_mtime_ns}\n".encode())
    return h.hexdigest()[:24]


def _safe(key: str) -> str:
    return "".join(c if c.isalnum() or c in "-_." else "_" for c in key)


def _path(key: str, digest: str) -> str:
    return os.path.join(cache_dir(), f"{_safe(key)}@{digest}.txt")


def answer(key: str, compute: Callable[[], str], remember: bool = True) -> str:
    """The text ``compute()`` returns, from the cache when the installation has not changed.
    ``remember=False`` (a caller that may have registered things in-process, e.g. a test
    calling ``jaxrl.cli.main([...])``) always computes."""
    if not remember or os.environ.get("JAXRL_NO_CACHE"):
        return compute()
    try:
        path = _path(key, fingerprint())
    except Exception:  # an installation that cannot be fingerprinted: no cache
        path = None
    if path is not None:
        with contextlib.suppress(OSError, UnicodeDecodeError):  # none yet or unreadable: compute
            with open(path, encoding="utf-8") as f:
                return f.read()
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        text = compute()
    for w in caught:  # shown as they would have been; the answer is not remembered
        warnings.showwarning(w.message, w.category, w.filename, w.lineno)
    if path is not None and not caught:
        _store(path, _safe(key), text)
    return text


def _store(path: str, safe_key: str, text: str) -> None:
    with contextlib.suppress(OSError):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        prefix = f"{safe_key}@"
        for old in os.listdir(os.path.dirname(path)):  # answers for an older installation
            if old.startswith(prefix) and old.endswith(".txt"):
                with contextlib.suppress(OSError):
                    os.unlink(os.path.join(os.path.dirname(path), old))
        tmp = f"{path}.{os.getpid()}.tmp"
        with open(tmp, "w", encoding="utf-8") as f:
            f.write(text)
        os.replace(tmp, path)


def captured(run: Callable[[], object]) -> str:
    """What ``run()`` prints to stdout, as text."""
    buffer = io.StringIO()
    with contextlib.redirect_stdout(buffer):
        run()
    return buffer.getvalue()
