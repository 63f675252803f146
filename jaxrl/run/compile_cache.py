"""XLA's persistent compilation cache for the commands that compile: a second ``jaxrl
train`` of the same config (or ``jaxrl eval`` of the same run) loads its executables
instead of compiling them again.

:func:`enable` points JAX's cache at ``xla/`` under jaxrl's cache directory (the one
:mod:`jaxrl.run.answers` uses: ``$JAXRL_CACHE_DIR``, else ``$XDG_CACHE_HOME/jaxrl``, else
``~/.cache/jaxrl``); ``JAXRL_NO_CACHE=1`` turns it off, and a cache the user configured for
JAX itself (``JAX_COMPILATION_CACHE_DIR``) is left as it is. Entries are keyed by the
program, the compile options, the devices and the jax/jaxlib versions, so a loaded
executable is the one a compile would give (same results bit for bit); the directory is
kept under :data:`MAX_BYTES` (least recently used entries go first). The cache holds
machine code that is loaded and run: a directory another user could write to (not owned
by this user, or group/world-writable) is not used, and ours is created ``0700``.
"""

from __future__ import annotations

import os
import stat
import sys

from jaxrl.run import answers

__all__ = ["MAX_BYTES", "MIN_COMPILE_SECONDS", "cache_dir", "enable"]

#: Largest size of the cache directory, in bytes.
MAX_BYTES = 2 * 1024**3
#: Programs that compile faster than this are not written (loading would save little).
MIN_COMPILE_SECONDS = 0.25


def cache_dir(environ=os.environ) -> str | None:
    """The directory :func:`enable` would use, or ``None`` when the cache is off."""
    if environ.get("JAXRL_NO_CACHE"):
        return None
    return os.path.join(os.path.expanduser(answers.cache_dir(environ)), "xla")


def _safe(path: str) -> str | None:
    """Why ``path`` must not hold executables we load, or ``None`` if it may."""
    try:
        os.makedirs(path, mode=0o700, exist_ok=True)
        info = os.stat(path)
    except OSError as exc:
        return f"cannot create it ({exc.strerror or exc})"
    if not stat.S_ISDIR(info.st_mode):
        return "not a directory"
    if hasattr(os, "getuid") and info.st_uid != os.getuid():
        return "owned by another user"
    if info.st_mode & (stat.S_IWGRP | stat.S_IWOTH):
        return "writable by other users"
    if not os.access(path, os.W_OK | os.X_OK):
        return "not writable"
    return None


def enable(environ=os.environ, err=None) -> str | None:
    """Turn the cache on for this process (before its first compile); returns the directory
    in use, or ``None``. A directory that cannot be used is reported in one line on
    ``err`` (stderr) and the command goes on without a cache."""
    import jax

    if jax.config.jax_compilation_cache_dir:  # the user's own JAX setting wins
        return jax.config.jax_compilation_cache_dir
    path = cache_dir(environ)
    if path is None:
        return None
    problem = _safe(path)
    if problem is not None:
        print(f"jaxrl: warning: compilation cache {path} not used: {problem} (JAXRL_NO_CACHE=1 to silence)",
              file=err or sys.stderr)
        return None
    jax.config.update("jax_compilation_cache_dir", path)
    jax.config.update("jax_persistent_cache_min_compile_time_secs", MIN_COMPILE_SECONDS)
    try:
        import filelock  # noqa: F401 -- JAX needs it to bound the directory's size
    except ImportError:
        return path  # unbounded then, as JAX's own default
    jax.config.update("jax_compilation_cache_max_size", MAX_BYTES)
    return path
