"""Rollouts to frames and GIF files: step an env with a policy, render each state, and
encode the frames as a GIF file or an inline Jupyter image (``jaxrl render``, notebooks).

Envs draw their frames with :mod:`jaxrl.core.raster`. Its drawing functions (``blank``,
``rect``, ``circle``, ``line``, ``polyline``, ``Color``) moved there from here in 0.5.0;
the old path loads them until 0.6.0 with a ``DeprecationWarning`` naming the new one.
"""

from __future__ import annotations

import io
from typing import Callable, Iterable, Sequence

import jax
import numpy as np


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


def __getattr__(name: str):
    """The drawing functions that moved to :mod:`jaxrl.core.raster` (with a warning)."""
    from jaxrl import _compat

    return _compat.moved_name(__name__, name)
