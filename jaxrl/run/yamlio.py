"""Bounded YAML: plain data only, no anchors or aliases, no duplicate keys, capped sizes.

Config files, ``--set`` values and a run's ``config.yaml`` are read here. Safe YAML never
executes code, but it still expands aliases: a few hundred bytes of nested ``&a``/``*a``
("billion laughs") become gigabytes in memory and in any error message that prints the
value. Configs never need aliases, so :class:`BoundedLoader` refuses every anchor, alias and
merge key (``<<``) before anything is expanded. It also refuses a key given twice in one
mapping (plain YAML silently keeps the last), values longer than :data:`MAX_VALUE_CHARS`
and nesting deeper than :data:`MAX_DEPTH`; :func:`read_file` refuses files larger than
:data:`MAX_FILE_BYTES`, bytes that are not UTF-8, and anything but a regular file (a FIFO would
block, a device never end).

Every refusal is a :class:`YamlError` whose message is one short line phrased to follow
the name of what was read: ``f"config file {path!r} {exc}"``.
"""

from __future__ import annotations

import os
import reprlib
import stat

import yaml

MAX_FILE_BYTES = 1 << 20  # a run config is a few KiB
MAX_VALUE_CHARS = 4096  # longer scalars are refused (also below Python's int-parsing limit)
MAX_DEPTH = 32  # nested mappings / lists

_SHORT = reprlib.Repr()
_SHORT.maxstring = 60
_SHORT.maxother = 60
_SHORT.maxlist = _SHORT.maxtuple = _SHORT.maxdict = _SHORT.maxset = 6
_SHORT.maxlevel = 3


def short(value) -> str:
    """A one-line ``repr`` of ``value`` abbreviated to a bounded length (for messages)."""
    return " ".join(_SHORT.repr(value).split())


class YamlError(ValueError):
    """Refused YAML input; the message is one line that follows the input's name."""


def _line(node_or_event) -> int:
    mark = getattr(node_or_event, "start_mark", None)
    return mark.line + 1 if mark is not None else 0


class BoundedLoader(yaml.SafeLoader):
    """``yaml.SafeLoader`` that refuses anchors, aliases, merge keys, duplicate keys, long
    values and deep nesting (see the module docstring)."""

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent, index):
        event = self.peek_event()
        if isinstance(event, yaml.AliasEvent) or getattr(event, "anchor", None) is not None:
            raise YamlError(
                f"uses a YAML anchor or alias at line {_line(event)} (not allowed: aliases can expand without bound)"
            )
        if isinstance(event, yaml.ScalarEvent) and len(event.value) > MAX_VALUE_CHARS:
            raise YamlError(
                f"has a value of {len(event.value):,} characters at line {_line(event)} "
                f"(at most {MAX_VALUE_CHARS:,} allowed)"
            )
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise YamlError(f"nests deeper than {MAX_DEPTH} levels at line {_line(event)}")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            first: dict = {}
            for key_node, _ in node.value:
                if key_node.tag == "tag:yaml.org,2002:merge":
                    raise YamlError(f"uses a YAML merge key (<<) at line {_line(key_node)} (not allowed)")
                key = self.construct_object(key_node, deep=True)
                try:
                    seen = first.get(key)
                except TypeError:  # an unhashable key: the base class reports it
                    break
                if seen is not None:
                    raise YamlError(f"has a duplicate key {short(key)} at line {_line(key_node)} (first at line {seen})")
                first[key] = _line(key_node)
        return super().construct_mapping(node, deep=deep)


def load(text: str, max_chars: int = MAX_FILE_BYTES):
    """The plain data in YAML ``text``; raises :class:`YamlError` (refused input) or
    ``yaml.YAMLError`` (not valid YAML)."""
    if len(text) > max_chars:
        raise YamlError(f"is {len(text):,} characters long (at most {max_chars:,} allowed)")
    loader = BoundedLoader(text)
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def read_file(path) -> object:
    """The plain data in the YAML file ``path`` (``None`` when empty).

    Raises :class:`YamlError` for a missing, unreadable, oversized, non-UTF-8 or invalid
    file and for every refusal of :class:`BoundedLoader`.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK | os.O_CLOEXEC)  # a FIFO opens without waiting for a writer
        with os.fdopen(fd, "rb") as f:
            mode = os.fstat(fd).st_mode
            if stat.S_ISDIR(mode):
                raise IsADirectoryError
            if not stat.S_ISREG(mode):
                kind = "a FIFO" if stat.S_ISFIFO(mode) else "a device" if stat.S_ISCHR(mode) or stat.S_ISBLK(mode) else "a socket"
                raise YamlError(f"is {kind}, not a regular file")
            data = f.read(MAX_FILE_BYTES + 1)  # never more than the cap
    except FileNotFoundError:
        raise YamlError("not found") from None
    except IsADirectoryError:
        raise YamlError("is a directory, not a file") from None
    except OSError as exc:
        raise YamlError(f"cannot be read: {(exc.strerror or type(exc).__name__).lower()}") from None
    if len(data) > MAX_FILE_BYTES:
        raise YamlError(f"is larger than the {MAX_FILE_BYTES:,} bytes allowed for a YAML file")
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise YamlError(f"is not UTF-8 text (byte 0x{data[exc.start]:02x} at offset {exc.start})") from None
    try:
        return load(text)
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f" at line {mark.line + 1}" if mark is not None else ""
        raise YamlError(f"is not valid YAML{where}") from None


def display_path(path) -> str:
    """``repr`` of ``path`` for a message; abbreviated only when very long."""
    text = os.fspath(path)
    return repr(text) if len(text) <= 200 and "\n" not in text else short(text)
