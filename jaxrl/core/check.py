"""``check_env``: a conformance checker for the environment contract (:mod:`jaxrl.core.env`).

It runs an env through every promise the contract makes and reports each as a named check
(PASS, FAIL or SKIP with a one-line reason), plus a throughput figure::

    >>> report = check_env(env, params)            # prints one line per check
    >>> report.passed, report.failed_names()

The checks, in order (:data:`CHECKS`; each ``check_<name>`` function's docstring says
exactly what it verifies, ``docs/writing_an_env.md`` has the table): ``jit``, ``vmap``,
``timestep_dtypes``, ``stable_types`` (no weak-type flips between steps),
``info_structure``, ``observation_space``, ``finite``, ``truncation``, ``determinism``,
``invalid_actions``, ``no_retrace`` and ``render``. Several read one random rollout
(``num_envs`` x ``num_steps``, actions from ``action_space.sample``, auto-reset by a full
``reset`` per step, every output consumed); the throughput figure is that rollout's env
steps per second on a second call, after compilation.

``check_env(..., only=[...])`` (``jaxrl check-env ID --only a,b``) runs a subset. A check
that raises is reported as FAIL with the exception; the others still run. Compiles are the
checker's cost (about four programs per env: jitted ``reset``, ``step``, a vmapped
reset-then-step and the rollout), so keep ``num_steps``/``num_envs`` small in tests.
"""

from __future__ import annotations

import dataclasses
import functools
import time
from typing import Any, Callable, Sequence

import jax
import jax.numpy as jnp
import numpy as np

from jaxrl.core import spaces
from jaxrl.core.check_rollout import (  # the rollout the checks read, and tree comparisons
    Rollout,
    _bit_equal,
    _close,
    _Counted,
    _float_leaves_finite,
    _to_numpy,
    _type_diff,
    rollout,
)
from jaxrl.core.env import Environment, replace_params
from jaxrl.core.tokens import TokenTask

PASS, FAIL, SKIP = "PASS", "FAIL", "SKIP"
#: The small episode limit used by the ``truncation`` check (or the env's own, if smaller).
SMALL_LIMIT = 5


@dataclasses.dataclass(frozen=True)
class CheckResult:
    """One named check: its status (``PASS``/``FAIL``/``SKIP``) and a one-line message."""

    name: str
    status: str
    message: str

    @property
    def passed(self) -> bool:
        return self.status != FAIL

    def __str__(self) -> str:
        return f"{self.status}  {self.name}  {self.message}"


class Checks:
    """What a report of named checks answers (``self.checks``: a list of :class:`CheckResult`);
    shared by :class:`CheckReport` and :class:`jaxrl.run.conformance.AlgoCheckReport`."""

    checks: list[CheckResult]

    @property
    def passed(self) -> bool:
        return all(c.passed for c in self.checks)

    def failed_names(self) -> list[str]:
        return [c.name for c in self.checks if c.status == FAIL]

    def __getitem__(self, name: str) -> CheckResult:
        for c in self.checks:
            if c.name == name:
                return c
        raise KeyError(f"no check named {name!r}; checks: {[c.name for c in self.checks]}")


@dataclasses.dataclass
class CheckReport(Checks):
    """Everything ``check_env`` found.

    Attributes:
      env_name: ``env.name``.
      checks: the checks in the order they ran.
      steps_per_second: env steps/s of the random rollout, after compile (0 if it failed).
      compile_seconds: wall time of the rollout's first call (trace + compile + run).
      num_envs, num_steps: the rollout's batch size and length.
    """

    env_name: str
    checks: list[CheckResult]
    steps_per_second: float = 0.0
    compile_seconds: float = 0.0
    num_envs: int = 0
    num_steps: int = 0

    def __str__(self) -> str:
        width = max(len(c.name) for c in self.checks)
        lines = [f"check_env({self.env_name})"]
        lines += [f"  {c.status}  {c.name:<{width}}  {c.message}" for c in self.checks]
        lines.append(
            f"throughput: {self.steps_per_second:,.0f} env steps/s "
            f"({self.num_envs} envs x {self.num_steps} steps, random actions, auto-reset; "
            f"first call incl. compile {self.compile_seconds:.2f} s)"
        )
        failed = self.failed_names()
        if failed:
            lines.append(f"result: {len(failed)} check(s) FAILED: {', '.join(failed)}")
        else:
            lines.append("result: all checks passed")
        return "\n".join(lines)


