"""The language-model wing (:mod:`jaxrl.algos.common.lm`): one decode loop whose early stop
changes no token, mask, masked value or key, and one ``model`` section checked alike for GRPO
and SFT. The loop on real models: tests/test_lm.py (``generate`` against transformers),
tests/test_lm_grpo.py (ragged rollouts), tests/test_sft.py (SFT's greedy score is GRPO's)."""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp
import pytest

from jaxrl.algos import grpo, sft
from jaxrl.algos.common.lm import ModelSection, decode_turn
from jaxrl.models.lm.generate import decode_loop

N, V, STEPS, END, PAD = 6, 7, 8, 3, 0
TABLE = jax.random.normal(jax.random.PRNGKey(1), (V, V))


def _extend(cache, tokens, pos):
    """A toy network: logits from the last token, the end-of-turn likelier with every position."""
    logits = TABLE[tokens[:, 0]] + 1.5 * (pos - 10) * jax.nn.one_hot(END, V)
    return cache + 1, logits[:, None]


def test_early_stop_gives_the_fixed_length_turn():
    logits = TABLE[jnp.arange(N) % V]
    writing = jnp.arange(N) != 2  # a row that already ended writes only pad ids
    turn = jax.jit(functools.partial(decode_turn, _extend, jnp.zeros((N,), jnp.int32)),
                   static_argnames=("greedy", "steps", "end_of_turn", "pad_id", "stop_early"))
    args = (logits, writing, jax.random.PRNGKey(0), 10, jnp.float32(1.0))
    kw = dict(greedy=False, steps=STEPS, end_of_turn=END, pad_id=PAD)
    ragged, full = turn(*args, **kw, stop_early=True), turn(*args, **kw, stop_early=False)
    cache, _, key, tokens, logp, mask, entropy = ragged
    assert bool(jnp.all(jnp.any(tokens == END, axis=1) | ~writing)) and int(mask.sum(1).max()) < STEPS  # it did stop
    assert int(cache[0]) < int(full[0][0])  # fewer steps ran
    for a, b in ((key, full[2]), (tokens, full[3]), (mask, full[5])):
        assert bool(jnp.array_equal(a, b))
    for a, b in ((logp, full[4]), (entropy, full[6])):
        assert bool(jnp.array_equal(jnp.where(mask, a, 0), jnp.where(full[5], b, 0)))
    assert bool(jnp.all(tokens[2] == PAD)) and not bool(mask[2].any())


def test_several_end_ids_stop_a_row():
    def draw(logits, key, j):
        return key, jnp.where(jnp.arange(N) == j, 5, 1 + j % 2), ()  # row j writes 5 at step j, else 1, 2, 1...

    feed = lambda cache, token, j: (jnp.zeros((N, V)), cache)  # noqa: E731
    out = decode_loop(draw, feed, jnp.zeros((N, V)), (), jnp.ones((N,), bool), jnp.zeros((2,), jnp.uint32),
                      steps=STEPS, pad_id=PAD, end_ids=(2, 5))
    tokens, written = out[3], out[4]
    assert tokens[:, 0].tolist() == [5, 1, 1, 1, 1, 1] and tokens[:, 1].tolist() == [PAD, 5, 2, 2, 2, 2]  # 5 or 2 ends a row
    assert written[:, 0].all() and written[:, 1].tolist() == [False] + [True] * 5 and not written[:, 2:].any()
    assert bool(jnp.all(tokens[:, 2:] == PAD))


def test_one_model_section_checked_alike():
    section = ModelSection(path="ckpt", lora=dataclasses.replace(ModelSection().lora, rank=2, targets=("nope",)))
    assert isinstance(grpo.config.ModelConfig(), ModelSection) and sft.SFTConfig().model == ModelSection()
    gcfg = grpo.GRPOConfig(model=grpo.config.ModelConfig(policy="hf", **{f.name: getattr(section, f.name)
                                                                         for f in dataclasses.fields(ModelSection)}))
    for cfg in (gcfg, sft.SFTConfig(model=section)):
        with pytest.raises(ValueError, match=r"^model\.lora\.targets: expected a non-empty subset of"):
            cfg.validate()
    for bad, key in ((dict(head_chunk=-1), "head_chunk"), (dict(remat="sometimes"), "remat"), (dict(dtype="fp8"), "dtype")):
        with pytest.raises(ValueError, match=rf"^model\.{key}: "):
            sft.SFTConfig(model=ModelSection(path="ckpt", **bad)).validate()
    assert sft.config.loss_pass(ModelSection()) == (64, True)  # SFT's auto: the 0.5 default, remat on
    assert sft.config.loss_pass(ModelSection(head_chunk=0, remat=False)) == (0, False)
