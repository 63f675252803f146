"""Run configuration: YAML -> typed, frozen dataclasses, checked before anything compiles.

A run config file looks like::

    algo: ppo                 # a registered algorithm (jaxrl.algos.registry)
    env:
      id: CartPole-v1         # a registered env id
      params: {}              # overrides of the env's default params
      eval_params: {}         # further overrides when evaluating
      curriculum: null        # or {param: num_digits, start: 1, stop: 3, threshold: 0.9}
      randomize: {}           # per-episode draws, e.g. {length: "uniform(0.4, 0.8)"}
    ppo:                      # the algorithm's own section, named after `algo`,
      lr: 2.5e-3              # loaded into that algorithm's config class
    train: {seed: 0}          # the trainer's section (TrainConfig)
    devices: 1                # "all" or a device count
    shard: auto               # what the devices split: auto | envs | seeds
    mesh: {model: 1}          # a model axis: {model: 2, strategy: tp | fsdp}

:func:`load_config` reads it with :mod:`jaxrl.run.yamlio` (safe YAML: no code, no aliases,
no duplicate keys, bounded sizes), applies ``--set a.b=value`` overrides to a copy, and
converts it by walking dataclass fields and their type hints. Every problem raises
:class:`ConfigError` with a one-line message naming the key ("did you mean" for unknown
keys). Nothing is built here (:func:`jaxrl.run.build.build` does). Derived values come from
:func:`derive`; configs are frozen, the user's mapping is never mutated, and
:func:`save_config` writes YAML that :func:`load_config` reads back to an equal object.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import math
import re
import types
import typing
import warnings
from typing import Any, Literal, Union

import yaml

from jaxrl import _compat
from jaxrl.algos.contract import Plan
from jaxrl.run import yamlio
from jaxrl.run.yamlio import short
from jaxrl.run.text_config import TextConfig, check_text


class ConfigError(ValueError):
    """A bad config: the message is one line and names the offending key."""


# ------------------------------------------------------------------------------------------
# The run's own sections
# ------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True)
class CurriculumConfig:
    """Raise one integer env param as training succeeds (:class:`jaxrl.core.curriculum.Curriculum`)."""

    param: str  # the env params field raised, e.g. "num_digits"
    start: int  # its first value
    stop: int  # its last value
    metric: str = "exact_match"  # batch mean of this info key (else the return) ...
    threshold: float = 0.9  # ... must reach this to advance one level
    step: int = 1  # a level raises the param by this much (capped at stop)


@dataclasses.dataclass(frozen=True)
class TokenizerConfig:
    """A token task spoken in a checkpoint's tokenizer (:mod:`jaxrl.adapters.tokenized`)."""

    path: str = ""  # a local directory with tokenizer.json (and tokenizer_config.json, config.json); unset: <algo>.model.path
    chat_template: bool = True  # wrap prompts in the tokenizer's chat template (user turn, assistant opens)
    system_prompt: str = ""  # a system message for the chat template ("" = none)


@dataclasses.dataclass(frozen=True)
class EnvConfig:
    """Which environment to train on, and how it is evaluated."""

    id: str  # a registered env id, e.g. "CartPole-v1" (see `jaxrl list`)
    params: dict = dataclasses.field(default_factory=dict)  # overrides of the env's default params
    eval_params: dict = dataclasses.field(default_factory=dict)  # further overrides at evaluation
    curriculum: CurriculumConfig | None = None  # raise one param during training (algorithms that run one)
    # Domain randomisation: {param: "uniform(a, b)" | "loguniform(a, b)" | "choice(v, ...)"},
    # drawn per episode for each env, in training and evaluation (jaxrl.core.randomize).
    randomize: dict = dataclasses.field(default_factory=dict)
    # The training env's auto-reset path for ppo, dqn, pqn, sac (jaxrl.algos.common.envs): "auto" (the path
    # measured fastest for env stepping; for training from 2,048 envs the paths are within ~1.0x), "vector" (batch-level VectorEnv), "autoreset" (a full reset per env per
    # step, the path of runs made before this key) or "pool" (start states from a pool drawn
    # ahead: envs whose reset is costly, e.g. Craftax; best with one seed).
    vector: Literal["auto", "vector", "autoreset", "pool"] = "auto"
    frame_stack: int = 1  # stack the last K observations on the channel (last) axis (jaxrl.core.wrappers.FrameStack); 1: off
    tokenizer: TokenizerConfig | None = None  # token tasks: speak a checkpoint's token ids (grpo.model.policy: hf)
    text: TextConfig | None = None  # text tasks (text/File-v0, text/WordProblems-v0, ...): rows, lengths, reward


