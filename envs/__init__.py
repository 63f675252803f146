"""The built-in environment suite (installed as ``jaxrl_envs``), one env per module.

``register_all`` is this package's entry point in the ``jaxrl.envs`` group: the registry
calls it on first lookup, exactly as it calls a third-party package's.
"""

from __future__ import annotations

from jaxrl import registry

_BUILTIN = [
    # (id, entry point, description)
    ("CartPole-v1", "jaxrl_envs.cartpole:CartPole", "Gymnasium cart-pole, discrete push left/right, 500-step limit"),
]


def register_all() -> None:
    """Register every built-in env (idempotent)."""
    known = set(registry._REGISTRY)
    for env_id, entry_point, description in _BUILTIN:
        if env_id not in known:
            registry.register(env_id, entry_point, description=description)
