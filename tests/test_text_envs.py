"""Token-task environments: the env contract, answers against Python, the held-out split."""

import functools
import itertools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl
from jaxrl.verifiers import EOS, PAD
from jaxrl_envs.text import Addition, AlphabetSort, Reverse, Sort, decode, encode, is_held_out
from jaxrl_envs.text.vocab import DIGIT0, VOCAB_SIZE

IDS = ["text/Reverse-v0", "text/Sort-v0", "text/AlphabetSort-v0", "text/Addition-v0"]


def _generate(env, keys, params):
    return jax.vmap(env.generate, in_axes=(0, None))(keys, params)


_generate_jit = jax.jit(_generate, static_argnums=0)  # one compile per (env, batch size)


def _tasks(env, params, n, seed=0):
    return _generate_jit(env, jax.random.split(jax.random.PRNGKey(seed), n), params)


def _text(tokens):
    return decode(tokens, stop_at_eos=False)


@pytest.fixture(scope="module")
def episode_fns():
    """One jitted 'write these tokens' episode per env (compiled once for the module)."""

    def play(env, params, key, tokens):
        state, ts0 = env.reset(key, params)

        def body(s, tok):
            s, ts = env.step(key, s, tok, params)
            return s, (ts.reward, ts.terminated, ts.truncated, ts.obs)

        return ts0, jax.lax.scan(body, state, tokens)

    return jax.jit(play, static_argnums=0)


@pytest.mark.parametrize("env_id", IDS)
def test_answer_then_eos_earns_one_and_terminates(env_id, episode_fns):
    env, params = jaxrl.make(env_id)
    key = jax.random.PRNGKey(3)
    task = env.generate(key, params)
    n = int(task.answer_len)
    tokens = jnp.concatenate([task.answer[:n], jnp.array([EOS]), jnp.zeros(env.max_completion_len - n - 1, jnp.int32)])
    ts0, (state, (reward, term, trunc, obs)) = episode_fns(env, params, key, tokens)
    assert ts0.obs.shape == (env.prompt_len + env.max_completion_len,) and ts0.obs.dtype == jnp.int32
    np.testing.assert_array_equal(ts0.obs[: env.prompt_len], task.prompt)
    np.testing.assert_array_equal(reward[:n], 0.0)  # nothing before the end
    assert float(reward[n]) == 1.0 and bool(term[n]) and not bool(trunc[n])
    np.testing.assert_array_equal(obs[n][env.prompt_len : env.prompt_len + n + 1], tokens[: n + 1])
    # finished episodes are frozen: later steps change nothing
    np.testing.assert_array_equal(obs[-1], obs[n])


@pytest.mark.parametrize("env_id", IDS)
def test_no_eos_truncates_with_partial_or_zero_reward(env_id, episode_fns):
    env, params = jaxrl.make(env_id)
    tokens = jnp.full((env.max_completion_len,), 100, jnp.int32)  # out of vocabulary: clipped to 40
    _, (state, (reward, term, trunc, obs)) = episode_fns(env, params, jax.random.PRNGKey(0), tokens)
    assert bool(trunc[-1]) and not bool(term[-1]) and not np.any(np.asarray(trunc[:-1]))
    assert float(reward[-1]) == 0.0  # every token wrong ('z' = 40 appears in no digit answer)
    assert int(obs[-1][-1]) == VOCAB_SIZE - 1  # the invalid-action rule: clip


def test_python_reference_answers():
    rev, srt, add, alpha = Reverse(max_digits=5), Sort(max_digits=5), Addition(max_digits=3), AlphabetSort(max_names=4, name_len=2)
    for env, params, check in [
        (rev, rev.default_params.replace(num_digits=3), lambda p: p[::-1]),
        (rev, rev.default_params, lambda p: p[::-1]),
        (srt, srt.default_params.replace(num_digits=4), lambda p: "".join(sorted(p))),
        (add, add.default_params.replace(min_digits=1, num_digits=3), lambda p: _add(p)),
        (alpha, alpha.default_params.replace(num_names=3), lambda p: ",".join(sorted(p.split(",")))),
        (alpha, alpha.default_params, lambda p: ",".join(sorted(p.split(",")))),
    ]:
        tasks = _tasks(env, params, 64)
        for prompt, answer in zip(np.asarray(tasks.prompt), np.asarray(tasks.answer)):
            text = _text(prompt)
            assert text.endswith("=")
            assert _text(answer) == check(text[:-1]), (env.name, text)