@dataclasses.dataclass(frozen=True)
class StopAt:
    """Stop when a metric of ``metrics.jsonl`` reaches a threshold, checked after each chunk."""

    metric: str  # a key of the update records, e.g. "exact_match" or "episode_return"
    threshold: float  # stop once the chunk's last record has metric >= threshold (seed mean)


@dataclasses.dataclass(frozen=True)
class TrainConfig:
    """The trainer's knobs (the host loop around the algorithm)."""

    seed: int = 0  # root PRNG seed; seed i of a vmapped run uses fold_in(PRNGKey(seed), i)
    seeds: int = 1  # independent seeds trained together in one vmapped program
    updates_per_chunk: int = 10  # updates scanned inside one jitted call between host logs
    checkpoint_every: int = 10  # chunks between periodic checkpoints; 0 = final checkpoint only
    keep_checkpoints: int = 3  # how many of the most recent checkpoints to keep
    out_dir: str = "runs"  # parent of run directories when --out is not given
    log_seeds: Literal["mean", "per_seed"] = "mean"  # with seeds > 1: mean/min/max or every seed
    progress: bool = True  # show a tqdm progress bar
    loggers: tuple[str, ...] = ("jsonl",)  # metric sinks: jsonl (always written), tensorboard, wandb
    stop_at: StopAt | None = None  # end training early once a logged metric reaches a threshold


@dataclasses.dataclass(frozen=True)
class MeshConfig:
    """A ``model`` mesh axis beside ``data`` (:mod:`jaxrl.parallel.sharding`, docs/scale_out.md)."""

    # Devices per model replica: the parameters the algorithm declares, and their optimiser
    # state, are split over them (1: none; must divide the devices; data = devices / model).
    model: int = 1
    # How: "tp" (tensor parallel: attention heads, MLP width and vocabulary split) or "fsdp"
    # (every parameter on its largest divisible axis, gathered for compute).
    strategy: Literal["tp", "fsdp"] = "tp"


@dataclasses.dataclass(frozen=True)
class RunConfig:
    """A whole run. ``algo_config`` is stored in the YAML under the key named by ``algo``."""

    algo: str  # a registered algorithm name (jaxrl.algos.registry)
    env: EnvConfig
    algo_config: Any  # an instance of the algorithm's own config class
    train: TrainConfig = dataclasses.field(default_factory=TrainConfig)
    devices: Union[Literal["all"], int] = 1  # devices to shard over: "all" or a count
    # What the devices split: "envs" (each seed's env batch / prompt groups; gradients are
    # all-reduced), "seeds" (whole seeds per device, no collectives; needs train.seeds
    # divisible by the devices) or "auto" (seeds when they divide, else envs).
    shard: Literal["auto", "envs", "seeds"] = "auto"
    mesh: MeshConfig = dataclasses.field(default_factory=MeshConfig)  # a model axis (parameters split)


_RUN_KEYS = ("algo", "env", "train", "devices", "shard", "mesh")  # plus the algorithm's section


# ------------------------------------------------------------------------------------------
# Generic conversion: raw YAML values -> typed dataclasses
# ------------------------------------------------------------------------------------------

_NUMBER_RE = re.compile(r"^[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?$")


def _type_name(tp) -> str:
    origin = typing.get_origin(tp)
    if origin is Literal:
        return "one of " + ", ".join(repr(a) for a in typing.get_args(tp))
    if origin in (Union, types.UnionType):
        return " or ".join(_type_name(a) for a in typing.get_args(tp) if a is not type(None))
    if origin is tuple:
        return "a list"
    if dataclasses.is_dataclass(tp):
        return "a mapping"
    if tp is dict:
        return "a mapping"
    return getattr(tp, "__name__", str(tp))


