"""The conv-torso keys every algorithm's ``network`` section shares (``conv``, ``channels``).

``ppo.network`` (with its recurrent keys), ``dqn.network`` and ``pqn.network`` all read an
optional conv torso from :mod:`jaxrl.models.conv` in front of their hidden layers; this
module holds the Q-learners' section, the static check and the build-time check against the
env's observation space (a conv on a non-image space is refused in one line).
"""

from __future__ import annotations

import dataclasses
from typing import Any

from jaxrl.algos.contract import check
from jaxrl.core.env import Environment
from jaxrl.models import conv as conv_lib


@dataclasses.dataclass(frozen=True)
class QNetworkConfig:
    """The ``network`` section of dqn and pqn (static): an optional conv torso."""

    conv: str | None = None  # null: MLP on the flattened obs; nature_cnn | minatar_cnn | impala: conv torso on (H, W, C) images first
    channels: tuple[int, ...] | None = None  # conv widths per layer (per stage for impala); null: the torso's published ones


def check_conv(network: Any) -> None:
    """Static check of ``network.conv`` / ``network.channels`` (``ValueError("network.<key>: ...")``)."""
    check(
        network.conv is None or network.conv in conv_lib.KINDS,
        "network.conv",
        f"expected null or one of {list(conv_lib.KINDS)}, got {network.conv!r}",
    )
    check(network.conv is not None or network.channels is None, "network.channels",
          "set only with a conv torso (network.conv: nature_cnn | minatar_cnn | impala)")
    if network.conv is not None:
        conv_lib.check_channels(network.conv, network.channels)


def conv_fields(network: Any, env: Environment, env_params: Any) -> dict:
    """``{"conv", "channels"}`` for a network module over ``env``'s observations, after
    checking that a conv torso gets images it fits (``ValueError("network.conv: ...")``)."""
    if network.conv is None:
        return {"conv": None, "channels": None}
    shape = tuple(env.observation_space(env_params).shape)
    conv_lib.check_image(network.conv, shape, network.channels, env.name)
    channels = None if network.channels is None else tuple(network.channels)
    return {"conv": network.conv, "channels": channels}
