"""The algorithm contract: everything the run machinery needs from an algorithm, typed.

An algorithm is one :class:`AlgoEntry` (registered by name, built-in or from a package's
``jaxrl.algos`` entry point, see :mod:`jaxrl.algos.registry`):

* ``config_cls``: a frozen dataclass subclassing :class:`AlgoConfig`; its fields are the
  YAML section's keys, its ``validate()`` rejects impossible settings before anything is
  built.
* ``build(envs, cfg) -> Program``: the pure program for one configured run, given the
  :class:`EnvSetup` (the env, its training and evaluation params, an optional curriculum).

A :class:`Program` carries the pure functions (``init_with``, ``update``, ``evaluate``;
``init`` is derived), the static counts (:class:`Plan`), which axes of the train state are
the batch (for sharding) and the :class:`EvalReport` (which arrays of ``evaluate``'s output
are per-episode scores); optional: the acting :class:`Policy` (eval, render, export),
``load_params``, a :class:`Monitor` and :class:`LMHooks`. The config loader, the chunked trainer,
checkpoints, eval, render and sharding read only these types, never an algorithm's fields
or module. ``docs/writing_an_algorithm.md`` walks through a complete example.
"""

from __future__ import annotations

import abc
import dataclasses
import inspect
import warnings
from typing import Any, Callable, NamedTuple

import jax

from jaxrl.core.curriculum import Curriculum
from jaxrl.core.env import Environment
from jaxrl.models.networks import ACTIVATIONS

State = Any  # an algorithm's train state: a pytree of arrays, defined in its own module
Metrics = dict  # flat ``{name: float32[]}`` (update) or ``{name: array}`` (evaluate)


@dataclasses.dataclass(frozen=True)
class Plan:
    """Static counts of one run (derived, never written back into a config).

    Attributes:
      num_updates: updates in the whole run.
      env_steps_per_update: environment transitions per update (all envs of one seed).
      grad_steps_per_update: optimiser steps per update.
      step_unit: what one env step is called in progress bars and summaries
        (``"env steps"``; ``"tokens"`` for token tasks).
    """

    num_updates: int
    env_steps_per_update: int
    grad_steps_per_update: int
    step_unit: str = "env steps"

    @property
    def total_env_steps(self) -> int:
        return self.num_updates * self.env_steps_per_update

    @property
    def total_grad_steps(self) -> int:
        return self.num_updates * self.grad_steps_per_update


class BatchSize(NamedTuple):
    """The config count that must divide over the devices of an env split.

    ``key`` is the config key (e.g. ``"num_envs"``), ``size`` its value, ``unit`` what one
    item is called in messages (``"envs"``, ``"prompt groups"``).
    """

    key: str
    size: int
    unit: str


class Policy(NamedTuple):
    """How a trained state acts, outside training (eval, render, export).

    Attributes:
      env: the single env the policy acts in (e.g. with its action rescaling).
      params: ``params(state) -> agent``, what ``act`` needs from one seed's train state.
      init_carry: ``init_carry(agent) -> carry`` at an episode start (``()`` if stateless).
      act: ``act(agent, carry, obs, key, deterministic) -> (carry, action)``; pure,
        ``deterministic`` static.
    """

    env: Environment
    params: Callable[[State], Any]
    init_carry: Callable[[Any], Any]
    act: Callable[[Any, Any, jax.Array, jax.Array, bool], tuple[Any, jax.Array]]


def no_carry(agent: Any) -> tuple:
    """:attr:`Policy.init_carry` of a stateless policy."""
    return ()


class EvalReport(NamedTuple):
    """What ``evaluate`` reports.

    Attributes:
      scores: ``{key of evaluate's output: label}`` of per-episode ``[E]`` arrays that
        ``jaxrl eval`` summarises (mean, std, 95% CI); the first is the headline.
      metric: what the scores are (``"return"``, ``"reward"``), for printed summaries.
      phrases: ``{key: what the printed line calls it}`` where ``"<label> <metric>"`` would
        mislead (``"held-out greedy exact match"``); optional.
    """

    scores: dict
    metric: str = "return"
    phrases: dict | None = None