def _wrong(key: str, tp, value) -> ConfigError:
    return ConfigError(f"{key}: expected {_type_name(tp)}, got {short(value)}")


_INT_LIMIT = 2**64  # no count, size or seed is larger; the seed's own range check is finer


def _convert_scalar(value, tp, key: str):
    if tp is bool:
        if isinstance(value, bool):
            return value
    elif tp is int:
        if isinstance(value, int) and not isinstance(value, bool):
            if abs(value) > _INT_LIMIT:
                raise ConfigError(f"{key}: {short(value)} is out of range (larger than 2**64)")
            return value
        if isinstance(value, float) and value.is_integer() and abs(value) < 2**53:
            return int(value)  # 1e6 written as 1.0e6
    elif tp is float:
        if isinstance(value, (int, float)) and not isinstance(value, bool):
            return float(value)
        if isinstance(value, str) and _NUMBER_RE.match(value.strip()):
            return float(value)  # YAML 1.1 reads "1e-3" (no dot) as a string
    elif tp is str:
        if isinstance(value, str):
            return value
    elif tp is dict:
        if isinstance(value, dict):
            return {str(k): v for k, v in value.items()}
    else:
        raise ConfigError(f"{key}: unsupported config field type {tp!r}")
    raise _wrong(key, tp, value)


def convert(value, tp, key: str):
    """``value`` (from YAML) as type ``tp``; raises :class:`ConfigError` naming ``key``."""
    if tp is Any:
        return value
    origin = typing.get_origin(tp)
    args = typing.get_args(tp)
    if dataclasses.is_dataclass(tp):
        return from_dict(tp, value, key)
    if origin is Literal:
        for a in args:
            if type(a) is type(value) and a == value:
                return a
        raise _wrong(key, tp, value)
    if origin in (Union, types.UnionType):
        if value is None and type(None) in args:
            return None
        present = [a for a in args if a is not type(None)]
        if len(present) == 1:  # X | None: X's own message (an unknown key of a section names it)
            return convert(value, present[0], key)
        for a in args:
            if a is type(None):
                continue
            try:
                return convert(value, a, key)
            except ConfigError:
                pass
        raise _wrong(key, tp, value)
    if origin is tuple:
        if not isinstance(value, (list, tuple)):
            raise _wrong(key, tp, value)
        if len(args) == 2 and args[1] is Ellipsis:
            return tuple(convert(v, args[0], f"{key}[{i}]") for i, v in enumerate(value))
        if args and len(args) != len(value):
            raise ConfigError(f"{key}: expected a list of {len(args)} items, got {len(value)}")
        return tuple(convert(v, a, f"{key}[{i}]") for i, (v, a) in enumerate(zip(value, args or [Any] * len(value))))
    if origin is dict:
        return _convert_scalar(value, dict, key)
    return _convert_scalar(value, tp, key)


def _suggest(name: str, known, prefix: str = "") -> str:
    close = difflib.get_close_matches(name, list(known), n=1, cutoff=0.6)
    if close:
        return f"; did you mean {_join(prefix, close[0])!r}?"
    return "; known keys: " + ", ".join(sorted(known))


def _join(prefix: str, name: str) -> str:
    return f"{prefix}.{name}" if prefix else name


def from_dict(cls, raw, prefix: str = ""):
    """An instance of dataclass ``cls`` from a mapping, checking every key and type."""
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError(f"{prefix or 'config'}: expected a mapping, got {short(raw)}")
    hints = typing.get_type_hints(cls)
    fields = {f.name: f for f in dataclasses.fields(cls) if f.init}
    for name in raw:
        if name not in fields:
            raise ConfigError(f"unknown key {short(_join(prefix, str(name)))}{_suggest(str(name), fields, prefix)}")
    kwargs = {}
    for name, f in fields.items():
        key = _join(prefix, name)
        if name in raw:
            kwargs[name] = convert(raw[name], hints[name], key)
        elif f.default is dataclasses.MISSING and f.default_factory is dataclasses.MISSING:
            raise ConfigError(f"missing key {key!r}")
    try:
        return cls(**kwargs)
    except (TypeError, ValueError) as exc:  # a config class checking itself in __post_init__
        raise ConfigError(f"{prefix or cls.__name__}: {exc}") from None


