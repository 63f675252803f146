"""The run directory's safety rules: one writer, files written whole, never through a link.

* **One writer**: :class:`RunLock` holds an exclusive ``fcntl.flock`` on ``RUN/.lock`` (the
  file names the holder: pid and host) for as long as ``jaxrl train`` writes the run; a
  second writer is refused with one line naming the holder. The kernel drops the lock when
  the holder exits, even on ``kill -9``, so a stale file never blocks a resume. Readers
  (``jaxrl eval``, ``render``) take no lock and write nothing but their own output.
* **Whole files, no links followed**: :func:`write_bytes` writes a sibling temporary file
  (``O_EXCL | O_NOFOLLOW``) and renames it over the target, so a reader never sees half a
  file and a crash never leaves one; a target that is a symbolic link is refused instead of
  written through (a rename would replace the link itself, but a link in a run directory
  is someone's mistake or an attack, so it is named); so is a file with other hard links.
  The directories a run writes into (``checkpoints/``, ``tensorboard/``, ``wandb/``) are
  refused the same way when they are links, and :func:`refuse_links` checks every entry
  of a run up front (``jaxrl train``, fresh or ``--resume``), before anything compiles.
* **Permissions follow the umask** (0666 & ~umask, as ``open`` gives any new file): a run
  is shared by whoever may read the directory; tighten the umask or the directory for more.
* **One identity**: the run's id lives in ``.lock`` and in the comment opening
  ``config.yaml`` (:func:`run_id`); checkpoint records carry it, so a step copied in from
  another run is refused, with or without ``.lock``.
* **No glob characters** in the run directory's path (:func:`check_path`).
* **Fresh runs never overwrite**: :func:`check_fresh` refuses an ``--out`` that is a file
  or already holds a file a run would write.
"""

from __future__ import annotations

import errno
import json
import os
import re
import socket
import stat
import tempfile
import uuid

from jaxrl.run.files import CONFIG_FILE
from jaxrl.run.yamlio import display_path, short

LOCK_FILE = ".lock"
#: Characters orbax treats as a glob pattern when it reads a checkpoint back (a step path
#: with one is never found again): refused in a run directory's path up front.
GLOB_CHARS = "[]*?\\"


def check_path(run_dir: str) -> None:
    """Refuse a run directory whose absolute path holds a glob character (see
    :data:`GLOB_CHARS`): its checkpoints could be written but never read back."""
    bad = sorted({c for c in os.path.abspath(run_dir) if c in GLOB_CHARS})
    if bad:
        raise RunDirError(
            f"run directory {display_path(run_dir)} has {' '.join(repr(c) for c in bad)} in its path, which the "
            "checkpoint reader (orbax) takes as a pattern; choose another --out"
        )


def refuse_shared(fd: int, path: str) -> None:
    """Refuse (closing ``fd``) a file with more than one hard link: writing or truncating it
    would change the other name's file too."""
    if os.fstat(fd).st_nlink > 1:
        os.close(fd)
        raise RunDirError(f"{display_path(path)} has other hard links; refusing to write through it (remove it first)")


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


class RunDirError(RuntimeError):
    """The run directory cannot be used as asked; the message is one line."""


def _holder(fd: int) -> str:
    try:
        text = os.pread(fd, 200, 0).decode("utf-8", "replace").strip().splitlines()
    except OSError:
        text = []
    return text[0] if text else "another process"


_RUN_ID_RE = re.compile(r"^run ([0-9a-f]{32})$", re.M)
_CONFIG_ID_RE = re.compile(r"\A# jaxrl run ([0-9a-f]{32})\b")


def id_header(ident: str | None) -> str:
    """The first line of a run's ``config.yaml``: a YAML comment naming the run's identity
    (its second home after ``.lock``, which a copy without hidden files loses); ``""`` for None."""
    if ident is None:
        return ""
    return f"# jaxrl run {ident} (this run's identity: checkpoints written by another run are refused)\n"


