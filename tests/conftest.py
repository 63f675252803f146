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
overrides the flag), but in this process they are compiled at ``-O0`` too (10% less CPU over
tests/test_grpo_eval_every.py, test_ppo_learning.py and test_masks.py, the learning tests
unchanged): the ``jaxrl`` processes tests start, tests/test_algo_conformance.py's ``ppo``
sentinel and tests/test_physics_learning.py (:data:`TRAINER_COMPILE`, a run long enough for
its execution to count) keep the trainer's own options. A test about the accuracy of machine
code as users get it compiles with :data:`USER_COMPILE` (e.g. tests/test_vector.py's sincos).
Every other comparison is between programs compiled alike, or within a tolerance.
"""

import gc
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

from jaxrl.algos.common import train as _train  # noqa: E402

#: The trainer's own ``COMPILER_OPTIONS`` (what ``jaxrl train`` compiles with).
TRAINER_COMPILE = dict(_train.COMPILER_OPTIONS)
_train.COMPILER_OPTIONS["xla_backend_optimization_level"] = 0  # in place: modules hold the dict

_ROOT = tempfile.mkdtemp(prefix="jaxrl-tests-cache-")
_CACHE = os.path.join(_ROOT, "xla")  # where jaxrl.run.compile_cache puts it under JAXRL_CACHE_DIR
os.environ["JAXRL_CACHE_DIR"] = _ROOT  # the `jaxrl` processes tests start share it, not ~/.cache
os.makedirs(_CACHE, mode=0o700)
jax.config.update("jax_compilation_cache_dir", _CACHE)
jax.config.update("jax_persistent_cache_min_compile_time_secs", 0.5)
jax.config.update("jax_persistent_cache_min_entry_size_bytes", 0)


def pytest_sessionfinish(session, exitstatus):
    shutil.rmtree(_ROOT, ignore_errors=True)


# Python's cyclic collector less often (its thresholds are 700, 10, 10), and not over the
# modules imported so far: tracing allocates millions of short-lived objects, few in cycles,
# and at the default thresholds the collector took 5% of tests/test_dialogue.py and
# test_sft.py (4.5 s of 90; 0.6 s with these).
gc.freeze()
gc.set_threshold(50_000, 50, 50)
