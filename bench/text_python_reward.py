"""One GRPO update of a text task scored on device (the rubric) vs by a Python reward.

    python bench/text_python_reward.py [--task text/WordProblems-v0] [--prompts 16] [--group 8] [--reps 7]

The model is the text recipes' checkpoint (``envs/assets/text_model``, 0.89M parameters).
*Rubric*: the task's own ``env.text.reward`` (the numeric answer in ``<answer>`` tags plus a
format weight), scored on device. *Python*: the same task with ``env.text.reward: {python:
bench.text_python_reward:numeric_answer}`` — a TRL-style ``reward_funcs`` function (regex
and ``float`` on the decoded completions), called through the one ``pure_callback`` per
update (the host calls are counted). Both are ``jaxrl.algos.grpo.update.update`` jitted, the
same initial state and key; the timed figure is the median of ``--reps`` updates after a
warm-up, compile apart, and the callback's own host time (row lookup, decoding, the function,
the checks) is timed inside it; the machine's load average is recorded beside it. Results:
``bench/results/text_python_reward.json``.
"""

from __future__ import annotations

import argparse
import dataclasses
import functools
import json
import os
import platform
import re
import statistics
import sys
import time

import jax

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODEL = os.path.join(ROOT, "envs", "assets", "text_model")
RESULTS = os.path.join(HERE, "results", "text_python_reward.json")
CALLS: list[int] = []


def numeric_answer(prompts, completions, answer, **columns):
    """1 when the number in the first ``<answer>...</answer>`` equals the row's answer, plus 0.1
    when that tag is there (TRL-style: regex on the decoded text)."""
    CALLS.append(len(completions))
    out = []
    for text, want in zip(completions, answer):
        m = re.search(r"<answer>(.*?)</answer>", text, re.S)
        score = 0.1 if m else 0.0
        try:
            score += float(m.group(1).strip()) == float(want) if m else 0.0
        except ValueError:
            pass
        out.append(float(score))
    return out


def main(argv=None) -> int:
    sys.path.insert(0, ROOT)
    from jaxrl.algos import grpo
    from jaxrl.algos.contract import EnvSetup
    from jaxrl.algos.grpo import update as update_lib
    from jaxrl.core import registry

    import bench.text_python_reward as this  # the module the reward is imported from (not __main__)
    from jaxrl.text import python_reward

    host_ms: list[float] = []
    call = python_reward.HostReward.__call__

    def timed(self, *arrays):  # the callback's own host time: lookup, decode, the function, checks
        t0 = time.perf_counter()
        try:
            return call(self, *arrays)
        finally:
            host_ms.append(1e3 * (time.perf_counter() - t0))

    python_reward.HostReward.__call__ = timed

    p = argparse.ArgumentParser()
    p.add_argument("--task", default="text/WordProblems-v0")
    p.add_argument("--prompts", type=int, default=16)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--reps", type=int, default=7)
    args = p.parse_args(argv)

    env, params = registry.make(args.task)
    python_env = dataclasses.replace(env, reward_spec=json.dumps({"python": "bench.text_python_reward:numeric_answer"}))
    cfg = grpo.GRPOConfig(num_prompts=args.prompts, group_size=args.group, model=grpo.config.ModelConfig(policy="hf", path=MODEL),
                          loss=grpo.config.LossConfig(type="dapo", eps_high=0.28), optim=grpo.config.GRPOOptim(lr=5e-5))
    record = {"task": args.task, "prompts": args.prompts, "group": args.group, "reps": args.reps,
              "machine": f"{platform.machine()} {os.cpu_count()} cpus, jax {jax.__version__} {jax.default_backend()}"}
    for name, task in (("rubric", env), ("python", python_env)):
        setup = grpo.make_setup(EnvSetup(task, params, task.held_out_params(params)), cfg)
        state = jax.jit(functools.partial(update_lib.init, setup))(jax.random.PRNGKey(0))
        step = jax.jit(functools.partial(update_lib.update, setup))
        t0 = time.perf_counter()
        jax.block_until_ready(step(state))
        compile_s = time.perf_counter() - t0
        this.CALLS.clear()
        host_ms.clear()
        times = []
        for _ in range(args.reps):
            t0 = time.perf_counter()
            out = jax.block_until_ready(step(state))
            times.append(time.perf_counter() - t0)
        record[name] = {"update_ms_median": 1e3 * statistics.median(times), "first_call_s": compile_s,
                        "reward_mean": float(out[1]["reward"]), "host_calls_per_update": len(this.CALLS) / args.reps,
                        "completions_per_call": this.CALLS[0] if this.CALLS else 0,
                        "callback_host_ms_median": statistics.median(host_ms) if host_ms else 0.0}
    record["python_minus_rubric_ms"] = record["python"]["update_ms_median"] - record["rubric"]["update_ms_median"]
    record["load_avg_1m"] = os.getloadavg()[0]
    os.makedirs(os.path.dirname(RESULTS), exist_ok=True)
    with open(RESULTS, "w", encoding="utf-8") as f:
        json.dump(record, f, indent=2)
        f.write("\n")
    print(json.dumps(record, indent=2))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
