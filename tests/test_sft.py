"""SFT (jaxrl/algos/sft) on the tiny random Qwen2 fixture (tests/fixtures/lm/qwen2, vocab 512):
the loss is masked cross-entropy on completion tokens only, computed by hand from full
logits; the end-of-turn is a target and the padding after it is not; SFT learns a small set
of demonstrations, LoRA and full; greedy evaluation is GRPO's, number for number; through
``jaxrl train``: a killed run resumes bit for bit, and GRPO ``--init-from`` an SFT run starts
from its weights (same log-probs) and refuses a different model config naming both values.
Demonstrations are text/Reverse-v0 (2 digits) answers made here, in the tokenizer's ids."""

import dataclasses
import functools
import os

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl
from jaxrl.core import registry as env_registry
from jaxrl.algos import grpo, sft
from jaxrl.algos.contract import EnvSetup
from jaxrl.run import config as config_lib
from jaxrl.text.tokenized import TokenizedTask, tokenized_symbols, tokenizer_task

ROOT = os.path.join(os.path.dirname(__file__), "..")
QWEN2 = os.path.join(ROOT, "tests", "fixtures", "lm", "qwen2")
ENV_ID = "sfttest/ReverseDemos-v0"


def reverse_demonstrations(task, params, n: int, seed: int = 0) -> tuple[np.ndarray, np.ndarray]:
    """``n`` prompts of the tokenized reverse task and their answers (digits reversed, then
    the end-of-turn, then the pad id), made from the prompt text's digit ids by hand."""
    _, prompts, _ = jax.vmap(task.start, in_axes=(0, None))(jax.random.split(jax.random.PRNGKey(seed), n), params)
    prompts = np.asarray(prompts)
    digits = {tokenized_symbols(task)[str(d)] for d in range(10)}
    inner = prompts[:, len(task.prefix) : len(task.prefix) + task.inner.prompt_len]
    completions = np.full((n, task.max_turn_tokens), task.pad_id, np.int32)
    for i, row in enumerate(inner):
        answer = [t for t in row if t in digits][::-1] + [task.end_of_turn]
        completions[i, : len(answer)] = answer
    return prompts.astype(np.int32), completions


@dataclasses.dataclass(frozen=True)
class ReverseDemos(TokenizedTask):
    """The tokenized reverse task with a reference solver (what a text task provides)."""

    def demonstrations(self, split: str = "train"):
        return reverse_demonstrations(self, self.default_params, 16)


def _make_reverse_demos(**_):
    env, _ = jaxrl.make("text/Reverse-v0")
    t = tokenizer_task(dataclasses.replace(env, max_digits=2), QWEN2)
    return ReverseDemos(**{f.name: getattr(t, f.name) for f in dataclasses.fields(t)})


if ENV_ID not in env_registry.registered_ids():
    env_registry.register(ENV_ID, _make_reverse_demos)


def _cfg(rank=4, micro=1):
    lora = sft.config.LoRASection(rank=rank, alpha=8.0)
    model = sft.config.ModelSection(path=QWEN2, lora=lora, head_chunk=4)  # 4 completion tokens: 1 chunk
    return sft.SFTConfig(batch_size=16, micro_batches=micro, eval_episodes=8, model=model)


def _run_cfg(rank=4, updates=40):
    return config_lib.config_from_dict(
        {"algo": "sft", "env": {"id": ENV_ID}, "sft": {
            "model": {"path": QWEN2, "lora": {"rank": rank, "alpha": 8.0}, "head_chunk": 4},
            "batch_size": 16, "num_updates": updates, "optim": {"lr": 0.02}, "eval_episodes": 8,
            "eval_every": 5, "eval_every_episodes": 8},
         "train": {"updates_per_chunk": 10, "checkpoint_every": 1, "progress": False}})


@pytest.fixture(scope="module")
def task():
    t = _make_reverse_demos()
    return t, t.default_params, t.demonstrations()


@pytest.fixture(scope="module")
def sft_run(tmp_path_factory):
    """``jaxrl train`` of SFT with LoRA rank 4: 40 updates of all 16 demonstrations, a
    checkpoint every 10, the held-out evaluation every 5 (mid-chunk and chunk ends)."""
    from jaxrl.run import trainer

    out = tmp_path_factory.mktemp("sft")
    return trainer.run(_run_cfg(), run_dir=str(out / "straight"), evaluate=False), out