# ------------------------------------------------------------------- the checks


#: Batch size of the small vmapped calls (``vmap`` and ``invalid_actions`` share one compile).
SMALL_BATCH = 5


def reset_then_step(env, reset_keys, step_keys, actions, params):
    """A batch of ``reset`` followed by one ``step`` with ``actions``; returns both outputs."""
    first = jax.vmap(env.reset, in_axes=(0, None))(reset_keys, params)
    second = jax.vmap(env.step, in_axes=(0, 0, 0, None))(step_keys, first[0], actions, params)
    return first, second


@dataclasses.dataclass
class _Context:
    """What the checks share: the env, its params, keys, compiled functions and results.

    Compiles are the checker's main cost, so it compiles four programs and shares them:
    ``reset_j``/``step_j`` (unbatched, trace-counted: ``no_retrace`` reads the counters
    after every check has used them), ``reset_step_b`` (vmapped over ``SMALL_BATCH``: the
    ``vmap`` and ``invalid_actions`` checks) and the random rollout.
    """

    env: Environment
    params: Any
    key: jax.Array
    num_envs: int
    num_steps: int
    reset_c: _Counted | None = None
    step_c: _Counted | None = None
    reset_j: Callable | None = None
    step_j: Callable | None = None
    reset_step_b: Callable | None = None
    obs_space: spaces.Space | None = None
    act_space: spaces.Space | None = None
    main: Rollout | None = None  # rollout at the env's own limit
    rollout_j: Callable | None = None  # the jitted rollout that made it (its first trace)
    again: Rollout | None = None  # second call of the main rollout (same key)
    small: Rollout | None = None  # rollout with a small limit, or None
    small_limit: int = -1
    rollout_error: Exception | None = None
    compile_seconds: float = 0.0
    steps_per_second: float = 0.0
    compiler_options: dict | None = None  # passed to every jax.jit of the checker
    trace_error: Exception | None = None  # a TRACER_ERRORS error: later checks are skipped


def _jit(ctx: _Context, fn: Callable) -> Callable:
    return jax.jit(fn, compiler_options=ctx.compiler_options)


def _limit_of(params) -> int:
    value = getattr(params, "max_steps_in_episode", None)
    return -1 if value is None else int(value)


def _sample_action(ctx: _Context, key):
    return ctx.act_space.sample(key)


def check_jit(ctx: _Context) -> tuple[str, str]:
    """``reset`` and ``step`` compile and run under ``jax.jit``."""
    env, params = ctx.env, ctx.params
    ctx.obs_space = env.observation_space(params)
    ctx.act_space = env.action_space(params)
    # The counters wrap the functions jit traces: no_retrace reads them at the end.
    ctx.reset_c = _Counted(env.reset)
    ctx.step_c = _Counted(env.step)
    ctx.reset_j = _jit(ctx, ctx.reset_c)
    ctx.step_j = _jit(ctx, ctx.step_c)
    ctx.reset_step_b = _jit(ctx, functools.partial(reset_then_step, env))
    reset_key, step_key, action_key = jax.random.split(ctx.key, 3)
    state, ts = ctx.reset_j(reset_key, params)
    state, ts = ctx.step_j(step_key, state, _sample_action(ctx, action_key), params)
    jax.block_until_ready((state, ts))
    return PASS, "reset and step compile and run under jax.jit"


