"""jaxrl: pure-JAX, end-to-end, on-device reinforcement learning.

The public API is re-exported here; everything else may change between releases.
"""

from jaxrl import spaces
from jaxrl.check import CheckReport, check_env
from jaxrl.env import Environment, TimeStep, Wrapper
from jaxrl.registry import make, register, registered_ids, spec
from jaxrl.wrappers import AutoReset, ClipAction, EpisodeStatistics, RescaleAction, TimeLimit, VmapEnv
from jaxrl.vector import VectorEnv, VectorState

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