def to_dict(obj) -> Any:
    """A plain YAML-ready structure (dicts, lists, scalars) of a config dataclass."""
    if dataclasses.is_dataclass(obj) and not isinstance(obj, type):
        return {f.name: to_dict(getattr(obj, f.name)) for f in dataclasses.fields(obj)}
    if isinstance(obj, (list, tuple)):
        return [to_dict(v) for v in obj]
    if isinstance(obj, dict):
        return {str(k): to_dict(v) for k, v in obj.items()}
    return obj


# ------------------------------------------------------------------------------------------
# Overrides
# ------------------------------------------------------------------------------------------


def apply_overrides(raw: dict, overrides=()) -> dict:
    """A copy of ``raw`` with each ``"a.b=value"`` applied (value parsed as a bounded YAML
    scalar or flow collection by :func:`jaxrl.run.yamlio.load`; text that is not valid YAML
    is kept as a string)."""
    out = copy.deepcopy(raw)
    for item in overrides:
        path, sep, text = str(item).partition("=")
        if not sep or not path.strip():
            raise ConfigError(f"--set {short(item)}: expected key=value, e.g. ppo.optim.lr=1e-3")
        try:
            value = yamlio.load(text, max_chars=yamlio.MAX_VALUE_CHARS) if text.strip() else ""
        except yamlio.YamlError as exc:
            raise ConfigError(f"--set {short(item)}: the value {exc}") from None
        except yaml.YAMLError:
            value = text
        node = out
        parts = _compat.renamed_key(path.strip()).split(".")  # an old spelling: its new key
        for i, part in enumerate(parts[:-1]):
            child = node.get(part)
            if child is None:
                child = node[part] = {}
            if not isinstance(child, dict):
                raise ConfigError(f"--set {short(item)}: {short('.'.join(parts[: i + 1]))} is not a section")
            node = child
        try:  # an old key whose value changed meaning too (anneal_lr: true -> optim.lr_end_frac: 0.0)
            node[parts[-1]] = _compat.renamed_value(path.strip(), value, node.get(parts[-1]))
        except ValueError as exc:
            raise ConfigError(f"--set {short(item)}: {exc}") from None
    return out


# ------------------------------------------------------------------------------------------
# Run configs
# ------------------------------------------------------------------------------------------


def algo_entry(name: str):
    """The registered :class:`~jaxrl.algos.contract.AlgoEntry` of ``name``, or a
    :class:`ConfigError` with suggestions."""
    from jaxrl.algos import registry as algo_registry

    algos = algo_registry.algorithms()
    if not isinstance(name, str) or name not in algos:
        raise ConfigError(f"algo: unknown algorithm {short(name)}{_suggest(str(name), algos)}")
    return algos[name]


