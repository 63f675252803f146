"""Policy export: ``jaxrl.load_policy(run_dir)`` -> a pure, jittable policy of a trained run.

The run's newest verified checkpoint is restored read-only (safe while it still trains),
the algorithm's acting :class:`~jaxrl.algos.contract.Policy` picks one seed's agent out of
it, and the returned :class:`ExportedPolicy` acts with it. A stateless (MLP) policy is
called as ``act(obs, key) -> action``; a recurrent one threads its carry, which the caller
owns and resets at episode starts::

    policy = jaxrl.load_policy("runs/ppo_CartPole-POMDP-v1_...")
    carry = policy.init_carry((num_envs,))            # zeros: every env at an episode start
    carry, action = jax.jit(policy.act)(carry, obs, key, done)   # done: obs starts an episode

``act`` and ``init_carry`` close over the agent's arrays only (``policy.agent``) and hold no
Python state, so ``jit``, ``vmap``, ``scan`` and ``grad`` apply. Observation normalisation,
action squashing and rescaling are the policy's own, as at evaluation.
"""

from __future__ import annotations

import errno
import functools
import os
from typing import Any

import jax
import jax.numpy as jnp

from jaxrl.algos.contract import Policy
from jaxrl.run import config as config_lib
from jaxrl.run import records, rundir
from jaxrl.run.checkpoint import Checkpoints
from jaxrl.run.config import ConfigError
from jaxrl.run.files import CHECKPOINT_DIR
from jaxrl.run.yamlio import display_path


def act_with(policy: Policy, agent: Any, deterministic: bool, obs: jax.Array, key: jax.Array) -> jax.Array:
    """One action of ``policy`` with ``agent`` for one observation (stateless policies)."""
    _, action = policy.act(agent, policy.init_carry(agent), obs, key, deterministic)
    return action


def batched_carry(policy: Policy, agent: Any, batch_shape: tuple[int, ...] = ()) -> Any:
    """``policy``'s episode-start carry for ``batch_shape`` envs (leaves ``[*batch_shape, ...]``)."""
    batch_shape = tuple(int(n) for n in batch_shape)
    one = policy.init_carry(agent)
    return jax.tree_util.tree_map(lambda c: jnp.broadcast_to(c, batch_shape + jnp.shape(c)), one)


def reset_where(done: jax.Array, carry: Any, fresh: Any) -> Any:
    """``carry`` with the envs where ``done [*batch]`` is set replaced by ``fresh`` (a carry
    of one env, broadcast)."""
    done = jnp.asarray(done, bool)

    def pick(c, f):
        mask = jnp.reshape(done, done.shape + (1,) * (c.ndim - done.ndim))
        return jnp.where(mask, jnp.broadcast_to(f, c.shape), c)

    return jax.tree_util.tree_map(pick, carry, fresh)


def act_carry(
    policy: Policy, agent: Any, deterministic: bool, carry: Any, obs: jax.Array, key: jax.Array, done: jax.Array | None = None
) -> tuple[Any, jax.Array]:
    """One step of ``policy``: the carry reset where ``done`` (``obs`` starts an episode),
    then advanced by ``obs``; returns ``(carry, action)``."""
    if done is not None:
        carry = reset_where(done, carry, policy.init_carry(agent))
    return policy.act(agent, carry, obs, key, deterministic)


class ExportedPolicy:
    """A run's trained policy: ``act(carry, obs, key, done=None) -> (carry, action)`` and
    ``init_carry(batch_shape)`` for every policy, plus ``policy(obs, key) -> action`` for a
    stateless one; what it was made from in ``agent``, ``env`` and ``step`` (updates done).

    ``obs`` is one observation (the env's observation shape) or a batch ``[*batch_shape,
    ...]`` with a carry from ``init_carry(batch_shape)``; ``done`` (bool, the batch's shape)
    marks the envs whose ``obs`` is the first of a new episode: their carry is reset first,
    as in training. A stateless policy's carry is ``()`` and passes through unchanged.
    """

    def __init__(self, policy: Policy, agent: Any, deterministic: bool, step: int):
        self.policy, self.agent, self.deterministic, self.step = policy, agent, deterministic, step
        self.env = policy.env
        self.recurrent = bool(jax.tree_util.tree_leaves(policy.init_carry(agent)))
        self._act = functools.partial(act_with, policy, agent, deterministic)
        self.act = functools.partial(act_carry, policy, agent, deterministic)
        self.init_carry = functools.partial(batched_carry, policy, agent)

    def __call__(self, obs: jax.Array, key: jax.Array) -> jax.Array:
        if self.recurrent:
            raise TypeError(
                "this policy carries a recurrent state: use carry = policy.init_carry(batch_shape) and "
                "carry, action = policy.act(carry, obs, key, done)"
            )
        return self._act(obs, key)


def load_policy(run_dir: str, seed: int = 0, deterministic: bool = True) -> ExportedPolicy:
    """The trained policy of seed ``seed`` of the run in ``run_dir`` (see the module docstring).

    ``deterministic`` acts greedily (the distribution's mode); ``False`` samples with ``key``.
    Raises :class:`ConfigError` for a directory that is not a run, a run without a
    checkpoint, a seed it did not train, or an algorithm that cannot act alone.
    """
    from jaxrl.run.evaluate import load_run

    cfg, built, states, step = load_run(run_dir)
    policy = built.program.policy
    if policy is None:
        raise ConfigError(f"{run_dir!r}: {cfg.algo} on {cfg.env.id} has no acting policy to export")
    if not 0 <= int(seed) < cfg.train.seeds:
        raise ConfigError(f"seed: the run trained seeds 0..{cfg.train.seeds - 1}, got {seed}")
    state = jax.tree_util.tree_map(lambda x: x[int(seed)], states)
    return ExportedPolicy(policy, policy.params(state), bool(deterministic), step)


