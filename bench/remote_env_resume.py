"""Resume and determinism of a remote GRPO run against a deterministic ``jaxrl serve``.

    python bench/remote_env_resume.py [--updates 4]

``text/WordProblems-v0`` (the text model's tokenizer) served by a ``jaxrl serve`` process on
loopback; GRPO of the text model through ``env.remote`` (``jaxrl.run.trainer.run``, one
update per chunk, a checkpoint after each). Three runs with the same seed: *straight*
(``--updates`` updates), *again* (the same, a second time), and *killed* (stopped by an
exception at its third checkpoint save, after that update was logged, as a kill would) then
*resumed* with ``resume=``: the updates after its last checkpoint, episodes in flight
included, run again. Recorded: whether every logged metric but the wall time (rewards,
returns, lengths, entropy, loss, ...) is equal between straight and again, and between
straight and killed + resumed. Results: ``bench/results/remote_env_resume.json`` and ``.md``.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
MODEL = os.path.join(ROOT, "envs", "assets", "text_model")
STEM = os.path.join(HERE, "results", "remote_env_resume")


class Killed(Exception):
    """Raised from a checkpoint save: the run stops as a kill would stop it."""


def records(run_dir: str) -> list[dict]:
    with open(os.path.join(run_dir, "metrics.jsonl"), encoding="utf-8") as f:
        return [{k: v for k, v in json.loads(line).items() if k != "wall_time"} for line in f]


def markdown(record: dict, path: str) -> None:
    from bench.common import measured

    lines = [measured(record["meta"], "jaxrl serve on the same machine"), "",
             f"GRPO through env.remote on a served text/WordProblems-v0, {record['updates']} updates, seed 0.", "",
             "| comparison | every logged metric equal (wall time apart) |", "|---|---|",
             f"| straight vs a second run, same seed | {record['again_equal']} |",
             f"| straight vs killed at update {record['killed_at']}'s checkpoint (logged, not saved) and resumed | "
             f"{record['resumed_equal']} |"]
    with open(path, "w", encoding="utf-8") as f:
        f.write("\n".join(lines) + "\n")


def main(argv=None) -> int:
    sys.path.insert(0, ROOT)
    p = argparse.ArgumentParser()
    p.add_argument("--updates", type=int, default=4)
    args = p.parse_args(argv)

    from bench.common import git_rev, metadata, write_record
    from bench.remote_env_overhead import serve
    from jaxrl.run import config as config_lib
    from jaxrl.run import trainer
    from jaxrl.run.checkpoint import Checkpoints

    load_before = os.getloadavg()[0]
    proc, url = serve(64, 12)  # room for every run's 8 sessions: a finished run's host keeps its connections open
    out = tempfile.mkdtemp(prefix="remote_resume_")
    try:
        raw = {"algo": "grpo",
               "env": {"remote": {"url": url, "prompt_len": 40, "turn_tokens": 12, "timeout_s": 120},
                       "tokenizer": {"chat_template": False}},
               "grpo": {"num_prompts": 4, "group_size": 2, "num_updates": args.updates, "eval_episodes": 4,
                        "model": {"policy": "hf", "path": MODEL}},
               "train": {"seed": 0, "updates_per_chunk": 1, "checkpoint_every": 1, "progress": False}}
        cfg = config_lib.config_from_dict(raw)
        runs = {}
        for name in ("straight", "again"):
            trainer.run(cfg, run_dir=os.path.join(out, name), evaluate=False)
            runs[name] = records(os.path.join(out, name))
        real_save, saves = Checkpoints.save, []

        def killing_save(self, step, state):
            saves.append(step)
            if len(saves) == 3:
                raise Killed
            return real_save(self, step, state)

        Checkpoints.save = killing_save
        try:
            trainer.run(cfg, run_dir=os.path.join(out, "killed"), evaluate=False)
        except Killed:
            pass
        finally:
            Checkpoints.save = real_save
        trainer.run(None, resume=os.path.join(out, "killed"), evaluate=False)
        runs["resumed"] = records(os.path.join(out, "killed"))
    finally:
        proc.kill()
        proc.wait()
    meta = metadata({"load_before": load_before, "load_after": os.getloadavg()[0], "git": git_rev()})
    record = {"meta": meta, "updates": args.updates, "killed_at": saves[-1] if saves else None,
              "again_equal": runs["again"] == runs["straight"], "resumed_equal": runs["resumed"] == runs["straight"],
              "rewards": {k: [r["reward"] for r in v] for k, v in runs.items()},
              "entropy": {k: [r["entropy"] for r in v] for k, v in runs.items()}}
    write_record(STEM, record, markdown)
    print(json.dumps({k: record[k] for k in ("again_equal", "resumed_equal", "killed_at")}))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
