"""The environment contract.

An environment is a hashable object that carries *static* structure only (shapes,
vocabulary sizes, names) and two pure functions::

    reset(key, params)                -> (state, TimeStep)
    step(key, state, action, params)  -> (state, TimeStep)

``params`` is a pytree of *dynamic* values (physics constants, episode limits, task
difficulty) that may be traced, ``vmap``-ed (domain randomisation) or changed between
calls without recompiling. ``state`` is a pytree the env defines.

``TimeStep.terminated`` means the MDP reached a terminal state: do not bootstrap.
``TimeStep.truncated`` means a limit cut the episode short: bootstrap from the value of
the observation in this TimeStep (or ``info["final_obs"]`` once auto-reset has replaced
``obs`` with the next episode's first observation). When both are set (the limit is hit on
the very step the MDP terminates) ``terminated`` wins: there is nothing to bootstrap.

Every env in the registry follows the Gymnasium convention for classic control: its params
carry ``max_steps_in_episode`` and its state a ``time`` counter, and ``truncated`` is set on
the step where ``time`` reaches the limit. Auto-reset is *not* part of an env: it is a
wrapper (:mod:`jaxrl.core.wrappers`, :mod:`jaxrl.core.vector`).
"""

from __future__ import annotations

import dataclasses
import math
import numbers
import re
import reprlib
from typing import Any, Generic, TypeVar

import jax
import jax.numpy as jnp
import numpy as np
from flax import struct

from jaxrl.core import spaces

Array = jax.Array
PRNGKey = jax.Array
EnvState = TypeVar("EnvState")
EnvParams = TypeVar("EnvParams")


@struct.dataclass
class TimeStep:
    """What an env returns from ``reset`` and ``step``.

    Attributes:
      obs: observation after the step, shape ``observation_space.shape``.
      reward: float32 ``[]``, reward for the transition (0 at reset).
      terminated: bool ``[]``, the MDP ended: do not bootstrap.
      truncated: bool ``[]``, a limit cut the episode: bootstrap from the final observation.
      info: dict of arrays with a structure that is the same at reset and at every step
        (so it can sit in a ``scan`` carry). Wrappers add keys (``final_obs``, episode
        statistics); free-form diagnostics only, never control flow.
    """

    obs: Any
    reward: Array
    terminated: Array
    truncated: Array
    info: dict = dataclasses.field(default_factory=dict)

    @property
    def done(self) -> Array:
        """``terminated | truncated``: the episode is over (for bookkeeping, not bootstrapping)."""
        return jnp.logical_or(self.terminated, self.truncated)


def tree_select(pred: jax.Array, on_true: Any, on_false: Any) -> Any:
    """Per-leaf ``where(pred, on_true, on_false)`` with ``pred`` (e.g. bool ``[N]``, one per
    env) broadcast against each leaf's trailing axes (leaves ``[N, ...]``)."""

    def pick(a, b):
        p = jnp.reshape(pred, jnp.shape(pred) + (1,) * (jnp.ndim(a) - jnp.ndim(pred)))
        return jnp.where(p, a, b)

    return jax.tree_util.tree_map(pick, on_true, on_false)


def first_timestep(obs: Any, info: dict | None = None) -> TimeStep:
    """The TimeStep returned by ``reset``: zero reward, no flags set."""
    return TimeStep(
        obs=obs,
        reward=jnp.zeros((), jnp.float32),
        terminated=jnp.zeros((), jnp.bool_),
        truncated=jnp.zeros((), jnp.bool_),
        info={} if info is None else info,
    )


def transition(obs, reward, terminated, truncated, info: dict | None = None) -> TimeStep:
    """A step's TimeStep with the contract's dtypes enforced (float32 reward, bool flags)."""
    return TimeStep(
        obs=obs,
        reward=jnp.asarray(reward, jnp.float32),
        terminated=jnp.asarray(terminated, jnp.bool_),
        truncated=jnp.asarray(truncated, jnp.bool_),
        info={} if info is None else info,
    )