def _add(prompt):
    a, b = prompt.split("+")
    width = len(a)
    return str(int(a) + int(b)).zfill(width + 1)[::-1]


def test_addition_digits_follow_params():
    env = Addition(max_digits=4)
    tasks = _tasks(env, env.default_params.replace(min_digits=1, num_digits=2), 256)
    lengths = {len(_text(p).split("+")[0]) for p in np.asarray(tasks.prompt)}
    assert lengths == {1, 2}
    np.testing.assert_array_equal(np.isin(np.asarray(tasks.answer_len), [2, 3]), True)


def test_addition_zero_pad_keeps_one_layout_and_bounds_the_values():
    env = Addition(max_digits=3)
    params = env.default_params.replace(min_digits=1, num_digits=2, zero_pad=1)
    tasks = _tasks(env, params, 256)
    prompts = [_text(p) for p in np.asarray(tasks.prompt)]
    assert {len(p) for p in prompts} == {8}  # 'abc+def=' every time: no PAD, one layout
    values = [int(x) for p in prompts for x in p.rstrip("=").split("+")]
    assert max(values) < 100 and max(values) >= 10  # 1- and 2-digit values, 3 digits written
    assert any(v < 10 for v in values)
    np.testing.assert_array_equal(np.asarray(tasks.answer_len), 4)
    for p, ans in zip(prompts, np.asarray(tasks.answer)):
        assert _text(ans[:4]) == _add(p.rstrip("="))


def test_vocab_roundtrip_and_errors():
    assert decode(encode("12+34=$")) == "12+34=$"
    assert decode(encode("ab,cd")) == "ab,cd"
    with pytest.raises(ValueError, match="vocabulary"):
        encode("A")


# ---------------------------------------------------------------------------------------
# The held-out split
# ---------------------------------------------------------------------------------------


def test_split_is_exactly_one_value_of_the_free_token():
    env = Reverse(max_digits=3)
    all_prompts = jnp.array([[DIGIT0 + d for d in ds] + [2] for ds in itertools.product(range(10), repeat=3)], jnp.int32)
    held = np.asarray(jax.vmap(is_held_out)(all_prompts)).reshape(100, 10)  # rows: the first two digits
    np.testing.assert_array_equal(held.sum(axis=1), 1)  # one held-out last digit per rest
    assert env.name == "text/Reverse-v0"


@pytest.mark.parametrize("env", [Reverse(max_digits=3), Sort(max_digits=3), Addition(max_digits=1), AlphabetSort(max_names=2, name_len=1)])
def test_training_generator_never_produces_held_out_prompts(env):
    params = env.default_params
    train = np.asarray(_tasks(env, params, 4000).prompt)
    held = np.asarray(_tasks(env, params.replace(held_out=True), 4000, seed=1).prompt)
    assert not np.any(np.asarray(jax.vmap(is_held_out)(jnp.asarray(train))))
    assert np.all(np.asarray(jax.vmap(is_held_out)(jnp.asarray(held))))
    train_set = {tuple(p) for p in train}
    held_set = {tuple(p) for p in held}
    assert not train_set & held_set
    # both splits are really sampled (the generators are not degenerate)
    assert len(train_set) > 50 and len(held_set) > 5


def test_small_prompt_space_is_fully_covered_by_training():
    env = Reverse(max_digits=2)  # 100 prompts, 10 held out
    train = {tuple(p) for p in np.asarray(_tasks(env, env.default_params, 3000).prompt)}
    assert len(train) == 90


# ---------------------------------------------------------------------------------------
# Contract conformance
# ---------------------------------------------------------------------------------------


@functools.partial(jax.jit, static_argnums=0)
def _reset_step(env, keys, actions, params):
    state, ts = jax.vmap(env.reset, in_axes=(0, None))(keys, params)
    _, ts2 = jax.vmap(env.step, in_axes=(0, 0, 0, None))(keys, state, actions, params)
    return ts, ts2


