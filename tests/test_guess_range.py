"""``text/GuessRange-v0``: replies against a Python reference, the reward schedule, the
held-out rule on ranges (disjoint from training, every range of both splits reachable), the
textbook bisection scripted through the env within ``log2(n) + 1`` turns, and evaluation's
per-episode turns and solve rate."""

from __future__ import annotations

import functools
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl
from jaxrl.algos import grpo
from jaxrl.algos.contract import EnvSetup
from jaxrl_envs.text.guess_range import ERROR, FOUND, HIGHER, LOWER, NUM0, GuessRange, is_held_out

ENV, PARAMS = jaxrl.make("text/GuessRange-v0")
KEYS = jax.random.split(jax.random.PRNGKey(0), 4096)


def _bisect(carry, reply):
    """The textbook search's next ``(l, h)`` and guess token from its last guess's reply."""
    l, h, g = carry
    l, h = jnp.where(reply == HIGHER, g + 1, l), jnp.where(reply == LOWER, g - 1, h)
    return l, h, (l + h) // 2


@functools.lru_cache(maxsize=None)
def _player(policy):
    """The jitted, vmapped scripted play of ``policy`` (compiled once per policy; params traced)."""

    def one(params, key):
        state, prompt, info = ENV.start(key, params)
        lo, hi = prompt[0] - NUM0, prompt[1] - NUM0
        carry, guess = policy((lo, hi, lo), jnp.int32(-1), key)

        def turn(c, k):
            state, carry, guess, alive, info = c
            new, out = ENV.respond(k, state, jnp.reshape(NUM0 + guess, (1,)).astype(jnp.int32), params)
            reply = out.reply[0]
            info = jax.tree_util.tree_map(lambda a, b: jnp.where(alive, a, b), out.info, info)
            carry2, guess2 = policy((carry[0], carry[1], guess), reply, k)
            still = alive & ~out.terminated & ~out.truncated
            return (new, carry2, guess2, still, info), (guess, reply, out.rewards[0] * alive, alive)

        (*_, info), (guesses, replies, rewards, alive) = jax.lax.scan(
            turn, (state, carry, guess, jnp.bool_(True), info), jax.random.split(key, ENV.max_turns))
        return prompt, state.secret, guesses, replies, rewards, alive, info

    return jax.jit(jax.vmap(one, in_axes=(None, 0)))


def _play(params, keys, policy):
    """Scripted play through ``start`` / ``respond``, vmapped over ``keys [B]``: ``policy(
    carry, reply, key) -> (carry, guess)`` with ``carry = (lo, hi, guess)`` starting from the
    prompt's range (reply ``-1`` before the first turn). Returns numpy ``prompt [B, 2]``,
    ``secret [B]``, ``guesses``, ``replies``, ``rewards`` and ``alive`` ``[B, T]`` (the turn
    was played) and the info of each episode's last turn."""
    return jax.device_get(_player(policy)(params, keys))


def _bisection(carry, reply, key):
    l, h, g = _bisect(carry, reply)
    return (l, h, g), g


def _uniform(carry, reply, key):
    """A random guess in the prompt's range, whatever the replies."""
    lo, hi, _ = carry
    return carry, jax.random.randint(jax.random.fold_in(key, 7), (), lo, hi + 1)


def _outside(carry, reply, key):
    """Always one past the range: a guess that tells nothing."""
    return carry, carry[1] + 1


_START = jax.jit(jax.vmap(ENV.start, in_axes=(0, None)))


def _starts(params):
    return _START(KEYS, params)


def test_held_out_rule_is_disjoint_from_training_and_both_splits_cover_every_bound():
    train, held = (np.asarray(_starts(p)[1]) - NUM0 for p in (PARAMS, ENV.held_out_params(PARAMS)))
    sizes = {(lo, hi - lo + 1) for lo, hi in train} | {(lo, hi - lo + 1) for lo, hi in held}
    assert all(ENV.min_size <= n <= ENV.max_size and 0 <= lo <= ENV.window - n for lo, n in sizes)
    assert not np.any(is_held_out(train[:, 0], train[:, 1])) and np.all(is_held_out(held[:, 0], held[:, 1]))
    held_pairs, train_pairs = set(map(tuple, held)), set(map(tuple, train))
    # every range of the window is reachable, in exactly one split (enumerated by hand)
    ranges = {(lo, lo + n - 1) for n in range(ENV.min_size, ENV.max_size + 1) for lo in range(ENV.window - n + 1)}
    assert held_pairs | train_pairs == ranges and not held_pairs & train_pairs
    assert len(held_pairs) == sum(bool(is_held_out(lo, hi)) for lo, hi in ranges) > len(ranges) // 10
    # a held-out range names a pair no training prompt does, built from bounds training has seen
    assert {lo for lo, _ in held_pairs} <= {lo for lo, _ in train_pairs}
    assert {hi for _, hi in held_pairs} <= {hi for _, hi in train_pairs}
    # the secret is uniform in the range (every value reached, none outside)
    states = _starts(ENV.held_out_params(PARAMS))[0]
    offset = np.asarray(states.secret - states.lo)
    assert offset.min() == 0 and np.all(offset < np.asarray(states.size)) and offset.max() == ENV.max_size - 1