def check_action_shape(env_name: str, action: Any, shape: tuple) -> None:
    """Refuse, at trace time, an ``action`` whose shape is not ``shape`` (one env's action).

    Without it a batched or malformed action broadcasts through ``step`` and silently
    changes the shape of the state (a scan carry then breaks far from the cause).
    """
    got = tuple(jnp.shape(action))
    if got != tuple(shape):
        raise ValueError(
            f"{env_name}.step: action has shape {got}, expected {tuple(shape)} "
            "(one env's action; vmap or a vector wrapper for a batch)"
        )


def clip_discrete_action(action: Any, n: int, nan_as: int) -> jax.Array:
    """int32 ``[]``: ``action`` clipped into ``{0, ..., n - 1}``, the "clip" invalid-action rule.

    Integer actions are clipped; a float action is rounded to the nearest action first and
    NaN counts as ``nan_as`` (so no action, however malformed, reaches the dynamics as NaN).
    """
    action = jnp.asarray(action)
    if jnp.issubdtype(action.dtype, jnp.floating):
        action = jnp.round(jnp.nan_to_num(action, nan=float(nan_as), posinf=n - 1.0, neginf=0.0))
    return jnp.clip(action, 0, n - 1).astype(jnp.int32)


def positive_int(owner: str, name: str, value: Any) -> int:
    """``value`` as an ``int`` if it is a positive integer (not a bool, not a float), else a
    one-line ``ValueError`` naming ``owner`` and the argument ``name``."""
    if isinstance(value, bool) or not isinstance(value, numbers.Integral) or value <= 0:
        raise ValueError(f"{owner} needs {name} > 0 (a positive int), got {reprlib.repr(value)}")
    return int(value)


class Environment(Generic[EnvState, EnvParams]):
    """Base class of every jaxrl environment.

    Subclasses are (frozen) dataclasses or plain classes holding static configuration
    only: they must be hashable and carry no arrays, so that they can be passed to
    ``jax.jit`` as static arguments and closed over without retracing.

    Subclasses implement :meth:`default_params`, :meth:`reset`, :meth:`step`,
    :meth:`observation_space` and :meth:`action_space`; :meth:`render` where it makes
    sense. ``invalid_action_rule`` documents what ``step`` does with an action outside
    ``action_space`` (``check_env`` verifies it never produces NaN).
    """

    #: How ``step`` treats actions outside the action space ("clip", "no-op", ...).
    invalid_action_rule: str = "clip"
    #: Largest number of resets worth computing in one ``vmap`` (``None``: no limit). Batched
    #: envs that draw many start states at once (``VmapEnv``, ``VectorEnv``, the reset pool:
    #: :func:`batched_resets`) compute them in batches of this size: Craftax's world generation
    #: costs far more per reset in one large ``vmap`` than in batches of 16 on a CPU
    #: (``docs/ecosystem.md``).
    reset_batch: int | None = None

    @property
    def name(self) -> str:
        return type(self).__name__

    @property
    def default_params(self) -> EnvParams:
        raise NotImplementedError

    def reset(self, key: PRNGKey, params: EnvParams) -> tuple[EnvState, TimeStep]:
        raise NotImplementedError

    def step(
        self, key: PRNGKey, state: EnvState, action: Any, params: EnvParams
    ) -> tuple[EnvState, TimeStep]:
        raise NotImplementedError

    def observation_space(self, params: EnvParams) -> spaces.Space:
        raise NotImplementedError

    def action_space(self, params: EnvParams) -> spaces.Space:
        raise NotImplementedError

    def render(self, state: EnvState, params: EnvParams) -> np.ndarray:
        """An RGB frame, ``uint8[H, W, 3]``, of ``state`` (one env, not a batch)."""
        raise NotImplementedError(f"{self.name} does not render")

    def held_out_params(self, params: EnvParams) -> EnvParams:
        """``params`` switched to the held-out split evaluation uses (an env without one:
        ``params``; token tasks draw held-out prompts)."""
        return params

    def episode_bound(self, params: EnvParams) -> int | None:
        """The most steps an episode of ``params`` can last, or ``None`` if unbounded.

        By default ``params.max_steps_in_episode`` (the truncation limit). A fixed-horizon
        env, whose episodes always *terminate* within ``H`` steps and have no time limit to
        truncate at (bsuite's Catch), returns ``H`` instead of inventing a
        ``max_steps_in_episode``; evaluation loops and ``check_env`` read this.
        """
        limit = getattr(params, "max_steps_in_episode", None)
        return None if limit is None else int(limit)

    @property
    def unwrapped(self) -> "Environment":
        return self

    def __repr__(self) -> str:
        return f"{self.name}()"