@pytest.fixture(scope="module")
def lora(task):
    t, p, data = task
    setup = sft.make_setup(EnvSetup(t, p, t.held_out_params(p)), _cfg(), data)
    return setup, sft.update.init(setup, jax.random.PRNGKey(0)), jax.jit(functools.partial(sft.update.grads, setup))


def _log_softmax(x):
    x = x - x.max(-1, keepdims=True)
    return x - np.log(np.exp(x).sum(-1, keepdims=True))


def _by_hand(setup, state, prompts, completions):
    """Masked token cross-entropy and accuracy from the model's full float32 logits, in numpy."""
    params = sft.update.model_params(state)
    base, adapters = (params["base"], params["lora"]) if state.frozen is not None else (params, None)
    ids = np.concatenate([prompts, completions], axis=1)
    apply = jax.jit(setup.model.apply)
    logits = np.asarray(apply(base, jnp.asarray(ids[:, :-1]), jnp.asarray(ids[:, :-1] != 397), lora=adapters))
    lp = prompts.shape[1]
    logp = _log_softmax(logits[:, lp - 1 :].astype(np.float64))
    nll, hits, count = 0.0, 0, 0
    for i, row in enumerate(completions):
        end = list(row).index(399) + 1 if 399 in row else len(row)  # through the end-of-turn
        for j in range(end):
            nll -= logp[i, j, row[j]]
            hits += int(np.argmax(logp[i, j]) == row[j])
            count += 1
    return nll / count, hits / count


def _loss_and_sums(grads, state, prompts, completions):
    (loss, sums), _ = grads(state, jnp.asarray(prompts), jnp.asarray(completions))[0]
    return float(loss), sums


def test_loss_is_masked_cross_entropy_of_the_completion(task, lora):
    _, _, (prompts, completions) = task
    setup, state, grads = lora  # random non-zero adapters below: the LoRA path counts in the reference too
    state = state.replace(params=jax.tree_util.tree_map(lambda x: 0.3 * jax.random.normal(jax.random.PRNGKey(1), x.shape), state.params))
    loss, sums = _loss_and_sums(grads, state, prompts, completions)
    want, acc = _by_hand(setup, state, prompts, completions)
    assert loss == pytest.approx(want, rel=1e-5)
    n_targets = sum(list(r).index(399) + 1 for r in completions)
    assert float(sums["hits"]) / n_targets == pytest.approx(acc)
    # the padding after the end is no target: other ids there change nothing ...
    padded = completions.copy()
    padded[padded == 397] = 42
    assert _loss_and_sums(grads, state, prompts, padded)[0] == pytest.approx(loss, rel=1e-6)
    # ... the end-of-turn is one: a completion ending elsewhere scores differently
    moved = completions.copy()
    moved[0, 2] = 42
    assert _loss_and_sums(grads, state, prompts, moved)[0] != pytest.approx(loss, rel=1e-4)


def test_sft_with_lora_learns_the_demonstrations(sft_run):
    from jaxrl.run import logging as log_lib

    result, _ = sft_run
    records = log_lib.read_metrics(os.path.join(result.run_dir, "metrics.jsonl"))
    loss = np.array([np.mean(r["loss"]) for r in records])
    assert len(loss) == 40 and loss[-5:].mean() < 0.05 * loss[0], loss  # 7.7 -> 0.07 when written
    assert np.mean(records[0]["token_accuracy"]) < 0.5 and np.mean(records[-1]["sequence_accuracy"]) == 1.0
    np.testing.assert_allclose([np.mean(r["epoch"]) for r in records[:3]], [0.0, 1.0, 2.0])  # 16 of 16 per update
    from jaxrl.models import lm

    _, weights = lm.load_lm(QWEN2)  # the base stays frozen: the checkpoint's weights
    for x, y in zip(jax.tree_util.tree_leaves(result.state.frozen), jax.tree_util.tree_leaves(weights)):
        np.testing.assert_array_equal(np.asarray(x)[0], np.asarray(y))


def test_every_demonstration_once_per_epoch():
    idx = jax.jit(sft.update.batch_indices, static_argnums=(2, 3))
    key = jax.random.PRNGKey(4)
    rows = np.concatenate([np.asarray(idx(key, jnp.int32(u), 6, 9)) for u in range(3)])  # 18 rows = 2 epochs of 9
    assert sorted(rows[:9]) == list(range(9)) and sorted(rows[9:]) == list(range(9))
    assert list(rows[:9]) != list(rows[9:])


