"""Session-wide test settings.

XLA's persistent compilation cache, in a fresh temporary directory per test session: tests
that build the same program again (a run and its resume, the same recipe through the CLI and
through ``trainer.run``) load it instead of compiling it again. Nothing is shared between
sessions, so no test ever sees a program compiled by another version of the code. The
``jaxrl`` processes tests start use the same directory (``JAXRL_CACHE_DIR``), and so do their
remembered ``list``/``config`` answers.
"""

import os
import shutil
import tempfile

import jax

_ROOT = tempfile.mkdtemp(prefix="jaxrl-tests-cache-")
_CACHE = os.path.join(_ROOT, "xla")  # where jaxrl.run.compile_cache puts it under JAXRL_CACHE_DIR
os.environ["JAXRL_CACHE_DIR"] = _ROOT  # the `jaxrl` processes tests start share it, not ~/.cache
os.makedirs(_CACHE, mode=0o700)
jax.config.update("jax_compilation_cache_dir", _CACHE)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(_ROOT, ignore_errors=True)