class Wrapper(Environment):
    """An environment that delegates everything to ``self.env`` unless overridden.

    Wrappers are hashable: equality and hash come from the wrapper type, the wrapped env
    and the wrapper's own static fields, so two identical wrapper stacks share a jit cache.
    """

    def __init__(self, env: Environment):
        if not isinstance(env, Environment):
            raise TypeError(f"{type(self).__name__} wraps an Environment, got {reprlib.repr(env)}")
        self.env = env

    def _static_fields(self) -> tuple:
        return tuple(sorted((k, v) for k, v in vars(self).items()))

    def __eq__(self, other) -> bool:
        return type(self) is type(other) and self._static_fields() == other._static_fields()

    def __hash__(self) -> int:
        return hash((type(self), self._static_fields()))

    @property
    def name(self) -> str:
        return self.env.name

    @property
    def invalid_action_rule(self) -> str:  # type: ignore[override]
        return self.env.invalid_action_rule

    @property
    def reset_batch(self) -> int | None:  # type: ignore[override]
        return self.env.reset_batch

    @property
    def default_params(self):
        return self.env.default_params

    def reset(self, key, params):
        return self.env.reset(key, params)

    def step(self, key, state, action, params):
        return self.env.step(key, state, action, params)

    def observation_space(self, params):
        return self.env.observation_space(params)

    def action_space(self, params):
        return self.env.action_space(params)

    def render(self, state, params):
        return self.env.render(state, params)

    def held_out_params(self, params):
        return self.env.held_out_params(params)

    def episode_bound(self, params):
        return self.env.episode_bound(params)

    @property
    def unwrapped(self) -> Environment:
        return self.env.unwrapped

    def __repr__(self) -> str:
        return f"{type(self).__name__}({self.env!r})"


# ---------------------------------------------------------------------------------------
# Typed params: overrides are checked against the params class
# ---------------------------------------------------------------------------------------

#: A decimal or scientific number literal. YAML 1.1 reads "5e-1" (no dot) as a string, so
#: env params accept such strings as floats, the way the config loader does for its fields.
_NUMBER_RE = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")
_KINDS = {"bool": bool, "int": int, "float": float}
_INT32 = np.iinfo(np.int32)


def batched_resets(env: Environment, keys: jax.Array, params, params_axis: int | None = None):
    """``env.reset`` under each of ``keys``: ``(state, TimeStep)``, leaves ``[len(keys), ...]``.

    One ``vmap``, or, with more keys than ``env.reset_batch``, ``lax.map`` over batches of
    that size: the same draws (each key's reset is the same function), without the cost of
    a reset that grows faster than its batch (Craftax's world generation on a CPU).
    ``params`` carry a leading ``[len(keys)]`` axis iff ``params_axis == 0``.
    """
    batch = env.reset_batch
    if batch is None or batch >= keys.shape[0]:
        return jax.vmap(env.reset, in_axes=(0, params_axis))(keys, params)
    if params_axis is None:
        return jax.lax.map(lambda k: env.reset(k, params), keys, batch_size=batch)
    return jax.lax.map(lambda kp: env.reset(*kp), (keys, params), batch_size=batch)