def check_vmap(ctx: _Context) -> tuple[str, str]:
    """``reset``/``step`` under ``vmap`` give a leading batch axis on every leaf and agree
    with unbatched calls (float tolerance 1e-5).
    """
    params = ctx.params
    n = SMALL_BATCH
    k_reset, k_step, k_act = jax.random.split(jax.random.fold_in(ctx.key, 1), 3)
    reset_keys = jax.random.split(k_reset, n)
    step_keys = jax.random.split(k_step, n)
    actions = jax.vmap(ctx.act_space.sample)(jax.random.split(k_act, n))
    batched = ctx.reset_step_b(reset_keys, step_keys, actions, params)

    for what, tree in zip(("reset", "step"), batched):
        for path, leaf in jax.tree_util.tree_flatten_with_path(tree)[0]:
            if np.shape(leaf)[:1] != (n,):
                where = jax.tree_util.keystr(path)
                return FAIL, f"vmapped {what} output {where} has shape {np.shape(leaf)}, expected leading axis {n}"

    batched = jax.tree_util.tree_map(_to_numpy, batched)
    for i in range(n):
        want_reset, want_step = jax.tree_util.tree_map(lambda x, i=i: x[i], batched)
        state, ts = ctx.reset_j(reset_keys[i], params)
        if not _close((state, ts), want_reset):
            return FAIL, f"vmapped reset differs from unbatched reset for env {i}"
        state, ts = ctx.step_j(step_keys[i], state, actions[i], params)
        if not _close((state, ts), want_step):
            return FAIL, f"vmapped step differs from unbatched step for env {i}"
    return PASS, f"reset/step vmap over {n} envs and match unbatched calls"


def _timesteps(ctx: _Context):
    """The (state, TimeStep) after reset, one step and two steps (jitted, concrete)."""
    keys = jax.random.split(jax.random.fold_in(ctx.key, 2), 5)
    s0, t0 = ctx.reset_j(keys[0], ctx.params)
    s1, t1 = ctx.step_j(keys[1], s0, _sample_action(ctx, keys[2]), ctx.params)
    s2, t2 = ctx.step_j(keys[3], s1, _sample_action(ctx, keys[4]), ctx.params)
    return (s0, t0), (s1, t1), (s2, t2)


def check_timestep_dtypes(ctx: _Context) -> tuple[str, str]:
    """``reward`` is float32 ``[]``, ``terminated``/``truncated`` bool ``[]``, none weakly
    typed, at reset and at step.
    """
    (_, t0), (_, t1), _ = _timesteps(ctx)
    want = {"reward": ("float32", ()), "terminated": ("bool", ()), "truncated": ("bool", ())}
    for when, ts in (("reset", t0), ("step", t1)):
        for field, (dtype, shape) in want.items():
            x = getattr(ts, field)
            aval = jax.typeof(x)
            if str(aval.dtype) != dtype or tuple(aval.shape) != shape or aval.weak_type:
                got = f"{aval.dtype}{list(aval.shape)}{' (weak)' if aval.weak_type else ''}"
                return FAIL, f"{when} TimeStep.{field} is {got}, expected {dtype}{list(shape)} (not weak)"
    return PASS, "reward float32[], terminated/truncated bool[] at reset and step"


def _core(state_ts):
    state, ts = state_ts
    return {"state": state, "obs": ts.obs, "reward": ts.reward, "terminated": ts.terminated, "truncated": ts.truncated}


def check_stable_types(ctx: _Context) -> tuple[str, str]:
    """State, obs, reward and flags have the same tree structure, shapes, dtypes and weak
    types after reset, one step and two, so a ``scan`` carry never changes type.
    """
    r0, r1, r2 = _timesteps(ctx)
    for label, a, b in (("reset vs step", r0, r1), ("step vs step", r1, r2)):
        diff = _type_diff(_core(a), _core(b), "")
        if diff:
            return FAIL, f"{label}: {diff.lstrip()}"
    return PASS, "state/obs/reward/flags: same structure, shapes, dtypes, weak types at reset and over steps"


def check_info_structure(ctx: _Context) -> tuple[str, str]:
    """``info`` has the same structure, shapes and dtypes at reset and at step."""
    (_, t0), (_, t1), (_, t2) = _timesteps(ctx)
    for label, a, b in (("reset vs step", t0, t1), ("step vs step", t1, t2)):
        diff = _type_diff(a.info, b.info, "info")
        if diff:
            return FAIL, f"{label}: {diff}"
    return PASS, f"info keys {sorted(t0.info) if isinstance(t0.info, dict) else '?'} identical at reset and step"


