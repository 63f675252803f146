"""Config to program, once: resolve the env side, build the algorithm's program, count.

``build(cfg)`` is the only place a run's env and program are made (train, eval, render and
``make_train`` all call it): parse -> validate (:mod:`jaxrl.run.config`) -> build once ->
run. Errors only a built env or program can find (bad env parameters, a policy that does not
fit the action space) come back as :class:`~jaxrl.run.config.ConfigError`.
"""

from __future__ import annotations

import functools
from typing import NamedTuple

import jax
import jax.numpy as jnp

from jaxrl.algos.contract import EnvSetup, Program
from jaxrl.core.curriculum import Curriculum
from jaxrl.core.env import replace_params
from jaxrl.core.randomize import DomainRandomization
from jaxrl.core.wrappers import FrameStack, NotStackable
from jaxrl.run import config as config_lib
from jaxrl.run.config import ConfigError, Derived, EnvConfig, RunConfig
from jaxrl.text import tokenized


class Built(NamedTuple):
    """A configured run: the env side, the algorithm's program and the derived counts."""

    envs: EnvSetup
    program: Program
    derived: Derived


def env_setup(e: EnvConfig) -> EnvSetup:
    """The env, its training and evaluation params and the curriculum of the env section ``e``:
    the registered env built once (in ``env.tokenizer``'s ids, from ``env.text``'s rows:
    :func:`jaxrl.text.tokenized.registered`), then randomised and frame-stacked as asked; an
    ``env.remote`` section builds :func:`jaxrl.text.remote.remote_task` instead, an ``env.mix``
    section :func:`jaxrl.text.mix.mix_task` of its members (each built as above)."""
    if e.mix:
        return _mix_setup(e)
    if e.verifiers is not None:
        return _verifiers_setup(e)
    if e.remote is not None:
        return _remote_setup(e)
    try:
        env, params = tokenized.registered(e.id, e.tokenizer, e.text)
    except (OSError, TypeError, ValueError) as exc:
        raise ConfigError(" ".join(str(exc).split())) from None
    try:
        params = replace_params(params, **e.params)
        eval_params = replace_params(env.held_out_params(params), **e.eval_params)
    except (TypeError, ValueError) as exc:
        raise ConfigError(f"env.params: {' '.join(str(exc).split())}") from None
    if e.randomize:
        try:
            env = DomainRandomization(env, e.randomize)
            env.check_params(params)
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"env.{' '.join(str(exc).split())}") from None
    if e.frame_stack > 1:
        try:
            env = FrameStack(env, e.frame_stack)
            env.observation_space(params)
        except NotStackable as exc:
            raise ConfigError(f"env.frame_stack: {e.id} is {exc}") from None
        except (TypeError, ValueError) as exc:
            raise ConfigError(f"env.frame_stack: {' '.join(str(exc).split())}") from None
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


def _remote_setup(e: EnvConfig) -> EnvSetup:
    from jaxrl.text import remote

    t = e.tokenizer
    try:
        env = remote.remote_task(e.remote, remote.tokenizer_codec(t.path, t.chat_template, t.system_prompt))
    except (OSError, ValueError) as exc:
        raise ConfigError(" ".join(str(exc).split())) from None
    params = env.default_params
    return EnvSetup(env, params, env.held_out_params(params), None, e.vector)


def _verifiers_setup(e: EnvConfig) -> EnvSetup:
    from jaxrl.text import remote, vf_env

    t = e.tokenizer
    try:
        env = vf_env.verifiers_task(e.verifiers, t.path, t.chat_template, t.system_prompt)
    except (OSError, ValueError) as exc:
        raise ConfigError(" ".join(str(exc).split())) from None
    params = env.default_params
    return EnvSetup(env, params, env.held_out_params(params), None, e.vector)


def _mix_setup(e: EnvConfig) -> EnvSetup:
    """Each member of ``env.mix`` built as its own env section would be (the shared tokenizer
    with the member's chat template and system prompt), then mixed; errors name the member."""
    import dataclasses

    from jaxrl.text import mix
    from jaxrl.text.config import source_name

    members, train, held = [], [], []
    for i, m in enumerate(e.mix):
        t = e.tokenizer if m.tokenizer is None else dataclasses.replace(m.tokenizer, path=e.tokenizer.path)
        if m.remote is not None:
            sub = EnvConfig(id="remote", tokenizer=t, remote=m.remote)
        elif m.verifiers is not None:
            sub = EnvConfig(id="verifiers", tokenizer=t, verifiers=m.verifiers)
        else:
            sub = EnvConfig(id=m.id, params=dict(m.params), eval_params=dict(m.eval_params), tokenizer=t, text=m.text)
        try:
            setup = env_setup(sub)
        except ConfigError as exc:
            raise ConfigError(_member_line(i, source_name(m), str(exc))) from None
        members.append(setup.env)
        train.append(setup.params)
        held.append(setup.eval_params)
    names = tuple(source_name(m) for m in e.mix)
    try:
        env = mix.mix_task(tuple(members), names, tuple(float(m.weight) for m in e.mix))
    except ValueError as exc:
        raise ConfigError(" ".join(str(exc).split())) from None
    return EnvSetup(env, mix.MixParams(tuple(train)), mix.MixParams(tuple(held)), None, e.vector)


def _member_line(i: int, name: str, line: str) -> str:
    """A member's build error with its keys under ``env.mix[i]`` (``env.text.x`` ->
    ``env.mix[i].text.x``), else prefixed with the member."""
    for key in ("env.remote.", "env.verifiers", "env.text.", "env.params", "env.eval_params", "env.tokenizer."):
        if line.startswith(key):
            rest = line[len("env."):]
            return f"env.mix[{i}].{rest}" if key != "env.tokenizer." else f"env.mix[{i}] ({name}): {line}"
    return f"env.mix[{i}] ({name}): {line}"


def build(cfg: RunConfig) -> Built:
    """Make the env side and the program of ``cfg`` (nothing is compiled)."""
    envs = env_setup(cfg.env)
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
