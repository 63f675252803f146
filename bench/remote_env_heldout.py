"""The held-out score rising on a served copy of a text task as on the device copy (issue 41).

    python bench/remote_env_heldout.py [--seed 1] [--sft RUN_DIR]

The task is the ``pick`` task of ``bench/text_grpo_lift.py`` (``configs/grpo_pick_larger.yaml``:
"Which is larger, A or B?", the SFT demonstrations showing only the answer format, so the SFT
start is near chance and GRPO's gain is its own). Both GRPO runs start from one SFT run of
``configs/sft_pick_larger.yaml`` (``--sft``; without it one is trained first) with the same
``train.seed``:

* *device*: ``jaxrl train configs/grpo_pick_larger.yaml --init-from SFT``;
* *remote*: the same ``grpo`` and ``train`` sections with ``env.remote`` on two ``jaxrl serve
  --config configs/grpo_pick_larger.yaml`` processes on loopback (the training rows, and the
  held-out rows with ``--held-out`` as ``eval_url``).

Each is one ``jaxrl train`` process under ``nice -n 19`` (``bench/text_tuning.train_process``:
wall and CPU seconds, the in-training evaluation curve, the final evaluation). The held-out
figure compared is the greedy one on **every held-out row once**, on device: the SFT start's
(its run's final evaluation), the device run's end (its final evaluation), and the remote
run's end (its final weights evaluated by the device copy's program here, as the remote
copy's own evaluation draws its rows from the server with replacement; that figure is
recorded too). The servers' CPU seconds are read from ``/proc`` before they stop. Results:
``bench/results/remote_env_heldout.json`` and ``.md``; the runs in ``runs/remote_env_heldout/``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [HERE, ROOT]
import common  # noqa: E402  (bench/common.py)
import text_tuning  # noqa: E402  (bench/text_tuning.py: one recorded jaxrl train process)

BASE = os.path.join("runs", "remote_env_heldout")  # relative to ROOT, as the configs name their rows
GRPO = os.path.join("configs", "grpo_pick_larger.yaml")
SFT = os.path.join("configs", "sft_pick_larger.yaml")
STEM = os.path.join(HERE, "results", "remote_env_heldout")
SESSIONS = 256  # the final evaluation's 256 episodes are in flight together


def serve(held_out: bool):
    """A ``jaxrl serve --config GRPO`` process (``nice -n 19``); ``(process, ws URL)`` once ready."""
    return common.serve_process(["--config", GRPO, "--port", "0", "--max-sessions", str(SESSIONS)]
                                + (["--held-out"] if held_out else []), nice=True)


def cpu_s(pid: int) -> float:
    """User + system CPU seconds of a live process and its waited children (``/proc``; ``nice``
    execs the server, so its pid is the server's)."""
    with open(f"/proc/{pid}/stat") as f:
        fields = f.read().rsplit(")", 1)[1].split()
    return sum(int(x) for x in fields[11:15]) / os.sysconf("SC_CLK_TCK")


def remote_config(task_cfg, urls: tuple[str, str], path: str) -> None:
    """The GRPO config of ``GRPO`` with the env section replaced by ``env.remote`` on ``urls``."""
    import yaml

    from jaxrl.run import build

    env = build.env_setup(task_cfg.env).env
    with open(os.path.join(ROOT, GRPO)) as f:
        raw = yaml.safe_load(f)
    raw["env"] = {"remote": {"url": urls[0], "eval_url": urls[1], "prompt_len": int(env.prompt_len),
                             "turn_tokens": int(env.max_turn_tokens), "timeout_s": 300},
                  "tokenizer": {"chat_template": False}}  # the served text already holds the chat template
    with open(os.path.join(ROOT, path), "w") as f:
        yaml.safe_dump(raw, f, sort_keys=False)


def device_heldout(remote_run: str, seed: int) -> dict:
    """The remote run's final weights scored by the device copy: every held-out row once, greedy."""
    from jaxrl.run import build
    from jaxrl.run import config as config_lib
    from jaxrl.run.evaluate import evaluate_run, load_run

    _, _, states, step = load_run(os.path.join(ROOT, remote_run))
    cfg = config_lib.load_config(os.path.join(ROOT, GRPO))  # greedy on every row: the figure does not depend on the seed
    summary = evaluate_run(build.build(cfg), states, seed)
    pol = summary["policies"]
    return {"checkpoint_update": step, **{k: {"mean": round(v["mean"], 4), "ci95": [round(v["ci95_low"], 4), round(v["ci95_high"], 4)],
                                              "episodes": v["episodes"], "label": v["label"]} for k, v in pol.items()},
            "held_out_rows": summary.get("held_out_rows")}


def markdown(record: dict, path: str) -> None:
    d, r, s = record["device"], record["remote"], record["sft"]
    start = s["eval"]["correct"]

    def fig(e):
        return f"{e['mean']:.3f} [{e['ci95'][0]:.3f}, {e['ci95'][1]:.3f}]"

    def curve(run, key):
        return ", ".join(f"{c['update']}: {c[key]:.3f}" for c in run["curve"] if key in c)

    lines = [common.measured(record["meta"], "two jaxrl serve processes on the same machine for the remote run"), "",
             f"GRPO on the pick task (configs/grpo_pick_larger.yaml, {record['updates']} updates, train.seed "
             f"{record['seed']}) from one SFT run ({s['name']}), on device and against `jaxrl serve` copies of the task "
             "(training rows; held-out rows as eval_url). Held-out: greedy, every one of the "
             f"{start['episodes']} held-out rows once, scored on device (the remote run's final weights through the "
             "device copy's evaluation program).", "",
             "| run | held-out correct at start | at end | gain | held-out reward at end | CPU s | wall s |",
             "|---|---|---|---|---|---|---|",
             f"| device | {fig(start)} | {fig(d['eval']['correct'])} | {d['eval']['correct']['mean'] - start['mean']:+.3f} | "
             f"{fig(d['eval']['greedy'])} | {d['cpu_s']} | {d['wall_s']} |",
             f"| remote | {fig(start)} | {fig(r['device_eval']['correct'])} | "
             f"{r['device_eval']['correct']['mean'] - start['mean']:+.3f} | {fig(r['device_eval']['greedy'])} | "
             f"{r['cpu_s']} + servers {record['server_cpu_s']} | {r['wall_s']} |", "",
             f"The remote run's own final evaluation (against the served held-out copy, {r['eval']['greedy']['episodes']} "
             f"episodes drawn with replacement): greedy reward {fig(r['eval']['greedy'])}.", "",
             "In-training held-out evaluations (every 10 updates; device: the first 64 rows once, `heldout_correct`; "
             "remote: 64 episodes drawn from the served held-out copy, `heldout_reward`, correct + 0.1 format):", "",
             f"- device heldout_correct: {curve(d, 'heldout_correct')}",
             f"- device heldout_reward: {curve(d, 'heldout_reward')}",
             f"- remote heldout_reward: {curve(r, 'heldout_reward')}",
             f"- training reward (return_mean) at updates 1 / last: device {d['curve'][0]['return_mean']:.3f} / "
             f"{d['curve'][-1]['return_mean']:.3f}, remote {r['curve'][0]['return_mean']:.3f} / {r['curve'][-1]['return_mean']:.3f}"]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def main(argv=None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--seed", type=int, default=1)
    p.add_argument("--sft", default="", help="an SFT run of configs/sft_pick_larger.yaml (default: train one)")
    args = p.parse_args(argv)
    os.makedirs(os.path.join(ROOT, BASE), exist_ok=True)
    load_before = os.getloadavg()[0]
    sets = [f"train.seed={args.seed}"]

    if args.sft:
        sft_dir = os.path.relpath(os.path.join(ROOT, args.sft), ROOT) if not os.path.isabs(args.sft) else args.sft
        sft = {"name": sft_dir, "eval": text_tuning._eval(os.path.join(ROOT, sft_dir)), "trained_here": False}
    else:
        sft_dir = os.path.join(BASE, f"seed{args.seed}_sft")
        sft = {"name": sft_dir, **text_tuning.train_process(SFT, sft_dir, sets, None, BASE), "trained_here": True}
    runs = os.path.dirname(sft_dir)
    init = os.path.basename(sft_dir)

    device = text_tuning.train_process(GRPO, os.path.join(BASE, "device"), sets, init, runs)
    print(f"device: {device['wall_s']} s wall, {device['cpu_s']} s CPU, {device['eval']}", flush=True)

    from jaxrl.run import config as config_lib

    servers = [serve(False), serve(True)]
    try:
        remote_yaml = os.path.join(BASE, "grpo_pick_larger_remote.yaml")
        remote_config(config_lib.load_config(os.path.join(ROOT, GRPO)), (servers[0][1], servers[1][1]), remote_yaml)
        remote = text_tuning.train_process(remote_yaml, os.path.join(BASE, "remote"), sets, init, runs)
        print(f"remote: {remote['wall_s']} s wall, {remote['cpu_s']} s CPU, {remote['eval']}", flush=True)
        server_cpu = round(sum(cpu_s(proc.pid) for proc, _ in servers), 1)
        remote["device_eval"] = device_heldout(os.path.join(BASE, "remote"), args.seed)
        print(f"remote, scored on device: {remote['device_eval']}", flush=True)
    finally:
        for proc, _ in servers:
            proc.kill()
            proc.wait()
    meta = common.metadata({"load_before": load_before, "load_after": os.getloadavg()[0], "git": common.git_rev()})
    record = {"meta": meta, "seed": args.seed, "updates": device["curve"][-1]["update"] if device["curve"] else None,
              "sft": sft, "device": device, "remote": remote, "server_cpu_s": server_cpu,
              "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
    common.write_record(STEM, record, markdown)
    print(json.dumps({"start": sft["eval"].get("correct"), "device": device["eval"].get("correct"),
                      "remote": remote["device_eval"].get("correct")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
