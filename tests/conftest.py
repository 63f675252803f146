"""Session-wide test settings.

XLA's persistent compilation cache, in a fresh temporary directory per test session: tests
that build the same program again (a run and its resume, the same recipe through the CLI and
through ``trainer.run``) load it instead of compiling it again. Nothing is shared between
sessions, so no test ever sees a program compiled by another version of the code. The
``jaxrl`` processes tests start use the same directory (``JAXRL_CACHE_DIR``), and so do their
remembered ``list``/``config`` answers.

XLA's CPU backend at ``-O0`` (:data:`FAST_XLA_FLAGS`, in ``XLA_FLAGS`` before the first
compile; the ``jaxrl`` processes tests start inherit it): the suite is nearly all compiling
of small programs, and LLVM's optimisation is most of that (measured: 24% less CPU time over
tests/test_conv.py, test_vector.py, test_ppo_recurrent.py and test_networks.py). Programs the
trainer compiles keep its own ``COMPILER_OPTIONS`` (``jax.jit(compiler_options=...)``
overrides the flag), so runs train as users' do; a test about the accuracy of machine code
as users get it compiles with :data:`USER_COMPILE` (e.g. tests/test_vector.py's sincos).
Every other comparison is between programs compiled alike, or within a tolerance.
"""

import os
import shutil
import tempfile

#: XLA flags for every program the tests compile without options of their own.
FAST_XLA_FLAGS = "--xla_backend_optimization_level=0"
#: ``jax.jit(compiler_options=...)`` for a test about code as XLA compiles it by default.
USER_COMPILE = {"xla_backend_optimization_level": 3}
if FAST_XLA_FLAGS not in os.environ.get("XLA_FLAGS", ""):
    os.environ["XLA_FLAGS"] = f"{os.environ.get('XLA_FLAGS', '')} {FAST_XLA_FLAGS}".strip()

import jax  # noqa: E402

_ROOT = tempfile.mkdtemp(prefix="jaxrl-tests-cache-")
_CACHE = os.path.join(_ROOT, "xla")  # where jaxrl.run.compile_cache puts it under JAXRL_CACHE_DIR
os.environ["JAXRL_CACHE_DIR"] = _ROOT  # the `jaxrl` processes tests start share it, not ~/.cache
os.makedirs(_CACHE, mode=0o700)
jax.config.update("jax_compilation_cache_dir", _CACHE)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(_ROOT, ignore_errors=True)

