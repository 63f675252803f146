"""jaxrl.core.threefry: JAX's threefry hash lowered straight on CPU gives JAX's bits, and
the commands put it in place before they compile."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl.core import threefry


# jax.random's values from JAX's own CPU lowering of threefry (a loop; jaxlib 0.10.2)
KEY42_BITS = [2098992034, 2919706841, 2646866425, 2409546199, 1935504149, 2516274904, 321304473, 3329172656]
SPLIT7_NORMALS = [[1.1140471696853638, 0.14163129031658173, -0.5224542021751404],
                  [0.4541335105895996, 0.9391627907752991, -0.2689431309700012]]


def test_unrolled_threefry_gives_jax_randoms_bits():
    assert threefry.unroll_on_cpu() and threefry.unroll_on_cpu()  # idempotent
    bits = jax.jit(lambda k: jax.random.bits(k, (8,)))  # fresh programs: lowered with the rule in place
    np.testing.assert_array_equal(bits(jax.random.key(42)), np.array(KEY42_BITS, np.uint32))
    normals = jax.jit(jax.vmap(lambda k: jax.random.normal(k, (3,))))(jax.random.split(jax.random.key(7), 16))
    np.testing.assert_array_equal(normals[:2], np.array(SPLIT7_NORMALS, np.float32))
    if jax.default_backend() == "cpu":  # straight-line: JAX's CPU rule would have emitted a loop
        assert "while" not in bits.lower(jax.random.key(42)).as_text()


@pytest.mark.parametrize("key, count, want", [  # Random123's known answers for Threefry-2x32-20
    ((0, 0), (0, 0), (0x6B200159, 0x99BA4EFE)),
    ((0xFFFFFFFF, 0xFFFFFFFF), (0xFFFFFFFF, 0xFFFFFFFF), (0x1CB996FC, 0xBB002BE7)),
    ((0x13198A2E, 0x03707344), (0x243F6A88, 0x85A308D3), (0xC4923A9C, 0x483DF7A0)),
])
def test_unrolled_threefry_known_answers(key, count, want):
    u32 = lambda v: jnp.array([v], jnp.uint32)  # noqa: E731
    got = threefry.threefry2x32_unrolled(u32(key[0]), u32(key[1]), u32(count[0]), u32(count[1]))
    assert [int(x[0]) for x in got] == list(want)


@pytest.mark.parametrize("argv", [["train", "missing.yaml"], ["eval", "missing-run"], ["render", "missing-run", "--out", "x.gif"]])
def test_commands_unroll_threefry_before_compiling(argv, monkeypatch, tmp_path, capsys):
    from jaxrl import cli

    calls = []
    monkeypatch.setattr(threefry, "unroll_on_cpu", lambda: calls.append(1) or True)
    monkeypatch.chdir(tmp_path)
    assert cli.main(argv) == 2  # refused (no such file), after the compile setup
    assert calls == [1]
