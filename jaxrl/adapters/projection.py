"""Frames of physics states without GL: an orthographic projection drawn in numpy.

MuJoCo's renderer needs an OpenGL context (EGL/OSMesa/GLFW), which headless CPU machines
and CI usually lack, so physics envs render through :mod:`jaxrl.core.raster`'s rasteriser:

* :func:`render_bodies` draws bodies as discs joined to their parents (Brax states carry
  body positions for every backend);
* :func:`render_geoms` draws MuJoCo geoms (capsules, cylinders, boxes, spheres) from an
  ``mjx.Data``'s ``geom_xpos`` / ``geom_xmat``.

The view is the x-z plane seen from -y (a side view, ground line at z = 0) or, for models
whose bodies all share one height (planar x-y models such as Brax's reacher), the x-y plane
seen from above. The camera follows the mean horizontal position; ground ticks every
0.5 m keep motion visible.
"""

from __future__ import annotations

import math
from typing import NamedTuple, Sequence

import numpy as np

from jaxrl.core import raster

BACKGROUND = (236, 240, 245)
GROUND = (205, 200, 190)
LINK = (202, 152, 101)
BODY = (60, 80, 160)

# MuJoCo's mjtGeom values (kept here so that drawing needs no mujoco import).
GEOM_PLANE, GEOM_SPHERE, GEOM_CAPSULE, GEOM_ELLIPSOID, GEOM_CYLINDER, GEOM_BOX = 0, 2, 3, 4, 5, 6


class View(NamedTuple):
    """A pixel mapping: world ``(a, b)`` plane coordinates to image ``(x, y)``."""

    planar: bool  # True: x-y plane from above; False: x-z plane from the side
    center_a: float  # world coordinate at the image's horizontal centre (m)
    center_b: float  # world coordinate of the reference row (m)
    row: float  # image row of ``center_b`` (px)
    scale: float  # px per metre
    width: int

    def project(self, points: np.ndarray) -> np.ndarray:
        """Pixel coordinates float ``[N, 2]`` of world points float ``[N, 3]`` (metres)."""
        points = np.atleast_2d(points)
        b = points[:, 1] if self.planar else points[:, 2]
        x = self.width / 2 + (points[:, 0] - self.center_a) * self.scale
        y = self.row - (b - self.center_b) * self.scale
        return np.stack([x, y], axis=1)


def choose_view(pos: np.ndarray, height: int, width: int, metres: float) -> View:
    """The view for bodies at ``pos`` float ``[N, 3]``: top-down when they share one height."""
    planar = bool(np.ptp(pos[:, 2]) < 1e-6 and np.ptp(pos[:, 1]) > 1e-6)
    scale = width / metres
    center_a = float(np.mean(pos[:, 0]))
    if planar:
        return View(True, center_a, float(np.mean(pos[:, 1])), height * 0.5, scale, width)
    return View(False, center_a, 0.0, height * 0.8, scale, width)


def draw_ground(canvas: np.ndarray, view: View, metres: float) -> None:
    """Ground below z = 0 with a tick every 0.5 m (side views only)."""
    if view.planar:
        return
    height, width = canvas.shape[:2]
    raster.rect(canvas, 0, view.row, width, height, GROUND)
    first = math.floor((view.center_a - metres / 2) / 0.5) * 0.5
    for i in range(int(metres / 0.5) + 2):
        x = view.project(np.array([[first + 0.5 * i, 0.0, 0.0]]))[0, 0]
        raster.line(canvas, (x, view.row), (x, view.row + 6), (120, 110, 100), 1)


def render_bodies(
    pos: np.ndarray, parents: Sequence[int], height: int = 240, width: int = 320, metres: float = 4.0
) -> np.ndarray:
    """Bodies at ``pos`` float ``[N, 3]`` (metres) as discs joined to their parents
    (``parents[i] < 0`` for none), ``uint8[height, width, 3]``; ``metres`` is the view width."""
    pos = np.asarray(pos, np.float64)
    canvas = raster.blank(height, width, BACKGROUND)
    view = choose_view(pos, height, width, metres)
    draw_ground(canvas, view, metres)
    points = view.project(pos)
    for i, parent in enumerate(parents):
        if parent >= 0:
            raster.line(canvas, points[parent], points[i], LINK, max(3.0, view.scale * 0.06))
    for p in points:
        raster.circle(canvas, p, max(3.0, view.scale * 0.05), BODY)
    return canvas


def render_geoms(
    geom_xpos: np.ndarray,
    geom_xmat: np.ndarray,
    geom_type: Sequence[int],
    geom_size: np.ndarray,
    height: int = 240,
    width: int = 320,
    metres: float = 5.0,
) -> np.ndarray:
    """MuJoCo geoms as seen by the side/top view, ``uint8[height, width, 3]``.

    Args:
      geom_xpos: float ``[G, 3]`` geom centres (m).
      geom_xmat: float ``[G, 3, 3]`` (or ``[G, 9]``) geom orientations.
      geom_type: int ``[G]`` MuJoCo ``mjtGeom`` values; planes are drawn as the ground.
      geom_size: float ``[G, 3]`` MuJoCo geom sizes (radius, half-length, ...).
    """
    xpos = np.asarray(geom_xpos, np.float64)
    xmat = np.asarray(geom_xmat, np.float64).reshape(-1, 3, 3)
    size = np.asarray(geom_size, np.float64)
    solid = [g for g, t in enumerate(geom_type) if t != GEOM_PLANE]
    canvas = raster.blank(height, width, BACKGROUND)
    view = choose_view(xpos[solid] if solid else xpos, height, width, metres)
    draw_ground(canvas, view, metres)
    for g in solid:
        _draw_geom(canvas, view, int(geom_type[g]), xpos[g], xmat[g], size[g])
    return canvas


def _draw_geom(canvas, view: View, kind: int, center, rot, size) -> None:
    if kind in (GEOM_CAPSULE, GEOM_CYLINDER):
        axis = rot[:, 2] * size[1]  # the geom's local z axis, half-length long
        ends = view.project(np.stack([center - axis, center + axis]))
        raster.line(canvas, ends[0], ends[1], LINK, max(2.0, 2 * size[0] * view.scale))
    elif kind == GEOM_BOX:
        # The box's longest local axis as a thick segment, its second-longest as width.
        order = np.argsort(size)[::-1]
        axis = rot[:, order[0]] * size[order[0]]
        ends = view.project(np.stack([center - axis, center + axis]))
        raster.line(canvas, ends[0], ends[1], BODY, max(2.0, 2 * size[order[1]] * view.scale))
    else:  # spheres, ellipsoids, meshes: a disc of the first size entry
        raster.circle(canvas, view.project(center)[0], max(2.0, size[0] * view.scale), BODY)
