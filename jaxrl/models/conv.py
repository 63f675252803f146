"""Convolutional torsos (flax linen) for image observations ``[..., H, W, C]``.

:class:`ConvTorso` maps ``[..., H, W, C]`` to flat features ``[..., F]`` (ReLU after every
layer, then flatten); the dense layers that follow are the network's ``hidden`` MLP, so
``nature_cnn`` with ``hidden: [512]`` is Mnih et al. (2015) exactly. Kinds (:data:`KINDS`):

* ``nature_cnn``: 32 8x8 stride 4, 64 4x4 stride 2, 64 3x3 stride 1, VALID (Mnih et al. 2015),
  for large frames (84x84).
* ``minatar_cnn``: 16 3x3 stride 1, VALID (Young & Tian 2019, MinAtar's own network; then a
  128-unit dense layer), for small frames (10x10).
* ``impala``: per stage a 3x3 conv, a 3x3 stride-2 max-pool and two residual blocks
  (Espeholt et al. 2018; channels 16, 32, 32; a final ReLU).

``channels`` overrides the widths (one per conv layer, or per IMPALA stage). Kernels are
orthogonal with gain ``sqrt(2)`` like the MLP's hidden layers (drawn in one batch by
:func:`jaxrl.models.networks.init_params` when ``deferred_kernels``), or flax's LeCun
normal (``lecun_init``, what the Q-networks use); biases zero. Each convolution is one
matmul over shifted slices (:class:`Conv`, why there). :func:`check_image` refuses
observation shapes a torso cannot read, in one line naming the key; :func:`leaf_image` finds
an image leaf inside a flat structured observation. ``docs/networks.md``
has the architectures and the config keys.
"""

from __future__ import annotations

import math

import flax.linen as nn
import jax
import jax.numpy as jnp
import numpy as np

from jaxrl.models.init import orthogonal  # the no-LAPACK orthogonal init

#: Conv torso kinds (the value of a config's ``network.conv``).
KINDS = ("nature_cnn", "minatar_cnn", "impala")
#: Published widths: per conv layer (nature_cnn, minatar_cnn) or per stage (impala).
DEFAULT_CHANNELS = {"nature_cnn": (32, 64, 64), "minatar_cnn": (16,), "impala": (16, 32, 32)}
#: (kernel, stride) of each layer of the plain conv stacks, VALID padding.
LAYOUTS = {"nature_cnn": ((8, 4), (4, 2), (3, 1)), "minatar_cnn": ((3, 1),)}
CONV_GAIN = math.sqrt(2.0)


def channels_of(kind: str, channels) -> tuple[int, ...]:
    """The widths ``kind`` uses: ``channels`` if given, else :data:`DEFAULT_CHANNELS`."""
    return tuple(DEFAULT_CHANNELS[kind] if channels is None else channels)


def check_channels(kind: str, channels) -> None:
    """``ValueError("network.channels: ...")`` when ``channels`` does not fit ``kind``."""
    if channels is None:
        return
    if not (len(channels) > 0 and all(isinstance(c, int) and not isinstance(c, bool) and c > 0 for c in channels)):
        raise ValueError(f"network.channels: expected a non-empty list of positive integers, got {list(channels)!r}")
    need = len(DEFAULT_CHANNELS[kind]) if kind in LAYOUTS else None
    if need is not None and len(channels) != need:
        raise ValueError(f"network.channels: {kind} has {need} conv layers, got {len(channels)} widths {list(channels)}")


