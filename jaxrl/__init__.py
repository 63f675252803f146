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


def load_policy(run_dir: str, seed: int = 0, deterministic: bool = True):
    """A trained run's policy: ``policy(obs, key) -> action``, and for any policy (recurrent
    ones carry their state) ``carry = policy.init_carry(batch_shape)`` and ``carry, action =
    policy.act(carry, obs, key, done)``; pure and jittable (:func:`jaxrl.run.export.load_policy`;
    imported on first use: the run machinery is heavy)."""
    from jaxrl.run.export import load_policy as load

    return load(run_dir, seed=seed, deterministic=deterministic)

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
    "load_policy",
    "make",
    "register",
    "registered_ids",
    "spec",
    "spaces",
]
