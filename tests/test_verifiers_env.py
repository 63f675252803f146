"""``env: {verifiers: NAME}``: an installed verifiers 0.4 taskset as a GRPO task.

The config section and its one-line errors run everywhere; without the ``verifiers``
package (CI: it is not in [dev], too heavy) building names the extra to install. Where it is
installed: a toy taskset (tests/verifiers_envs/jaxrl_toy_words) scored through its own
``Task.score``: the right completion earns its reward, a wrong one none, a reward that
raises and a prompt of two messages fail their episode only; one update through
``trainer.run``. A multi-turn env (tests/verifiers_envs/jaxrl_toy_guess: its ``Env.run``
answers each guess with higher / lower) played turn by turn, its failures per session, and
two updates through ``jaxrl train``.
"""

from __future__ import annotations

import importlib.util
import json
import math
import os
import sys

import numpy as np
import pytest
from remote_envs.turns import encode_turns

from jaxrl.run import build
from jaxrl.run import config as config_lib
from jaxrl.run.config import ConfigError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
MODEL = os.path.join(ROOT, "envs", "assets", "text_model")
HAVE_VERIFIERS = importlib.util.find_spec("verifiers") is not None


def _raw(section, **env):
    return {"algo": "grpo", "env": {"verifiers": section, **env},
            "grpo": {"num_prompts": 2, "group_size": 2, "num_updates": 1, "eval_episodes": 2,
                     "model": {"policy": "hf", "path": MODEL}},
            "train": {"seed": 0, "updates_per_chunk": 1, "checkpoint_every": 0, "progress": False}}


def test_the_config_section_and_its_one_line_errors():
    cfg = config_lib.config_from_dict(_raw("jaxrl-toy-words"))
    assert cfg.env.id == "verifiers" and cfg.env.verifiers.id == "jaxrl-toy-words" and cfg.env.tokenizer.path == MODEL
    for section, env, match in [
        ({"id": ""}, {}, "env.verifiers: no taskset named"),
        ({"id": "x", "prompt_len": 0}, {}, "env.verifiers.prompt_len: must be >= 1"),
        ({"id": "x", "held_out_every": 1}, {}, "env.verifiers.held_out_every: 0 .none. or k >= 2"),
        ({"id": "x", "timeout_s": -1}, {}, "env.verifiers.timeout_s: must be a positive"),
        ({"id": "x"}, {"text": {"num_train": 3}}, "env.text: not with env.verifiers"),
        ({"id": "x"}, {"id": "CartPole-v1"}, "env.id: 'CartPole-v1' with env.verifiers"),
        ({"id": "x", "colour": 1}, {}, "unknown key 'env.verifiers.colour'"),
        ({"id": "x", "turns": 0}, {}, "env.verifiers.turns: must be >= 1"),
        ({"id": "x", "turns": 2}, {}, r"env.verifiers.reply_tokens: turns 2 > 1 needs reply slots"),
    ]:
        with pytest.raises(ConfigError, match=match):
            config_lib.config_from_dict(_raw(section, **env))


@pytest.mark.skipif(HAVE_VERIFIERS, reason="verifiers is installed: the install hint is not shown")
def test_without_the_package_building_names_the_extra():
    with pytest.raises(ConfigError, match=r"^env.verifiers: needs the verifiers package \(0.4\): pip install 'jaxrl\[verifiers\]'$"):
        build.env_setup(config_lib.config_from_dict(_raw("jaxrl-toy-words")).env)
    mixed = _raw(None)
    mixed["env"] = {"mix": [{"id": "text/WordProblems-v0", "text": {"num_train": 8, "num_held_out": 4}},
                            {"verifiers": {"id": "jaxrl-toy-words"}}]}
    with pytest.raises(ConfigError, match=r"^env.mix\[1\].verifiers: needs the verifiers package"):
        build.env_setup(config_lib.config_from_dict(mixed).env)


@pytest.fixture
def toy():
    pytest.importorskip("verifiers.v1")
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "verifiers_envs"))
    yield
    sys.path.remove(os.path.join(os.path.dirname(os.path.abspath(__file__)), "verifiers_envs"))