def _with_limit(params, limit: int):
    """``params`` with ``max_steps_in_episode = limit``, keeping the field's type (an array's
    dtype, or a Python float: gymnax's BernoulliBandit declares ``100.0``)."""
    old = params.max_steps_in_episode
    value = jnp.asarray(limit, old.dtype) if hasattr(old, "dtype") else type(old)(limit)
    return replace_params(params, max_steps_in_episode=value)


def _jit_rollout(ctx: _Context) -> Callable:
    """A freshly traced, jitted :func:`rollout` for this env (a new callable each time)."""
    fn = functools.partial(rollout, ctx.env, ctx.obs_space, ctx.act_space, ctx.num_envs, ctx.num_steps)
    return _jit(ctx, _Counted(fn))


def _ensure_rollouts(ctx: _Context) -> None:
    """Compile and run the random rollout once (at the env's limit and at a small one)."""
    if ctx.rollout_error is not None:
        raise ctx.rollout_error
    if ctx.main is not None:
        return
    try:
        fn = ctx.rollout_j = _jit_rollout(ctx)
        key = jax.random.fold_in(ctx.key, 3)
        limit = _limit_of(ctx.params)

        start = time.perf_counter()  # the first call: trace, compile and run
        ctx.main = jax.block_until_ready(fn(key, ctx.params, jnp.int32(limit)))
        ctx.compile_seconds = time.perf_counter() - start

        start = time.perf_counter()  # the second call, same key: the throughput figure
        ctx.again = jax.block_until_ready(fn(key, ctx.params, jnp.int32(limit)))
        seconds = max(time.perf_counter() - start, 1e-9)
        ctx.steps_per_second = ctx.num_envs * ctx.num_steps / seconds

        if limit > 0:  # the same rollout again at a small limit, for the truncation check
            ctx.small_limit = min(limit, SMALL_LIMIT)
            small_params = _with_limit(ctx.params, ctx.small_limit)
            ctx.small = fn(jax.random.fold_in(key, 1), small_params, jnp.int32(ctx.small_limit))
    except Exception as exc:  # remembered: every later check that needs the rollout re-raises it
        ctx.main = None
        ctx.rollout_error = exc
        raise


def _first_bad(mask: np.ndarray) -> str:
    t, b = np.argwhere(~mask)[0]
    return f"step {t}, env {b}"


def check_observation_space(ctx: _Context) -> tuple[str, str]:
    """obs has the space's shape and dtype, and every observation of the random rollout
    lies inside ``observation_space(params)``.
    """
    space = ctx.obs_space
    _, ts = ctx.reset_j(ctx.key, ctx.params)
    obs = ts.obs
    if isinstance(space, (spaces.Box, spaces.Discrete)):
        shape, dtype = tuple(np.shape(obs)), jnp.result_type(obs)
        if shape != tuple(space.shape) or dtype != space.dtype:
            return FAIL, f"obs is {dtype}{list(shape)}, space is {space.dtype}{list(space.shape)}"
    if not bool(space.contains(obs)):
        return FAIL, f"reset obs {np.asarray(obs)} outside {space!r}"
    _ensure_rollouts(ctx)
    mask = np.asarray(ctx.main.in_space)
    if not mask.all():
        return FAIL, f"observation outside {space!r} at {_first_bad(mask)} of the random rollout"
    episodes = int(np.asarray(ctx.main.terminated | ctx.main.truncated).sum())
    return PASS, f"{mask.size} observations ({episodes} episode ends) inside {space!r}"


def check_finite(ctx: _Context) -> tuple[str, str]:
    """Every reward and float observation of the random rollout is finite."""
    _ensure_rollouts(ctx)
    mask = np.asarray(ctx.main.finite)
    if not mask.all():
        return FAIL, f"non-finite reward or observation at {_first_bad(mask)} of the random rollout"
    return PASS, f"{mask.size} rewards and observations finite"