def _check_env(env: EnvConfig) -> None:
    from jaxrl.core import registry

    try:
        registry.spec(env.id)
    except KeyError as exc:
        raise ConfigError(f"env.id: {exc.args[0]}") from None
    except ValueError as exc:
        raise ConfigError(f"env.id: {exc}") from None
    for section in ("params", "eval_params"):
        for name, value in getattr(env, section).items():
            numeric = isinstance(value, (int, float)) or (isinstance(value, str) and _NUMBER_RE.match(value.strip()))
            if not numeric:  # bools pass: bool params take them; make checks every kind and range
                raise ConfigError(f"env.{section}.{name}: expected a number, got {short(value)}")
    if isinstance(env.frame_stack, bool) or not isinstance(env.frame_stack, int) or not 1 <= env.frame_stack <= 64:
        raise ConfigError(f"env.frame_stack: expected an integer in [1, 64] (1: no stacking), got {short(env.frame_stack)}")
    from jaxrl.core.randomize import parse_distribution

    for name, text in env.randomize.items():
        try:
            parse_distribution(text)
        except ValueError as exc:
            raise ConfigError(f"env.randomize.{name}: {exc}") from None
    if env.tokenizer is not None and not env.tokenizer.path:  # a run config took it from model.path
        raise ConfigError("env.tokenizer.path: not set; name the tokenizer's directory (a checkpoint's)")
    if env.params.get("held_out") not in (None, 0, False, "0", "false"):
        raise ConfigError("env.params.held_out: training on the held-out split would leave no unseen prompts to "
                          "evaluate on; evaluation uses it already (env.eval_params)")
    if env.text is not None:
        try:
            check_text(env.text)
        except ValueError as exc:
            raise ConfigError(str(exc)) from None
    c = env.curriculum
    if c is not None:
        if c.start > c.stop:
            raise ConfigError(f"env.curriculum.stop: must be >= start ({c.start}), got {c.stop}")
        if c.step < 1:
            raise ConfigError(f"env.curriculum.step: must be >= 1, got {c.step}")
        if not math.isfinite(c.threshold):
            raise ConfigError(f"env.curriculum.threshold: must be a finite number, got {c.threshold}")


def _check_train(train: TrainConfig) -> None:
    positive = ("seeds", "updates_per_chunk", "keep_checkpoints")
    for name in positive:
        if getattr(train, name) < 1:
            raise ConfigError(f"train.{name}: must be >= 1, got {getattr(train, name)}")
    from jaxrl.run.loggers import check_loggers

    try:
        check_loggers(train.loggers)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    if train.stop_at is not None and not train.stop_at.metric.strip():
        raise ConfigError("train.stop_at.metric: must name a metric, e.g. exact_match")
    if train.stop_at is not None and not math.isfinite(train.stop_at.threshold):
        raise ConfigError(f"train.stop_at.threshold: must be a finite number, got {train.stop_at.threshold}")
    if train.checkpoint_every < 0:
        raise ConfigError(f"train.checkpoint_every: must be >= 0 (0 = final only), got {train.checkpoint_every}")


def _check_devices(devices, mesh: MeshConfig = MeshConfig()) -> None:
    if devices != "all" and devices < 1:
        raise ConfigError(f"devices: must be 'all' or >= 1, got {devices}")
    if mesh.model < 1:
        raise ConfigError(f"mesh.model: must be >= 1, got {mesh.model}")
    if devices != "all" and devices % mesh.model:
        raise ConfigError(f"mesh.model: {mesh.model} does not divide devices={devices}; use a divisor of it")


#: Optimiser values (by their last key) that must be finite: an infinite ``adam_eps`` or
#: ``lr`` trains parameters that never move, or turn NaN, without any error.
OPTIMISER_KEYS = frozenset({"lr", "lr_end_frac", "adam_eps", "eps", "max_grad_norm", "weight_decay", "b1", "b2"})


def _check_finite(tree, prefix: str) -> None:
    """No NaN anywhere in an algorithm's section, nor an infinite optimiser value."""
    if isinstance(tree, dict):
        for name, value in tree.items():
            _check_finite(value, f"{prefix}.{name}")
        return
    if isinstance(tree, list):
        for i, value in enumerate(tree):
            _check_finite(value, f"{prefix}.{i}")
        return
    if isinstance(tree, float) and (math.isnan(tree) or (math.isinf(tree) and prefix.rsplit(".", 1)[-1] in OPTIMISER_KEYS)):
        raise ConfigError(f"{prefix}: must be a finite number, got {tree}")


def _validate_algo(cfg: RunConfig) -> None:
    """The algorithm config's own ``validate()`` (pure: builds nothing), after
    :func:`_check_finite`."""
    _check_finite(to_dict(cfg.algo_config), cfg.algo)
    try:
        cfg.algo_config.validate()
    except (ValueError, TypeError) as exc:
        raise ConfigError(prefixed(cfg.algo, str(exc))) from None