def test_a_taskset_scores_completions_through_its_own_rewards(toy):
    """Prompts are the tasks' (in the chat template), split by held_out_every; the task's own
    ``score`` pays the right completion 1 and a wrong one 0; a reward that raises and a
    prompt of two messages fail their episode (zero reward, counted), not the run."""
    cfg = config_lib.config_from_dict(_raw({"id": "jaxrl-toy-words", "prompt_len": 48, "turn_tokens": 8,
                                            "held_out_every": 4, "max_failure_frac": 1.0}))
    with pytest.raises(ConfigError, match=r"env.verifiers.id: .*'no-such-taskset'"):
        build.env_setup(config_lib.config_from_dict(_raw({"id": "no-such-taskset"})).env)
    with pytest.raises(ConfigError, match=r"env.verifiers.args: jaxrl-toy-words's config refuses them"):
        build.env_setup(config_lib.config_from_dict(_raw({"id": "jaxrl-toy-words", "args": {"count": "many"}})).env)
    task = build.env_setup(cfg.env).env
    host = task.host
    assert task.name == "verifiers:jaxrl-toy-words" and task.prompt_len == 48
    assert [t.data.answer for t in host.splits["held_out"]] == ["tac", "nep"]  # positions 0 and 4
    codec = host.codec
    train = [t.data.answer for t in host.splits["train"]]  # god nus pam puc moob eciwt
    slots, prompts, failed = host.reset(np.arange(6, dtype=np.int32), np.int32(0))
    assert failed.tolist() == [False] * 5 + [True]  # 'twice': two user messages
    assert codec.decode([int(i) for i in prompts[0] if i != codec.pad_id]) == "user\nWrite dog backwards.\nassistant\n"
    live = ~failed
    texts = [train[0], "nope", train[2], train[3], "x", ""]
    _, rewards, done, failed_step = host.step(slots, np.zeros(6, np.int32), live, encode_turns(codec, texts, 8))
    assert rewards.tolist()[:4] == [1.0, 0.0, 1.0, 1.0] and failed_step.tolist() == [False] * 4 + [True, False]
    assert host.faults == {"malformed reply": 1, "scoring": 1} and done[:4].all()
    host.close()


def test_grpo_trains_on_a_verifiers_taskset(toy, tmp_path):
    from jaxrl.run import trainer

    cfg = config_lib.config_from_dict(_raw({"id": "jaxrl-toy-words", "prompt_len": 48, "turn_tokens": 8,
                                            "args": {"count": 6}, "max_failure_frac": 1.0}))
    result = trainer.run(cfg, run_dir=str(tmp_path / "run"), evaluate=False)
    assert result.updates == 1
    with open(tmp_path / "run" / "metrics.jsonl", encoding="utf-8") as f:
        (record,) = [json.loads(line) for line in f]
    assert math.isfinite(record["loss"]) and record["rewards/remote_failed/mean"] == 0.0


def test_a_taskset_mixed_with_an_on_device_task(toy):
    """A taskset as a member of ``env.mix``: the rows drawn from it, and only they, take a
    task of it (their prompts are its tasks'); the others are WordProblems'."""
    import jax

    raw = _raw(None)
    raw["env"] = {"mix": [{"id": "text/WordProblems-v0", "text": {"num_train": 8, "num_held_out": 4}},
                          {"verifiers": {"id": "jaxrl-toy-words", "prompt_len": 40, "turn_tokens": 12, "args": {"count": 6}},
                           "name": "words"}]}
    setup = build.env_setup(config_lib.config_from_dict(raw).env)
    task, host = setup.env, setup.env.members[1].host
    keys = jax.random.split(jax.random.PRNGKey(0), 12)
    state, prompts, info = jax.jit(jax.vmap(task.start, in_axes=(0, None)))(keys, setup.params)
    mine = np.asarray(info["source/words"]) > 0.5
    assert 0 < mine.sum() < 12 and host.counts["sessions"] == mine.sum()
    for row in np.flatnonzero(mine):
        assert "backwards" in host.codec.decode([int(i) for i in np.asarray(prompts[row]) if i != host.codec.pad_id])
    host.close()


def _guess(**extra):
    return _raw({"id": "jaxrl-toy-guess", "prompt_len": 48, "turn_tokens": 8, "turns": 3, "reply_tokens": 24,
                 "held_out_every": 0, "max_failure_frac": 1.0, **extra})