class Curve(NamedTuple):
    """The training metric that progress bars and learning curves show.

    ``metric`` is a key of ``update``'s metrics; ``label`` says what it is (``"sampled
    reward"``: the training batch's, not an evaluation score).
    """

    metric: str
    label: str


class Alert(NamedTuple):
    """A sign of a stalled run that the trainer watches for in the update records.

    It fires once, when the mean of ``metric`` (seed mean) over the last ``patience``
    updates is above (``above``) or below ``threshold``; an update in which ``unless`` =
    ``(metric, level)`` has that metric at or above ``level`` (e.g. the task is solved)
    empties the window.
    ``says`` is what it means, ``hint`` what to try; both are printed and recorded.

    ``gain_from > 0`` makes it a *gain* alert (a metric that should rise, e.g. SFT's token
    accuracy): from update ``gain_from`` on, the value compared with ``threshold`` is the
    mean over the last ``patience`` updates minus the mean over the ``patience`` updates
    that ended halfway through the updates watched so far (halfway, not the first window,
    so a fast early rise, such as learning a completion's fixed format, is not taken for
    progress); with ``above=False`` it fires when that rise is below ``threshold``.
    """

    metric: str
    above: bool
    threshold: float
    patience: int
    says: str
    hint: str
    unless: tuple[str, float] | None = None
    gain_from: int = 0


class ModelParams(NamedTuple):
    """Which leaves of a train state a ``model`` mesh axis may split (run key ``mesh``).

    Attributes:
      leaves: ``leaves(state) -> pytree of bool`` with the state's structure (one seed,
        abstract): ``True`` on model parameters, frozen or trained, and on the optimiser
        leaves that mirror them (Adam's ``mu`` / ``nu``). The strategy's rules
        (:func:`jaxrl.parallel.sharding.param_specs`) split those; every other leaf keeps its
        ``batch_axes`` placement.
      num_heads, num_kv_heads: the attention heads tensor parallelism splits (it refuses a
        model axis that does not divide both); ``0``: no attention to check.
      estimate: ``estimate(data, model, strategy) -> MemoryEstimate`` (per device of that
        mesh: weights, gradients, optimiser, KV cache, activations; it has ``total`` and
        ``table()``), checked up front by the run machinery; ``None``: the train state's
        size is the only estimate.
      export: ``export(state, out_dir, adapters_only) -> out_dir`` writes one seed's trained
        model as a Hugging Face directory (adapters merged; ``adapters_only``: PEFT's adapter
        files alone), or ``None``.
    """

    leaves: Callable[[Any], Any]
    num_heads: int = 0
    num_kv_heads: int = 0
    estimate: Callable[[int, int, str], Any] | None = None
    export: Callable[[Any, str, bool], str] | None = None


class Monitor(NamedTuple):
    """What the trainer shows and watches besides the return (optional).

    Attributes:
      curve: the training metric of progress bars and curves (``None``: the return).
      alerts: signs of a stalled run the trainer reports once (:class:`Alert`).
    """

    curve: Curve | None = None
    alerts: tuple = ()


class LMHooks(NamedTuple):
    """What a language-model run adds (optional; GRPO on token tasks, SFT).

    Attributes:
      samples: ``samples(state, key, num) -> list[str]``, a few printable episodes
        (``jaxrl eval``, transcripts of token tasks), or ``None``.
      rollouts: ``rollouts(state, key, n, r) -> dict``, host-side (one seed's state): ``r``
        sampled episodes on each of ``n`` held-out prompts plus a greedy one, as numpy
        arrays and transcripts (``jaxrl eval -n N -r R``; the keys are listed in
        :func:`jaxrl.run.sampled.summarise`), or ``None``.
      model_params: the leaves a ``model`` mesh axis splits (:class:`ModelParams`), or
        ``None``: the algorithm runs with ``mesh.model: 1`` only.
      notes: lines the run prints when it starts (how the loss pass of a loaded model runs).
      chosen: ``(("<algo>.<key>", value), ...)``: config keys left at ``auto`` that the
        program set from this machine's memory (``grpo.micro_batches``...). Each checkpoint
        records them (``meta.chosen``) and ``--resume`` builds with the recorded values, so a
        resumed run does not choose again differently.
    """

    samples: Callable[[State, jax.Array, int], list[str]] | None = None
    rollouts: Callable[[State, jax.Array, int, int], dict] | None = None
    model_params: ModelParams | None = None
    notes: tuple[str, ...] = ()
    chosen: tuple[tuple[str, Any], ...] = ()


