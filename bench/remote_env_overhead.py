"""One GRPO update on a text task on device vs the same task served by ``jaxrl serve`` (env.remote).

    python bench/remote_env_overhead.py [--sessions 8 64 256] [--reps 5] [--completion-len 8]

The model is the text recipes' checkpoint (``envs/assets/text_model``); the task
``text/WordProblems-v0`` in its tokenizer, completions of ``--completion-len`` tokens.
*Device*: the task on device (its rubric inside the program). *Remote*: the same task served
by a ``jaxrl serve`` process on loopback (``--max-sessions`` the batch's sessions), trained
through :class:`jaxrl.text.remote.RemoteTask`: one ``pure_callback`` resets every session of
the update, one steps them all (the completion sent as text, re-tokenized and scored by the
server). Sessions = prompts x group (8 = 4 x 2, 64 = 16 x 4, 256 = 32 x 8). Both are
``jaxrl.algos.grpo.update.update`` jitted, the same initial state; the timed figure is the
median of ``--reps`` updates after a warm-up, compile apart; the host's time inside the two
callbacks (waiting for the server included) is timed per update. The server runs on the same
machine, so its CPU time is part of the remote figure. Results:
``bench/results/remote_env_overhead.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import functools
import os
import statistics
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODEL = os.path.join(ROOT, "envs", "assets", "text_model")
STEM = os.path.join(HERE, "results", "remote_env_overhead")
GROUPS = {8: (4, 2), 64: (16, 4), 256: (32, 8)}


def serve(sessions: int, completion_len: int):
    """A ``jaxrl serve`` process of the task; ``(process, ws URL)`` once it is ready."""
    from bench import common

    return common.serve_process(["text/WordProblems-v0", "--port", "0", "--max-sessions", str(sessions),
                                 "--set", f"env.tokenizer.path={MODEL}", "--set", f"env.text.completion_len={completion_len}"])


def time_update(setup, reps: int, host_ms: list[float]) -> dict:
    import jax

    from jaxrl.algos.grpo import update as update_lib

    state = jax.jit(functools.partial(update_lib.init, setup))(jax.random.PRNGKey(0))
    step = jax.jit(functools.partial(update_lib.update, setup))
    t0 = time.perf_counter()
    jax.block_until_ready(step(state))
    first = time.perf_counter() - t0
    times, hosts = [], []
    for _ in range(reps):
        host_ms.clear()
        t0 = time.perf_counter()
        out = jax.block_until_ready(step(state))
        times.append(time.perf_counter() - t0)
        hosts.append(sum(host_ms))
    return {"update_ms_median": 1e3 * statistics.median(times), "first_call_s": first,
            "host_callback_ms_median": statistics.median(hosts), "reward_mean": float(out[1]["reward"]),
            "completion_tokens_mean": float(out[1]["completions/mean_length"])}


def markdown(record: dict, path: str) -> None:
    from bench.common import measured

    lines = [measured(record["meta"], "jaxrl serve on the same machine"), "",
             f"GRPO update, text/WordProblems-v0, the text model, completions of {record['completion_len']} tokens; "
             f"median of {record['reps']} updates (compile apart).", "",
             "| sessions (prompts x group) | device ms | remote ms | remote / device | host in callbacks ms |",
             "|---|---|---|---|---|"]
    for r in record["rows"]:
        lines.append(f"| {r['sessions']} ({r['prompts']} x {r['group']}) | {r['device']['update_ms_median']:.0f} | "
                     f"{r['remote']['update_ms_median']:.0f} | {r['remote']['update_ms_median'] / r['device']['update_ms_median']:.2f} | "
                     f"{r['remote']['host_callback_ms_median']:.0f} |")
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def main(argv=None) -> int:
    sys.path.insert(0, ROOT)
    p = argparse.ArgumentParser()
    p.add_argument("--sessions", type=int, nargs="+", default=[8, 64, 256], choices=sorted(GROUPS))
    p.add_argument("--reps", type=int, default=5)
    p.add_argument("--completion-len", type=int, default=8)
    args = p.parse_args(argv)

    from bench.common import git_rev, metadata, write_record
    from jaxrl.algos import grpo
    from jaxrl.algos.contract import EnvSetup
    from jaxrl.run import config as config_lib
    from jaxrl.run.build import env_setup
    from jaxrl.text import remote

    load_before = os.getloadavg()[0]
    host_ms: list[float] = []
    for name in ("reset", "step"):
        call = getattr(remote.RemoteHost, name)

        def timed(self, *a, _call=call):
            t0 = time.perf_counter()
            try:
                return _call(self, *a)
            finally:
                host_ms.append(1e3 * (time.perf_counter() - t0))

        setattr(remote.RemoteHost, name, timed)

    sets = [f"env.tokenizer.path={MODEL}", f"env.text.completion_len={args.completion_len}"]
    device_env = env_setup(config_lib.convert(config_lib.apply_overrides({"env": {"id": "text/WordProblems-v0"}}, sets)["env"],
                                              config_lib.EnvConfig, "env"))
    task = device_env.env.unwrapped
    codec = remote.tokenizer_codec(MODEL, chat_template=False, system_prompt="")  # the served text holds the template
    rows = []
    for sessions in args.sessions:
        proc, url = serve(sessions, args.completion_len)  # a pool of this many sessions: each batched step is its size
        try:
            remote_cfg = remote.RemoteConfig(url=url, prompt_len=task.prompt_len, turn_tokens=args.completion_len, timeout_s=120)
            remote_task = remote.remote_task(remote_cfg, codec)
            prompts, group = GROUPS[sessions]
            cfg = grpo.GRPOConfig(num_prompts=prompts, group_size=group, model=grpo.config.ModelConfig(policy="hf", path=MODEL),
                                  loss=grpo.config.LossConfig(type="dapo", eps_high=0.28), optim=grpo.config.GRPOOptim(lr=5e-5))
            row = {"sessions": sessions, "prompts": prompts, "group": group}
            for name, env, params in (("device", device_env.env, device_env.params),
                                      ("remote", remote_task, remote_task.default_params)):
                setup = grpo.make_setup(EnvSetup(env, params, env.held_out_params(params)), cfg)
                row[name] = time_update(setup, args.reps, host_ms)
                print(sessions, name, row[name], flush=True)
            rows.append(row)
            remote_task.host.close()
        finally:
            proc.kill()
            proc.wait()
    meta = metadata({"load_before": load_before, "load_after": os.getloadavg()[0], "git": git_rev()})
    record = {"meta": meta, "completion_len": args.completion_len, "reps": args.reps, "rows": rows}
    write_record(STEM, record, markdown)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
