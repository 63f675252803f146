"""One GRPO iteration fused on device vs the same iteration with rewards scored on the host.

    python bench/grpo_fused_vs_host.py [--digits 8] [--prompts 32] [--group 8] [--reps 10]

*Fused*: ``jaxrl.algos.grpo.update`` — generation, verifier reward, advantages and the
gradient steps in one jitted program, no host round trip.
*Host-scored*: the way a Python-reward trainer (TRL-style) does it — a jitted generation
step, the completions copied to the host, decoded to strings and scored by a Python
verifier (reverse: the completion string equals the reversed prompt; the same dense rubric
as the env's), the rewards copied back, then a jitted learning step (advantages + the same
gradient steps). Both iterations do the same work on the same shapes; the host one also
pays two transfers and the Python loop. Compile time is reported apart; the timed figure
is the median of ``--reps`` iterations after a warm-up.
"""

from __future__ import annotations

import argparse
import functools
import json
import os
import statistics
import sys
import time

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl.algos import grpo
from jaxrl.algos.contract import EnvSetup
from jaxrl.algos.grpo import losses
from jaxrl.algos.grpo import rollout as rollout_lib
from jaxrl.algos.grpo import update as update_lib
from jaxrl_envs.text import Reverse
from jaxrl_envs.text.vocab import token_str

RESULTS = os.path.join(os.path.dirname(__file__), "results")


def decode(tokens) -> str:
    """Token ids to text, one character per id (PAD shown as '_', so positions are kept)."""
    out = []
    for t in np.asarray(tokens).tolist():
        out.append(token_str(t) or "_")
        if t == 1:  # EOS
            break
    return "".join(out)


def host_reward(prompt: str, completion: str) -> float:
    """Python version of the reverse task's dense rubric (0.5 token accuracy + 0.5 exact)."""
    answer = prompt.rstrip("=").lstrip("_")[::-1]
    emitted = completion if "$" not in completion else completion[: completion.index("$") + 1]
    target = answer + "$"
    hits = sum(1 for a, b in zip(emitted, target) if a == b)
    acc = hits / max(len(target), len(emitted))
    exact = float(emitted == target)
    return 0.5 * acc + 0.5 * exact


def generate(setup, state, key):
    cfg = setup.cfg
    k_reset, k_roll = jax.random.split(key)
    reset_keys = jnp.repeat(jax.random.split(k_reset, cfg.num_prompts), cfg.group_size, axis=0)
    return rollout_lib.group_rollout(
        setup.policy, setup.env, setup.env_params, state.params, reset_keys, k_roll, setup.num_steps, state.hyper.temperature
    )


def learn(setup, state, ro, rewards, key):
    cfg = setup.cfg
    grouped = rewards.reshape(cfg.num_prompts, cfg.group_size)
    kind = losses.advantage_kind(cfg.loss.type, cfg.loss.scale_rewards)
    adv = losses.group_advantages(grouped, jnp.ones_like(grouped, bool), kind).reshape(-1)
    batch = update_lib.Batch(ro.obs, ro.actions, ro.logp, jnp.zeros_like(ro.logp), ro.mask, adv)
    epoch = functools.partial(update_lib._epoch, setup, state.hyper, batch)
    (params, opt_state), _ = jax.lax.scan(epoch, (state.params, state.opt_state), jax.random.split(key, cfg.num_epochs))
    return state.replace(params=params, opt_state=opt_state, update_step=state.update_step + 1)


def host_iteration(setup, gen, lrn, state, key):
    k_gen, k_learn = jax.random.split(key)
    ro = gen(state, k_gen)
    obs, actions = jax.device_get((ro.obs[:, : setup.env.prompt_len], ro.actions))
    rewards = np.array([host_reward(decode(p), decode(a)) for p, a in zip(obs, actions)], np.float32)
    return lrn(state, ro, jnp.asarray(rewards), k_learn)


def _median_time(fn, reps):
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--digits", type=int, default=8)
    p.add_argument("--prompts", type=int, default=32)
    p.add_argument("--group", type=int, default=8)
    p.add_argument("--reps", type=int, default=10)
    args = p.parse_args(argv)
    env = Reverse(max_digits=args.digits)
    cfg = grpo.GRPOConfig(
        num_prompts=args.prompts, group_size=args.group, num_minibatches=4, optim=grpo.config.GRPOOptim(lr=5e-4)
    )
    setup = grpo.make_setup(EnvSetup(env, env.default_params, env.default_params), cfg)
    state = jax.jit(functools.partial(update_lib.init, setup))(jax.random.PRNGKey(0))

    fused = jax.jit(functools.partial(update_lib.update, setup))
    t = time.perf_counter()
    s, m = fused(state)
    jax.block_until_ready(s)
    fused_compile = time.perf_counter() - t

    gen = jax.jit(functools.partial(generate, setup))
    lrn = jax.jit(functools.partial(learn, setup))
    t = time.perf_counter()
    jax.block_until_ready(host_iteration(setup, gen, lrn, state, jax.random.PRNGKey(1)))
    host_compile = time.perf_counter() - t

    # sanity: the Python verifier agrees with the on-device one on real completions
    ro = gen(state, jax.random.PRNGKey(2))
    obs, actions, returns = jax.device_get((ro.obs[:, : env.prompt_len], ro.actions, ro.returns))
    host = np.array([host_reward(decode(p), decode(a)) for p, a in zip(obs, actions)])
    max_diff = float(np.max(np.abs(host - returns)))

    fused_s = _median_time(lambda: jax.block_until_ready(fused(state)), args.reps)
    host_s = _median_time(lambda: jax.block_until_ready(host_iteration(setup, gen, lrn, state, jax.random.PRNGKey(3))), args.reps)
    gen_s = _median_time(lambda: jax.block_until_ready(gen(state, jax.random.PRNGKey(4))), args.reps)
    result = {
        "task": f"reverse-{args.digits}", "prompts": args.prompts, "group": args.group,
        "sequences_per_iteration": args.prompts * args.group,
        "fused_iteration_s_median": round(fused_s, 4), "host_scored_iteration_s_median": round(host_s, 4),
        "host_over_fused": round(host_s / fused_s, 3), "generation_only_s_median": round(gen_s, 4),
        "fused_compile_s": round(fused_compile, 2), "host_compile_s": round(host_compile, 2),
        "max_reward_diff_host_vs_device": max_diff,
        "reps": args.reps, "timing": "median of reps after warm-up",
        "load_avg_1m": os.getloadavg()[0], "jax": jax.__version__, "cpu_count": os.cpu_count(),
        "command": " ".join(["python"] + sys.argv),
    }
    print(json.dumps(result, indent=1))
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "grpo_fused_vs_host.json"), "w") as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    sys.exit(main())