def check_out_dir(out_dir: str, run_dir: str, keep: dict[str, str], force: bool = False) -> None:
    """Refuse an ``export-hf --out`` that would destroy something (one line, :class:`ConfigError`):
    a symbolic link, a file, an existing non-empty directory (unless ``force``), and, even with
    ``force``, a directory that is or contains the run directory (or lies inside it), the current
    directory, or a directory of ``keep`` (``{what: path}``: the base checkpoint, the tokenizer)."""
    shown = display_path(out_dir)
    out = os.path.abspath(out_dir)
    if os.path.islink(out):
        raise ConfigError(f"--out {shown} is a symbolic link; give the directory itself")
    real = os.path.realpath(out)
    guarded = {"the run directory": run_dir, "the current directory": os.getcwd(), **keep}
    for what, path in guarded.items():
        mine = os.path.realpath(path)
        if real == mine or _inside(mine, real) or (what == "the run directory" and _inside(real, mine)):
            how = "is" if real == mine else ("contains" if _inside(mine, real) else "is inside")
            raise ConfigError(f"--out {shown} {how} {what} ({display_path(path)}), which an export would replace; "
                              "choose a new directory")
    if os.path.lexists(out) and not os.path.isdir(out):
        raise ConfigError(f"--out {shown} is a file, not a directory")
    if os.path.isdir(out) and os.listdir(out) and not force:
        raise ConfigError(f"--out {shown} is a directory that is not empty (an export replaces it whole); choose a "
                          "new directory, or pass --force to replace it")


def _inside(child: str, parent: str) -> bool:
    """``child`` lies strictly under ``parent`` (both absolute, links resolved)."""
    return child != parent and os.path.commonpath([child, parent]) == parent


def _model_dirs(cfg) -> dict[str, str]:
    """``{config key: directory}``: the base checkpoint and tokenizer directories ``cfg`` names."""
    return records.model_dir_keys(config_lib.config_to_dict(cfg))


def _check_tokenizer(run_dir: str, cfg, step: int) -> None:
    """Refuse to pair the weights of checkpoint ``step`` with a tokenizer (or model config) that
    changed since it was trained: the files the export copies are checked against the record."""
    with Checkpoints(os.path.join(run_dir, CHECKPOINT_DIR), read_only=True, run_id=rundir.run_id(run_dir)) as ckpts:
        recorded = ((ckpts.record(step).get("meta") or {}).get("trained_on") or {}).get("models") or {}
    for key, path in _model_dirs(cfg).items():
        if not key.endswith(".model.path") or not isinstance(recorded.get(key), dict):  # (what the export copies)
            continue  # a run recorded before runs recorded their tokenizer: nothing to check against
        problem = records.tokenizer_problem(recorded[key], path, key)
        if problem:
            raise ConfigError(f"export: {problem}; put back the files the run trained with (the export pairs the "
                              "weights with them)")


def export_hf(run_dir: str, out_dir: str, seed: int = 0, step: int | None = None, adapters_only: bool = False,
              force: bool = False) -> str:
    """Write seed ``seed``'s trained language model of the run in ``run_dir`` (checkpoint
    ``step``, default the newest that verifies) as a Hugging Face directory ``out_dir`` that
    transformers loads (``adapters_only``: PEFT's adapter files).

    ``out_dir`` must be new or empty (``force``: an existing directory is replaced whole), and
    never the run, the current directory or the base checkpoint (:func:`check_out_dir`); the
    export is written beside it and renamed into place. The tokenizer and config files copied
    from ``model.path`` must be those the run recorded. Raises :class:`ConfigError` for a run
    whose algorithm has no model to export and for each refusal; ``OSError`` (one line) for an
    I/O failure, which leaves nothing behind."""
    from jaxrl.run.evaluate import load_run, run_config

    check_out_dir(out_dir, run_dir, _model_dirs(run_config(run_dir)), force)  # before loading anything
    cfg, built, states, step = load_run(run_dir, step=step)
    check_out_dir(out_dir, run_dir, _model_dirs(cfg), force)  # the recorded config's directories too
    declared = built.program.lm.model_params
    if declared is None or declared.export is None:
        raise ConfigError(f"{run_dir!r}: {cfg.algo} on {cfg.env.id} trained no language model to export")
    if not 0 <= int(seed) < cfg.train.seeds:
        raise ConfigError(f"seed: the run trained seeds 0..{cfg.train.seeds - 1}, got {seed}")
    _check_tokenizer(run_dir, cfg, step)
    state = jax.device_get(jax.tree_util.tree_map(lambda x: x[int(seed)], states))
    try:
        return declared.export(state, out_dir, bool(adapters_only))
    except OSError as exc:
        raise OSError(exc.errno, f"{exc.strerror or exc} (the export was not written)", out_dir) from None
    except ValueError as exc:
        raise ConfigError(f"export: {' '.join(str(exc).split())}") from None
    except Exception as exc:  # safetensors' own error type wraps the writer's I/O errors
        if type(exc).__name__ != "SafetensorError":
            raise
        text = " ".join(str(exc).split())
        full = "No space left" in text or "StorageFull" in text
        raise OSError(errno.ENOSPC if full else errno.EIO,
                      f"{'No space left on device' if full else text[:200]} (the export was not written)", out_dir) from None


def __getattr__(name: str):
    """``main_export_hf`` moved to :mod:`jaxrl.commands.export_hf` (with a warning)."""
    from jaxrl import _compat

    return _compat.moved_name(__name__, name)