@dataclasses.dataclass(frozen=True)
class Range:
    """The allowed values of one numeric env param: ``value >= ge``, ``> gt``, ``<= le``,
    ``< lt`` for every bound that is not ``None``.

    A params class declares its ranges in a class attribute ``bounds`` mapping field names to
    ``Range``; :func:`replace_params` (so :func:`jaxrl.make` and the config) checks every
    override against it::

        @struct.dataclass
        class MyParams:
            length: float = 0.5
            max_steps_in_episode: int = 500
            bounds: ClassVar[dict] = {"length": Range(gt=0), "max_steps_in_episode": Range(ge=1)}

    A bound may name a *static* field of the params (``struct.field(pytree_node=False)``)
    that the env sets in ``default_params``: ``Range(ge=1, le="max_digits")`` bounds a
    token task's ``num_digits`` by the size its buffers were built for (a larger value
    would be clipped silently). Static fields cannot be overridden.
    """

    ge: float | str | None = None
    gt: float | str | None = None
    le: float | str | None = None
    lt: float | str | None = None

    def span(self, params: Any = None) -> str | None:
        """``"[1, 8]"`` (brackets open where the bound is strict) when both ends are bounded."""
        lo, hi = (self.ge, "[") if self.ge is not None else (self.gt, "("), (self.le, "]") if self.le is not None else (self.lt, ")")
        if lo[0] is None or hi[0] is None:
            return None
        value = lambda b: getattr(params, b) if isinstance(b, str) else b  # noqa: E731
        return f"{lo[1]}{value(lo[0])}, {value(hi[0])}{hi[1]}"

    def violation(self, values: np.ndarray, params: Any = None) -> str | None:
        """The first bound some entry of ``values`` breaks, as text (``"> 0"``, ``"<= 8
        (max_digits)"``), or ``None``; a bound naming a field is read from ``params``."""
        tests = (
            (self.ge, ">=", lambda v, b: v >= b),
            (self.gt, ">", lambda v, b: v > b),
            (self.le, "<=", lambda v, b: v <= b),
            (self.lt, "<", lambda v, b: v < b),
        )
        for bound, op, holds in tests:
            if isinstance(bound, str):
                value = getattr(params, bound)
                bound, text = value, f"{op} {value} ({bound})"
            else:
                text = f"{op} {bound}"
            if bound is not None and not np.all(holds(values, bound)):
                return text
        return None


def _declared_kind(field: dataclasses.Field, current: Any) -> type | None:
    """``bool``, ``int`` or ``float``: the field's annotation, or when that is loose (``Any``,
    ``jax.Array``) the kind of its current value; ``None`` for a non-numeric field."""
    tp = field.type
    if isinstance(tp, str):
        tp = _KINDS.get(tp.strip())
    if tp in (bool, int, float):
        return tp
    for kind in (bool, int, float):  # bool first: it is an int
        if isinstance(current, kind) and not hasattr(current, "dtype"):
            return kind
    dtype = getattr(current, "dtype", None)
    kind = np.dtype(dtype).kind if dtype is not None else ""
    return {"b": bool, "i": int, "u": int, "f": float}.get(kind)


def _bad(where: str, kind: type, value: Any) -> TypeError:
    return TypeError(f"{where}: expected {kind.__name__}, got {reprlib.repr(value)}")


def _coerce_scalar(where: str, kind: type, value: Any) -> Any:
    """A Python ``bool``/``int``/``float``/numeric ``str`` as a value of ``kind``."""
    if isinstance(value, str):
        if kind is bool or not _NUMBER_RE.match(value.strip()):
            raise _bad(where, kind, value)
        number = float(value)
        if kind is int and not number.is_integer():
            raise _bad(where, kind, value)
        value = number
    if isinstance(value, bool):
        if kind is not bool:
            raise _bad(where, kind, value)
        return value
    if not isinstance(value, (int, float)):
        raise _bad(where, kind, value)
    if not math.isfinite(value):
        raise ValueError(f"{where}: expected a finite {kind.__name__}, got {value!r}")
    if kind is float:
        return value if isinstance(value, float) else float(value)
    if kind is bool:
        if value not in (0, 1):
            raise _bad(where, kind, value)
        return bool(value)
    if isinstance(value, float) and not value.is_integer():
        raise _bad(where, kind, value)
    if not _INT32.min <= value <= _INT32.max:
        raise ValueError(f"{where}: {value!r} does not fit in int32")
    return int(value)