def check_truncation(ctx: _Context) -> tuple[str, str]:
    """With ``max_steps_in_episode`` in params: ``truncated`` is never set before the
    episode's step counter reaches the limit and always set (or the episode terminated) when
    it does, at the env's own limit and at :data:`SMALL_LIMIT` (set with
    :func:`jaxrl.core.env.replace_params`); the counter restarts after reset. Without it, a
    fixed-horizon env (``episode_bound``) never truncates and ends within its bound.
    """
    limit = _limit_of(ctx.params)
    if limit < 0:
        return _check_fixed_horizon(ctx)
    _ensure_rollouts(ctx)
    reached = 0
    for lim, ro in ((limit, ctx.main), (ctx.small_limit, ctx.small)):
        ok = np.asarray(ro.limit_ok)
        if not ok.all():
            t, b = np.argwhere(~ok)[0]
            trunc = bool(np.asarray(ro.truncated)[t, b])
            when = "before the step counter reached" if trunc else "missing when the step counter reached"
            return FAIL, f"with max_steps_in_episode={lim}: truncated {when} the limit (step {t}, env {b})"
        reached += int(np.asarray(ro.at_limit).sum())
    if reached == 0:
        return SKIP, f"every episode terminated before the limit (tried {limit} and {ctx.small_limit})"
    return PASS, f"truncated exactly at the limit ({reached} episodes reached max_steps_in_episode={limit} or {ctx.small_limit})"


def _check_fixed_horizon(ctx: _Context) -> tuple[str, str]:
    """No truncation limit: with ``env.episode_bound(params) = H`` every episode of the
    random rollout ends (terminated, never truncated) within ``H`` steps."""
    bound = ctx.env.episode_bound(ctx.params)
    # A token task without its own bound is bounded by its turns: every step writes a token.
    dialogue = bound is None and isinstance(ctx.env, TokenTask)
    if dialogue:
        bound = int(ctx.env.max_completion_len)
    if bound is None:
        return SKIP, "no max_steps_in_episode and no episode_bound: episodes are unbounded"

    _ensure_rollouts(ctx)
    elapsed = np.asarray(ctx.main.elapsed)
    truncated = np.asarray(ctx.main.truncated)
    past_bound = elapsed > bound
    if dialogue and not past_bound.any():
        # A dialogue is truncated when its last turn ends unanswered: that is its bound at work.
        at_cap = int(truncated.sum())
        return PASS, f"bounded by its turns: every episode ended within {bound} steps ({at_cap} at the turn cap)"
    if truncated.any():
        t, b = np.argwhere(truncated)[0]
        return FAIL, f"truncated at step {t}, env {b}, but the params have no max_steps_in_episode to truncate at"
    if past_bound.any():
        t, b = np.argwhere(past_bound)[0]
        return FAIL, f"episode ran past episode_bound(params)={bound} (step {t}, env {b})"
    ends = int(np.asarray(ctx.main.terminated).sum())
    longest = int(elapsed.max())
    return PASS, f"fixed horizon: {ends} episodes terminated within episode_bound(params)={bound} steps (longest {longest})"


def check_determinism(ctx: _Context) -> tuple[str, str]:
    """The same key gives a bit-identical rollout on a second call, and a fresh trace lowers
    to the program of the first (hidden Python state read at trace time, without another
    compile).
    """
    _ensure_rollouts(ctx)
    if not _bit_equal(ctx.main, ctx.again):
        return FAIL, "two calls with the same key gave different rollouts"
    # A fresh trace must lower to the same program as the rollout's first (the one that ran,
    # lowered again from jit's cache: no second trace): a hidden Python counter or any other
    # state read at trace time shows up as a different constant (lowering costs no compile).
    args = (ctx.key, ctx.params, jnp.int32(_limit_of(ctx.params)))
    first = ctx.rollout_j.lower(*args).as_text()
    second = _jit_rollout(ctx).lower(*args).as_text()
    if first != second:
        return FAIL, "a fresh trace of reset/step lowers to another program than the first (hidden Python state read at trace time?)"
    return PASS, "same key -> bit-identical rollout across calls; a fresh trace lowers to the first trace's program"


