"""The run's own config sections: env, train, mesh and the whole run, as frozen dataclasses.

Each field's comment is its meaning in ``jaxrl config ALGO`` and docs/config_reference.md
(:mod:`jaxrl.run.reference`); the algorithm's own section is its registered config class.
"""

from __future__ import annotations

import dataclasses
from typing import Any, Literal, Union

from jaxrl.text.config import MixMember, RemoteConfig, TextConfig, TokenizerConfig, VerifiersConfig


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
    remote: RemoteConfig | None = None  # an OpenEnv server's text env (id "remote", may be left out; docs/remote_envs.md)
    # Several token tasks in one GRPO run, each prompt group drawn from one by weight: a list of
    # {id: text/X, weight, name, params, text, tokenizer} or {remote: {url: ...}, weight, name}
    # (id "mix", may be left out; the env section's tokenizer is shared; docs/remote_envs.md#mixing-tasks).
    mix: tuple[MixMember, ...] = ()
    # An installed verifiers (0.4) taskset: env: {verifiers: NAME} or {verifiers: {id: NAME, args: {...}}}
    # (id "verifiers", may be left out; the [verifiers] extra; docs/remote_envs.md#verifiers-environments).
    verifiers: VerifiersConfig | None = None


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


RUN_KEYS = ("algo", "env", "train", "devices", "shard", "mesh")  # plus the algorithm's section
