"""Legal-action masks for the algorithms: find an env's mask hook, mask a policy or Q-values.

An env with legal actions defines ``action_mask(obs)``: from one observation, bool ``[n]``
(``Discrete``) or ``[D, max(nvec)]`` (``MultiDiscrete``, per component), ``True`` where legal;
``None`` when it has no mask (``docs/masks.md``). Because the mask is a function of the
observation, a rollout that stores observations stores the mask the action was taken with,
and the update recomputes exactly the same mask for its log-probabilities and targets.

:func:`action_mask_fn` finds the hook (through wrappers that keep the observation) unless the
config turned masks off; :class:`MaskedPolicy` wraps a policy network so that its
categorical distributions are masked (and factorised for ``MultiDiscrete``) where the raw
observation is at hand (:func:`masked`); :func:`legal_q` masks Q-values.
"""

from __future__ import annotations

import dataclasses
import math
from typing import Any, Callable

import jax
import jax.numpy as jnp

from jaxrl.core import spaces
from jaxrl.core.env import Environment
from jaxrl.models.distributions import Categorical, MultiCategorical, legal_actions


def _hook(env: Environment) -> tuple[Environment, Callable] | None:
    """The outermost env of the wrapper chain that defines ``action_mask``."""
    while isinstance(env, Environment):
        fn = getattr(env, "action_mask", None)
        if callable(fn):
            return env, fn
        env = getattr(env, "env", None)
    return None


def mask_shape(space: spaces.Space) -> tuple[int, ...] | None:
    """The shape of one observation's mask for an action ``space`` (``None``: no mask fits)."""
    if isinstance(space, spaces.Discrete):
        return (space.n,)
    if isinstance(space, spaces.MultiDiscrete):
        return (len(space.nvec), max(space.nvec))
    return None


def action_mask_fn(env: Environment, params: Any, enabled: bool = True) -> Callable | None:
    """``mask(obs [*batch, *obs_shape]) -> bool [*batch, *mask_shape]`` of ``env``, or ``None``
    (masks off, no hook, a hook that returns ``None``, or a continuous action space).

    Raises ``ValueError("action_mask: ...")`` when the hook sits under a wrapper that changes
    the observation, or returns the wrong shape or dtype.
    """
    found = _hook(env) if enabled else None
    space = env.action_space(params)
    shape = mask_shape(space)
    if found is None or shape is None:
        return None
    inner, fn = found
    obs_shape = tuple(env.observation_space(params).shape)
    if tuple(inner.observation_space(params).shape) != obs_shape:
        raise ValueError(f"action_mask: {inner.name}'s mask reads its own observation, but a wrapper changed it; "
                         "define action_mask on the wrapper or set action_mask: false")
    out = jax.eval_shape(fn, jax.ShapeDtypeStruct(obs_shape, jnp.float32))
    if out is None:
        return None
    if tuple(out.shape) != shape or out.dtype != jnp.bool_:
        raise ValueError(f"action_mask: {env.name}.action_mask gives {out.dtype}{list(out.shape)}, expected "
                         f"bool{list(shape)} for {space!r}")
    return _Batched(fn, len(obs_shape))


@dataclasses.dataclass(frozen=True)
class _Batched:
    """A one-observation mask hook applied over any leading batch axes."""

    fn: Callable
    obs_ndim: int

    def __call__(self, obs: jax.Array) -> jax.Array:
        obs = jnp.asarray(obs)
        batch = obs.shape[: obs.ndim - self.obs_ndim]
        flat = jnp.reshape(obs, (math.prod(batch),) + obs.shape[len(batch):])
        out = jax.vmap(self.fn)(flat)
        return jnp.reshape(out, batch + out.shape[1:])


@dataclasses.dataclass(frozen=True)
class MaskedPolicy:
    """A policy network whose categorical distributions :func:`masked` restricts to legal
    actions (``mask_fn``, or none) and factorises over ``nvec`` (``MultiDiscrete``, the
    network's head then has ``len(nvec) * max(nvec)`` logits). Every other attribute
    (``apply``, ``init``, ``initial_carry`` ...) is the wrapped network's."""

    network: Any
    mask_fn: Callable | None = None
    nvec: tuple | None = None

    def __getattr__(self, name: str):
        if name in ("network", "mask_fn", "nvec") or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.network, name)

    def dist(self, dist: Categorical, obs: jax.Array):
        """``dist`` (from ``obs``, the raw observations) masked and, for ``nvec``, factorised."""
        mask = None if self.mask_fn is None else self.mask_fn(obs)
        if self.nvec:
            return MultiCategorical.from_flat(dist.logits, self.nvec, mask)
        return dist.replace(mask=mask)


def masked(network: Any, dist: Any, obs: jax.Array) -> Any:
    """``dist`` restricted to the legal actions of the raw observations ``obs`` when
    ``network`` is a :class:`MaskedPolicy`; ``dist`` itself otherwise."""
    return network.dist(dist, obs) if isinstance(network, MaskedPolicy) else dist


def legal_q(q: jax.Array, mask: jax.Array | None) -> jax.Array:
    """``q [..., A]`` with illegal actions at the most negative finite value (an all-masked
    row stays as it is), so ``argmax`` and ``max`` range over the legal actions only."""
    if mask is None:
        return q
    return jnp.where(legal_actions(mask), q, jnp.finfo(q.dtype).min)


@dataclasses.dataclass(frozen=True)
class MaskedQ:
    """A Q-network whose ``apply(params, obs)`` gives :func:`legal_q` of its Q-values, so
    greedy actions and bootstrap maxima range over the legal actions of ``obs`` (raw
    observations); ``init`` and every other attribute are the wrapped network's."""

    network: Any
    mask_fn: Callable

    def __getattr__(self, name: str):
        if name in ("network", "mask_fn") or name.startswith("__"):
            raise AttributeError(name)
        return getattr(self.network, name)

    def apply(self, params: Any, obs: jax.Array, *args, **kwargs) -> jax.Array:
        return legal_q(self.network.apply(params, obs, *args, **kwargs), self.mask_fn(obs))


def masked_q_network(network: Any, env: Environment, params: Any, enabled: bool = True) -> Any:
    """``network`` in a :class:`MaskedQ` when ``env`` declares legal actions (and ``enabled``)."""
    fn = action_mask_fn(env, params, enabled)
    return network if fn is None else MaskedQ(network, fn)


def legal_mask(network: Any, obs: jax.Array) -> jax.Array | None:
    """The legal actions of ``obs`` for a :class:`MaskedQ` or :class:`MaskedPolicy` with a
    mask (``None`` otherwise): what epsilon-greedy exploration draws from."""
    fn = getattr(network, "mask_fn", None) if isinstance(network, (MaskedQ, MaskedPolicy)) else None
    return None if fn is None else fn(obs)


#: The logit :func:`mask_logits` gives an illegal action: ``exp`` of it underflows to exactly 0
#: against any legal logit above ``-1e9 + 104``, and it stays finite when divided by a
#: sampling temperature (the most negative float32 would not).
MASKED_LOGIT = -1e9


def mask_logits(logits: jax.Array, mask: jax.Array | None) -> jax.Array:
    """``logits [..., A]`` with illegal actions at :data:`MASKED_LOGIT` (an all-masked row
    stays as it is): for code that softmaxes logits itself (GRPO's rollout and loss)."""
    if mask is None:
        return logits
    return jnp.where(legal_actions(mask), logits, jnp.asarray(MASKED_LOGIT, logits.dtype))