def _invalid_actions(space: spaces.Space) -> tuple[jax.Array, jax.Array] | None:
    """A batch of (at most :data:`SMALL_BATCH`) out-of-range actions and their clipped
    counterparts, or None for a space without known invalid actions."""
    if isinstance(space, spaces.Discrete):
        return _invalid_discrete(space)
    if isinstance(space, spaces.MultiDiscrete):
        return _invalid_multi_discrete(space)
    if isinstance(space, spaces.Box) and jnp.issubdtype(space.dtype, jnp.floating):
        return _invalid_box(space)
    return None


def _invalid_discrete(space: spaces.Discrete) -> tuple[jax.Array, jax.Array]:
    """Below 0, at ``n``, past ``n``, and the dtype's largest and smallest values."""
    info = jnp.iinfo(space.dtype)
    values = [-1, space.n, space.n + 7, info.max, info.min]
    bad = np.array(values[:SMALL_BATCH], dtype=np.int64)
    clipped = np.clip(bad, 0, space.n - 1)
    return jnp.asarray(bad, space.dtype), jnp.asarray(clipped, space.dtype)


def _invalid_multi_discrete(space: spaces.MultiDiscrete) -> tuple[jax.Array, jax.Array]:
    """The rows of :func:`_invalid_discrete` per component (``n`` is each component's
    ``nvec``), the second and fourth invalid in the first component only."""
    nvec = np.asarray(space.nvec, np.int64)
    info = jnp.iinfo(space.dtype)
    rows = [
        np.full_like(nvec, -1),  # every component below 0
        nvec,  # every component at its n
        nvec + 7,  # every component past its n
        np.full_like(nvec, info.max),
        np.full_like(nvec, info.min),
    ]
    bad = np.stack(rows[:SMALL_BATCH])
    # Rows 1 and 3 are out of range in the first component only (the others set to 0, a valid
    # value): one bad component among good ones.
    bad[1::2, 1:] = 0
    clipped = np.clip(bad, 0, nvec - 1)  # per component
    return jnp.asarray(bad, space.dtype), jnp.asarray(clipped, space.dtype)


def _invalid_box(space: spaces.Box) -> tuple[jax.Array, jax.Array]:
    """Actions with every component at +-1e6, +-the dtype's largest value, or -1e3."""
    big = float(jnp.finfo(space.dtype).max)
    values = jnp.asarray([1e6, -1e6, big, -big, -1e3][:SMALL_BATCH], space.dtype)
    # Action i is values[i] in every component: [n] -> [n, *space.shape].
    per_action = values.reshape(values.shape + (1,) * len(space.shape))
    bad = jnp.broadcast_to(per_action, values.shape + tuple(space.shape))
    return bad, jnp.clip(bad, space.low, space.high)