def test_replies_and_reward_schedule_match_python():
    prompt, secret, guesses, replies, rewards, alive, info = _play(PARAMS, KEYS[:512], _uniform)
    for i in range(512):
        t = int(alive[i].sum())
        for k in range(t):
            g = guesses[i, k]
            assert replies[i, k] == (FOUND if g == secret[i] else LOWER if secret[i] < g else HIGHER)
            assert rewards[i, k] == pytest.approx(1 - k / ENV.max_turns if g == secret[i] else 0.0)
        found = guesses[i, t - 1] == secret[i]
        assert info["solved"][i] == float(found) and info["turns"][i] == (t if found else ENV.max_turns + 1)
        assert found or t == ENV.max_turns
    assert 0.2 < info["solved"].mean() < 1.0  # both outcomes were checked
    # a non-number is an error and running out of turns truncates with reward 0
    respond = jax.jit(ENV.respond)
    state, _, _ = ENV.start(KEYS[0], PARAMS)
    for token in [FOUND] * (ENV.max_turns - 1) + [NUM0 + ENV.window]:  # the last: clipped by the rollout, not here
        state, out = respond(KEYS[0], state, jnp.array([token], jnp.int32), PARAMS)
        assert int(out.reply[0]) == ERROR and float(out.rewards.sum()) == 0.0
    assert bool(out.truncated) and not bool(out.terminated) and float(out.info["turns"]) == ENV.max_turns + 1


def test_information_shaping_pays_bits_and_sums_to_the_weight():
    """``bits = w``: a guess pays ``w log2(c_before / c_after) / log2(n)``; a solved episode
    gains ``w`` in all on top of the rubric, a guess outside the consistent values 0."""
    w = 0.5
    p = PARAMS.replace(bits=w)
    prompt, secret, guesses, replies, rewards, alive, info = _play(p, KEYS[:512], _bisection)
    t = alive.sum(1)
    np.testing.assert_allclose(rewards.sum(1), 1 - (t - 1) / ENV.max_turns + w, atol=1e-5)
    n = prompt[:, 1] - prompt[:, 0] + 1
    first = np.where(replies[:, 0] == LOWER, (n - 1) // 2, np.where(replies[:, 0] == HIGHER, n // 2, 1))
    np.testing.assert_allclose(rewards[:, 0], w * np.log2(n / first) / np.log2(n) + (replies[:, 0] == FOUND), atol=1e-5)

    *_, rewards, alive, info = _play(p, KEYS[:512], _outside)
    assert np.all(rewards == 0.0) and np.all(info["solved"] == 0.0)
    # turn_cost: the turn penalty paid as incurred; a solved episode's return is unchanged
    *_, costed, alive, _ = _play(PARAMS.replace(turn_cost=1), KEYS[:512], _bisection)
    np.testing.assert_allclose(costed.sum(1), 1 - (t - 1) / ENV.max_turns, atol=1e-6)
    assert np.all(costed[alive & (costed < 1)] == -1 / ENV.max_turns)
    *_, costed, _, _ = _play(PARAMS.replace(turn_cost=1), KEYS[:512], _outside)
    np.testing.assert_allclose(costed.sum(1), -1.0, atol=1e-6)


def test_bisection_through_the_env_needs_at_most_log2_n_plus_one_turns():
    """The textbook search, scripted through ``respond`` on many ranges and secrets of both
    splits: always found, in at most ``floor(log2 n) + 1 <= log2(16) + 1`` turns, exactly as
    ``info["bisection_turns"]`` says. An env that answered wrong would fail it."""
    for split in (False, True):
        prompt, secret, guesses, replies, rewards, alive, info = _play(PARAMS.replace(held_out=split), KEYS[:512], _bisection)
        n, t = prompt[:, 1] - prompt[:, 0] + 1, alive.sum(1)
        assert np.all(info["solved"] == 1.0) and np.all(replies[np.arange(512), t - 1] == FOUND)
        assert np.all(t <= np.floor(np.log2(n)) + 1) and t.max() == math.log2(ENV.max_size) + 1
        np.testing.assert_array_equal(info["turns"], t)
        np.testing.assert_array_equal(info["bisection_turns"], t)
        assert t.mean() < 4  # bisection's mean is well below its worst case


def test_grpo_evaluation_reports_turns_and_solve_rate_per_episode():
    """``jaxrl eval``'s summary includes the task's ``turns`` and ``solved`` per episode; an
    untrained policy is far from the target (most episodes unsolved)."""
    from jaxrl.run import evaluate as eval_lib

    cfg = grpo.GRPOConfig(num_prompts=2, group_size=2, eval_episodes=16,
                          model=grpo.config.ModelConfig(d_model=16, n_layers=1, n_heads=2))
    envs = EnvSetup(ENV, PARAMS.replace(bits=0.5), ENV.held_out_params(PARAMS))
    program = grpo.ENTRY.build(envs, cfg)
    state = program.init(jax.random.PRNGKey(0))
    ev = jax.device_get(jax.jit(program.evaluate)(state, jax.random.PRNGKey(1)))
    assert ev["episode_returns_turns"].shape == (16,) and ev["episode_returns_solved"].shape == (16,)
    assert ev["turns"] == pytest.approx(ev["episode_returns_turns"].mean()) and ev["turns"] > 6
    summary = eval_lib.summarise(jax.tree_util.tree_map(lambda x: np.asarray(x)[None], ev), program.report)
    lines = eval_lib.format_summary(summary)
    assert "held-out greedy turns to solve" in lines and "held-out greedy solve rate" in lines
    assert summary["policies"]["turns"]["mean"] == pytest.approx(float(ev["turns"]), abs=1e-5)


def test_bad_sizes_are_refused():
    with pytest.raises(ValueError, match="min_size"):
        GuessRange(window=16, max_size=20)