def test_full_finetuning_with_micro_batches_is_the_same_loss(task):
    t, p, (prompts, completions) = task
    setup = sft.make_setup(EnvSetup(t, p, p), _cfg(rank=0, micro=4), (prompts, completions))
    state = sft.update.init(setup, jax.random.PRNGKey(0))
    assert state.frozen is None and jax.tree_util.tree_leaves(state.params)[0].dtype == jnp.float32
    (loss, _), g = jax.jit(functools.partial(sft.update.grads, setup))(state, jnp.asarray(prompts), jnp.asarray(completions))[0]
    assert float(loss) == pytest.approx(_by_hand(setup, state, prompts, completions)[0], rel=1e-5)
    assert float(optax_norm(g)) > 0


def optax_norm(tree):
    return jnp.sqrt(sum(jnp.sum(jnp.square(x)) for x in jax.tree_util.tree_leaves(tree)))


def test_evaluation_is_grpos_on_the_same_weights(task, lora, sft_run):
    t, p, _ = task
    setup, trained = lora[0], jax.tree_util.tree_map(lambda x: x[0], sft_run[0].state)
    key = sft.evaluate.heldout_key(trained)  # the in-training evaluation's key (any key would do here)
    ours = jax.jit(functools.partial(sft.evaluate.evaluate, setup))(trained, key)
    gcfg = grpo.GRPOConfig(num_prompts=2, group_size=2, eval_episodes=8, model=grpo.config.ModelConfig(
        policy="hf", path=QWEN2, lora=grpo.config.LoRASection(rank=4, alpha=8.0), head_chunk=4))
    gsetup = grpo.make_setup(EnvSetup(t, p, t.held_out_params(p)), gcfg)
    gstate = grpo.load_params(grpo.update.init(gsetup, jax.random.PRNGKey(0)), trained)
    theirs = jax.jit(functools.partial(grpo.evaluate.evaluate, gsetup))(gstate, key)
    for k in ("episode_returns", "episode_returns_exact_match", "length_mean"):
        np.testing.assert_allclose(np.asarray(ours[k]), np.asarray(theirs[k]), atol=1e-6)
    # sft.eval_every's figures of the last update are this evaluation's with the state's held-out key
    from jaxrl.run import logging as log_lib

    last = log_lib.read_metrics(os.path.join(sft_run[0].run_dir, "metrics.jsonl"))[-1]
    np.testing.assert_allclose(np.mean(last["heldout_reward"]), ours["return_mean"], rtol=1e-6)
    np.testing.assert_allclose(np.mean(last["heldout_exact_match"]), ours["exact_match"], rtol=1e-6)


def test_eval_every_logs_held_out_figures_on_every_nth_update_only(sft_run):
    import json

    result, _ = sft_run
    with open(os.path.join(result.run_dir, "metrics.jsonl"), encoding="utf-8") as f:
        records = [json.loads(line) for line in f]
    assert [r["update"] for r in records] == list(range(1, 41))
    for r in records:
        measured = r["update"] % 5 == 0  # updates 5, 15, ... mid-chunk; 10, 20, ... a chunk's last
        for name in ("heldout_reward", "heldout_exact_match"):
            assert (name in r) == measured, (r["update"], name)
            assert not measured or np.all(np.isfinite(r[name]))


def test_eval_every_is_validated_and_stop_at_needs_whole_chunks():
    with pytest.raises(ValueError, match="eval_every: must be >= 0"):
        dataclasses.replace(_cfg(), eval_every=-1).validate()
    with pytest.raises(ValueError, match="eval_every_episodes: must be >= 1"):
        dataclasses.replace(_cfg(), eval_every=5, eval_every_episodes=0).validate()
    raw = {"algo": "sft", "env": {"id": ENV_ID}, "sft": {"model": {"path": QWEN2}, "eval_every": 3},
           "train": {"updates_per_chunk": 10, "stop_at": {"metric": "heldout_exact_match", "threshold": 0.9}}}
    with pytest.raises(config_lib.ConfigError, match="must be a multiple of sft.eval_every=3"):
        config_lib.config_from_dict(raw)
    raw["sft"]["eval_every"] = 0
    with pytest.raises(config_lib.ConfigError, match="logged only with sft.eval_every > 0"):
        config_lib.config_from_dict(raw)