def check_invalid_actions(ctx: _Context) -> tuple[str, str]:
    """Out-of-range actions (ints below 0, at or above ``n`` and the int32 extremes, per component
    for ``MultiDiscrete``; +-1e6 and +-float32 max for ``Box``) give finite outputs; when
    ``env.invalid_action_rule`` starts with "clip", the outputs equal the clipped action's.
    """
    rule = ctx.env.invalid_action_rule
    if not isinstance(rule, str) or not rule.strip():
        return FAIL, "env.invalid_action_rule is empty: document what step does with invalid actions"
    actions = _invalid_actions(ctx.act_space)
    if actions is None:
        return SKIP, f"no invalid actions known for {ctx.act_space!r}"
    bad, clipped = actions
    n = bad.shape[0]
    # One reset key for the whole batch: every invalid action is applied to the same state.
    reset_keys = jnp.broadcast_to(jax.random.fold_in(ctx.key, 4), (n,) + jnp.shape(ctx.key))
    step_keys = jax.random.split(jax.random.fold_in(ctx.key, 5), n)
    _, out_bad = ctx.reset_step_b(reset_keys, step_keys, bad, ctx.params)
    _, ts = out_bad
    reward_finite = jnp.isfinite(ts.reward)
    outputs_finite = jax.vmap(_float_leaves_finite)(out_bad)  # state and TimeStep, per action
    finite = np.asarray(reward_finite & outputs_finite)
    if not finite.all():
        i = int(np.argwhere(~finite)[0][0])
        return FAIL, f"action {np.asarray(bad[i]).tolist()} gives a non-finite state/reward/obs"
    if rule.strip().lower().startswith("clip"):
        _, out_clip = ctx.reset_step_b(reset_keys, step_keys, clipped, ctx.params)
        if not _close(out_bad, out_clip):
            return FAIL, f"rule {rule!r}, but invalid actions do not act like their clipped values"
        return PASS, f"{n} invalid actions finite and clipped (rule: {rule!r})"
    return PASS, f"{n} invalid actions give finite outputs (rule: {rule!r})"


def check_no_retrace(ctx: _Context) -> tuple[str, str]:
    """Repeated ``reset``/``step`` calls with new keys, states, actions and param values
    trace once each (params are dynamic, types are stable).
    """
    params = ctx.params
    other = params
    limit = _limit_of(params)
    if limit > 0:  # a new param value must not retrace: params are dynamic
        other = _with_limit(params, limit + 1)
    keys = jax.random.split(jax.random.fold_in(ctx.key, 6), 7)
    state, _ = ctx.reset_j(keys[0], other)
    for i, p in enumerate((params, other, params, params)):
        state, _ = ctx.step_j(keys[1 + i], state, _sample_action(ctx, keys[6]), p)
    jax.block_until_ready(state)
    if ctx.reset_c.traces != 1 or ctx.step_c.traces != 1:
        return FAIL, (
            f"jitted reset traced {ctx.reset_c.traces}x and step {ctx.step_c.traces}x over the checks' "
            "calls with new keys, states and param values (expected 1 each)"
        )
    return PASS, "reset and step traced once over every call of the checks (new keys, states, param values)"


def check_render(ctx: _Context) -> tuple[str, str]:
    """If implemented, ``render(state, params)`` returns ``uint8[H, W, 3]``."""
    state, _ = ctx.reset_j(ctx.key, ctx.params)
    try:
        frame = ctx.env.render(state, ctx.params)
    except NotImplementedError:
        return SKIP, "render not implemented"
    frame = np.asarray(frame)
    if frame.dtype != np.uint8 or frame.ndim != 3 or frame.shape[-1] != 3:
        return FAIL, f"render returned {frame.dtype}{list(frame.shape)}, expected uint8[H, W, 3]"
    return PASS, f"uint8{list(frame.shape)} frame"


#: (name, function) in the order they run; later checks use what earlier ones computed.
CHECKS: list[tuple[str, Callable[[_Context], tuple[str, str]]]] = [
    ("jit", check_jit),
    ("vmap", check_vmap),
    ("timestep_dtypes", check_timestep_dtypes),
    ("stable_types", check_stable_types),
    ("info_structure", check_info_structure),
    ("observation_space", check_observation_space),
    ("finite", check_finite),
    ("truncation", check_truncation),
    ("determinism", check_determinism),
    ("invalid_actions", check_invalid_actions),
    ("no_retrace", check_no_retrace),
    ("render", check_render),
]


#: Errors of Python control flow or conversions on traced values (``if x > 0:``, ``int(x)``).
TRACER_ERRORS = (jax.errors.TracerBoolConversionError, jax.errors.ConcretizationTypeError, jax.errors.TracerIntegerConversionError)


def user_frame(exc: BaseException) -> str:
    """``file:line (code)`` of the deepest traceback frame outside JAX and this checker: the
    env author's line that raised (``"?"`` if none)."""
    import os
    import traceback

    jax_dir = os.path.dirname(jax.__file__) + os.sep
    numpy_dir = os.path.dirname(np.__file__) + os.sep
    internal = (jax_dir, numpy_dir, __file__)
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith(internal)]
    if not frames:
        return "?"
    frame = frames[-1]
    code = (frame.line or "").strip()
    return f"{frame.filename}:{frame.lineno} ({code})"


