"""The checks of a run config beyond its types: each section's ranges and the algorithm's own validation.

Each check raises one :class:`~jaxrl.run.convert.ConfigError` line naming the key; nothing
is built (:func:`jaxrl.run.config.config_from_dict` runs them in order).
"""

from __future__ import annotations

import math

from jaxrl.run.convert import NUMBER_RE, ConfigError, suggest, to_dict
from jaxrl.run.sections import RUN_KEYS, EnvConfig, MeshConfig, RunConfig, TrainConfig
from jaxrl.text.config import check_text
from jaxrl.run.yamlio import short


def algo_entry(name: str):
    """The registered :class:`~jaxrl.algos.contract.AlgoEntry` of ``name``, or a
    :class:`ConfigError` with suggestions."""
    from jaxrl.algos import registry as algo_registry

    algos = algo_registry.algorithms()
    if not isinstance(name, str) or name not in algos:
        raise ConfigError(f"algo: unknown algorithm {short(name)}{suggest(str(name), algos)}")
    return algos[name]


def check_env_section(env: EnvConfig) -> None:
    from jaxrl.core import registry

    if env.mix:
        _check_mix_section(env)
        return
    if env.verifiers is not None:
        _check_verifiers_section(env)
        return
    if env.remote is not None:
        _check_remote_section(env)
        return
    try:
        registry.spec(env.id)
    except KeyError as exc:
        raise ConfigError(f"env.id: {exc.args[0]}") from None
    except ValueError as exc:
        raise ConfigError(f"env.id: {exc}") from None
    for section in ("params", "eval_params"):
        for name, value in getattr(env, section).items():
            numeric = isinstance(value, (int, float)) or (isinstance(value, str) and NUMBER_RE.match(value.strip()))
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


def _check_mix_section(env: EnvConfig) -> None:
    """``env.mix``: each task's keys (registered ids exist), and none of a single env's keys."""
    from jaxrl.core import registry
    from jaxrl.text.config import check_mix

    if env.id != "mix":
        raise ConfigError(f"env.id: {env.id!r} with env.mix; name each task in env.mix (leave env.id out)")
    given = [k for k in ("remote", "params", "eval_params", "randomize", "text", "curriculum") if getattr(env, k)]
    if given or env.frame_stack != 1:
        key = (given or ["frame_stack"])[0]
        raise ConfigError(f"env.{key}: not with env.mix; set it on the task in env.mix that it is for"
                          if key in ("remote", "params", "eval_params", "text") else f"env.{key}: not with env.mix")
    if env.tokenizer is None or not env.tokenizer.path:
        raise ConfigError("env.tokenizer.path: not set; the tasks of env.mix share one tokenizer (a checkpoint's directory)")
    try:
        check_mix(env.mix)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None
    for i, m in enumerate(env.mix):
        if m.id:
            try:
                registry.spec(m.id)
            except (KeyError, ValueError) as exc:
                raise ConfigError(f"env.mix[{i}].id: {exc.args[0] if isinstance(exc, KeyError) else exc}") from None
        for section in ("params", "eval_params"):
            for name, value in getattr(m, section).items():
                if not (isinstance(value, (int, float)) or (isinstance(value, str) and NUMBER_RE.match(value.strip()))):
                    raise ConfigError(f"env.mix[{i}].{section}.{name}: expected a number, got {short(value)}")
        if m.params.get("held_out") not in (None, 0, False, "0", "false"):
            raise ConfigError(f"env.mix[{i}].params.held_out: training on the held-out split leaves no unseen prompts to evaluate on")


def _check_verifiers_section(env: EnvConfig) -> None:
    """``env.verifiers``: the taskset's settings, and none of the keys of a registered env."""
    from jaxrl.text.config import check_verifiers

    if env.id != "verifiers":
        raise ConfigError(f"env.id: {env.id!r} with env.verifiers; a verifiers taskset has no registered id (leave env.id out)")
    given = [k for k in ("remote", "params", "eval_params", "randomize", "text", "curriculum") if getattr(env, k)]
    if given or env.frame_stack != 1:
        raise ConfigError(f"env.{(given or ['frame_stack'])[0]}: not with env.verifiers (the taskset holds its tasks and rewards)")
    if env.tokenizer is not None and not env.tokenizer.path:
        raise ConfigError("env.tokenizer.path: not set; name the tokenizer's directory (a checkpoint's)")
    try:
        check_verifiers(env.verifiers)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def _check_remote_section(env: EnvConfig) -> None:
    """``env.remote``: the server's settings, and none of the keys of a registered env."""
    from jaxrl.text.config import check_remote

    if env.id != "remote":
        raise ConfigError(f"env.id: {env.id!r} with env.remote; a remote env has no registered id (leave env.id out)")
    given = [k for k in ("params", "eval_params", "randomize", "text", "curriculum") if getattr(env, k)]
    if given or env.frame_stack != 1:
        raise ConfigError(f"env.{(given or ['frame_stack'])[0]}: a remote env takes its settings from the server, not this key")
    if env.tokenizer is not None and not env.tokenizer.path:
        raise ConfigError("env.tokenizer.path: not set; name the tokenizer's directory (a checkpoint's)")
    try:
        check_remote(env.remote)
    except ValueError as exc:
        raise ConfigError(str(exc)) from None


def check_train_section(train: TrainConfig) -> None:
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


def check_devices(devices, mesh: MeshConfig = MeshConfig()) -> None:
    if devices != "all" and devices < 1:
        raise ConfigError(f"devices: must be 'all' or >= 1, got {devices}")
    if mesh.model < 1:
        raise ConfigError(f"mesh.model: must be >= 1, got {mesh.model}")
    if devices != "all" and devices % mesh.model:
        raise ConfigError(f"mesh.model: {mesh.model} does not divide devices={devices}; use a divisor of it")


#: Optimiser values (by their last key) that must be finite: an infinite ``adam_eps`` or
#: ``lr`` trains parameters that never move, or turn NaN, without any error.
OPTIMISER_KEYS = frozenset({"lr", "lr_end_frac", "adam_eps", "eps", "max_grad_norm", "weight_decay", "b1", "b2"})


def check_finite(tree, prefix: str) -> None:
    """No NaN anywhere in an algorithm's section, nor an infinite optimiser value."""
    if isinstance(tree, dict):
        for name, value in tree.items():
            check_finite(value, f"{prefix}.{name}")
        return
    if isinstance(tree, list):
        for i, value in enumerate(tree):
            check_finite(value, f"{prefix}.{i}")
        return
    if isinstance(tree, float) and (math.isnan(tree) or (math.isinf(tree) and prefix.rsplit(".", 1)[-1] in OPTIMISER_KEYS)):
        raise ConfigError(f"{prefix}: must be a finite number, got {tree}")


def validate_algo(cfg: RunConfig) -> None:
    """The algorithm config's own ``validate()`` (pure: builds nothing), after
    :func:`check_finite`."""
    check_finite(to_dict(cfg.algo_config), cfg.algo)
    try:
        cfg.algo_config.validate()
    except (ValueError, TypeError) as exc:
        raise ConfigError(prefixed(cfg.algo, str(exc))) from None


def prefixed(section: str, message: str) -> str:
    """``message`` on one line, starting with ``section.`` (the key it is about), unless it
    already names a key of the run's own sections (``env.curriculum: ...``)."""
    message = " ".join(message.split())  # one line
    own = tuple(f"{key}." for key in (section, *RUN_KEYS)) + tuple(f"{key}:" for key in RUN_KEYS)
    return message if message.startswith(own) else f"{section}.{message}"


def check_stop_every(cfg: RunConfig) -> None:
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
