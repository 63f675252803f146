"""Milliseconds per rendered frame of the classic-control envs, and per GIF frame.

One rollout of each env (random actions, no auto-reset, ``--steps`` states) is rendered
with :mod:`jaxrl.core.raster` as it is (each shape drawn in a window around it) and with
every shape tested at every pixel of the canvas (the definition the window must equal,
pixel for pixel; ``tests/test_render.py`` holds that), interleaved repeat by repeat. The
frames of both sides are compared, and GIF encoding of the same frames is timed apart.
The rollout is simulated (and compiled) before any timing.

Writes ``bench/results/render_frames.json`` and ``.csv``. Usage::

    python bench/render_frames.py [--steps 100] [--repeats 5]
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from pathlib import Path

import jax
import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
import common  # noqa: E402

import jaxrl  # noqa: E402
from jaxrl.core import raster, render  # noqa: E402

ENVS = ("CartPole-v1", "Pendulum-v1", "Acrobot-v1", "MountainCar-v0")


def whole_canvas_window(canvas, xs, ys, reach):
    """``raster._window`` as the whole canvas: every shape tested at every pixel."""
    h, w = canvas.shape[:2]
    ys_, xs_ = np.mgrid[0:h, 0:w]
    return canvas, xs_ + 0.5, ys_ + 0.5


def frames_with(window, env, params, states):
    real = raster._window
    raster._window = window
    try:
        return render.rollout_frames(env, params, states)
    finally:
        raster._window = real


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=100)
    parser.add_argument("--repeats", type=int, default=5)
    args = parser.parse_args()
    meta = common.run_meta()
    records = []
    for env_id in ENVS:
        env, params = jaxrl.make(env_id)
        space = env.action_space(params)
        states = render.rollout(env, params, lambda k, obs: space.sample(k), jax.random.PRNGKey(0), args.steps)
        sides = {"window": lambda: frames_with(raster._window, env, params, states),
                 "whole_canvas": lambda: frames_with(whole_canvas_window, env, params, states)}
        same = all(np.array_equal(a, b) for a, b in zip(sides["window"](), sides["whole_canvas"]()))
        timed = common.time_interleaved(sides, args.repeats)
        frames = sides["window"]()
        gif = []
        for _ in range(args.repeats):
            start = time.perf_counter()
            data = render.gif_bytes(frames)
            gif.append(time.perf_counter() - start)
        n = len(frames)
        rec = {
            "env": env_id, "frames": n, "frame_shape": list(frames[0].shape), "identical_frames": bool(same),
            "window_ms_per_frame": 1e3 * statistics.median(timed.wall["window"]) / n,
            "whole_canvas_ms_per_frame": 1e3 * statistics.median(timed.wall["whole_canvas"]) / n,
            "gif_ms_per_frame": 1e3 * statistics.median(gif) / n, "gif_bytes": len(data), "repeats": args.repeats,
        }
        rec["speedup"] = rec["whole_canvas_ms_per_frame"] / rec["window_ms_per_frame"]
        records.append(rec)
        print(f"{env_id}: {n} frames {rec['frame_shape']}, window {rec['window_ms_per_frame']:.2f} ms/frame, "
              f"whole canvas {rec['whole_canvas_ms_per_frame']:.2f} ({rec['speedup']:.1f}x), identical {same}; "
              f"GIF {rec['gif_ms_per_frame']:.2f} ms/frame", flush=True)
    meta["load_average_1m_after"] = common.machine_info().get("load_average_1m")
    meta["git"] = common.git_rev()
    paths = common.write_results("render_frames", records, meta)
    print("wrote", paths["json"])


if __name__ == "__main__":
    main()