def tracer_message(exc: BaseException) -> str:
    """One line for a :data:`TRACER_ERRORS` error: where, what, and the fix."""
    return (
        f"Python control flow on a traced value at {user_frame(exc)}: {type(exc).__name__}; "
        "reset/step are traced, so use jnp.where(cond, a, b) (or jax.lax.cond / lax.select) "
        "instead of `if`/`while`/int()/float() on arrays"
    )


def _run_one(fn, ctx: _Context) -> tuple[str, str]:
    if ctx.trace_error is not None:
        return SKIP, "not run: reset/step cannot be traced (see the first failure)"
    try:
        return fn(ctx)
    except TRACER_ERRORS as exc:  # reported once, with the author's line; the rest skip
        ctx.trace_error = exc
        return FAIL, tracer_message(exc)
    except Exception as exc:  # a check that crashes is a failed check, with the reason
        text = str(exc).strip()
        first_line = text.splitlines()[0] if text else ""
        message = f"raised {type(exc).__name__}: {first_line}"
        return FAIL, message[:300]


def check_env(
    env: Environment,
    params: Any = None,
    *,
    num_steps: int = 500,
    num_envs: int = 16,
    key: jax.Array | None = None,
    only: Sequence[str] | None = None,
    compiler_options: dict | None = None,
    verbose: bool = True,
) -> CheckReport:
    """Check ``env`` against the environment contract; see the module docstring.

    Args:
      env: the environment (unbatched: one copy; ``check_env`` vmaps it itself).
      params: its params (default: ``env.default_params``).
      num_steps, num_envs: size of the random auto-reset rollout (``num_envs`` x
        ``num_steps`` env steps) used by the space, finiteness, truncation and determinism
        checks and by the throughput figure.
      key: PRNG key (default ``jax.random.PRNGKey(0)``).
      only: run just these checks (``jit`` always runs first: the others need it).
      compiler_options: XLA options for every program the checker compiles, e.g.
        ``{"xla_backend_optimization_level": 1}`` to compile faster in test suites (the
        checks' verdicts do not depend on it; the throughput figure may).
      verbose: print the report.

    Returns:
      A :class:`CheckReport`; ``report.passed`` is False if any check failed.
    """
    if int(num_steps) <= 0 or int(num_envs) <= 0:
        raise ValueError(f"check_env needs num_steps > 0 and num_envs > 0, got {num_steps}, {num_envs}")
    own = getattr(env, "check_contract", None)
    if own is not None:  # an env of another contract (jaxrl.core.multiagent) checks itself against it
        return own(params, num_steps=num_steps, num_envs=num_envs, key=key, only=only, verbose=verbose)
    names = [name for name, _ in CHECKS]
    unknown = sorted(set(only or ()) - set(names))
    if unknown:
        raise ValueError(f"unknown check name(s) {unknown}; checks: {names}")
    params = env.default_params if params is None else params
    key = jax.random.PRNGKey(0) if key is None else key
    ctx = _Context(env, params, key, int(num_envs), int(num_steps), compiler_options=compiler_options)
    results = []
    if verbose:
        print(f"check_env({env.name}): {ctx.num_envs} envs x {ctx.num_steps} steps", flush=True)
    for name, fn in CHECKS:
        if only is not None and name != "jit" and name not in only:
            continue
        status, message = _run_one(fn, ctx)
        results.append(CheckResult(name, status, message))
        if verbose:
            print(f"  {status}  {name:<17}  {message}", flush=True)
    report = CheckReport(env.name, results, ctx.steps_per_second, ctx.compile_seconds, ctx.num_envs, ctx.num_steps)
    if verbose:  # the checks are printed already: the report's last two lines, throughput and result
        print("\n".join(str(report).splitlines()[-2:]), flush=True)
    return report
