"""Frames and GIFs: a tiny numpy rasteriser for env ``render`` methods, and helpers that
turn a rollout into a GIF file or an inline Jupyter image.

The drawing functions work on ``uint8[H, W, 3]`` canvases in place, with pixel
coordinates ``(x, y)``, ``y`` growing downwards. They need no GL, no pygame and no display.
"""

from __future__ import annotations

import io
from typing import Callable, Iterable, Sequence

import jax
import numpy as np

Color = tuple[int, int, int]


def blank(height: int, width: int, color: Color = (255, 255, 255)) -> np.ndarray:
    """A ``uint8[height, width, 3]`` canvas filled with ``color``."""
    canvas = np.empty((height, width, 3), np.uint8)
    canvas[:] = color
    return canvas


def _grid(canvas: np.ndarray):
    h, w = canvas.shape[:2]
    ys, xs = np.mgrid[0:h, 0:w]
    return xs + 0.5, ys + 0.5


def rect(canvas: np.ndarray, x0: float, y0: float, x1: float, y1: float, color: Color) -> None:
    """Fill the axis-aligned rectangle with corners ``(x0, y0)`` and ``(x1, y1)``."""
    h, w = canvas.shape[:2]
    xa, xb = sorted((x0, x1))
    ya, yb = sorted((y0, y1))
    xa, xb = int(np.clip(round(xa), 0, w)), int(np.clip(round(xb), 0, w))
    ya, yb = int(np.clip(round(ya), 0, h)), int(np.clip(round(yb), 0, h))
    canvas[ya:yb, xa:xb] = color


def circle(canvas: np.ndarray, center: Sequence[float], radius: float, color: Color) -> None:
    """Fill a disc."""
    xs, ys = _grid(canvas)
    mask = (xs - center[0]) ** 2 + (ys - center[1]) ** 2 <= radius**2
    canvas[mask] = color


def line(canvas: np.ndarray, p0: Sequence[float], p1: Sequence[float], color: Color, width: float = 1.0) -> None:
    """Draw a segment of the given pixel ``width`` (a capsule: rounded ends)."""
    xs, ys = _grid(canvas)
    (x0, y0), (x1, y1) = p0, p1
    dx, dy = x1 - x0, y1 - y0
    length2 = dx * dx + dy * dy
    t = np.zeros_like(xs) if length2 == 0 else np.clip(((xs - x0) * dx + (ys - y0) * dy) / length2, 0.0, 1.0)
    dist2 = (xs - (x0 + t * dx)) ** 2 + (ys - (y0 + t * dy)) ** 2
    canvas[dist2 <= max(width / 2.0, 0.5) ** 2] = color


def polyline(canvas: np.ndarray, points: Sequence[Sequence[float]], color: Color, width: float = 1.0) -> None:
    """Draw connected segments through ``points``."""
    for a, b in zip(points[:-1], points[1:]):
        line(canvas, a, b, color, width)


def rollout_frames(env, params, states: Iterable) -> list[np.ndarray]:
    """Render each state of a rollout (a pytree with a leading time axis, or a list)."""
    if not isinstance(states, (list, tuple)):
        n = jax.tree_util.tree_leaves(states)[0].shape[0]
        states = [jax.tree_util.tree_map(lambda x, i=i: x[i], states) for i in range(n)]
    return [np.asarray(env.render(s, params), np.uint8) for s in states]


def gif_bytes(frames: Sequence[np.ndarray], fps: int = 30) -> bytes:
    """Encode ``uint8[H, W, 3]`` frames as an animated GIF (looping forever)."""
    from PIL import Image

    if len(frames) == 0:
        raise ValueError("cannot write a GIF with no frames")
    images = [Image.fromarray(np.asarray(f, np.uint8)) for f in frames]
    buf = io.BytesIO()
    images[0].save(buf, format="GIF", save_all=True, append_images=images[1:], duration=max(1, int(1000 / fps)), loop=0)
    return buf.getvalue()


def save_gif(frames: Sequence[np.ndarray], path: str, fps: int = 30) -> str:
    """Write frames to ``path`` as a GIF; returns the path."""
    data = gif_bytes(frames, fps)
    with open(path, "wb") as f:
        f.write(data)
    return path


def gif_frame_count(path: str) -> int:
    """Frames stored in the GIF at ``path``. The GIF writer merges a frame identical to the
    previous one into that frame's display time (a pole at rest after the episode ended),
    so this can be fewer than the frames given to :func:`save_gif`."""
    from PIL import Image

    with Image.open(path) as image:
        return int(image.n_frames)


def show_gif(frames: Sequence[np.ndarray], fps: int = 30):
    """An ``IPython.display.Image`` that shows the animation inline in Jupyter."""
    from IPython.display import Image

    return Image(data=gif_bytes(frames, fps), format="gif")


def rollout(env, params, policy: Callable, key: jax.Array, num_steps: int):
    """Run one env for ``num_steps`` with ``action = policy(key, obs)`` (no auto-reset:
    the rollout stops changing after the episode ends). Returns the list of states,
    starting with the reset state; suitable for :func:`rollout_frames`.
    """
    key, reset_key = jax.random.split(key)
    state, ts = env.reset(reset_key, params)
    states = [state]
    step = jax.jit(env.step)
    for _ in range(num_steps):
        key, act_key, step_key = jax.random.split(key, 3)
        action = policy(act_key, ts.obs)
        state, ts = step(step_key, state, action, params)
        states.append(state)
        if bool(ts.terminated) or bool(ts.truncated):
            break
    return states