# ------------------------------------------------------------------- through jaxrl train


class _Kill(BaseException):
    """A crash nothing in the trainer handles (kill -9)."""


def test_jaxrl_train_sft_resumes_bit_for_bit_after_a_kill(sft_run):
    from jaxrl.run import trainer
    from jaxrl.run.checkpoint import Checkpoints

    straight, out = sft_run
    real_save, calls = Checkpoints.save, []

    def crashing_save(self, step, state):
        calls.append(step)
        if len(calls) == 2:
            raise _Kill
        return real_save(self, step, state)

    with pytest.MonkeyPatch.context() as mp, pytest.raises(_Kill):
        mp.setattr(Checkpoints, "save", crashing_save)
        trainer.run(_run_cfg(), run_dir=str(out / "resumed"), evaluate=False)
    resumed = trainer.run(resume=str(out / "resumed"), evaluate=False)
    assert resumed.updates == straight.updates == 40
    for x, y in zip(jax.tree_util.tree_leaves(straight.state), jax.tree_util.tree_leaves(resumed.state)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))


def _grpo_cfg(rank=4, alpha=8.0):
    return config_lib.config_from_dict(
        {"algo": "grpo", "env": {"id": ENV_ID}, "grpo": {
            "model": {"policy": "hf", "path": QWEN2, "lora": {"rank": rank, "alpha": alpha}, "head_chunk": 4},
            "num_prompts": 2, "group_size": 2, "num_updates": 1, "eval_episodes": 4}})


def test_grpo_init_from_an_sft_run_starts_from_its_weights(sft_run, task, lora):
    from jaxrl.run import trainer

    straight, out = sft_run
    cfg = _grpo_cfg()
    built = trainer.build(cfg)
    keys = trainer.seed_keys(0, 1)
    fresh = jax.vmap(built.program.init)(keys)
    state, record = trainer.initial_from(cfg, built, fresh, keys, str(out / "straight"), trainer.make_layout(cfg, built, keys))
    assert record["update"] == 40
    one = jax.tree_util.tree_map(lambda x: x[0], state)
    src = jax.tree_util.tree_map(lambda x: x[0], straight.state)
    for x, y in zip(jax.tree_util.tree_leaves(one.params), jax.tree_util.tree_leaves(src.params)):
        np.testing.assert_array_equal(np.asarray(x), np.asarray(y))
    # GRPO's policy log-probs of a demonstration are the SFT model's
    t, p, (prompts, completions) = task
    obs = jnp.asarray(np.concatenate([prompts[:4], completions[:4]], axis=1))
    policy = built.program.init_with.args[0].policy
    glogp, _ = policy.token_logp(grpo.update.acting_params(one), obs, obs[:, prompts.shape[1]:], jnp.float32(1.0))
    base, adapters = src.frozen, src.params  # the SFT run's own state
    hidden = sft.losses.completion_hidden(lora[0].model, base, adapters, obs[:, : prompts.shape[1]], obs[:, prompts.shape[1]:], 397)
    slogp, _ = sft.losses.token_stats(base, hidden, obs[:, prompts.shape[1]:], 4)
    np.testing.assert_allclose(np.asarray(glogp), np.asarray(slogp), atol=1e-5)
    with pytest.raises(config_lib.ConfigError, match=r"sft.model.lora.rank=4 there, grpo.model.lora.rank=2 here"):
        trainer.initial_from(_grpo_cfg(rank=2), built, None, keys, str(out / "straight"), None)  # refused before it builds


# ------------------------------------------------------------------- a text task's demonstrations


def test_a_text_tasks_reference_completions_are_the_demonstrations(tmp_path):
    from jaxrl.models import lm
    from jaxrl.text.task import text_task

    rows = [{"prompt": f"Reverse {a}{b}", "answer": f"{b}{a}", "completion": f"<answer>{b}{a}</answer>"}
            for a in range(3) for b in range(3)]
    t = text_task("t", rows, [], tokenizer_path=QWEN2, prompt_len=32, completion_len=16, answer_bytes=4,
                  reward={"answer": "exact", "extract": "answer_tag"})
    prompts, completions = sft.demonstrations(t, _cfg())
    assert prompts.shape == (9, 32) and completions.shape == (9, 16)
    tok = lm.load_tokenizer(QWEN2)
    mask = np.asarray(sft.losses.completion_mask(jnp.asarray(completions), t.end_of_turn))
    for row, c, m in zip(rows, completions, mask):  # the targets: the completion's tokens, then eos
        want = tok.encode(row["completion"]) + [t.end_of_turn]
        assert list(c[m]) == want and set(c[~m]) == {t.pad_id}
    with pytest.raises(ValueError, match="data: .* is not a file"):
        sft.demonstrations(t, dataclasses.replace(_cfg(), data=str(tmp_path / "missing.jsonl")))


