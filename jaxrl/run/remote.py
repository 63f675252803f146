"""A trained run's policy playing a served env from this host, as library functions.

``jaxrl eval RUN --remote URL`` (:mod:`jaxrl.commands.eval`) is their caller; the server is
``jaxrl serve`` or any OpenEnv server speaking jaxrl's observation shape. A run with an
acting policy plays it deterministically (:func:`policy_returns`); a language-model run
(GRPO, SFT) completes each served prompt greedily with its exported model
(:func:`lm_returns`, :func:`remote_completions`). Each returns one return per episode;
episode ``i`` is ``reset(seed=seed + i)``. Bad input raises
:class:`~jaxrl.run.config.ConfigError`; the connection's own errors (``ConnectionError``,
``TimeoutError``, :class:`~jaxrl.interop.openenv.OpenEnvError`) pass through.
"""

from __future__ import annotations

import os

import jax
import numpy as np

from jaxrl.core.tokens import TokenTask
from jaxrl.run.config import ConfigError
from jaxrl.run.evaluate import actor_factory, remote_action_map, remote_returns
from jaxrl.text.task import TextTask

__all__ = ["lm_returns", "plays_remotely", "policy_returns", "remote_completions", "served_space"]


def served_space(url: str) -> dict:
    """The action space the server at ``url`` names in its ``/schema``
    (``x-jaxrl-space``: what ``jaxrl serve`` writes)."""
    from jaxrl.interop import openenv

    try:
        schema = openenv.schema(url)
    except (ConnectionError, ValueError) as exc:
        raise ConfigError(f"--remote: {exc}") from None
    space = (schema.get("action") or {}).get("x-jaxrl-space")
    if not space:
        raise ConfigError(f"--remote {url}: the server's /schema names no x-jaxrl-space (not a jaxrl serve server)")
    return space


def plays_remotely(built) -> bool:
    """Whether the built run can step a served env: it has an acting policy, or it is a
    token task whose model can be exported."""
    lm = built.program.lm.model_params
    if built.program.policy is not None:
        return True
    return lm is not None and lm.export is not None and isinstance(built.envs.env.unwrapped, TokenTask)


def policy_returns(built, states, url: str, episodes: int, seed: int, space: dict) -> list[float]:
    """Returns of the run's deterministic policy (seed 0 of ``states``) on ``episodes``
    served episodes; ``space`` is the server's action space (:func:`served_space`)."""
    policy = built.program.policy
    action_map = remote_action_map(policy.env.action_space(built.envs.eval_params), space)
    obs_space = policy.env.observation_space(built.envs.eval_params)
    agent = policy.params(jax.tree_util.tree_map(lambda x: x[0], states))
    act = actor_factory(policy, agent, deterministic=True)
    return remote_returns(act, url, episodes, seed, np.dtype(obs_space.dtype), action_map)


def lm_returns(built, states, url: str, episodes: int, seed: int, space: dict, run_dir: str) -> list[float]:
    """Returns of a language-model run (GRPO, SFT) on ``episodes`` served episodes: the
    trained model (seed 0, written out as ``export-hf`` writes it, into a temporary
    directory) completes each served prompt greedily (:func:`remote_completions`).
    ``run_dir`` only names the run in the message of a mismatched server."""
    import tempfile

    from jaxrl.models.lm import load_lm

    task = built.envs.env.unwrapped
    vocab = task.action_space(built.envs.eval_params).n
    if space.get("kind") != "Discrete" or space.get("n") != vocab:
        raise ConfigError(f"--remote: the run's model writes tokens of a vocabulary of {vocab}, the server's action space is "
                          f"{space.get('kind')}({space.get('n', space.get('shape'))}); serve the run's "
                          f"task: jaxrl serve {run_dir} --held-out")
    state = jax.device_get(jax.tree_util.tree_map(lambda x: x[0], states))
    with tempfile.TemporaryDirectory(prefix="jaxrl-remote-") as tmp:
        out = built.program.lm.model_params.export(state, os.path.join(tmp, "model"), False)
        model, params = load_lm(out)
    return remote_completions(model, params, task, url, episodes, seed)


def remote_completions(model, params, task, url: str, episodes: int, seed: int, as_text: bool | None = None) -> list[float]:
    """Returns of ``episodes`` served token-task episodes (``reset(seed=seed + i)``), each
    completed greedily by ``model``: one generate call on the left-padded prompt (the task's
    ``prompt_len``, so one compiled program), then the completion up to the task's
    end-of-turn id sent as text when the server speaks text (its observation has ``"text"``),
    else as token ids one step each (``as_text`` True / False: always that way)."""
    from jaxrl.interop.openenv import OpenEnvClient
    from jaxrl.models.lm import generate

    eot, pad = int(task.end_of_turn), int(task.pad_id)
    returns = []
    with OpenEnvClient(url) as client:
        for i in range(episodes):
            result = client.reset(seed=seed + i)
            prompt = np.asarray(result.obs, np.int32)[: task.prompt_len]
            if prompt.shape != (task.prompt_len,):
                raise ConfigError(f"--remote: the served observation holds {prompt.size} tokens, the run's task a prompt of "
                                  f"{task.prompt_len}: serve the run's own task (jaxrl serve RUN --held-out)")
            mask = np.cumsum(prompt != pad) > 0  # the left padding
            out = generate(model, params, prompt[None], mask[None].astype(np.int32),
                           max_new_tokens=int(task.max_completion_len), eos_ids=(eot,))
            tokens = [int(t) for t in np.asarray(out)[0, task.prompt_len:]]
            tokens = tokens[: tokens.index(eot) + 1] if eot in tokens else tokens
            total = 0.0
            speaks_text = isinstance(task, TextTask) and isinstance(result.observation, dict) and "text" in result.observation
            if speaks_text if as_text is None else as_text:
                result = client.step(task.decode(tokens[:-1] if tokens and tokens[-1] == eot else tokens))
                total += float(result.reward)
            else:
                for token in tokens:
                    result = client.step(token)
                    total += float(result.reward)
                    if result.done:
                        break
            if not result.done:
                raise ConfigError(f"--remote: episode {i} did not end after the completion (multi-turn tasks are not played "
                                  "remotely)")
            returns.append(total)
    return returns
