"""The raster for env ``render`` methods: numpy drawing primitives on ``uint8[H, W, 3]``
canvases, so every env can draw its frame without GL, pygame or a display.

The functions draw in place, with pixel coordinates ``(x, y)``, ``y`` growing downwards.
Turning a rollout's frames into a GIF is :mod:`jaxrl.core.render`'s job.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np

Color = tuple[int, int, int]


def blank(height: int, width: int, color: Color = (255, 255, 255)) -> np.ndarray:
    """A ``uint8[height, width, 3]`` canvas filled with ``color``."""
    canvas = np.empty((height, width, 3), np.uint8)
    canvas[:] = color
    return canvas


def _window(canvas: np.ndarray, xs: Sequence[float], ys: Sequence[float], reach: float):
    """The part of ``canvas`` within ``reach`` pixels of the box around the points ``xs``,
    ``ys`` (the whole canvas when one is not finite), and its pixel centres.

    A shape is drawn only in its window: pixels outside it are farther from the shape than
    ``reach`` and would be left alone anyway, and the ones inside get the same arithmetic as
    on the whole canvas, so the frame is the same, pixel for pixel, at a fraction of the cost.
    """
    h, w = canvas.shape[:2]
    bounds = (min(xs) - reach, max(xs) + reach, min(ys) - reach, max(ys) + reach)
    if not all(np.isfinite(bounds)):
        x0, x1, y0, y1 = 0, w, 0, h
    else:
        x0, x1 = (int(np.clip(np.floor(bounds[0]) - 1, 0, w)), int(np.clip(np.ceil(bounds[1]) + 1, 0, w)))
        y0, y1 = (int(np.clip(np.floor(bounds[2]) - 1, 0, h)), int(np.clip(np.ceil(bounds[3]) + 1, 0, h)))
    ys_, xs_ = np.mgrid[y0:y1, x0:x1]
    return canvas[y0:y1, x0:x1], xs_ + 0.5, ys_ + 0.5


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
    view, xs, ys = _window(canvas, (center[0],), (center[1],), abs(radius))
    mask = (xs - center[0]) ** 2 + (ys - center[1]) ** 2 <= radius**2
    view[mask] = color


def line(canvas: np.ndarray, p0: Sequence[float], p1: Sequence[float], color: Color, width: float = 1.0) -> None:
    """Draw a segment of the given pixel ``width`` (a capsule: rounded ends)."""
    (x0, y0), (x1, y1) = p0, p1
    half = max(width / 2.0, 0.5)
    view, xs, ys = _window(canvas, (x0, x1), (y0, y1), half)
    dx, dy = x1 - x0, y1 - y0
    length2 = dx * dx + dy * dy
    t = np.zeros_like(xs) if length2 == 0 else np.clip(((xs - x0) * dx + (ys - y0) * dy) / length2, 0.0, 1.0)
    dist2 = (xs - (x0 + t * dx)) ** 2 + (ys - (y0 + t * dy)) ** 2
    view[dist2 <= half**2] = color


def polyline(canvas: np.ndarray, points: Sequence[Sequence[float]], color: Color, width: float = 1.0) -> None:
    """Draw connected segments through ``points``."""
    for a, b in zip(points[:-1], points[1:]):
        line(canvas, a, b, color, width)