def output_hw(kind: str, hw: tuple[int, int], num_stages: int = 3) -> tuple[int, int]:
    """Spatial size ``(H', W')`` after the torso (``num_stages``: IMPALA's stage count)."""
    h, w = hw
    if kind == "impala":
        for _ in range(num_stages):
            h, w = -(-h // 2), -(-w // 2)  # SAME pooling, stride 2
        return h, w
    for k, s in LAYOUTS[kind]:
        h, w = (h - k) // s + 1, (w - k) // s + 1
    return h, w


def check_image(kind: str, obs_shape: tuple[int, ...], channels=None, source: str = "the env") -> None:
    """``ValueError("network.conv: ...")`` unless ``obs_shape`` (of ``source``, for the
    message) is an image ``(H, W, C)`` that every layer of ``kind`` fits."""
    if kind not in KINDS:
        raise ValueError(f"network.conv: expected null or one of {list(KINDS)}, got {kind!r}")
    if len(obs_shape) != 3:
        raise ValueError(
            f"network.conv: {kind} needs image observations (H, W, C), {source} gives shape {tuple(obs_shape)}; "
            "use network.conv: null (an MLP on the flattened observation)"
        )
    stages = len(channels_of(kind, channels))
    h, w = output_hw(kind, obs_shape[:2], stages)
    if h < 1 or w < 1:
        raise ValueError(
            f"network.conv: {kind} does not fit the {obs_shape[0]}x{obs_shape[1]} frames of {source} "
            f"(its strides leave no pixels); use minatar_cnn or impala for small frames"
        )


def leaf_image(env, obs_size: int, leaf: str, kind: str, channels=None) -> tuple[int, tuple[int, int, int]]:
    """``(start, (H, W, C))``: where leaf ``leaf`` of ``env``'s flat observation (``obs_size``
    values, named back by ``env.unflatten_obs``) lies, as one row-major slice
    ``obs[start:start + H*W*C]``; ``ValueError("network.image_leaf: ...")`` when ``env`` has no
    such leaf, it is not an image ``[H, W, C]`` or not one slice, or ``kind`` does not fit it."""
    if not callable(getattr(env, "unflatten_obs", None)):
        raise ValueError(
            f"network.image_leaf: {env.name} has a plain observation with no named leaves (no unflatten_obs); "
            "use network.image_leaf: null"
        )
    leaves = env.unflatten_obs(np.arange(obs_size, dtype=np.float64))  # each leaf holds its own positions
    if leaf not in leaves:
        raise ValueError(f"network.image_leaf: {env.name} has no leaf {leaf!r}; its leaves: {sorted(leaves)}")
    where = np.asarray(leaves[leaf])
    if where.ndim != 3:
        raise ValueError(f"network.image_leaf: leaf {leaf!r} of {env.name} has shape {where.shape}, not an image [H, W, C]")
    start = int(where.flat[0])
    if not np.array_equal(where.ravel(), np.arange(start, start + where.size)):
        raise ValueError(f"network.image_leaf: leaf {leaf!r} of {env.name} is not one row-major slice of the flat observation")
    check_image(kind, where.shape, channels, f"leaf {leaf!r} of {env.name}")
    return start, tuple(int(d) for d in where.shape)


def feature_size(kind: str, obs_shape: tuple[int, ...], channels=None) -> int:
    """``F``, the length of the torso's flat output for ``obs_shape = (H, W, C)``."""
    widths = channels_of(kind, channels)
    h, w = output_hw(kind, obs_shape[:2], len(widths))
    return h * w * widths[-1]


def same_padding(size: int, kernel: int, stride: int) -> tuple[int, int]:
    """``(low, high)`` zero padding of ``"SAME"`` (output ``ceil(size / stride)``), as XLA pads."""
    total = max((-(-size // stride) - 1) * stride + kernel - size, 0)
    return total // 2, total - total // 2


class Conv(nn.Module):
    """A 2-D convolution ``[N, H, W, C] -> [N, H', W', features]`` with ``nn.Conv``'s params
    (``kernel [k, k, C, features]``, ``bias``) and, to rounding, its outputs, computed as
    one matmul over the ``k * k`` shifted slices of the input (im2col). Under a ``vmap`` over
    seeds the kernel is batched, and XLA's CPU convolution then turns into a much slower
    grouped one; a batched matmul does not."""

    features: int
    kernel: int
    stride: int
    padding: str  # "VALID" | "SAME"
    kernel_init: object

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        k, s = self.kernel, self.stride
        kernel = self.param("kernel", self.kernel_init, (k, k, x.shape[-1], self.features), jnp.float32)
        bias = self.param("bias", nn.initializers.zeros, (self.features,), jnp.float32)
        if self.padding == "SAME":
            x = jnp.pad(x, ((0, 0), same_padding(x.shape[1], k, s), same_padding(x.shape[2], k, s), (0, 0)))
        oh, ow = (x.shape[1] - k) // s + 1, (x.shape[2] - k) // s + 1
        patches = jnp.concatenate(
            [x[:, i: i + s * (oh - 1) + 1: s, j: j + s * (ow - 1) + 1: s, :] for i in range(k) for j in range(k)], axis=-1
        )  # [N, oh, ow, k * k * C], ordered like the kernel's [k, k, C] axes
        flat = jnp.reshape(patches, (-1, patches.shape[-1])) @ jnp.reshape(kernel, (-1, self.features))
        return jnp.reshape(flat + bias, patches.shape[:-1] + (self.features,))  # a 2-D matmul: cheaper on CPU


def _conv(features: int, kernel: int, stride: int, padding: str, name: str, deferred: bool, lecun: bool) -> Conv:

    init = nn.initializers.zeros if deferred else (nn.initializers.lecun_normal() if lecun else orthogonal(CONV_GAIN))
    return Conv(features, kernel, stride, padding, init, name=name)


class ConvTorso(nn.Module):
    """``[..., H, W, C] -> float32 [..., F]`` (see the module docstring).

    Attributes:
      kind: a key of :data:`KINDS`.
      channels: widths, or ``None`` for :data:`DEFAULT_CHANNELS`.
      deferred_kernels: zero kernels, filled by :func:`jaxrl.models.networks.init_params`.
      lecun_init: flax's LeCun-normal kernels instead of orthogonal ones.
    """

    kind: str
    channels: tuple[int, ...] | None = None
    deferred_kernels: bool = False
    lecun_init: bool = False

    @nn.compact
    def __call__(self, x: jax.Array) -> jax.Array:
        x = jnp.asarray(x, jnp.float32)
        batch = x.shape[:-3]
        x = jnp.reshape(x, (-1,) + x.shape[-3:])  # one batch axis for the convolutions
        widths = channels_of(self.kind, self.channels)
        conv = lambda c, k, s, pad, name: _conv(c, k, s, pad, name, self.deferred_kernels, self.lecun_init)  # noqa: E731
        if self.kind == "impala":
            for i, c in enumerate(widths):
                x = conv(c, 3, 1, "SAME", f"conv_{i}")(x)
                x = nn.max_pool(x, (3, 3), (2, 2), padding="SAME")
                for j in range(2):
                    y = conv(c, 3, 1, "SAME", f"conv_{i}_res{j}_a")(nn.relu(x))
                    x = x + conv(c, 3, 1, "SAME", f"conv_{i}_res{j}_b")(nn.relu(y))
            x = nn.relu(x)
        else:
            for i, (c, (k, s)) in enumerate(zip(widths, LAYOUTS[self.kind])):
                x = nn.relu(conv(c, k, s, "VALID", f"conv_{i}")(x))
        return jnp.reshape(x, batch + (-1,))


def conv_torso(kind: str | None, channels=None, **kwargs) -> ConvTorso | None:
    """The :class:`ConvTorso` of a config's ``network.conv`` / ``network.channels``
    (``None`` for ``kind=None``: the network flattens the observation instead)."""
    if kind is None:
        return None
    return ConvTorso(kind, None if channels is None else tuple(channels), **kwargs)