def test_a_multi_turn_env_is_played_turn_by_turn(toy):
    """The env's own ``run`` writes the user turns: a wrong guess gets its hint as the env
    reply, the right one ends the episode with the task's reward on the whole dialogue
    (1 / turns), the third turn is the last (terminated, scored); an env that raises and a
    reward that raises fail their session only; a single-turn taskset refuses turns > 1."""
    with pytest.raises(ConfigError, match=r"^env.verifiers.turns: jaxrl-toy-words has no multi-turn env"):
        build.env_setup(config_lib.config_from_dict(_raw({"id": "jaxrl-toy-words", "turns": 2, "reply_tokens": 8})).env)
    with pytest.raises(ConfigError, match=r"^env.verifiers.seat: GuessEnv has no seat 'judge' \(its seats: \['player'\]\)$"):
        build.env_setup(config_lib.config_from_dict(_guess(seat="judge")).env)
    host = build.env_setup(config_lib.config_from_dict(_guess(args={"secrets": [1, 2, 3, 4, 5, 6]})).env).env.host
    codec = host.codec
    slots, prompts, failed = host.reset(np.arange(6, dtype=np.int32), np.int32(0))
    assert host.seat == "player" and not failed.any()
    assert codec.decode([int(i) for i in prompts[0] if i != codec.pad_id]) == "user\nGuess my number from 1 to 4.\nassistant\n"
    live, got = ~failed, []
    for turn, guess in enumerate("123"):
        replies, rewards, done, failed = host.step(slots, np.full(6, turn, np.int32), live, encode_turns(codec, [guess] * 6, 8))
        got.append(([round(float(r), 3) for r in rewards], done.tolist(), failed.tolist()))
        if turn == 0:
            assert codec.decode([int(i) for i in replies[1] if i != codec.pad_id]).endswith("user\nNo, higher.\nassistant\n")
        live = live & ~done & ~failed
    assert got == [([1.0, 0, 0, 0, 0, 0], [True] + [False] * 5, [False] * 4 + [True, False]),  # 5: the env raises
                   ([0, 0.5, 0, 0, 0, 0], [False, True] + [False] * 4, [False] * 6),
                   ([0, 0, 0.333, 0, 0, 0], [False, False, True, True, False, False], [False] * 5 + [True])]  # 6: the reward raises
    assert host.faults == {"env": 1, "scoring": 1} and not host.episodes_

    async def two_exchanges(task, agents):  # one conversation per episode: a second one fails it
        async with agents.player.interaction(task), agents.player.interaction(task):
            pass

    host.env.run = two_exchanges
    _, _, failed = host.reset(np.zeros(1, np.int32), np.int32(0))
    assert failed.tolist() == [True] and host.faults["unsupported"] == 1
    host.env = _two_seats(asks_user=True)  # a seat with its own model (a modeled user): not played here
    _, _, failed = host.reset(np.zeros(1, np.int32), np.int32(0))
    assert failed.tolist() == [True] and host.faults["unsupported"] == 2
    host.close()


def _two_seats(asks_user: bool = False, user_trainable: bool = False):
    import verifiers.v1 as vf

    class TwoConfig(vf.EnvConfig):
        user: vf.AgentConfig = vf.AgentConfig()
        player: vf.AgentConfig = vf.AgentConfig()

    class Two(vf.Env[TwoConfig]):
        async def setup(self, agents):
            agents.user.trainable = user_trainable

        async def run(self, task, agents):
            async with agents.user.interaction(task) if asks_user else agents.player.interaction(task) as x:
                await x.turn()

    return Two(TwoConfig(taskset={"id": "jaxrl-toy-guess"}))


def test_the_seat_jaxrl_plays(toy):
    """The only seat ``setup`` leaves trainable, or the one named; else one line."""
    from jaxrl.text.vf_dialogue import played_seat

    assert played_seat(_two_seats(), "") == "player" and played_seat(_two_seats(), "user") == "user"
    with pytest.raises(ValueError, match=r"^env.verifiers.seat: Two has seats \['user', 'player'\] \(2 trainable\); name the one"):
        played_seat(_two_seats(user_trainable=True), "")


def test_grpo_trains_on_a_multi_turn_env_through_jaxrl_train(toy, tmp_path):
    import yaml

    from jaxrl import cli

    raw = _guess(args={"secrets": [1, 2, 3, 4]})
    raw["grpo"]["num_updates"] = 2
    path = tmp_path / "guess.yaml"
    path.write_text(yaml.safe_dump(raw))
    assert cli.main(["train", str(path), "--out", str(tmp_path / "run")]) == 0
    with open(tmp_path / "run" / "metrics.jsonl", encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    assert len(records) == 2 and all(math.isfinite(r["loss"]) and r["rewards/remote_failed/mean"] == 0.0 for r in records)


def test_the_docs_examples_are_the_shipped_files():
    """docs/remote_envs.md shows examples/verifiers_{words,guess}.{py,yaml} as they are, and
    the two configs are valid run configs."""
    import yaml

    with open(os.path.join(ROOT, "docs", "remote_envs.md"), encoding="utf-8") as f:
        page = f.read()
    for name in ("verifiers_words", "verifiers_guess"):
        for ext, lang in (("py", "python"), ("yaml", "yaml")):
            with open(os.path.join(ROOT, "examples", f"{name}.{ext}"), encoding="utf-8") as f:
                text = f.read().rstrip()
            assert f"```{lang}\n{text}\n```" in page, f"docs/remote_envs.md does not show examples/{name}.{ext} as it is"
            if ext == "yaml":
                cfg = config_lib.config_from_dict(yaml.safe_load(text))
                assert cfg.env.verifiers.id == name.replace("_", "-")
