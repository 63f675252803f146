"""Config to program, once: resolve the env side, build the algorithm's program, count.

``build(cfg)`` is the only place a run's env and program are made (train, eval, render and
``make_train`` all call it): parse -> validate (:mod:`jaxrl.run.config`) -> build once ->
run. Errors only a built env or program can find (bad env parameters, a policy that does not
fit the action space) come back as :class:`~jaxrl.run.config.ConfigError`.
"""

from __future__ import annotations

import dataclasses
import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxrl.algos.contract import EnvSetup, Program
from jaxrl.core import registry
from jaxrl.core.curriculum import Curriculum
from jaxrl.core.env import replace_params
from jaxrl.core.randomize import DomainRandomization
from jaxrl.core.tokens import TokenTask
from jaxrl.run import config as config_lib
from jaxrl.run.config import ConfigError, Derived, EnvConfig, RunConfig
from jaxrl.text.task import TextTask


class Built(NamedTuple):
    """A configured run: the env side, the algorithm's program and the derived counts."""

    envs: EnvSetup
    program: Program
    derived: Derived


def _frame_stack(env, params, e):
    """``env`` inside a :class:`~jaxrl.core.wrappers.FrameStack` of ``e.frame_stack`` frames
    (the algorithms' auto-reset wraps it, so a final observation is its episode's own stack)."""
    from jaxrl.core.multiagent import MultiAgentEnv
    from jaxrl.core.wrappers import FrameStack

    if isinstance(env, (TokenTask, MultiAgentEnv)) or e.text is not None or e.tokenizer is not None:
        raise ConfigError(f"env.frame_stack: {e.id} is a token or multi-agent task; frame stacking is for single-agent observations")
    try:
        stacked = FrameStack(env, e.frame_stack)
        stacked.observation_space(params)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"env.frame_stack: {' '.join(str(exc).split())}") from None
    return stacked


def env_setup(cfg: RunConfig) -> EnvSetup:
    """The env, its training and evaluation params and the curriculum of ``cfg``."""
    e = cfg.env
    try:
        env, params = registry.make(e.id, **e.params)
        eval_params = env.held_out_params(params) if isinstance(env, TokenTask) else params
        eval_params = replace_params(eval_params, **e.eval_params)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"env.params: {' '.join(str(exc).split())}") from None
    if e.randomize:
        if isinstance(env, TokenTask):
            raise ConfigError("env.randomize: token tasks draw their prompts from their params already; not supported")
        try:
            env = DomainRandomization(env, e.randomize)
            env.check_params(params)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"env.{' '.join(str(exc).split())}") from None
    if e.frame_stack > 1:
        env = _frame_stack(env, params, e)
    if isinstance(env, TextTask):
        env = text_env(e)
        print(env.summary(), flush=True)
    elif e.text is not None:
        raise ConfigError(f"env.text: only text tasks (text/File-v0, text/WordProblems-v0, ...) read it, {e.id} is not one")
    elif e.tokenizer is not None and isinstance(getattr(env, "tokenizer_path", None), str):
        env = tokenizer_env(e)  # a task written in a tokenizer's ids (a phrasebook): rebuilt with this one
    elif e.tokenizer is not None:
        if not isinstance(env, TokenTask):
            raise ConfigError(f"env.tokenizer: only token tasks speak a tokenizer's ids, {e.id} is not one")
        from jaxrl.run.tokenized import tokenizer_task

        try:
            env = tokenizer_task(env, e.tokenizer.path, e.tokenizer.chat_template, e.tokenizer.system_prompt)
        except (OSError, ValueError) as exc:
            raise ConfigError(f"env.tokenizer: {' '.join(str(exc).split())}") from None
    curriculum = None
    if e.curriculum is not None:
        c = e.curriculum
        for key, value in (("param", c.start), ("stop", c.stop)):  # both ends, so no level is clipped
            try:
                replace_params(params, **{c.param: value})
            except (TypeError, ValueError) as exc:
                raise ConfigError(f"env.curriculum.{key}: {' '.join(str(exc).split())}") from None
        curriculum = Curriculum(c.param, c.start, c.stop, c.metric, c.threshold, c.step)
    return EnvSetup(env, params, eval_params, curriculum, e.vector)