def prefixed(section: str, message: str) -> str:
    """``message`` on one line, starting with ``section.`` (the key it is about), unless it
    already names a key of the run's own sections (``env.curriculum: ...``)."""
    message = " ".join(message.split())  # one line
    own = tuple(f"{key}." for key in (section, *_RUN_KEYS)) + tuple(f"{key}:" for key in _RUN_KEYS)
    return message if message.startswith(own) else f"{section}.{message}"


def config_from_dict(raw) -> RunConfig:
    """A checked :class:`RunConfig` from a raw mapping (as read from YAML)."""
    if not isinstance(raw, dict):
        raise ConfigError(f"config: expected a mapping at the top level, got {type(raw).__name__}")
    if "algo" not in raw:
        raise ConfigError("missing key 'algo'")
    try:
        raw = _compat.rename_config_keys(raw)  # renamed keys: read as the new ones, with a warning
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    name = raw["algo"]
    entry = algo_entry(name)
    known = set(_RUN_KEYS) | {name}
    for key in raw:
        if key not in known:
            raise ConfigError(f"unknown key {short(str(key))}{_suggest(str(key), known)}")
    hints = typing.get_type_hints(RunConfig)
    if "env" not in raw:
        raise ConfigError("missing key 'env'")
    raw = tokenizer_from_model(raw, name)
    cfg = RunConfig(
        algo=name,
        env=convert(raw["env"], EnvConfig, "env"),
        algo_config=from_dict(entry.config_cls, raw.get(name), name),
        train=convert({} if raw.get("train") is None else raw["train"], TrainConfig, "train"),  # [] is no mapping
        devices=convert(raw.get("devices", 1), hints["devices"], "devices"),
        shard=convert(raw.get("shard", "auto"), hints["shard"], "shard"),
        mesh=convert({} if raw.get("mesh") is None else raw["mesh"], MeshConfig, "mesh"),
    )
    _check_env(cfg.env)
    _check_train(cfg.train)
    _check_devices(cfg.devices, cfg.mesh)
    _validate_algo(cfg)
    _check_stop_every(cfg)
    return cfg


def tokenizer_from_model(raw: dict, algo: str) -> dict:
    """``raw`` with ``env.tokenizer.path`` taken from ``<algo>.model.path`` when the env's
    ``tokenizer`` section names no path of its own: the policy's checkpoint supplies its
    tokenizer, so a config names the checkpoint once. A path given in both places is kept."""
    env = raw.get("env")
    tokenizer = env.get("tokenizer") if isinstance(env, dict) else None
    if not isinstance(tokenizer, dict) or tokenizer.get("path") not in (None, ""):
        return raw
    section = raw.get(algo)
    model = section.get("model") if isinstance(section, dict) else None
    path = model.get("path") if isinstance(model, dict) else None
    if not isinstance(path, str) or not path:
        raise ConfigError(f"env.tokenizer.path: not set, and {algo}.model.path names no checkpoint to take the tokenizer from; "
                          "set one of them")
    return {**raw, "env": {**env, "tokenizer": {**tokenizer, "path": path}}}


def _check_stop_every(cfg: RunConfig) -> None:
    """A stop on a figure measured every N updates (``grpo.eval_every``) is read from a chunk's
    last record, so the chunks must end on measured updates."""
    stop, every = cfg.train.stop_at, getattr(cfg.algo_config, "eval_every", 0)
    if stop is None or not stop.metric.startswith("heldout_"):
        return
    if not every:
        raise ConfigError(f"train.stop_at.metric: {stop.metric} is logged only with {cfg.algo}.eval_every > 0 (a held-out evaluation during training)")
    if cfg.train.updates_per_chunk % every:
        raise ConfigError(f"train.updates_per_chunk: must be a multiple of {cfg.algo}.eval_every={every} for train.stop_at on "
                          f"{stop.metric} (the stop reads a chunk's last update), got {cfg.train.updates_per_chunk}")


def config_to_dict(cfg: RunConfig) -> dict:
    """The YAML-ready mapping of ``cfg`` (the algorithm section under its name)."""
    return {
        "algo": cfg.algo,
        "env": to_dict(cfg.env),
        cfg.algo: to_dict(cfg.algo_config),
        "train": to_dict(cfg.train),
        "devices": cfg.devices,
        "shard": cfg.shard,
        **({"mesh": to_dict(cfg.mesh)} if cfg.mesh != MeshConfig() else {}),  # absent: 1-D, as before the key
    }


