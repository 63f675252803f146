"""Rendering: every env draws a ``uint8[H, W, 3]`` frame that depends on its state, the
raster's shapes cover the pixels geometry says, and a rollout turns into a GIF that decodes
back to the same number of frames."""

from __future__ import annotations

import io
import sys
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from PIL import Image

import jaxrl
from jaxrl.core import raster, render

ENV_IDS = [
    "CartPole-v1",
    "Acrobot-v1",
    "MountainCar-v0",
    "MountainCarContinuous-v0",
    "Pendulum-v1",
    "ProbeConstant-v0",
    "ProbeTwoStep-v0",
    "ProbeObsReward-v0",
    "ProbeActionMatch-v0",
    "ProbeTimeLimit-v0",
    "ProbeContinuous-v0",
]

# A state change each env's picture must show: (field, new value). Probes draw their step
# counter and their observation.
MOVES = {
    "CartPole-v1": ("theta", 0.15),
    "Acrobot-v1": ("theta1", 1.0),
    "MountainCar-v0": ("position", -1.0),
    "MountainCarContinuous-v0": ("position", 0.3),
    "Pendulum-v1": ("theta", 2.0),
}


def _check_frame(frame, env_id):
    assert isinstance(frame, np.ndarray), env_id
    assert frame.dtype == np.uint8 and frame.ndim == 3 and frame.shape[2] == 3, (env_id, frame.shape)
    assert frame.shape[0] >= 64 and frame.shape[1] >= 64, env_id
    assert len(np.unique(frame.reshape(-1, 3), axis=0)) >= 2, f"{env_id}: a blank frame"


@pytest.mark.parametrize("env_id", ENV_IDS)
def test_render_is_an_rgb_frame_that_follows_the_state(env_id):
    env, params = jaxrl.make(env_id)
    state, _ = jax.jit(env.reset)(jax.random.key(0), params)
    before = env.render(state, params)
    _check_frame(before, env_id)
    if env_id in MOVES:
        field, value = MOVES[env_id]
        moved = state.replace(**{field: jnp.asarray(value, jnp.float32)})
    else:
        action = env.action_space(params).sample(jax.random.key(1))
        moved, _ = jax.jit(env.step)(jax.random.key(2), state, action, params)
        if env_id == "ProbeContinuous-v0":
            moved = moved.replace(obs=-moved.obs)  # the bar flips sides
    after = env.render(moved, params)
    _check_frame(after, env_id)
    assert after.shape == before.shape
    assert np.any(after != before), f"{env_id}: the frame does not change with the state"
    # Rendering is a pure function of the state.
    np.testing.assert_array_equal(env.render(moved, params), after)


def test_rollout_becomes_a_gif_with_every_frame():
    env, params = jaxrl.make("Pendulum-v1")
    policy = lambda key, obs: jax.random.uniform(key, (1,), jnp.float32, -2.0, 2.0)  # noqa: E731
    states = render.rollout(env, params, policy, jax.random.key(3), num_steps=11)
    assert len(states) == 12  # the reset state and 11 steps (Pendulum never ends early)
    frames = render.rollout_frames(env, params, states)
    assert all(np.any(a != b) for a, b in zip(frames[:-1], frames[1:]))  # GIF keeps distinct frames
    data = render.gif_bytes(frames, fps=20)
    assert data[:6] in (b"GIF87a", b"GIF89a")
    image = Image.open(io.BytesIO(data))
    assert image.n_frames == len(frames)
    assert image.size == (frames[0].shape[1], frames[0].shape[0])
    image.seek(5)
    decoded = np.asarray(image.convert("RGB"))
    # GIF palettes are lossy; the picture itself survives (mostly white background, same shape).
    assert decoded.shape == frames[5].shape
    assert np.mean(np.all(decoded == frames[5], axis=-1)) > 0.95


def test_batched_rollout_states_render_frame_by_frame():
    """``rollout_frames`` also takes a pytree with a leading time axis (a ``scan`` output)."""
    env, params = jaxrl.make("CartPole-v1")

    def body(s, _):
        s, _ = env.step(None, s, 1, params)
        return s, s

    def run(key):
        return jax.lax.scan(body, env.reset(key, params)[0], None, length=4)[1]

    traj = jax.jit(run)(jax.random.key(0))
    frames = render.rollout_frames(env, params, traj)
    assert len(frames) == 4
    for frame in frames:
        _check_frame(frame, "CartPole-v1")
    assert np.any(frames[0] != frames[-1])


def test_gif_of_no_frames_is_an_error():
    with pytest.raises(ValueError, match="no frames"):
        render.gif_bytes([])