@pytest.mark.parametrize("env_id", IDS)
def test_jit_vmap_dtypes_and_spaces(env_id):
    env, params = jaxrl.make(env_id)
    ts, ts2 = _reset_step(env, jax.random.split(jax.random.PRNGKey(0), 4), jnp.array([EOS, 5, -7, 1000], jnp.int32), params)
    assert ts2.reward.dtype == jnp.float32 and ts2.terminated.dtype == jnp.bool_
    assert jax.tree_util.tree_structure(ts.info) == jax.tree_util.tree_structure(ts2.info)
    space = env.observation_space(params)
    assert all(bool(space.contains(o)) for o in ts2.obs)
    assert env.action_space(params).n == VOCAB_SIZE
    assert bool(ts2.terminated[0]) and not bool(ts2.terminated[1])
    assert np.all(np.isfinite(np.asarray(ts2.reward)))
    assert int(ts2.obs[2, env.prompt_len]) == 0 and int(ts2.obs[3, env.prompt_len]) == VOCAB_SIZE - 1


def test_bad_static_sizes_are_rejected():
    with pytest.raises(ValueError, match="max_digits"):
        Reverse(max_digits=0)
    with pytest.raises(ValueError, match="max_digits"):
        Addition(max_digits=9)
    with pytest.raises(ValueError, match="max_names"):
        AlphabetSort(max_names=1)
    with pytest.raises(TypeError, match="unknown env parameter"):
        jaxrl.make("text/Reverse-v0", digits=3)
    assert PAD == 0


def test_alphabet_sort_shaping_mixes_in_token_accuracy(episode_fns):
    env = AlphabetSort()
    key = jax.random.PRNGKey(4)
    task = env.generate(key, env.default_params)
    # the right names, then a wrong last letter and EOS: similarity 2*7/16 -> sim**4; token accuracy 8/9
    # (8 of the 9 positions of answer + EOS are right)
    tokens = task.answer.at[int(task.answer_len) - 1].set((task.answer[int(task.answer_len) - 1] - 15 + 1) % 26 + 15)
    tokens = jnp.concatenate([tokens[: int(task.answer_len)], jnp.array([EOS])])
    tokens = jnp.pad(tokens, (0, env.max_completion_len - tokens.shape[0]))
    rewards = {}
    for w in (0.0, 0.5, 1.0):
        params = env.default_params.replace(shaping=w)
        _, (_, (reward, term, _, _)) = episode_fns(env, params, key, tokens)
        rewards[w] = float(reward[int(task.answer_len)])
    sim4, acc = (7 / 8) ** 4, 8 / 9
    assert rewards[0.0] == pytest.approx(sim4, abs=1e-5)
    assert rewards[1.0] == pytest.approx(acc, abs=1e-5)
    assert rewards[0.5] == pytest.approx(0.5 * sim4 + 0.5 * acc, abs=1e-5)
    # shaping_sim mixes in the un-powered similarity; the weights are clipped to sum to <= 1
    sim = 7 / 8
    for (w_a, w_s), expected in [((0.25, 0.5), 0.25 * sim4 + 0.25 * acc + 0.5 * sim), ((0.0, 1.0), sim),
                                 ((0.8, 0.5), 0.8 * acc + 0.2 * sim)]:
        params = env.default_params.replace(shaping=w_a, shaping_sim=w_s)
        _, (_, (reward, _, _, _)) = episode_fns(env, params, key, tokens)
        assert float(reward[int(task.answer_len)]) == pytest.approx(expected, abs=1e-5), (w_a, w_s)


# ---------------------------------------------------------------------------------------
# Step rewards: the partial credit paid token by token, the return unchanged
# ---------------------------------------------------------------------------------------


def _play_tokens(env, params, key, text, episode_fns):
    tokens = jnp.asarray(np.pad(encode(text), (0, env.max_completion_len - len(text))), jnp.int32)
    _, (_, (reward, term, trunc, _)) = episode_fns(env, params, key, tokens)
    return np.asarray(reward), np.asarray(term), np.asarray(trunc)


