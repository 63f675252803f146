"""One GRPO iteration on a text task, fused vs scored on the host, with a loaded checkpoint.

    python bench/text_grpo_fused_vs_host.py [--task text/WordProblems-v0] [--prompts 16] [--group 8] [--reps 5]

The model is the text recipes' checkpoint (``envs/assets/text_model``, 0.89M parameters,
loaded from safetensors) or ``--model DIR`` (e.g. the recipe's SFT run exported with ``jaxrl
export-hf``, so that rewards vary), the task ``text/WordProblems-v0`` (or ``text/AlphabetSortText-v0``).

*Fused*: ``jaxrl.algos.grpo.update.update`` — generation, decoding to bytes, the rubric,
advantages and the gradient step in one jitted program.
*Host-scored*: the way a TRL-style trainer runs it — a jitted generation step with no
scoring in it (the same task with a zero verifier), the completions copied to the host,
``tokenizer.decode`` per completion and the rubric's rules in Python
(``jaxrl.text.reference.rubric``), the rewards copied back, then a jitted learning step
(``shape_batch`` + ``learn``: advantages and the same gradient step). Same keys, so both
iterations sample the same completions: their rewards must be equal and their updated
parameters equal to float rounding (recorded). Compile time is apart; the timed figure is
the median of ``--reps`` iterations after a warm-up. Results:
``bench/results/text_grpo_fused_vs_host.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, HERE)

MODEL = os.path.join(ROOT, "envs", "assets", "text_model")


def _zero_verifier(verifier):
    from jaxrl.verifiers import Verifier

    def score(task, completion):
        reward, metrics = jax.eval_shape(verifier.score, task, completion)
        return jnp.zeros((), jnp.float32), {k: jnp.zeros((), jnp.float32) for k in metrics}

    return Verifier(score, verifier.low, verifier.high)


def main(argv=None) -> int:
    from jaxrl.algos import grpo
    from jaxrl.algos.contract import EnvSetup
    from jaxrl.algos.grpo import rollout as rollout_lib
    from jaxrl.algos.grpo import update as update_lib
    from jaxrl.core import registry
    from jaxrl.models.lm import load_tokenizer
    from jaxrl.text import reference as R
    from jaxrl.text.task import TextTask

    p = argparse.ArgumentParser()
    p.add_argument("--task", default="text/WordProblems-v0")
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--model", default=MODEL, help="a checkpoint directory (e.g. an SFT run exported with jaxrl export-hf)")
    args = p.parse_args(argv)

    env, params = registry.make(args.task)
    assert isinstance(env, TextTask)

    class Unscored(type(env)):  # the same task, its rubric replaced by zeros (generation only)
        @property
        def verifier(self):
            return _zero_verifier(TextTask.verifier.func(env))

    unscored = Unscored(**{f.name: getattr(env, f.name) for f in dataclasses.fields(env)})
    cfg = grpo.GRPOConfig(num_prompts=args.prompts, group_size=args.group, model=grpo.config.ModelConfig(policy="hf", path=args.model),
                          loss=grpo.config.LossConfig(type="dapo", eps_high=0.28), optim=grpo.config.GRPOOptim(lr=5e-5))
    setup = grpo.make_setup(EnvSetup(env, params, env.held_out_params(params)), cfg)
    host_setup = grpo.make_setup(EnvSetup(unscored, params, unscored.held_out_params(params)), cfg)
    state = jax.jit(functools.partial(update_lib.init, setup))(jax.random.PRNGKey(0))
    tok = load_tokenizer(env.tokenizer_path)
    spec = json.loads(env.reward_spec)
    eos = env.end_of_turn

    fused = jax.jit(functools.partial(update_lib.update, setup))

    @jax.jit
    def generate(state):
        _, k_collect, _ = jax.random.split(state.key, 3)
        reset_keys, k_roll = update_lib.rollout_keys(host_setup, k_collect)
        ro = rollout_lib.group_rollout(host_setup.policy, unscored, params, update_lib.acting_params(state), reset_keys, k_roll,
                                       host_setup.num_steps, state.hyper.temperature, group=cfg.group_size)
        answers = jax.vmap(lambda k: unscored.reset(k, params)[0].task)(reset_keys)
        return ro, answers.answer, answers.answer_len

    @jax.jit
    def learn(state, ro, rewards):
        last = jnp.maximum(ro.length - 1, 0)
        step_rewards = jnp.zeros_like(ro.rewards).at[jnp.arange(ro.rewards.shape[0]), last].set(rewards)
        ro = ro.replace(returns=rewards, rewards=step_rewards * ro.mask)
        return update_lib.learn(host_setup, state, update_lib.shape_batch(host_setup, state, ro))

    def host_scores(ro, answers, answer_len):
        actions, answers, answer_len = jax.device_get((ro.actions, answers, answer_len))
        out = []
        for row, ans, la in zip(actions.tolist(), answers, answer_len):
            cut = row.index(eos) if eos in row else len(row)
            text = tok.decode(row[:cut], skip_special_tokens=False).encode("utf-8")
            out.append(R.rubric(spec, text, bytes(np.asarray(ans[:la], np.uint8)))[0])
        return np.asarray(out, np.float32)

    def host_iteration(state):
        ro, answers, answer_len = generate(state)
        rewards = host_scores(ro, answers, answer_len)
        return learn(state, ro, jnp.asarray(rewards)), ro, rewards

    t = time.perf_counter()
    f_state, f_metrics = jax.block_until_ready(fused(state))
    fused_compile = time.perf_counter() - t
    t = time.perf_counter()
    (h_state, _), ro, host_rewards = host_iteration(state)
    jax.block_until_ready(h_state)
    host_compile = time.perf_counter() - t

    # same results: the fused rollout's rewards (device rubric) vs the host's, same completions
    collected = jax.jit(functools.partial(update_lib.collect, setup))(state, jax.random.split(state.key, 3)[1])
    np.testing.assert_array_equal(np.asarray(collected[0].actions), np.asarray(ro.actions))  # same samples
    reward_diff = float(np.max(np.abs(np.asarray(collected[0].returns) - host_rewards)))
    param_diff = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(jax.tree_util.tree_leaves(f_state.params),
                                                                        jax.tree_util.tree_leaves(h_state.params)))

    def median(fn):
        times = []
        for _ in range(args.reps):
            t = time.perf_counter()
            fn()
            times.append(time.perf_counter() - t)
        return statistics.median(times), times

    fused_s, fused_all = median(lambda: jax.block_until_ready(fused(state)))
    host_s, host_all = median(lambda: jax.block_until_ready(host_iteration(state)[0]))
    gen_s, _ = median(lambda: jax.block_until_ready(generate(state)))
    generated = jax.block_until_ready(generate(state))
    score_s, _ = median(lambda: host_scores(*generated))  # device -> host copy, decode, Python rubric
    import common

    result = {
        "task": args.task, "model": args.model,
        "sequences_per_iteration": args.prompts * args.group, "completion_tokens_max": env.max_completion_len,
        "fused_iteration_s_median": round(fused_s, 4), "host_scored_iteration_s_median": round(host_s, 4),
        "host_over_fused": round(host_s / fused_s, 3), "host_generation_only_s_median": round(gen_s, 4),
        "host_decode_and_score_s_median": round(score_s, 4),
        "fused_all_s": [round(x, 4) for x in fused_all], "host_all_s": [round(x, 4) for x in host_all],
        "fused_compile_s": round(fused_compile, 2), "host_compile_s": round(host_compile, 2),
        "max_reward_diff_device_vs_host": reward_diff, "max_param_diff_after_update": param_diff,
        "mean_reward": float(np.mean(host_rewards)), "reps": args.reps,
        "meta": common.metadata({"command": common.command_line(), "load_avg": os.getloadavg()},
                                libraries=["jax", "jaxlib", "flax", "optax", "tokenizers", "numpy"]),
    }
    print(json.dumps({k: v for k, v in result.items() if k != "meta"}, indent=1))
    with open(os.path.join(HERE, "results", "text_grpo_fused_vs_host.json"), "w") as f:
        f.write(common.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
