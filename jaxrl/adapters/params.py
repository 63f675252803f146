"""The dynamic params shared by every physics adapter (Brax and MJX)."""

from __future__ import annotations

from flax import struct


@struct.dataclass
class PhysicsParams:
    """Dynamic params of a physics env (all may be traced or vmapped).

    Attributes:
      max_steps_in_episode: int, steps after which ``truncated`` is set.
      mass_scale: float, multiplies every body's mass and rotational inertia.
      friction_scale: float, multiplies every geom's friction coefficients.
      gravity_scale: float, multiplies the gravity vector.
    """

    max_steps_in_episode: int = 1000
    mass_scale: float = 1.0
    friction_scale: float = 1.0
    gravity_scale: float = 1.0
