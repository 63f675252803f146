"""One GRPO iteration over dialogues fused on device vs the same loop with a Python
environment on the host between turns.

    python bench/grpo_dialogue_fused_vs_host.py [--config configs/grpo_alphabet_sort_turns.yaml] [--reps 5]

*Fused*: ``jaxrl.algos.grpo.update.update`` — every turn's decoding, the environment's
replies (``respond``, vmapped), their prefill into the KV cache, scoring and the gradient
steps in one jitted program.
*Host*: the way host-side frameworks (verifiers' MultiTurnEnv, TRL's agentic GRPO) run a
dialogue — per turn, a jitted decode of the turn, the tokens copied to the host, decoded to
strings and answered by a Python environment (multi-turn alphabet-sort: sorted names, an
LCS similarity ** 4 in Python), the reply tokens copied back and prefilled by a jitted call;
then a jitted learning step on the assembled batch (the same ``shape_batch`` + ``learn``).
Same keys, so both sample the same tokens: the results must agree (returns exactly, the new
parameters to float rounding). Compile time apart; the timed figure is the median of
``--reps`` iterations after a warm-up. The record: bench/results/grpo_dialogue_fused_vs_host.json.
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

sys.path.insert(0, os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
from bench.common import machine_info  # noqa: E402
from jaxrl.algos.grpo import rollout as R  # noqa: E402
from jaxrl.algos.grpo import update as U  # noqa: E402
from jaxrl.run import config as config_lib  # noqa: E402
from jaxrl.run import trainer  # noqa: E402
from jaxrl_envs.text.vocab import encode, token_str  # noqa: E402

RESULTS = os.path.join(os.path.dirname(__file__), "results")


# --- the host environment: multi-turn alphabet-sort in plain Python ----------------------


def decode(tokens) -> str:
    """A turn's text through its first EOS (``$``); PAD, which a policy may write, is ``_``."""
    out = []
    for t in np.asarray(tokens).tolist():
        out.append(token_str(t) or "_")
        if t == 1:
            break
    return "".join(out)


def lcs(a: str, b: str) -> int:
    row = [0] * (len(b) + 1)
    for ca in a:
        prev = 0
        for j, cb in enumerate(b):
            cur = row[j + 1]
            row[j + 1] = prev + 1 if ca == cb else max(row[j + 1], row[j])
            prev = cur
    return row[-1]


class HostAlphabetSort:
    """One dialogue: the names it will reveal, the turn; ``respond(text) -> (reward, reply, done)``."""

    def __init__(self, names: list[str], first: int, per_turn: int, turns: int):
        self.names, self.first, self.per_turn, self.turns, self.turn = names, first, per_turn, turns, 0

    def respond(self, text: str) -> tuple[float, str, bool]:
        count = self.first + self.turn * self.per_turn
        answer = ",".join(sorted(self.names[:count]))
        has_eos = "$" in text
        said = text.split("$")[0]
        sim = 2 * lcs(answer, said) / (len(answer) + len(said)) if has_eos else 0.0
        self.turn += 1
        reply = ",".join(self.names[count : count + self.per_turn]) + "="
        return sim**4 / self.turns, reply, self.turn >= self.turns


# --- the host-driven loop -------------------------------------------------------------------


def _decode_turn(setup, params, cache, logits, alive, key, base, temperature):
    env = setup.env
    cache, logits, key, *out = setup.policy.decode(params, cache, logits, alive, key, base, temperature, False,
                                                   env.max_turn_tokens, env.end_of_turn, env.pad_id, stop_early=False)
    key, _ = jax.random.split(key)  # the fused rollout's env key
    return cache, logits, key, tuple(out)  # tokens, logp, mask, entropy [N, Tt]


def _prefill(setup, params, cache, reply, pos):
    cache, logits = setup.policy.extend(params, cache, reply, pos)
    return cache, logits[:, -1].astype(jnp.float32)


