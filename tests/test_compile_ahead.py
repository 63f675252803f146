"""Work the trainer and the commands do ahead or not at all: the evaluation program compiled
in a thread while the chunks run (same summary as compiling it at the end), and XLA's persistent
compilation cache of ``jaxrl.run.compile_cache`` (where it lives, which directories it
refuses, a second process loading what the first compiled, with the same results)."""

from __future__ import annotations

import io
import json
import os
import subprocess
import sys
import textwrap
import threading

import jax

from jaxrl.run import compile_cache, trainer
from jaxrl.run import evaluate as eval_lib
from test_trainer import FakeConfig, fake_algo, fake_config, read_jsonl  # noqa: F401 (a fixture)


def test_eval_is_compiled_beside_the_chunks_and_summarises_as_before(fake_algo, tmp_path, monkeypatch):
    calls = []
    prepare = eval_lib.prepare_evaluate

    def spy(built, states, seed=0):
        calls.append(threading.current_thread().name)
        return prepare(built, states, seed)

    monkeypatch.setattr(eval_lib, "prepare_evaluate", spy)
    cfg = fake_config(FakeConfig(num_updates=7), updates_per_chunk=3, seed=5)
    result = trainer.run(cfg, run_dir=str(tmp_path / "run"))
    assert calls == ["jaxrl-compile-eval"]  # once, beside the chunks, not again at the end
    assert len(read_jsonl(tmp_path / "run" / "metrics.jsonl")) == 7
    direct = eval_lib.evaluate_run(trainer.build(cfg), result.state, seed=5)  # compiled at the end, plain jit
    assert {**direct, "checkpoint_update": 7} == result.evaluation
    with open(tmp_path / "run" / "eval.json") as f:
        assert json.load(f) == json.loads(json.dumps(result.evaluation))


def test_cache_directory_follows_jaxrls_cache_settings():
    assert compile_cache.cache_dir({"JAXRL_CACHE_DIR": "/x/y"}) == os.path.join("/x/y", "xla")
    assert compile_cache.cache_dir({"XDG_CACHE_HOME": "/c"}) == os.path.join("/c", "jaxrl", "xla")
    assert compile_cache.cache_dir({"JAXRL_NO_CACHE": "1", "JAXRL_CACHE_DIR": "/x"}) is None
    home = compile_cache.cache_dir({})
    assert home == os.path.join(os.path.expanduser("~"), ".cache", "jaxrl", "xla")


def test_a_directory_others_can_write_is_not_used(tmp_path):
    shared = tmp_path / "shared"
    shared.mkdir()
    os.chmod(shared, 0o777)
    assert compile_cache._safe(str(shared)) == "writable by other users"
    (tmp_path / "file").write_text("")
    assert compile_cache._safe(str(tmp_path / "file")).startswith("cannot create it")
    fresh = tmp_path / "fresh" / "xla"
    assert compile_cache._safe(str(fresh)) is None
    assert os.stat(fresh).st_mode & 0o777 == 0o700

    before = jax.config.jax_compilation_cache_dir
    jax.config.update("jax_compilation_cache_dir", None)
    try:
        err = io.StringIO()
        os.makedirs(tmp_path / "xla", exist_ok=True)
        os.chmod(tmp_path / "xla", 0o777)
        assert compile_cache.enable({"JAXRL_CACHE_DIR": str(tmp_path)}, err=err) is None
        assert jax.config.jax_compilation_cache_dir is None  # left off
        (line,) = err.getvalue().splitlines()
        assert "writable by other users" in line and "JAXRL_NO_CACHE=1" in line
    finally:
        jax.config.update("jax_compilation_cache_dir", before)


ROUND_TRIP = textwrap.dedent(
    """
    import sys
    import jax, jax.numpy as jnp, numpy as np
    from jaxrl.run import compile_cache
    hits = []
    jax.monitoring.register_event_listener(lambda name, **kw: hits.append(name) if name.endswith("cache_hits") else None)
    print(compile_cache.enable())
    jax.config.update("jax_persistent_cache_min_compile_time_secs", 0)  # this tiny program too

    @jax.jit
    def f(x):
        for _ in range(8):
            x = jnp.tanh(x @ x.T) + jnp.sin(x)
        return x

    out = f(jnp.linspace(-1.0, 1.0, 64 * 64).reshape(64, 64))
    print(len(hits))
    print(np.asarray(out).tobytes().hex()[:4096])
    """
)


def test_a_second_process_loads_the_first_ones_program_with_the_same_result(tmp_path):
    env = {**os.environ, "JAXRL_CACHE_DIR": str(tmp_path)}
    env.pop("JAXRL_NO_CACHE", None)
    env.pop("JAX_COMPILATION_CACHE_DIR", None)
    runs = []
    for _ in range(2):
        done = subprocess.run([sys.executable, "-c", ROUND_TRIP], env=env, capture_output=True, text=True, timeout=300)
        assert done.returncode == 0, done.stderr[-2000:]
        runs.append(done.stdout.splitlines())
    (first_dir, first_hits, first_out), (second_dir, second_hits, second_out) = runs
    assert first_dir == second_dir == os.path.join(str(tmp_path), "xla")
    assert any(name.endswith("-cache") for name in os.listdir(first_dir))
    assert int(first_hits) == 0 and int(second_hits) >= 1  # compiled (f and the inputs' programs), then loaded
    assert first_out == second_out  # the loaded executable computes the same bits