def read_yaml(path) -> dict:
    """The raw mapping in a YAML file, read by :mod:`jaxrl.run.yamlio` (plain data only: no
    aliases, no duplicate keys, bounded size); every refusal is one :class:`ConfigError` line."""
    try:
        raw = yamlio.read_file(path)
    except yamlio.YamlError as exc:
        raise ConfigError(f"config file {yamlio.display_path(path)} {exc}") from None
    return {} if raw is None else raw


def load_config(path, overrides=()) -> RunConfig:
    """Read, override and check a config file; raises :class:`ConfigError`."""
    raw = read_yaml(path)
    if not isinstance(raw, dict):
        raise ConfigError(f"config file {yamlio.display_path(path)}: expected a mapping at the top level")
    return config_from_dict(apply_overrides(raw, overrides))


def with_overrides(cfg: RunConfig, overrides=()) -> RunConfig:
    """A new config: ``cfg`` with ``"a.b=value"`` overrides applied (``cfg`` is unchanged)."""
    return config_from_dict(apply_overrides(config_to_dict(cfg), overrides))


def dump_config(cfg: RunConfig) -> str:
    """``cfg`` as YAML text."""
    return yaml.safe_dump(config_to_dict(cfg), sort_keys=False)


def save_config(cfg: RunConfig, path) -> None:
    """Write ``cfg`` as YAML; :func:`load_config` reads it back to an equal config."""
    with open(path, "w") as f:
        f.write(dump_config(cfg))


# ------------------------------------------------------------------------------------------
# Derived values
# ------------------------------------------------------------------------------------------


@dataclasses.dataclass(frozen=True, kw_only=True)
class Derived(Plan):
    """The program's :class:`~jaxrl.algos.contract.Plan` plus the run's chunking, from
    :func:`derive` (never written back into the config)."""

    updates_per_chunk: int  # K: updates scanned per jitted call
    num_chunks: int  # ceil(num_updates / K); the last chunk may run fewer than K
    seeds: int

    def describe(self) -> str:
        seeds = f" x {self.seeds} seeds" if self.seeds > 1 else ""
        unit = self.step_unit
        return (
            f"{self.num_updates} updates x {self.env_steps_per_update} {unit} = "
            f"{self.total_env_steps:,} {unit}{seeds}; "
            f"{self.total_grad_steps:,} gradient steps ({self.grad_steps_per_update} per update); "
            f"{self.num_chunks} chunk{'s' if self.num_chunks != 1 else ''} of <= {self.updates_per_chunk} updates"
        )


def derive(cfg: RunConfig, plan) -> Derived:
    """The derived counts of ``cfg`` given its algorithm's :class:`~jaxrl.algos.contract.Plan`."""
    k = min(cfg.train.updates_per_chunk, max(plan.num_updates, 1))
    return Derived(
        num_updates=int(plan.num_updates),
        env_steps_per_update=int(plan.env_steps_per_update),
        grad_steps_per_update=int(plan.grad_steps_per_update),
        step_unit=plan.step_unit,
        updates_per_chunk=int(k),
        num_chunks=-(-int(plan.num_updates) // k),
        seeds=cfg.train.seeds,
    )


def replace_algo_config(cfg: RunConfig, algo_config) -> RunConfig:
    """A new run config with ``algo_config`` in place of the algorithm's section."""
    return dataclasses.replace(cfg, algo_config=algo_config)


def in_current_spelling(raw: dict) -> dict:
    """A run config recorded by an older release (a checkpoint's ``meta.config``) as today's
    :func:`config_to_dict` writes it: old keys renamed, every default filled in (``raw``
    itself when it no longer loads). A resume compares the checkpoint's record with this."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)  # the run's config.yaml, read too, warns once
        try:
            return config_to_dict(config_from_dict(raw))
        except ConfigError:
            return raw