def host_iteration(setup, fns, state) -> tuple:
    env = setup.env
    _, k_collect, _ = jax.random.split(state.key, 3)
    reset_keys, key = U.rollout_keys(setup, k_collect)
    env_state, prompt, _ = fns["start"](reset_keys)
    cache, logits = fns["begin"](state.params, prompt)
    names = np.asarray(env_state.names)
    n = names.shape[0]
    envs = [HostAlphabetSort(["".join(chr(97 + c) for c in row) for row in names[i]], env.first_names, env.names_per_turn, env.turns)
            for i in range(n)]
    tt, tr, k_turns = env.max_turn_tokens, env.max_reply_tokens, env.max_turns
    alive = np.ones(n, bool)
    cols = {k: [] for k in ("tokens", "reply", "logp", "mask", "entropy", "rewards")}
    returns, length, turns = np.zeros(n, np.float32), np.zeros(n, np.int32), np.zeros(n, np.int32)
    for k in range(k_turns):
        base = env.prompt_len + k * (tt + tr)
        cache, logits, key, out = fns["decode"](state.params, cache, logits, jnp.asarray(alive), key, base)
        tokens, logp, mask, entropy = (np.asarray(x) for x in out)
        rewards, replies = np.zeros((n, tt), np.float32), np.zeros((n, tr), np.int32)
        for i in np.flatnonzero(alive):
            text = decode(tokens[i])
            r, reply, done = envs[i].respond(text)
            rewards[i, int(np.flatnonzero(mask[i])[-1])] = r  # on the turn's last written token
            if not done:
                ids = encode(reply)
                replies[i, tr - len(ids) :] = ids
            returns[i] += r
            length[i] += mask[i].sum()
            turns[i] += 1
            alive[i] = not done
        if tr:
            cache, logits = fns["prefill"](state.params, cache, jnp.asarray(replies), base + tt)
        for name, value in zip(cols, (tokens, replies, logp, mask, entropy, rewards)):
            cols[name].append(value)
    slots = lambda x: np.concatenate([np.stack(x, 1), np.zeros((n, k_turns, tr), np.asarray(x[0]).dtype)], 2).reshape(n, -1)  # noqa: E731
    actions = np.concatenate([np.stack(cols["tokens"], 1), np.stack(cols["reply"], 1)], 2).reshape(n, -1)
    ro = R.Rollout(
        np.concatenate([np.asarray(prompt), actions], 1), actions, slots(cols["logp"]), slots(cols["mask"]),
        slots(cols["entropy"]), slots(cols["rewards"]), returns, length, ~np.ones(n, bool), {"similarity_pow4": returns.copy()}, turns,
    )
    return fns["learn"](state, jax.tree_util.tree_map(jnp.asarray, ro)), returns


def make_fns(setup):
    env, params = setup.env, setup.env_params
    return {
        "start": jax.jit(lambda keys: jax.vmap(env.start, in_axes=(0, None))(keys, params)),
        "begin": jax.jit(setup.policy.start),
        "decode": jax.jit(lambda p, c, lg, a, k, b: _decode_turn(setup, p, c, lg, a, k, b, jnp.float32(setup.cfg.sampling.temperature))),
        "prefill": jax.jit(functools.partial(_prefill, setup)),
        "learn": jax.jit(lambda state, ro: U.learn(setup, state, U.shape_batch(setup, state, ro))),
    }


def _median(fn, reps):
    times = []
    for _ in range(reps):
        t = time.perf_counter()
        fn()
        times.append(time.perf_counter() - t)
    return statistics.median(times)


def main(argv=None) -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--config", default="configs/grpo_alphabet_sort_turns.yaml")
    p.add_argument("--reps", type=int, default=5)
    args = p.parse_args(argv)
    # the host env reproduces the rubric without the training-only shaping term
    cfg = config_lib.load_config(args.config, ["env.params.shaping=0.0"])
    built = trainer.build(cfg)
    setup = built.program.init_with.args[0]  # functools.partial(update.init, setup)
    state = jax.jit(built.program.init)(jax.random.PRNGKey(0))
    fns = make_fns(setup)
    fused = jax.jit(built.program.update)

    t = time.perf_counter()
    new_fused, metrics = jax.block_until_ready(fused(state))
    fused_compile = time.perf_counter() - t
    t = time.perf_counter()
    (new_host, _), host_returns = jax.block_until_ready(host_iteration(setup, fns, state))
    host_compile = time.perf_counter() - t

    ro_fused, _, _ = jax.jit(lambda s: U.collect(setup, s, jax.random.split(s.key, 3)[1]))(state)
    max_return_diff = float(np.max(np.abs(np.asarray(ro_fused.returns) - host_returns)))
    diff = max(float(jnp.max(jnp.abs(a - b))) for a, b in zip(jax.tree_util.tree_leaves(new_fused.params), jax.tree_util.tree_leaves(new_host.params)))

    fused_s = _median(lambda: jax.block_until_ready(fused(state)), args.reps)
    host_s = _median(lambda: jax.block_until_ready(host_iteration(setup, fns, state)), args.reps)
    env = setup.env
    result = {
        "task": env.name, "turns": env.max_turns, "dialogue_len": env.dialogue_len,
        "prompts": setup.cfg.num_prompts, "group": setup.cfg.group_size,
        "fused_iteration_s_median": round(fused_s, 4), "host_env_iteration_s_median": round(host_s, 4),
        "host_over_fused": round(host_s / fused_s, 3),
        "fused_compile_s": round(fused_compile, 2), "host_first_iteration_s_incl_compile": round(host_compile, 2),
        "max_return_diff_host_vs_fused": max_return_diff, "max_param_diff_after_update": diff,
        "reps": args.reps, "timing": "median of reps after warm-up", "load_avg_1m": os.getloadavg()[0],
        "note": "machine shared with other engineers' jobs while measured (see load_avg_1m)",
        "machine": machine_info(), "command": " ".join(["python"] + sys.argv),
    }
    print(json.dumps(result, indent=1))
    os.makedirs(RESULTS, exist_ok=True)
    with open(os.path.join(RESULTS, "grpo_dialogue_fused_vs_host.json"), "w") as f:
        json.dump(result, f, indent=1)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
