"""Run configuration: YAML -> typed, frozen dataclasses, checked before anything compiles.

A run config file looks like::

    algo: ppo                 # a registered algorithm (jaxrl.algos.registry)
    env: {id: CartPole-v1, params: {}, eval_params: {}, curriculum: null, randomize: {}}
    ppo: {lr: 2.5e-3}         # the algorithm's own section, named after `algo`
    train: {seed: 0}          # the trainer's section (TrainConfig)
    devices: 1                # "all" or a device count
    shard: auto               # what the devices split: auto | envs | seeds
    mesh: {model: 1}          # a model axis: {model: 2, strategy: tp | fsdp}

:func:`load_config` reads it with :mod:`jaxrl.run.yamlio` (safe YAML: no code, no aliases,
no duplicate keys, bounded sizes), applies ``--set a.b=value`` overrides to a copy, and
converts it by walking dataclass fields and their type hints. Every problem raises
:class:`ConfigError` with a one-line message naming the key. Nothing is built here
(:func:`jaxrl.run.build.build` does); configs are frozen, and :func:`save_config` writes YAML
that :func:`load_config` reads back to an equal object.

The pieces live by concept, each name re-exported here: :mod:`jaxrl.run.sections`,
:mod:`jaxrl.run.convert`, :mod:`jaxrl.run.checks` and :mod:`jaxrl.run.derived`.
"""

from __future__ import annotations

import copy
import dataclasses
import typing
import warnings

import yaml

from jaxrl import _compat
from jaxrl.algos.contract import Plan  # noqa: F401 (re-exported)
from jaxrl.run import yamlio
from jaxrl.run.checks import (  # noqa: F401 (re-exported)
    OPTIMISER_KEYS, algo_entry, check_devices, check_env_section, check_finite, check_stop_every, check_train_section, prefixed,
    validate_algo,
)
from jaxrl.run.convert import (  # noqa: F401 (re-exported)
    _INT_LIMIT, NUMBER_RE, ConfigError, _convert_scalar, _join, _type_name, _wrong, convert, from_dict, suggest, to_dict,
)
from jaxrl.run.derived import Derived, derive  # noqa: F401 (re-exported)
from jaxrl.run.sections import (  # noqa: F401 (re-exported)
    RUN_KEYS, CurriculumConfig, EnvConfig, MeshConfig, RunConfig, StopAt, TokenizerConfig, TrainConfig,
)
from jaxrl.text.config import TextConfig, check_text  # noqa: F401 (re-exported)
from jaxrl.run.yamlio import short

#: The names of 0.5 (private ones that other modules used), kept as aliases.
_RUN_KEYS, _suggest, _NUMBER_RE = RUN_KEYS, suggest, NUMBER_RE
_check_env, _check_train, _check_devices = check_env_section, check_train_section, check_devices
_check_finite, _validate_algo, _check_stop_every = check_finite, validate_algo, check_stop_every


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
    known = set(RUN_KEYS) | {name}
    for key in raw:
        if key not in known:
            raise ConfigError(f"unknown key {short(str(key))}{suggest(str(key), known)}")
    hints = typing.get_type_hints(RunConfig)
    if "env" not in raw:
        raise ConfigError("missing key 'env'")
    raw = tokenizer_from_model(remote_env(raw), name)
    cfg = RunConfig(
        algo=name,
        env=convert(raw["env"], EnvConfig, "env"),
        algo_config=from_dict(entry.config_cls, raw.get(name), name),
        train=convert({} if raw.get("train") is None else raw["train"], TrainConfig, "train"),  # [] is no mapping
        devices=convert(raw.get("devices", 1), hints["devices"], "devices"),
        shard=convert(raw.get("shard", "auto"), hints["shard"], "shard"),
        mesh=convert({} if raw.get("mesh") is None else raw["mesh"], MeshConfig, "mesh"),
    )
    check_env_section(cfg.env)
    check_train_section(cfg.train)
    check_devices(cfg.devices, cfg.mesh)
    validate_algo(cfg)
    check_stop_every(cfg)
    return cfg


def remote_env(raw: dict) -> dict:
    """``raw`` with an ``env.remote`` (``env.mix``) section's implied keys: ``id: remote``
    (``mix``) and a ``tokenizer`` section (the model's, through :func:`tokenizer_from_model`)
    when left out."""
    env = raw.get("env")
    if not isinstance(env, dict):
        return raw
    if env.get("mix") not in (None, [], ()):  # env.mix: id "mix", the shared tokenizer
        return {**raw, "env": {"id": "mix", "tokenizer": {}, **env}}
    if isinstance(env.get("verifiers"), str):  # env: {verifiers: NAME}
        env = {**env, "verifiers": {"id": env["verifiers"]}}
    if env.get("verifiers") is not None:
        return {**raw, "env": {"id": "verifiers", "tokenizer": {}, **env}}
    if env.get("remote") is None:
        return raw
    return {**raw, "env": {"id": "remote", "tokenizer": {}, **env}}


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
