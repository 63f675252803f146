"""An error a host callback raises on purpose (a Python reward's, a remote env's), printed as one line.

JAX re-raises it as a ``JaxRuntimeError`` whose text holds the host traceback
(:func:`raised_in_callback` finds the line again), and logs that traceback first
(:func:`quiet_callback_log` drops the log for these errors; every other callback failure is
still logged). Shared by :mod:`jaxrl.text.python_reward` and :mod:`jaxrl.text.remote`.
"""

from __future__ import annotations

import logging

#: The logger JAX reports a failed ``pure_callback`` on.
CALLBACK_LOG = "jax._src.callback"


class _Quiet(logging.Filter):
    """Drops a log record whose exception is an ``error_type``."""

    def __init__(self, error_type: type[BaseException]):
        super().__init__()
        self.error_type = error_type

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.exc_info and isinstance(record.exc_info[1], self.error_type))


def quiet_callback_log(error_type: type[BaseException]) -> None:
    """JAX's "callback failed" traceback log dropped for ``error_type`` (once per type)."""
    log = logging.getLogger(CALLBACK_LOG)
    if not any(isinstance(f, _Quiet) and f.error_type is error_type for f in log.filters):
        log.addFilter(_Quiet(error_type))


def raised_in_callback(exc: BaseException, error_type: type[BaseException]) -> str | None:
    """The message of the last ``error_type`` raised inside a callback that ``exc`` (JAX's
    re-raise) carries in its text, else None."""
    if type(exc).__name__ not in ("JaxRuntimeError", "XlaRuntimeError"):
        return None
    marker = f"{error_type.__name__}: "
    lines = [line for line in str(exc).splitlines() if marker in line]
    return lines[-1].split(marker, 1)[1].strip() if lines else None
