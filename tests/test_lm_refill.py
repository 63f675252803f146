"""Continuous batching inside the decode loop (grpo.sampling.decode_rows): rows that end take the
next queued (prompt, sample) pair. The generic loop on a toy draw (queue order, one compile
whatever the lengths), the loaded model's refilled rollout against the fixed-length loop with
the same per-pair keys, and the refusals."""

import functools
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl
from jaxrl.algos import grpo
from jaxrl.algos.common.lm.refill import decode_pairs, pair_keys
from jaxrl.algos.contract import EnvSetup
from jaxrl.models.lm.generate import refill_loop
from jaxrl.text.tokenized import tokenizer_task

QWEN2 = os.path.join(os.path.dirname(__file__), "fixtures", "lm", "qwen2")
END, PAD = 7, 0


def _toy(lengths, rows: int, steps: int):
    """refill_loop on a toy model: pair q writes tokens 10 + q at steps < its length, then END;
    the 'cache' counts each row's tokens fed since its last refill."""
    pairs = lengths.shape[0]

    def draw(logits, pair, step):
        token = jnp.where(step + 1 >= lengths[jnp.minimum(pair, pairs - 1)], END, 10 + pair)
        return token.astype(jnp.int32), (step.astype(jnp.float32),)

    def feed(cache, token, step):
        return jnp.zeros((rows, 1)), cache + 1

    def refill(logits, cache, take, pair):
        return logits, jnp.where(take, 0, cache)

    return refill_loop(draw, feed, refill, jnp.zeros((rows, 1)), jnp.zeros((rows,), jnp.int32), pairs=pairs,
                       steps=steps, pad_id=PAD, end_ids=END)


def test_refill_loop_writes_every_pair_in_its_slot_with_one_compile():
    traces = []

    @functools.partial(jax.jit, static_argnums=(1, 2))
    def run(lengths, rows, steps):
        traces.append(1)
        return _toy(lengths, rows, steps)

    for lengths in ([1, 6, 2, 2, 3, 1, 6], [6, 6, 6, 1, 1, 1, 1]):  # queues that drain differently
        lengths = np.asarray(lengths, np.int32)
        tokens, written, (step,), iterations = run(jnp.asarray(lengths), 3, 5)
        want_len = np.minimum(lengths, 5)
        np.testing.assert_array_equal(np.asarray(written).sum(1), want_len)
        for q, n in enumerate(want_len):
            want = [10 + q] * (n - 1) + ([END] if lengths[q] <= 5 else [10 + q]) + [PAD] * (5 - n)
            np.testing.assert_array_equal(np.asarray(tokens)[q], want)
            np.testing.assert_array_equal(np.asarray(step)[q], np.where(np.arange(5) < n, np.arange(5), 0))
        # rows take pairs in order as they free up: never more iterations than a greedy schedule's makespan
        free = [0, 0, 0]
        for n in want_len:
            free[int(np.argmin(free))] += n
        assert int(iterations) == max(free)
    assert len(traces) == 1
    with pytest.raises(ValueError, match="4 rows for 3 sequences"):
        _toy(jnp.ones((3,), jnp.int32), 4, 5)


# ------------------------------------------------------------------------------- a loaded model


def _eager_to_stop(policy, end_of_turn: int, bias: float):
    """``policy`` whose logits favour ending the turn: rows stop at different steps."""
    def extend(params, cache, tokens, pos):
        cache, logits = policy.extend(params, cache, tokens, pos)
        return cache, logits.at[..., end_of_turn].add(bias)
    return policy._replace(extend=extend)


@pytest.fixture(scope="module")
def reverse():
    env, p = jaxrl.make("text/Reverse-v0", num_digits=2)
    task = tokenizer_task(env, QWEN2)
    model = grpo.config.ModelConfig(policy="hf", path=QWEN2, lora=grpo.config.LoRASection(rank=4, alpha=8.0))
    cfg = grpo.GRPOConfig(num_prompts=3, group_size=4, eval_episodes=4, micro_batches=1, model=model)
    policy = grpo.make_setup(EnvSetup(task, p, task.held_out_params(p)), cfg).policy
    params = grpo.update.policy_params(policy.frozen(), policy.init(jax.random.PRNGKey(0), None))
    return task, p, _eager_to_stop(policy, task.end_of_turn, 4.0), params