#: env.text keys -> the text task option each sets (a key left at its default sets nothing).
_TEXT_KEYS = (
    "train", "held_out", "held_out_every", "prompt_column", "answer_column", "completion_column", "answer_after", "prompt_len",
    "completion_len", "answer_bytes", "completion_bytes", "reward", "num_train", "num_held_out", "seed", "prompt_prefix",
    "prompt_suffix",
)
#: Option names of jaxrl.text.task that are keys of env.tokenizer, for error messages.
_TOKENIZER_OPTIONS = {"tokenizer_path": "env.tokenizer.path", "chat_template": "env.tokenizer.chat_template"}


def text_options(e: EnvConfig) -> dict:
    """The options ``env.text`` and ``env.tokenizer`` give a text task's factory."""
    options = {}
    if e.text is not None:
        defaults = config_lib.TextConfig()
        options = {k: getattr(e.text, k) for k in _TEXT_KEYS if getattr(e.text, k) != getattr(defaults, k)}
    system = e.text.system_prompt if e.text is not None else None
    if e.tokenizer is not None:
        options.update(tokenizer_path=e.tokenizer.path, chat_template=e.tokenizer.chat_template)
        system = e.tokenizer.system_prompt if system is None else system
    if system:
        options["system_prompt"] = system
    return options


def text_env(e: EnvConfig) -> TextTask:
    """The text task ``e.id`` rebuilt with ``env.text`` / ``env.tokenizer`` (its registered
    factory, called with :func:`text_options`); errors name the config key."""
    options = text_options(e)
    spec = registry.spec(e.id)
    try:
        env = dataclasses.replace(spec, kwargs=tuple({**dict(spec.kwargs), **options}.items())).build()
    except (TypeError, ValueError) as exc:
        message = " ".join(str(exc).split())
        option, _, rest = message.partition(": ")
        if option in _TOKENIZER_OPTIONS:
            raise ConfigError(f"{_TOKENIZER_OPTIONS[option]}: {rest}") from None
        if option in _TEXT_KEYS or option == "system_prompt":
            raise ConfigError(f"env.text.{option}: {rest}") from None
        raise ConfigError(f"env.text: {message}") from None
    return env


def tokenizer_env(e: EnvConfig):
    """A task that speaks a tokenizer natively (a ``tokenizer_path`` field, e.g.
    ``text/GuessNumberText-v0``) rebuilt with ``env.tokenizer.path``."""
    if not e.tokenizer.chat_template or e.tokenizer.system_prompt:
        raise ConfigError(f"env.tokenizer: {e.id} takes only a path (its own chat template, no system prompt)")
    spec = registry.spec(e.id)
    try:
        return dataclasses.replace(spec, kwargs=tuple({**dict(spec.kwargs), "tokenizer_path": e.tokenizer.path}.items())).build()
    except (OSError, TypeError, ValueError) as exc:
        raise ConfigError(f"env.tokenizer.path: {' '.join(str(exc).split())}") from None


def build(cfg: RunConfig) -> Built:
    """Make the env side and the program of ``cfg`` (nothing is compiled)."""
    envs = env_setup(cfg)
    entry = config_lib.algo_entry(cfg.algo)
    try:
        program = entry.build(envs, cfg.algo_config)
    except (ValueError, TypeError) as exc:
        raise ConfigError(config_lib.prefixed(cfg.algo, str(exc))) from None
    return Built(envs, program, config_lib.derive(cfg, program.plan))


def seed_keys(seed: int, num_seeds: int) -> jax.Array:
    """``uint32[num_seeds, 2]``: seed ``i`` of a run uses ``fold_in(PRNGKey(seed), i)``."""
    return _seed_keys(seed, num_seeds)


@functools.partial(jax.jit, static_argnums=(0, 1))
def _seed_keys(seed: int, num_seeds: int) -> jax.Array:  # one small program instead of five
    root = jax.random.PRNGKey(seed)
    return jax.vmap(functools.partial(jax.random.fold_in, root))(jnp.arange(num_seeds, dtype=jnp.uint32))