def _read_head(path: str) -> str:
    """The first 200 bytes of a regular file (never through a link, never blocking), or ``""``."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except OSError:
        return ""
    try:
        return os.pread(fd, 200, 0).decode("utf-8", "replace") if stat.S_ISREG(os.fstat(fd).st_mode) else ""
    except OSError:
        return ""
    finally:
        os.close(fd)


def run_id(run_dir: str) -> str | None:
    """The run's identity: the second line of its ``.lock`` file (``run <32 hex>``: made by
    the first writer, kept by every later one, copied with the directory), else the comment
    that opens its ``config.yaml`` (:func:`id_header`), else None. Checkpoint records carry it,
    so a step copied in from another run is refused (:class:`jaxrl.run.checkpoint.Checkpoints`),
    also when ``.lock`` is missing."""
    match = _RUN_ID_RE.search(_read_head(os.path.join(run_dir, LOCK_FILE)))
    if match is None:
        match = _CONFIG_ID_RE.search(_read_head(os.path.join(run_dir, CONFIG_FILE)))
    return match.group(1) if match else None


class RunLock:
    """Exclusive writer lock on ``run_dir`` (created if missing); a context manager."""

    def __init__(self, run_dir: str):
        self.run_dir = run_dir
        self.path = os.path.join(run_dir, LOCK_FILE)
        self._fd: int | None = None

    def acquire(self) -> "RunLock":
        import fcntl

        check_path(self.run_dir)
        os.makedirs(self.run_dir, exist_ok=True)
        try:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
        except OSError as exc:
            if exc.errno == errno.ELOOP:
                raise RunDirError(f"{display_path(self.path)} is a symbolic link; refusing to lock through it") from None
            raise
        refuse_shared(fd, self.path)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = _holder(fd)
            os.close(fd)
            raise RunDirError(
                f"run directory {display_path(self.run_dir)} is being written by {holder}; "
                "wait for that run to finish or choose another --out"
            ) from None
        match = _RUN_ID_RE.search(os.pread(fd, 200, 0).decode("utf-8", "replace"))
        # the run's identity, kept across writers (from config.yaml when .lock was lost)
        ident = match.group(1) if match else (run_id(self.run_dir) or uuid.uuid4().hex)
        os.ftruncate(fd, 0)
        os.pwrite(fd, f"pid {os.getpid()} on {socket.gethostname()}\nrun {ident}\n".encode(), 0)
        self._fd = fd
        return self

    def release(self) -> None:
        if self._fd is not None:
            import fcntl

            fcntl.flock(self._fd, fcntl.LOCK_UN)
            os.close(self._fd)
            self._fd = None

    def __enter__(self) -> "RunLock":
        return self.acquire()

    def __exit__(self, *exc) -> None:
        self.release()


def refuse_link(path: str) -> None:
    """Raise :class:`RunDirError` if ``path`` is a symbolic link."""
    if os.path.islink(path):
        raise RunDirError(f"{display_path(path)} is a symbolic link; refusing to write through it (remove it first)")


def refuse_links(run_dir: str, names) -> None:
    """Raise :class:`RunDirError` naming the first of ``names`` (entries of ``run_dir``: files
    such as ``metrics.jsonl`` and directories such as ``tensorboard``) that is a symbolic link.
    A run checks its entries before it compiles or writes anything, so a linked entry is
    one line up front, not a file or directory elsewhere written through (or a refusal at
    the end of the run); each writer checks its own path again when it opens it."""
    if not os.path.isdir(run_dir):
        return
    for name in names:
        refuse_link(os.path.join(run_dir, name))


def write_bytes(path: str, data: bytes) -> None:
    """Replace ``path`` by ``data`` atomically (sibling temp file + rename, fsynced);
    a symbolic link at ``path`` is refused."""
    refuse_link(path)
    directory, name = os.path.split(os.path.abspath(path))
    fd, tmp = tempfile.mkstemp(prefix=f".{name}.", suffix=".tmp", dir=directory)  # O_EXCL, no link followed
    try:
        os.fchmod(fd, 0o666 & ~_umask())  # mkstemp makes 0600; run files follow the umask like any file
        with os.fdopen(fd, "wb") as f:
            f.write(data)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def set_aside(path: str) -> str:
    """Rename ``path`` to the first free ``<stem>.set-aside-<n><ext>`` beside it; that name."""
    stem, ext = os.path.splitext(path)
    n = 1
    while os.path.lexists(f"{stem}.set-aside-{n}{ext}"):
        n += 1
    os.rename(path, f"{stem}.set-aside-{n}{ext}")
    return f"{stem}.set-aside-{n}{ext}"


def write_text(path: str, text: str) -> None:
    """:func:`write_bytes` of UTF-8 ``text``."""
    write_bytes(path, text.encode("utf-8"))


def open_append(path: str) -> int:
    """A raw append-only descriptor on ``path`` (created if missing), never through a link."""
    try:
        fd = os.open(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o666)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            refuse_link(path)
        raise
    refuse_shared(fd, path)
    return fd


def write_all(fd: int, data: bytes) -> None:
    """``os.write`` until every byte of ``data`` is written."""
    view = memoryview(data)
    while view:
        view = view[os.write(fd, view) :]


def append_jsonl(path: str, record: dict) -> None:
    """Append one JSON record as a line (one write; never through a link)."""
    fd = open_append(path)
    try:
        write_all(fd, (json.dumps(record) + "\n").encode("utf-8"))
    finally:
        os.close(fd)


def check_fresh(run_dir: str, run_files) -> None:
    """Refuse ``run_dir`` for a new run when it is not a directory or holds one of
    ``run_files`` (a non-empty directory among them counts; an empty one does not)."""
    if os.path.lexists(run_dir) and not os.path.isdir(run_dir):
        raise RunDirError(f"--out {display_path(run_dir)} is a file, not a directory")
    if not os.path.isdir(run_dir):
        return
    refuse_links(run_dir, run_files)
    taken = []
    for name in run_files:
        path = os.path.join(run_dir, name)
        if os.path.isdir(path) and not os.path.islink(path):
            if os.listdir(path):
                taken.append(name)
        elif os.path.lexists(path):
            taken.append(name)
    if taken:
        raise RunDirError(
            f"--out {display_path(run_dir)} already holds {', '.join(taken)}, which a new run would overwrite; "
            "choose another --out"
        )


def flat(tree: dict, prefix: str = "") -> dict:
    """``{"a.b": leaf}`` of a nested mapping (lists are leaves)."""
    out = {}
    for key, value in tree.items():
        name = f"{prefix}.{key}" if prefix else str(key)
        if isinstance(value, dict) and value:
            out.update(flat(value, name))
        else:
            out[name] = value
    return out


def config_diff(old: dict, new: dict, ignore=()) -> dict:
    """``{"ppo.lr": (old, new)}`` for every dotted key whose value differs (missing: None)."""
    a, b = flat(old), flat(new)
    return {k: (a.get(k), b.get(k)) for k in sorted(set(a) | set(b)) if k not in ignore and a.get(k) != b.get(k)}


def describe_diff(diff: dict) -> str:
    """``"ppo.lr: 0.0025 -> 0.001, ..."`` (values abbreviated)."""
    return ", ".join(f"{k}: {short(a)} -> {short(b)}" for k, (a, b) in diff.items())