def test_gif_frame_count_reports_what_the_file_holds(tmp_path):
    """Identical consecutive frames are merged by the GIF writer: the count says so."""
    a = np.zeros((8, 8, 3), np.uint8)
    b = np.full((8, 8, 3), 255, np.uint8)
    path = render.save_gif([a, a, a, b, a], str(tmp_path / "x.gif"))
    assert render.gif_frame_count(path) == 3


def test_raster_shapes_cover_the_pixels_geometry_says():
    canvas = raster.blank(20, 30, (1, 2, 3))
    assert canvas.shape == (20, 30, 3) and canvas.dtype == np.uint8 and np.all(canvas == (1, 2, 3))
    raster.rect(canvas, 25, 4, 5, 14, (255, 0, 0))  # corners in any order: 20 x 10 pixels
    red = np.all(canvas == (255, 0, 0), axis=-1)
    assert red.sum() == 200 and red[4:14, 5:25].all()
    disc = raster.blank(64, 64)
    raster.circle(disc, (32, 32), 10, (0, 0, 0))
    assert abs(np.all(disc == 0, axis=-1).sum() - np.pi * 10**2) < 0.05 * np.pi * 10**2
    bar = raster.blank(20, 40)
    raster.line(bar, (5, 10), (35, 10), (0, 0, 0), width=4)  # a 30 x 4 box and two half-discs
    assert abs(np.all(bar == 0, axis=-1).sum() - (30 * 4 + np.pi * 2**2)) <= 8


def _whole_canvas(canvas, xs, ys, reach):
    """``raster._window`` without the window: every pixel of the canvas tested."""
    h, w = canvas.shape[:2]
    ys_, xs_ = np.mgrid[0:h, 0:w]
    return canvas, xs_ + 0.5, ys_ + 0.5


def test_circles_and_lines_draw_the_pixels_a_whole_canvas_test_would(monkeypatch):
    """Shapes are drawn in a window around them: the frame must equal, pixel for pixel, the
    one testing every pixel, for shapes inside, across and outside the canvas edges, of
    zero length, negative radius, sub-pixel or huge widths, and non-finite coordinates."""
    rng = np.random.default_rng(0)
    edge = [(-3.0, 5.0), (33.0, 21.0), (-40.0, -40.0), (15.5, 10.5), (0.0, 0.0), (30.0, 20.0)]
    odd = [(np.nan, 4.0), (np.inf, 3.0), (-np.inf, np.inf)]
    for i in range(400):
        a, b = (tuple(rng.uniform(-15, 45, 2)) for _ in range(2))
        if i % 5 == 0:
            a = edge[i // 5 % len(edge)]
        if i % 7 == 0:
            b = a  # zero length
        if i % 50 == 1:
            a = odd[i // 50 % len(odd)]
        width = [0.2, 1.0, 3.7, 10.0, 80.0][i % 5]
        radius = [-4.0, 0.3, 2.5, 9.0, 60.0, np.nan][i % 6]
        color = tuple(int(c) for c in rng.integers(0, 256, 3))
        for shape, args in (("line", (a, b, color, width)), ("circle", (a, radius, color))):
            want, got = raster.blank(20, 30, (9, 9, 9)), raster.blank(20, 30, (9, 9, 9))
            with np.errstate(invalid="ignore"):
                getattr(raster, shape)(got, *args)
                with monkeypatch.context() as m:
                    m.setattr(raster, "_window", _whole_canvas)
                    getattr(raster, shape)(want, *args)
            np.testing.assert_array_equal(got, want, err_msg=f"{shape}{args}")


_MOVED = ("Color", "blank", "rect", "circle", "line", "polyline")


@pytest.mark.parametrize("name", _MOVED)
def test_drawing_names_still_load_from_render_with_a_warning(name):
    with pytest.warns(DeprecationWarning, match=rf"jaxrl\.core\.render\.{name} moved to jaxrl\.core\.raster\.{name}"):
        old = getattr(render, name)
    assert old is getattr(raster, name)


def test_old_render_module_path_loads_drawing_names_with_one_warning():
    """``from jaxrl import render`` (0.1.0) reaches both halves; only the module move warns."""
    sys.modules.pop("jaxrl.render", None)
    vars(jaxrl).pop("render", None)
    with warnings.catch_warnings(record=True) as record:
        warnings.simplefilter("always")
        from jaxrl import render as old

        assert old.blank is raster.blank and old.show_gif is render.show_gif
    assert [str(w.message).split(" moved")[0] for w in record] == ["jaxrl.render"]
    with pytest.raises(AttributeError):
        render.no_such_name
