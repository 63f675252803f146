"""jaxrl: pure-JAX, end-to-end, on-device reinforcement learning.

The public API is re-exported here; everything else may change between releases.
"""

from jaxrl.core import spaces
from jaxrl.core.check import CheckReport, check_env
from jaxrl.core.env import Environment, TimeStep, Wrapper
from jaxrl.core.registry import make, register, registered_ids, spec
from jaxrl.core.wrappers import AutoReset, ClipAction, EpisodeStatistics, RescaleAction, TimeLimit, VmapEnv
from jaxrl.core.vector import VectorEnv, VectorState

__version__ = "0.1.0"

__all__ = [
    "AutoReset",
    "CheckReport",
    "ClipAction",
    "Environment",
    "EpisodeStatistics",
    "RescaleAction",
    "TimeLimit",
    "TimeStep",
    "VectorEnv",
    "VectorState",
    "VmapEnv",
    "Wrapper",
    "check_env",
    "make",
    "register",
    "registered_ids",
    "spec",
    "spaces",
]