class DerivedInit:
    """``init(key) = init_with(key, hyperparams())``: :attr:`Program.init` unless one is given.

    Equal to another made from the same two functions, so a rebuilt program reuses jit caches.
    """

    __slots__ = ("init_with", "hyperparams", "__weakref__")

    def __init__(self, init_with: Callable[[jax.Array, Any], State], hyperparams: Callable[..., Any]):
        self.init_with, self.hyperparams = init_with, hyperparams

    def __call__(self, key: jax.Array) -> State:
        return self.init_with(key, self.hyperparams())

    def __eq__(self, other) -> bool:
        return isinstance(other, DerivedInit) and (other.init_with, other.hyperparams) == (self.init_with, self.hyperparams)

    def __hash__(self) -> int:
        return hash((self.init_with, self.hyperparams))

    def __repr__(self) -> str:
        return f"DerivedInit({self.init_with!r}, {self.hyperparams!r})"


#: Releases: the one that grouped :class:`Program`'s optional fields, and the one that drops the old spellings.
MOVED_IN, REMOVED_IN = "0.5.0", "0.6.0"
#: 0.4.0 fields of :class:`Program` now in a record: old name -> the field holding that record.
MOVED_FIELDS = {"curve": "monitor", "alerts": "monitor", "samples": "lm", "rollouts": "lm", "model_params": "lm"}
_RECORDS = {"monitor": Monitor, "lm": LMHooks}
#: 0.4.0's field order, for positional construction the old way.
_FIELDS_040 = ("init", "update", "evaluate", "plan", "batch_axes", "batch", "policy", "report", "hyperparams",
               "init_with", "samples", "load_params", "curve", "alerts", "rollouts", "model_params")


def _deprecated(old: str, new: str) -> None:
    warnings.warn(f"{old} is deprecated since jaxrl {MOVED_IN} and goes away in {REMOVED_IN}: {new}",
                  DeprecationWarning, stacklevel=3)