def test_refilled_rollout_samples_the_fixed_loops_pairs_key_for_key(reverse):
    """decode_rows 5 of 12 completions: the tokens, masks and hand-on key of the fixed-length
    loop drawing row by row (log-probs within float32 rounding: other batch shapes), today's
    all-rows rollout's tokens and rewards, and the rollout the task's verifier makes of them."""
    task, p, policy, pp = reverse
    g, n = 4, 12
    keys = jnp.repeat(jax.random.split(jax.random.PRNGKey(1), n // g), g, axis=0)
    key, temp = jax.random.PRNGKey(2), jnp.float32(1.0)

    @jax.jit
    def programs(pp):
        state, prompt, _ = jax.vmap(task.start, in_axes=(0, None))(keys, p)
        cache, logits = policy.start_grouped(pp, prompt[::g, : task.prompt_len], g)
        ref = decode_pairs(functools.partial(policy.extend, pp), cache, logits.astype(jnp.float32), jnp.ones((n,), bool),
                           key, task.prompt_len, temp, False, task.max_turn_tokens, task.end_of_turn, task.pad_id,
                           stop_early=False)
        k_env = jax.random.split(ref[2])[1]  # the verifier's key, as after today's turn
        answer = jax.vmap(task.respond, in_axes=(0, 0, 0, None))(jax.random.split(k_env, n), state, ref[3], p)[1]
        ro = grpo.rollout.dialogue_rollout(policy, task, p, pp, keys, key, temp, group=g, decode_rows=5)
        today = grpo.rollout.dialogue_rollout(policy, task, p, pp, keys, key, temp, group=g)  # all rows at once
        return prompt, ref, answer, ro, today

    prompt, (_, _, ref_key, tokens, logp, mask, entropy), answer, ro, today = programs(pp)
    np.testing.assert_array_equal(np.asarray(today.actions), np.asarray(tokens))  # today's samples, key for key
    np.testing.assert_array_equal(np.asarray(today.returns), np.asarray(ro.returns))
    mask = np.asarray(mask)
    assert 1 <= mask.sum(1).min() < task.max_turn_tokens  # rows end at different steps
    np.testing.assert_array_equal(np.asarray(ro.actions), np.asarray(tokens))
    np.testing.assert_array_equal(np.asarray(ro.obs), np.concatenate([np.asarray(prompt), np.asarray(tokens)], axis=1))
    np.testing.assert_array_equal(np.asarray(ro.mask), mask)
    np.testing.assert_array_equal(np.asarray(ro.length), mask.sum(1))
    np.testing.assert_allclose(np.asarray(ro.logp), np.asarray(logp) * mask, rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(np.asarray(ro.entropy), np.asarray(entropy) * mask, rtol=1e-5, atol=1e-5)
    rewards = np.where(mask, np.asarray(answer.rewards), 0.0)
    np.testing.assert_array_equal(np.asarray(ro.rewards), rewards)
    np.testing.assert_array_equal(np.asarray(ro.returns), rewards.sum(1))
    np.testing.assert_array_equal(np.asarray(ro.turns), np.ones(n))
    handed_on = key
    for _ in range(task.max_turn_tokens):  # decode_turn's key after the turn: one three-way split per step
        handed_on = jax.random.split(handed_on, 3)[0]
    np.testing.assert_array_equal(np.asarray(ref_key), np.asarray(handed_on))


def test_pair_keys_are_one_split_of_the_step_key_whichever_row_draws():
    k_act = jax.random.split(jax.random.PRNGKey(3), 4)
    pair, step = jnp.asarray([5, 0, 2]), jnp.asarray([3, 1, 3])
    got, splits = jax.jit(lambda: (pair_keys(k_act, pair, step), jax.vmap(lambda k: jax.random.split(k, 6))(k_act)))()
    np.testing.assert_array_equal(np.asarray(got), np.asarray(splits)[np.asarray(step), np.asarray(pair)])


# ------------------------------------------------------------------------------- refusals


def test_decode_rows_refusals(reverse):
    def cfg(rows):
        return grpo.GRPOConfig(num_prompts=2, group_size=4, sampling=grpo.config.SamplingConfig(decode_rows=rows))

    for bad in (-1, 8, True, 2.0):
        with pytest.raises(ValueError, match=r"^sampling.decode_rows: expected an integer in \[0, 8\)"):
            grpo.config.validate(cfg(bad))
    grpo.config.validate(cfg(7))
    env, p = jaxrl.make("text/AlphabetSortTurns-v0")
    with pytest.raises(ValueError, match="^sampling.decode_rows: refilling rows decodes single-turn tasks only"):
        grpo.make_setup(EnvSetup(env, p, p), grpo.GRPOConfig(num_prompts=2, group_size=4, micro_batches=1,
                                                             sampling=grpo.config.SamplingConfig(decode_rows=3)))
    turns = tokenizer_task(env, QWEN2)
    keys = jnp.repeat(jax.random.split(jax.random.PRNGKey(1), 2), 4, axis=0)
    with pytest.raises(ValueError, match="decode_rows: refilling rows decodes single-turn tasks only; .* max_turns"):
        jax.eval_shape(lambda: grpo.rollout.group_rollout(None, turns, p, None, keys, jax.random.PRNGKey(0), 0,
                                                          jnp.float32(1.0), group=4, decode_rows=3))
    task, p, policy, pp = reverse
    with pytest.raises(ValueError, match="decode_rows: 8 rows for 8 completions"):
        jax.eval_shape(lambda: grpo.rollout.group_rollout(policy, task, p, pp, keys, jax.random.PRNGKey(0), 0,
                                                          jnp.float32(1.0), group=4, decode_rows=8))
    cart, cp = jaxrl.make("CartPole-v1")
    with pytest.raises(ValueError, match="decode_rows: refills rows of a token task's decode; .* is not one"):
        jax.eval_shape(lambda: grpo.rollout.group_rollout(None, cart, cp, None, keys, jax.random.PRNGKey(0), 5,
                                                          jnp.float32(1.0), group=4, decode_rows=3))


def test_decoding_folds_float32_adapters_into_the_base_once_per_turn(reverse):
    """LoRA in float32: decode reads ``kernel + scale * a @ b`` (one matmul per projection per
    token): a decode step's logits are the factored pass's within float32 rounding; bfloat16
    keeps the factored form (the fold would round the adapters' small updates away)."""
    task, p, policy, pp = reverse
    folded = policy.decode_params(pp)
    assert folded["lora"] is None and set(folded["base"]) == set(pp["base"])
    pp = {**pp, "lora": jax.tree_util.tree_map(lambda x: x + 0.01, pp["lora"])}  # adapters that change the kernels
    prompt = jax.vmap(task.start, in_axes=(0, None))(jax.random.split(jax.random.PRNGKey(5), 4), p)[1]

    @jax.jit
    def step(pp):
        cache, logits = policy.start(pp, prompt[:, : task.prompt_len])
        token = jnp.argmax(logits, axis=-1)[:, None]
        return [policy.extend(params, cache, token, task.prompt_len)[1] for params in (policy.decode_params(pp), pp)]

    folded_logits, factored_logits = step(pp)
    np.testing.assert_allclose(np.asarray(folded_logits), np.asarray(factored_logits), atol=2e-5)
    assert float(jnp.max(jnp.abs(factored_logits - step({**pp, "lora": jax.tree_util.tree_map(jnp.zeros_like, pp["lora"])})[1]))) > 1e-3
    from jaxrl.algos.common.lm.policy import LMSpec, _decode_params

    class Bf16:  # only the dtype is read before the fold is declined
        dtype = jnp.bfloat16
    assert _decode_params(LMSpec(Bf16(), None, 0, 0, 0, 0), pp) is pp