def test_sft_data_holding_held_out_prompts_is_refused_unless_allowed(tmp_path, capsys):
    """Demonstrations whose prompts are held-out prompts of the task (exactly, or after strip +
    casefold + NFKC) are one line naming the count and the first row; the explicit key trains
    on them and says how many; demonstrations without them pass."""
    import json

    from jaxrl.text.task import text_task

    rows = [{"prompt": f"Reverse {a}{b}", "answer": f"{b}{a}", "completion": f"<answer>{b}{a}</answer>"}
            for a in range(3) for b in range(3)]
    held = [{"prompt": "Reverse 77", "answer": "77", "completion": "<answer>77</answer>"},
            {"prompt": "Reverse 98", "answer": "89", "completion": "<answer>89</answer>"}]
    t = text_task("t", rows, held, tokenizer_path=QWEN2, prompt_len=32, completion_len=16, answer_bytes=4,
                  reward={"answer": "exact", "extract": "answer_tag"})
    demos = [{"prompt": r["prompt"], "completion": r["completion"]} for r in rows[:3]]
    overlap = demos + [{"prompt": "reverse 98 ", "completion": "<answer>89</answer>"},
                       {"prompt": "Reverse 77", "completion": "<answer>77</answer>"}]
    for name, lines in (("clean.jsonl", demos), ("overlap.jsonl", overlap)):
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in lines))
    cfg = dataclasses.replace(_cfg(), data=str(tmp_path / "overlap.jsonl"))
    assert t.held.count == 2 and t.held is not t.train
    with pytest.raises(ValueError) as info:
        sft.demonstrations(t, cfg)
    line = str(info.value)
    assert line.startswith(f"data: {tmp_path / 'overlap.jsonl'}: 2 of 5 rows have a prompt of the held-out split") and "\n" not in line
    assert "the first: row 4, 'reverse 98 '" in line and "set sft.allow_held_out_overlap: true" in line
    prompts, _ = sft.demonstrations(t, dataclasses.replace(cfg, allow_held_out_overlap=True))
    assert prompts.shape[0] == 5 and "2 of 5 demonstrations have a held-out prompt (trained on: allowed)" in capsys.readouterr().out
    prompts, _ = sft.demonstrations(t, dataclasses.replace(cfg, data=str(tmp_path / "clean.jsonl")))  # the control
    assert prompts.shape[0] == 3
    raw = {"algo": "sft", "env": {"id": ENV_ID}, "sft": {"model": {"path": QWEN2}, "allow_held_out_overlap": "yes"}}
    with pytest.raises(config_lib.ConfigError, match="sft.allow_held_out_overlap: expected bool"):
        config_lib.config_from_dict(raw)
    # Through `jaxrl train`: a file task with a held-out file, one line before anything compiles.
    import yaml

    from jaxrl import cli

    for name, lines in (("train.jsonl", rows), ("held.jsonl", held)):
        (tmp_path / name).write_text("".join(json.dumps(r) + "\n" for r in lines))
    text = {"train": str(tmp_path / "train.jsonl"), "held_out": str(tmp_path / "held.jsonl"), "prompt_len": 32,
            "completion_len": 16, "answer_bytes": 4, "reward": {"answer": "exact", "extract": "answer_tag"}}
    run = {"algo": "sft", "env": {"id": "text/File-v0", "tokenizer": {"path": QWEN2}, "text": text},
           "sft": {"model": {"path": QWEN2}, "data": str(tmp_path / "overlap.jsonl"), "batch_size": 2}}
    (tmp_path / "c.yaml").write_text(yaml.safe_dump(run))
    capsys.readouterr()
    assert cli.main(["train", str(tmp_path / "c.yaml"), "--out", str(tmp_path / "run")]) == 2
    err = capsys.readouterr().err.strip()
    assert "\n" not in err and err.startswith("jaxrl: config error: sft.data: ") and "2 of 5 rows" in err, err
    assert not os.path.exists(tmp_path / "run")