def _coerce_array(where: str, kind: type, value: Any) -> Any:
    """A numpy/JAX array (or numpy scalar, or tracer) as an array of ``kind``: kept as it is
    when its dtype fits, cast when its (concrete) values do."""
    dkind = np.dtype(value.dtype).kind
    traced = isinstance(value, jax.core.Tracer)
    if dkind not in "biuf" or (dkind == "b" and kind is not bool):
        raise _bad(where, kind, value)
    if traced:  # values unknown at trace time: the dtype must fit as it is
        if (kind is int and dkind == "f") or (kind is bool and dkind != "b"):
            raise TypeError(f"{where}: expected {kind.__name__}, got a traced {value.dtype} array")
        return value
    values = np.asarray(value)
    if dkind == "f" and not np.all(np.isfinite(values)):
        raise ValueError(f"{where}: expected finite values, got {reprlib.repr(values)}")
    if kind is bool and dkind != "b":
        if not np.all((values == 0) | (values == 1)):
            raise _bad(where, kind, value)
        return value.astype(np.bool_)
    if kind is int and dkind == "f":
        if not np.all(values == np.round(values)):
            raise _bad(where, kind, value)
        if not np.all((values >= _INT32.min) & (values <= _INT32.max)):
            raise ValueError(f"{where}: {reprlib.repr(values)} does not fit in int32")
        return value.astype(np.int32)
    return value


def check_param(params: Any, name: str, value: Any) -> Any:
    """``value`` checked (and converted) for the field ``name`` of the params dataclass
    ``params``: its kind (``_declared_kind``) and its ``Range`` in ``type(params).bounds``.

    An ``int`` field takes integral numbers (``3.0`` becomes ``3``, ``2.5`` is refused), a
    ``bool`` field bools and 0/1, a ``float`` field ints, floats and numeric strings
    (``"5e-1"``); arrays and tracers are accepted when their dtype fits. Non-numbers, NaN
    and infinities raise a one-line ``TypeError``/``ValueError`` naming the param.
    """
    cls = type(params)
    where = f"{cls.__name__}.{name}"
    field = next(f for f in dataclasses.fields(params) if f.name == name)
    kind = _declared_kind(field, getattr(params, name))
    if kind is None:
        return value
    if hasattr(value, "dtype") and hasattr(value, "astype"):
        checked = _coerce_array(where, kind, value)
    else:
        checked = _coerce_scalar(where, kind, value)
    bound = _bounds(params).get(name)
    if bound is not None and not isinstance(checked, jax.core.Tracer):
        broken = bound.violation(np.asarray(checked), params)
        if broken is not None:
            span = bound.span(params)
            raise ValueError(f"{where}: must be {broken}, got {reprlib.repr(value)}" + (f"; its range is {span}" if span else ""))
    return checked


def _bounds(params: Any) -> dict:
    """``type(params).bounds`` (``{}`` when absent), checked to name fields and hold ranges."""
    cls = type(params)
    bounds = getattr(cls, "bounds", None) or {}
    known = {f.name for f in dataclasses.fields(params)}
    for name, bound in bounds.items():
        if name not in known or not isinstance(bound, Range):
            raise TypeError(f"{cls.__name__}.bounds: {name!r} must name a field and map to a Range, got {bound!r}")
        for b in (bound.ge, bound.gt, bound.le, bound.lt):
            if isinstance(b, str) and b not in _static_fields(params):
                raise TypeError(f"{cls.__name__}.bounds: {name!r}: {b!r} must name a static field (pytree_node=False)")
    return bounds


def _static_fields(params: Any) -> set[str]:
    """Names of the fields of ``params`` that are not pytree leaves (set by the env)."""
    return {f.name for f in dataclasses.fields(params) if not f.metadata.get("pytree_node", True)}


def replace_params(params: Any, **overrides) -> Any:
    """``params`` with some fields replaced, each checked by :func:`check_param`.

    Unknown names raise a ``TypeError`` naming them; a value of the wrong kind or outside
    the field's declared ``Range`` raises a one-line ``TypeError``/``ValueError`` naming the
    param, what it expects and the value. Valid values of the field's own kind are stored
    unchanged.
    """
    if not overrides:
        return params
    if not dataclasses.is_dataclass(params):
        raise TypeError(f"params of type {type(params).__name__} take no overrides")
    known = {f.name for f in dataclasses.fields(params)}
    unknown = sorted(set(overrides) - known)
    if unknown:
        raise TypeError(
            f"unknown env parameter(s) {unknown} for {type(params).__name__}; "
            f"known: {sorted(known)}"
        )
    fixed = sorted(set(overrides) & _static_fields(params))
    if fixed:
        raise TypeError(f"{type(params).__name__}: {', '.join(fixed)} is fixed by the env (its buffers are sized by it); "
                        "register or construct the env with another size instead")
    return params.replace(**{name: check_param(params, name, v) for name, v in overrides.items()})
