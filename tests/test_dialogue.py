"""Dialogue token episodes: the turn contract, the fused rollout with env replies prefilled
into the KV cache, the loss mask, and the multi-turn tasks against Python references."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl
from jaxrl.algos import grpo
from jaxrl.algos.contract import EnvSetup
from jaxrl.algos.grpo.config import GRPOHyper
from jaxrl.algos.grpo.losses import policy_loss
from jaxrl.core.check import check_env
from jaxrl.core.tokens import EOS, PAD
from jaxrl_envs.text import AlphabetSort, decode, encode, is_held_out
from jaxrl_envs.text.alphabet_sort_turns import AlphabetSortTurns
from jaxrl_envs.text.vocab import LETTER_A

ENV = AlphabetSortTurns()
PARAMS = ENV.default_params
TEMP = jnp.float32(1.3)


def _setup(env=ENV, params=PARAMS):
    cfg = grpo.GRPOConfig(num_prompts=2, group_size=2, eval_episodes=2)
    return grpo.make_setup(EnvSetup(env, params, env.held_out_params(params)), cfg)


def _roll_and_score(setup, params, key):
    """Four dialogues (two groups of two) and the one-pass log-probs of their tokens."""
    keys = jnp.repeat(jax.random.split(key, 2), 2, axis=0)
    ro = grpo.rollout.group_rollout(setup.policy, ENV, PARAMS, params, keys, key, setup.num_steps, TEMP)
    lp, _ = grpo.update._token_logp(setup.policy, params, ro.obs, ro.actions, TEMP)
    return ro, lp


@pytest.fixture(scope="module")
def rolled():
    """Four 3-turn dialogues of a random policy, and the one-pass log-probs of their tokens."""
    setup = _setup()
    state = grpo.update.init(setup, jax.random.PRNGKey(0))
    ro, lp = jax.jit(_roll_and_score, static_argnums=0)(setup, state.params, jax.random.PRNGKey(5))
    return setup, state, ro, lp


def _reply_slots(env) -> np.ndarray:
    """bool [dialogue_len - prompt_len]: the slots that hold env replies."""
    tt, tr = env.max_turn_tokens, env.max_reply_tokens
    return np.tile(np.r_[np.zeros(tt, bool), np.ones(tr, bool)], env.max_turns)


def test_dialogue_layout_and_shapes(rolled):
    setup, _, ro, _ = rolled
    assert ENV.dialogue_len == ENV.prompt_len + 3 * (ENV.max_turn_tokens + ENV.max_reply_tokens)
    assert ro.obs.shape == (4, ENV.dialogue_len) and ro.actions.shape == (4, setup.num_steps)
    np.testing.assert_array_equal(ro.obs[:, ENV.prompt_len :], ro.actions)
    np.testing.assert_array_equal(ro.turns, 3)
    # replies are the env's: "<name>=" each time, never written by the policy, never in the mask
    replies = np.asarray(ro.actions)[:, _reply_slots(ENV)].reshape(4, 3, -1)
    for row in replies[:, :2]:
        for reply in row:
            assert decode(reply).endswith("=") and len(decode(reply)) == 3
    np.testing.assert_array_equal(replies[:, 2], PAD)  # no reply after the last turn
    assert not np.any(np.asarray(ro.mask)[:, _reply_slots(ENV)])
    np.testing.assert_array_equal(ro.length, np.asarray(ro.mask).sum(axis=1))


def test_cached_log_probs_equal_one_forward_pass_over_the_dialogue(rolled):
    _, _, ro, lp = rolled
    mask = np.asarray(ro.mask)
    np.testing.assert_allclose(np.where(mask, lp, 0.0), np.where(mask, ro.logp, 0.0), atol=2e-5)
    # members of a group share the prompt and sampled different dialogues
    np.testing.assert_array_equal(ro.obs[0, : ENV.prompt_len], ro.obs[1, : ENV.prompt_len])
    assert not np.array_equal(ro.actions[0], ro.actions[1])


def test_turns_every_row_ends_early_leave_later_turns_on_the_loss_pass_distribution(rolled):
    """A policy that ends its turns after a token or two (EOS favoured by the head's bias), so
    every row has ended each turn long before its last slot: later turns are still drawn from
    the distribution the loss pass scores. The project's transformer reads a turn's pad slots
    as tokens, so its decode loop writes them: a loop that stopped once every row had ended
    the turn would leave them unwritten, and turns 2 and 3 would draw from another
    distribution (docs/dialogues.md)."""
    setup, state, _, _ = rolled
    assert not setup.policy.pads_invisible

    def favour_eos(path, x):
        return x.at[EOS].add(6.0) if jax.tree_util.keystr(path).endswith("['head']['bias']") else x

    params = jax.tree_util.tree_map_with_path(favour_eos, state.params)
    ro, lp = jax.jit(_roll_and_score, static_argnums=0)(setup, params, jax.random.PRNGKey(5))
    mask = np.asarray(ro.mask)
    turns = mask[:, ~_reply_slots(ENV)].reshape(4, ENV.max_turns, ENV.max_turn_tokens)
    assert turns[:, :, 0].all() and not turns[:, :, ENV.max_turn_tokens // 2 :].any()  # every turn ended early
    np.testing.assert_array_equal(ro.turns, 3)
    np.testing.assert_allclose(np.where(mask, lp, 0.0), np.where(mask, ro.logp, 0.0), atol=2e-5)


def test_env_tokens_carry_zero_loss_and_zero_gradient(rolled):
    setup, state, ro, _ = rolled
    hyper = GRPOHyper(*(jnp.float32(v) for v in (0.2, 0.28, 0.04, 1.3)))
    adv = jnp.array([1.0, -1.0, 0.5, -0.5])
    logits = setup.policy.sequence_logits(state.params, ro.obs, ro.actions)

    def loss_of(logits):
        logp = jnp.take_along_axis(jax.nn.log_softmax(logits / TEMP), ro.actions[..., None], -1)[..., 0]
        return policy_loss(logp, ro.logp, ro.logp - 0.1, adv, ro.mask, hyper, "dapo")[0]

    grad = np.asarray(jax.grad(loss_of)(logits))
    per_slot = np.abs(grad).sum(axis=-1)  # [N, T]
    assert np.all(per_slot[:, _reply_slots(ENV)] == 0.0)  # exactly zero, not small
    assert np.all(per_slot[~np.asarray(ro.mask)] == 0.0)
    assert np.all(per_slot[np.asarray(ro.mask)] > 0.0)
    # and the loss does not see them: scrambling what the env said there changes nothing
    noise = jnp.where(jnp.asarray(_reply_slots(ENV))[None, :, None], 7.0, 0.0)
    assert float(loss_of(logits + noise)) == float(loss_of(logits))


def test_policy_logits_depend_on_what_the_env_said(rolled):
    setup, state, ro, _ = rolled
    obs = np.asarray(ro.obs).copy()
    first_reply = ENV.prompt_len + ENV.max_turn_tokens
    other = obs.copy()
    other[:, first_reply : first_reply + 2] = encode("zz")  # another name in the first reply
    a = setup.policy.sequence_logits(state.params, jnp.asarray(obs), jnp.asarray(obs[:, ENV.prompt_len :]))
    b = setup.policy.sequence_logits(state.params, jnp.asarray(other), jnp.asarray(other[:, ENV.prompt_len :]))
    t_reply = first_reply - ENV.prompt_len  # slot index of the reply's first token
    np.testing.assert_array_equal(a[:, :t_reply], b[:, :t_reply])  # causal: before the reply, equal
    turn2 = t_reply + ENV.max_reply_tokens  # the first token of turn 2 is drawn after the reply
    assert float(jnp.max(jnp.abs(a[:, turn2] - b[:, turn2]))) > 1e-3


def test_rollout_equals_the_token_by_token_env(rolled):
    """The rollout's dialogue, played token by token through the env's reset/step (the
    Environment view of the same task), gives the same tokens, rewards and flags."""
    _, _, ro, _ = rolled
    key = jax.random.PRNGKey(5)
    reset_keys = jnp.repeat(jax.random.split(key, 2), 2, axis=0)

    def play(reset_key, actions, mask):
        state, ts = ENV.reset(reset_key, PARAMS)

        def body(s, xs):
            tok, m = xs
            s2, ts = ENV.step(key, s, tok, PARAMS)
            s2 = jax.tree_util.tree_map(lambda a, b: jnp.where(m, a, b), s2, s)
            return s2, (jnp.where(m, ts.reward, 0.0), m & ts.terminated, ts.obs)

        return jax.lax.scan(body, state, (actions, mask))

    state, (rewards, term, obs) = jax.jit(jax.vmap(play))(reset_keys, ro.actions, ro.mask)
    np.testing.assert_allclose(np.asarray(rewards).sum(1), ro.returns, atol=1e-6)
    np.testing.assert_array_equal(np.asarray(state.tokens), ro.obs)
    np.testing.assert_array_equal(np.asarray(term).any(1), ~np.asarray(ro.truncated))


def _python_turns(prompt_text: str, replies: list[str]) -> list[str]:
    names = prompt_text.rstrip("=").split(",")
    answers = [",".join(sorted(names))]
    for reply in replies:
        names += reply.rstrip("=").split(",")
        answers.append(",".join(sorted(names)))
    return answers


def test_perfect_answers_earn_one_and_match_python():
    """Answer every turn with Python's sorted cumulative list: reward 1; a wrong first turn
    costs exactly its share of sim ** 4."""
    def play(key, params, wrong_first):
        state, prompt, _ = ENV.start(key, params)
        texts, total = [prompt], 0.0
        for k in range(ENV.max_turns):
            count = ENV.first_names + k * ENV.names_per_turn
            task = ENV.answer(state.names, count)
            turn = jnp.full((ENV.max_turn_tokens,), PAD, jnp.int32).at[: ENV.max_turn_tokens - 1].set(task.answer)
            turn = turn.at[task.answer_len].set(EOS)
            if k == 0 and wrong_first:
                turn = turn.at[0].set(EOS)  # an empty answer: sim 0
            state, out = ENV.respond(key, state, turn, params)
            total += float(out.rewards.sum())
            texts.append((turn, out.reply))
        return texts, total, out

    for seed in range(3):
        texts, total, out = play(jax.random.PRNGKey(seed), PARAMS, False)
        prompt = decode(texts[0])
        replies = [decode(r) for _, r in texts[1:-1]]
        assert [decode(t).rstrip("$") for t, _ in texts[1:]] == _python_turns(prompt, replies)
        assert total == pytest.approx(1.0, abs=1e-6) and bool(out.terminated)
        assert float(out.info["exact_match"]) == 1.0
        _, total, out = play(jax.random.PRNGKey(seed), PARAMS, True)
        assert total == pytest.approx(2.0 / 3.0, abs=1e-6) and float(out.info["exact_match"]) == 0.0


def test_held_out_split_and_registration():
    env, params = jaxrl.make("text/AlphabetSortTurns-v0")
    keys = jax.random.split(jax.random.PRNGKey(0), 256)
    start = jax.jit(jax.vmap(env.start, in_axes=(0, None)))
    train = start(keys, params)[1]
    held = start(keys, env.held_out_params(params))[1]
    assert not np.any(np.asarray(jax.vmap(is_held_out)(train)))
    assert np.all(np.asarray(jax.vmap(is_held_out)(held)))
    assert "text/AlphabetSortTurns-v0" in jaxrl.registered_ids()  # so tests/test_check_env.py's sweep checks it


def test_single_turn_task_is_the_one_turn_dialogue():
    env = AlphabetSort()
    assert (env.max_turns, env.max_reply_tokens, env.max_turn_tokens) == (1, 0, env.max_completion_len)
    assert env.dialogue_len == env.prompt_len + env.max_completion_len
    key = jax.random.PRNGKey(2)
    state, prompt, _ = env.start(key, env.default_params)
    task = env.generate(key, env.default_params)
    n = int(task.answer_len)
    turn = jnp.full((env.max_turn_tokens,), PAD, jnp.int32).at[:n].set(task.answer[:n]).at[n].set(EOS)
    _, out = env.respond(key, state, turn, env.default_params)
    np.testing.assert_array_equal(prompt, task.prompt)
    assert float(out.rewards.sum()) == 1.0 and float(out.rewards[n]) == 1.0
    assert bool(out.terminated) and not bool(out.truncated) and out.reply.shape == (0,)


# ---------------------------------------------------------------------------------------
# The tool task and the guessing game
# ---------------------------------------------------------------------------------------


def _turn(env, text):
    ids = encode(text)
    return jnp.full((env.max_turn_tokens,), PAD, jnp.int32).at[: len(ids)].set(jnp.asarray(ids))


@pytest.mark.parametrize("seed", [0, 1, 2])
def test_tool_call_result_and_answers(seed):
    env, params = jaxrl.make("text/ToolAddition-v0")
    key = jax.random.PRNGKey(seed)
    state, prompt, _ = env.start(key, params)
    a, b = decode(prompt).rstrip("=").split("+")
    total = f"{int(a) + int(b):04d}"
    # a call copying the prompt: the calculator answers, then the copied result earns 1
    s1, out = env.respond(key, state, _turn(env, f"?{a}+{b}$"), params)
    assert decode(out.reply) == total + "=" and not bool(out.terminated) and float(out.rewards.sum()) == 0.0
    _, out = env.respond(key, s1, _turn(env, total + "$"), params)
    assert float(out.rewards.sum()) == 1.0 and bool(out.terminated) and float(out.info["tool_calls"]) == 1.0
    # the calculator computes what it is asked, not the prompt
    _, out = env.respond(key, state, _turn(env, "?123+004$"), params)
    assert decode(out.reply) == "0127="
    # answering directly ends the episode; a wrong answer earns 0
    _, out = env.respond(key, state, _turn(env, total + "$"), params)
    assert float(out.rewards.sum()) == 1.0 and bool(out.terminated) and float(out.info["tool_calls"]) == 0.0
    _, out = env.respond(key, state, _turn(env, "9999$"), params)
    assert float(out.rewards.sum()) == (1.0 if total == "9999" else 0.0)
    # malformed calls and the disabled tool get "!="
    for text, p in [(f"?{a}{b}$", params), (f"?{a}+{b}", params), (f"?{a}+{b}$", params.replace(tool=0))]:
        _, out = env.respond(key, state, _turn(env, text), p)
        assert decode(out.reply) == "!=" and not bool(out.terminated)


def test_step_rewards_pay_each_token_its_own_credit_with_the_same_return():
    """``params.step_rewards``: the shaping lands on the tokens that earned it (a wrong token
    earns 0, a right one its share) and the turn's total is unchanged, in both tasks."""
    env, params = jaxrl.make("text/ToolAddition-v0")
    params = params.replace(shaping=0.5, call_shaping=1.0)
    key = jax.random.PRNGKey(3)
    respond = jax.jit(env.respond)
    state, prompt, _ = env.start(key, params)
    a, b = decode(prompt).rstrip("=").split("+")
    total = f"{int(a) + int(b):04d}"
    wrong = str((int(total[1]) + 1) % 10)
    for text, right in [(f"?{a}+{b}$", [1] * 9), (f"?{a}+{b[:2]}$", [1] * 7 + [0, 0]),
                        (total + "$", [1] * 5 + [0] * 4), (total[0] + wrong + total[2:] + "$", [1, 0, 1, 1, 1] + [0] * 4)]:
        flat = np.asarray(respond(key, state, _turn(env, text), params)[1].rewards)
        step = np.asarray(respond(key, state, _turn(env, text), params.replace(step_rewards=1))[1].rewards)
        assert step.sum() == pytest.approx(flat.sum(), abs=1e-6) and np.count_nonzero(flat) == 1, text
        np.testing.assert_array_equal(step > 0, np.asarray(right, bool), err_msg=text)
    # alphabet-sort turns: the first turn's answer with its second token wrong
    env, params = ENV, PARAMS.replace(shaping=0.5)
    respond = jax.jit(env.respond)
    state, _, _ = env.start(key, params)
    task = env.answer(state.names, env.first_names)
    good = jnp.full((env.max_turn_tokens,), PAD, jnp.int32).at[: task.answer.shape[0]].set(task.answer).at[task.answer_len].set(EOS)
    for turn in (good, good.at[1].set(LETTER_A + (good[1] - LETTER_A + 1) % 26)):
        flat = np.asarray(respond(key, state, turn, params)[1].rewards)
        step = np.asarray(respond(key, state, turn, params.replace(step_rewards=1))[1].rewards)
        assert step.sum() == pytest.approx(flat.sum(), abs=1e-6)
        assert (step[1] > 0) == bool(turn[1] == good[1]) and step[0] > 0 and step[int(task.answer_len)] > step[0]


def test_tool_task_held_out_split():
    env, params = jaxrl.make("text/ToolAddition-v0")
    keys = jax.random.split(jax.random.PRNGKey(0), 128)
    start = jax.jit(jax.vmap(env.start, in_axes=(0, None)))
    assert not np.any(np.asarray(jax.vmap(is_held_out)(start(keys, params)[1])))
    assert np.all(np.asarray(jax.vmap(is_held_out)(start(keys, env.held_out_params(params))[1])))


# ---------------------------------------------------------------------------------------
# GRPO over dialogues
# ---------------------------------------------------------------------------------------


def _dialogue_setup(loss_type, credit):
    from jaxrl.algos.grpo.config import LossConfig, ModelConfig

    cfg = grpo.GRPOConfig(num_prompts=2, group_size=4, eval_episodes=2, model=ModelConfig(d_model=16, n_layers=1, n_heads=2),
                          loss=LossConfig(type=loss_type, beta=0.04, token_credit=credit))
    return grpo.make_setup(EnvSetup(ENV, PARAMS.replace(shaping=0.5), ENV.held_out_params(PARAMS)), cfg)


@pytest.mark.parametrize("loss_type, credit", [("dapo", True), ("gspo", False)])
def test_grpo_update_on_a_dialogue(loss_type, credit):
    """A whole GRPO update (rollout, per-episode group advantages, KL, optimiser) on the
    3-turn task: finite metrics, parameters move; with per-token credit a turn's tokens are
    credited with the rewards from their turn on, so one dialogue's tokens differ."""
    setup = _dialogue_setup(loss_type, credit)
    state = grpo.update.init(setup, jax.random.PRNGKey(1))

    def run(state):  # grpo.update.update's two steps, so that the batch it learns from can be read
        _, k_collect, _ = jax.random.split(state.key, 3)
        collected = grpo.update.collect(setup, state, k_collect)
        new, metrics = grpo.update.learn(setup, state, collected)
        return collected[1], new, metrics

    batch, new, metrics = jax.jit(run)(state)
    assert all(np.isfinite(float(v)) for v in metrics.values()), metrics
    assert float(metrics["completions/mean_turns"]) == 3.0 and float(metrics["kl"]) >= 0.0
    moved = jax.tree_util.tree_map(lambda a, b: float(jnp.max(jnp.abs(a - b))), new.params, state.params)
    assert max(jax.tree_util.tree_leaves(moved)) > 0
    adv, mask = np.asarray(batch.advantages), np.asarray(batch.mask)
    if credit:
        assert adv.shape == mask.shape
        assert any(len(set(adv[i][mask[i]].tolist())) > 1 for i in range(adv.shape[0]))
    else:
        assert adv.shape == (8,)


def test_every_loss_type_and_the_kl_on_a_dialogue_batch():
    """The six losses with the KL term on one collected dialogue batch: finite, a gradient,
    and none of it from env reply slots (their log-probs do not enter any variant)."""
    setup = _dialogue_setup("dapo", False)
    state = grpo.update.init(setup, jax.random.PRNGKey(1))
    _, batch, _ = jax.jit(grpo.update.collect, static_argnums=0)(setup, state, state.key)
    replies = jnp.asarray(_reply_slots(ENV))[None]
    for loss_type in ("grpo", "dr_grpo", "dapo", "rloo", "cispo", "gspo"):
        s = _dialogue_setup(loss_type, False)
        loss, metrics = grpo.update.loss_fn(s, state.hyper, state.params, batch)
        assert np.isfinite(float(loss)) and float(metrics["kl"]) == 0.0  # ref = params at init

        def with_logp(logp):  # the loss as a function of the per-slot log-probs
            return grpo.losses.policy_loss(logp, batch.old_logp, batch.ref_logp, batch.advantages, batch.mask,
                                           state.hyper, loss_type)[0]

        g = np.asarray(jax.grad(with_logp)(batch.old_logp + 0.1 * jnp.where(replies, 1.0, -1.0)))
        assert np.all(g[:, _reply_slots(ENV)] == 0.0) and np.any(g != 0.0), loss_type