@dataclasses.dataclass(frozen=True, init=False, eq=False)
class Program:
    """One configured algorithm as pure functions (see the module docstring).

    Every algorithm gives the first seven; the rest are optional capabilities.

    Attributes:
      update: ``update(state) -> (state, metrics)``, one full update; ``metrics`` a flat
        dict of float32 scalars with the same keys every call.
      evaluate: ``evaluate(state, key) -> metrics``, jittable; holds the ``report`` arrays.
      plan: the static counts.
      batch_axes: ``batch_axes(state) -> pytree of int`` with the state's structure: per
        leaf, the axis that carries the env batch (``-1``: replicated). Applied to the
        abstract state; seeds are vmapped in front by the trainer.
      report: which arrays of ``evaluate``'s output are per-episode scores.
      hyperparams: ``hyperparams(**values) -> pytree`` of traced hyperparameters.
      init_with: ``init_with(key, hyper) -> state``, a pytree holding everything the run
        depends on, started with ``hyper`` (sweeps: ``vmap`` over both).
      batch: the config count that must divide over the devices (``None``: nothing to split).
      policy: acting outside training (eval, render, export), or ``None``.
      load_params: ``load_params(fresh, trained) -> state``: the fresh state ``init`` made,
        starting from the learned parameters of ``trained`` (a state of the same
        algorithm and network) with its own optimiser, envs and counters (``jaxrl train
        --init-from RUN``), or ``None`` if the algorithm cannot.
      monitor: the training curve and stall alerts (:class:`Monitor`).
      lm: transcripts, sampled rollouts and model-axis parameters (:class:`LMHooks`).
      init: ``init(key) -> state``; derived, ``init_with(key, hyperparams())``
        (:class:`DerivedInit`).

    The 0.4.0 spellings still work until 0.6.0, with a ``DeprecationWarning`` naming the
    new one: the keywords and attributes ``samples``, ``rollouts``, ``model_params``
    (now in ``lm``), ``curve``, ``alerts`` (in ``monitor``), an ``init=`` of one's own,
    0.4.0's positional order, and ``_replace`` (use :func:`dataclasses.replace`).
    """

    update: Callable[[State], tuple[State, Metrics]]
    evaluate: Callable[[State, jax.Array], Metrics]
    plan: Plan
    batch_axes: Callable[[State], Any]
    report: EvalReport
    hyperparams: Callable[..., Any]
    init_with: Callable[[jax.Array, Any], State]
    batch: BatchSize | None = None
    policy: Policy | None = None
    load_params: Callable[[State, State], State] | None = None
    monitor: Monitor = Monitor()
    lm: LMHooks = LMHooks()
    init: Callable[[jax.Array], State] | None = None

    def __init__(self, *args, **kwargs):
        names = [f.name for f in dataclasses.fields(self) if f.name != "init"]  # init: keyword only
        if len(args) > 3 and isinstance(args[3], Plan) and not isinstance(args[2], Plan):
            _deprecated("Program's 0.4.0 positional order", f"pass keywords ({', '.join(names[:7])}, ...)")
            names = list(_FIELDS_040)
        if len(args) > len(names):
            raise TypeError(f"Program takes at most {len(names)} positional arguments, got {len(args)}")
        for name, value in zip(names, args):
            if name in kwargs:
                raise TypeError(f"Program got multiple values for {name!r}")
            kwargs[name] = value
        for old, record in MOVED_FIELDS.items():
            if old in kwargs:
                _deprecated(f"Program({old}=...)", f"pass {record}={_RECORDS[record].__name__}({old}=...)")
                kwargs[record] = kwargs.get(record, _RECORDS[record]())._replace(**{old: kwargs.pop(old)})
        if not isinstance(kwargs.get("init"), (DerivedInit, type(None))):
            _deprecated("Program(init=...)", "drop init=; it is derived as init_with(key, hyperparams())")
        unknown = sorted(set(kwargs) - {f.name for f in dataclasses.fields(self)})
        missing = [f.name for f in dataclasses.fields(self) if f.default is dataclasses.MISSING and f.name not in kwargs]
        if unknown or missing:
            raise TypeError(f"Program: unknown field(s) {unknown}, missing {missing}")
        for f in dataclasses.fields(self):
            object.__setattr__(self, f.name, kwargs.get(f.name, f.default))
        if isinstance(self.init, (DerivedInit, type(None))):  # derived again, from this program's functions
            object.__setattr__(self, "init", DerivedInit(self.init_with, self.hyperparams))

    def _replace(self, **changes) -> "Program":
        """0.4.0's ``NamedTuple`` method: :func:`dataclasses.replace` with the old keywords too."""
        _deprecated("Program._replace", "use dataclasses.replace(program, ...)")
        fields = {f.name: getattr(self, f.name) for f in dataclasses.fields(self)}
        for old, record in MOVED_FIELDS.items():  # an old keyword edits its record, not a stale copy
            if old in changes:
                fields[record] = changes.pop(record, fields[record])._replace(**{old: changes.pop(old)})
        return Program(**{**fields, **changes})

    def __getattr__(self, name: str):  # only for names that are not fields: 0.4.0's moved ones
        record = MOVED_FIELDS.get(name)
        if record is None:
            raise AttributeError(f"'Program' object has no attribute {name!r}")
        _deprecated(f"Program.{name}", f"read Program.{record}.{name}")
        return getattr(object.__getattribute__(self, record), name)