def test_step_rewards_hand_table_reverse(episode_fns):
    env = Reverse(max_digits=3)
    key = jax.random.PRNGKey(0)
    answer = decode(env.generate(key, env.default_params).answer)
    wrong = str((int(answer[2]) + 1) % 10)
    on, off = env.default_params.replace(step_rewards=1), env.default_params
    # answer + EOS = 4 positions; dense = 0.5 token_accuracy + 0.5 exact_match; phi = 0.5 token_accuracy
    table = [
        (answer + "$", [0.125, 0.125, 0.125, 0.625]),  # every token earns 0.5 / 4; the last adds the exact half
        (answer[:2] + wrong + "$", [0.125, 0.125, 0.0, 0.125]),  # the wrong digit earns nothing, EOS still does
        (answer + wrong, [0.125, 0.125, 0.125, 0.0]),  # no EOS: truncated at 4 tokens, 3 hits of 4
        (answer[:1] + "$", [0.125, 0.0, 0.0, 0.0]),  # EOS too early: 1 hit of max(4, 2) -> 0.125 in all
    ]
    for text, expected in table:
        r_on, term_on, _ = _play_tokens(env, on, key, text, episode_fns)
        r_off, term_off, _ = _play_tokens(env, off, key, text, episode_fns)
        end = len(text) - 1  # the episode's last step
        np.testing.assert_array_equal(term_on, term_off)
        assert np.sum(r_on[: end + 1]) == pytest.approx(float(r_off[end]), abs=1e-6), text  # same return
        np.testing.assert_array_equal(r_off[:end], 0.0)  # off: everything at the end
        np.testing.assert_allclose(r_on[end:], r_on[end], atol=0)  # a finished episode repeats its last reward
        np.testing.assert_allclose(r_on[: end + 1], expected[: end + 1], atol=1e-6, err_msg=text)


def test_step_rewards_alphabet_sort_pay_the_shaping_term_only(episode_fns):
    env = AlphabetSort()
    key = jax.random.PRNGKey(4)
    answer = decode(env.generate(key, env.default_params).answer)  # 'xx,xx,xx' (8 tokens) + EOS: 9 positions
    params = env.default_params.replace(shaping=0.5, step_rewards=1)
    r, _, _ = _play_tokens(env, params, key, answer + "$", episode_fns)
    # each of the first 8 tokens earns 0.5 / 9; the last: 0.5 * sim ** 4 (= 0.5) + 0.5 / 9
    np.testing.assert_allclose(r[:8], 0.5 / 9, atol=1e-6)
    assert r[8] == pytest.approx(0.5 + 0.5 / 9, abs=1e-6)
    # shaping 0 (what evaluation uses): no step rewards even when switched on
    r0, _, _ = _play_tokens(env, params.replace(shaping=0.0), key, answer + "$", episode_fns)
    np.testing.assert_array_equal(r0[:8], 0.0)
    assert r0[8] == pytest.approx(1.0)


def test_alphabet_sort_num_letters_restricts_the_names():
    # a difficulty knob for curricula: names drawn from the first num_letters letters (the
    # free token, the last letter of the prompt, is redrawn over all 26 for the split);
    # the answer is still the names sorted
    env = AlphabetSort()
    params = env.default_params.replace(num_letters=4)
    tasks = jax.vmap(lambda k: env.generate(k, params))(jax.random.split(jax.random.PRNGKey(0), 256))
    prompts = np.asarray(tasks.prompt)
    body = prompts[:, :-2]  # names and commas, without the free token and '='
    letters = body[body >= 15] - 15
    assert letters.max() == 3 and letters.min() == 0
    for prompt, answer in zip(prompts[:32], np.asarray(tasks.answer)[:32]):
        names = decode(prompt[:-1]).split(",")
        assert decode(answer) == ",".join(sorted(names))


def test_a_token_task_that_forgets_an_abstract_member_cannot_be_built():
    """TokenEnv's members are abstract: a task without ``prompt_len`` (or a digit task without
    ``answer``) fails when it is built, not at its first reset."""
    import dataclasses

    from jaxrl_envs.text.base import DigitListTask, TokenEnv

    @dataclasses.dataclass(frozen=True)
    class NoPromptLen(TokenEnv):
        name = "test/NoPromptLen-v0"
        default_params = None
        max_completion_len = 2

        @property
        def verifier(self):
            return None

        def generate(self, key, params):
            return None

    with pytest.raises(TypeError, match="prompt_len"):
        NoPromptLen()

    @dataclasses.dataclass(frozen=True)
    class NoAnswer(DigitListTask):
        max_digits: int = 3
        rubric: str = "dense"
        name = "test/NoAnswer-v0"

    with pytest.raises(TypeError, match="answer"):
        NoAnswer()
