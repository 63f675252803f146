"""Peak memory of a CartPole PPO run does not grow with its length (issue 3's target:
a 10^7-step run's peak RSS within 20% of a 10^6-step run's).

Each budget runs in a fresh process through the full host loop (:func:`jaxrl.run.trainer.run`:
chunked training, metrics log, checkpoints, learning-curve plot, final evaluation) with
the same config except ``ppo.total_env_steps``; the peak resident set size of that process
comes from ``wait4``'s rusage (``ru_maxrss``). Metrics are reduced per chunk on device and
appended to disk, so nothing on the host should scale with the number of updates.

Results: ``bench/results/memory.json`` / ``memory.csv``. Usage::

    python bench/memory.py            # 10^6 vs 10^7 env steps
"""

from __future__ import annotations

import argparse
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from bench import common  # noqa: E402

REPO = Path(__file__).resolve().parent.parent
BATCH = 64 * 128  # env steps per update: 64 envs x 128 steps
SETTINGS = [
    "ppo.num_envs=64",
    "ppo.num_steps=128",
    "ppo.num_minibatches=4",
    "ppo.update_epochs=2",
    "train.updates_per_chunk=50",
    "train.checkpoint_every=4",
    "train.progress=false",
]

_CHILD = """
import sys
from jaxrl.run import config, trainer
cfg = config.load_config(sys.argv[1], sys.argv[3:])
trainer.run(cfg, run_dir=sys.argv[2])
"""


def peak_rss_mib(total_env_steps: int) -> tuple[float, float]:
    """``(peak RSS in MiB, wall seconds)`` of one run with ``total_env_steps`` per seed."""
    with tempfile.TemporaryDirectory() as tmp:
        args = [str(REPO / "configs" / "ppo_cartpole.yaml"), str(Path(tmp) / "run"), *SETTINGS]
        args.append(f"ppo.total_env_steps={total_env_steps}")
        start = time.perf_counter()
        proc = subprocess.Popen([sys.executable, "-c", _CHILD, *args], stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        if os.waitstatus_to_exitcode(status) != 0:
            raise RuntimeError(f"run of {total_env_steps} steps failed: {proc.stderr.read().decode()[-2000:]}")
    return usage.ru_maxrss / 1024.0, wall  # Linux reports KiB


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--small", type=int, default=10**6, help="env steps of the short run")
    parser.add_argument("--large", type=int, default=10**7, help="env steps of the long run")
    args = parser.parse_args(argv)
    records = []
    for target in (args.small, args.large):
        steps = max(target // BATCH, 1) * BATCH  # a whole number of updates
        rss, wall = peak_rss_mib(steps)
        records.append({"env_steps": steps, "updates": steps // BATCH, "peak_rss_mib": round(rss, 1), "wall_s": round(wall, 1)})
        print(records[-1], flush=True)
    ratio = records[1]["peak_rss_mib"] / records[0]["peak_rss_mib"]
    for rec in records:
        rec["ratio_to_small"] = round(rec["peak_rss_mib"] / records[0]["peak_rss_mib"], 3)
    meta = common.metadata({"settings": SETTINGS, "target": "large run's peak RSS within 20% of the small run's"})
    common.write_results("memory", records, meta)
    print(f"peak RSS ratio {ratio:.3f} ({'within' if abs(ratio - 1) <= 0.2 else 'NOT within'} 20%)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