Program.__signature__ = inspect.Signature([  # what help() and editors show: the 0.5.0 keywords
    inspect.Parameter(f.name, inspect.Parameter.POSITIONAL_OR_KEYWORD if f.name != "init" else inspect.Parameter.KEYWORD_ONLY,
                      default=inspect.Parameter.empty if f.default is dataclasses.MISSING else f.default, annotation=f.type)
    for f in dataclasses.fields(Program)
])


def leaves_under(state: State, names: tuple[str, ...]) -> Any:
    """A :attr:`ModelParams.leaves` mask: ``True`` on the leaves of ``state`` whose path
    passes through a field or key in ``names`` (e.g. ``("params", "opt_state")``)."""

    def under(path, _):
        return any(getattr(k, "name", getattr(k, "key", None)) in names for k in path)

    return jax.tree_util.tree_map_with_path(under, state)


def replicated_axes(state: State) -> Any:
    """:attr:`Program.batch_axes` of a state with no env batch (every leaf replicated)."""
    return jax.tree_util.tree_map(lambda _: -1, state)


class EnvSetup(NamedTuple):
    """The environment side of a run, as the run machinery resolved it from the config.

    Attributes:
      env: the single (unbatched) env.
      params: its training params (config overrides applied).
      eval_params: the params evaluation uses (held-out split for token tasks, plus the
        config's ``env.eval_params``).
      curriculum: raises one env param as training succeeds, or ``None``.
      vector: the training env's auto-reset path, one of
        :data:`jaxrl.algos.common.envs.ENV_PATHS` (config key ``env.vector``).
    """

    env: Environment
    params: Any
    eval_params: Any
    curriculum: Curriculum | None = None
    vector: str = "auto"


class AlgoConfig(abc.ABC):
    """Base of every algorithm's config class (a frozen dataclass).

    Subclasses declare their fields with types and defaults (the YAML section's keys) and
    implement :meth:`validate`. Nested dataclass fields become nested YAML sections.
    """

    @abc.abstractmethod
    def validate(self) -> None:
        """Raise ``ValueError("<key>: <what is wrong>")`` for the first impossible setting."""

    def with_eval_episodes(self, episodes: int) -> "AlgoConfig":
        """A copy evaluating ``episodes`` episodes (``jaxrl eval --episodes``).

        The default replaces a field named ``eval_episodes``; raises ``ValueError`` if
        there is none.
        """
        if "eval_episodes" not in {f.name for f in dataclasses.fields(self)}:
            raise ValueError(f"{type(self).__name__} has no eval_episodes setting")
        return dataclasses.replace(self, eval_episodes=episodes)


@dataclasses.dataclass(frozen=True)
class AlgoEntry:
    """One algorithm as the registry holds it.

    Attributes:
      name: the ``algo:`` value of a run config, a lower-case identifier.
      config_cls: a frozen dataclass subclassing :class:`AlgoConfig`.
      build: ``build(envs: EnvSetup, cfg) -> Program``; raises ``ValueError("<key>: ...")``
        when the config does not fit the env.
      description: one line for ``jaxrl list``.
    """

    name: str
    config_cls: type
    build: Callable[[EnvSetup, Any], Program]
    description: str = ""


def check(ok: bool, key: str, message: str) -> None:
    """``ValueError("<key>: <message>")`` unless ``ok``: the form ``validate`` raises."""
    if not ok:
        raise ValueError(f"{key}: {message}")


def check_mlp(hidden: tuple, activation: str) -> None:
    """The ``hidden`` widths and ``activation`` keys every MLP-based config shares."""
    check(len(hidden) > 0 and all(isinstance(h, int) and h > 0 for h in hidden), "hidden",
          f"expected a non-empty list of positive integers, got {hidden!r}")
    check(activation in ACTIVATIONS, "activation", f"expected one of {sorted(ACTIVATIONS)}, got {activation!r}")
