"""The networks GRPO drives: a small named tuple of pure functions per policy kind.

A causal transformer over token tasks (prefill the prompt, decode token by token and
prefill environment replies into a key/value cache, one pass over the whole dialogue for the
loss) — the small one of :mod:`jaxrl.models.transformer` or a loaded Hugging Face checkpoint
(:mod:`jaxrl.models.lm`, :func:`lm_policy`) — or an MLP over flat observations (control envs).
"""

from __future__ import annotations

import functools
from typing import Callable, NamedTuple

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxrl.algos.common.masks import mask_logits
from jaxrl.models.networks import MLP, orthogonal
from jaxrl.models.transformer import TransformerLM

Array = jax.Array


class Policy(NamedTuple):
    """How the GRPO rollout and loss talk to a network.

    * ``init(key, obs) -> params`` with ``obs [N, *obs_shape]``.
    * ``start(params, obs [N, ...]) -> (carry, logits [N, A])`` on the first observation.
    * ``step(params, carry, obs [N, ...], action [N], t) -> (carry, logits [N, A])`` after
      action ``t`` led to ``obs``.
    * ``sequence_logits(params, obs, actions [N, T]) -> logits [N, T, A]``: the logits
      every action was drawn from, in one pass (what the loss differentiates). ``obs`` is
      ``[N, T, ...]`` for a control env, the whole dialogue ``int32 [N, L]`` for a token task
      (``actions`` = its last ``T`` tokens).
    * ``extend(params, carry, tokens [N, R], pos) -> (carry, logits [N, R, A])``: feed ``R``
      tokens at dialogue positions ``pos ..`` in one pass (token tasks; None otherwise).
    * ``token_logp(params, obs, actions [N, T], temperature) -> (logp [N, T], entropy [N, T])``:
      what the loss needs of ``sequence_logits`` without holding ``[N, T, A]`` logits (a
      150k-token vocabulary); ``None``: computed from ``sequence_logits``.
    * ``frozen() -> params or None``: weights the policy reads but never trains (a loaded
      model's base under LoRA); the trainable ``params`` are then its adapters and every
      function above receives ``{"base": frozen, "lora": params}`` (``lora: None`` = the base
      alone, the KL reference).
    * ``start_grouped(params, obs [P, ...], g) -> (carry, logits [P * g, A])``: ``start`` of
      ``P`` prompts each shared by ``g`` consecutive members, computed once per prompt
      (``None``: the rollout calls ``start`` on every member).
    * ``token_logp_shared(params, obs [P * g, L], actions, temperature, g)``: ``token_logp``
      of dialogues whose consecutive runs of ``g`` rows share a prompt, each prompt computed
      once (``None``: the loss runs ``token_logp`` on every row).
    """

    init: Callable
    start: Callable
    step: Callable
    sequence_logits: Callable
    extend: Callable | None = None
    token_logp: Callable | None = None
    frozen: Callable | None = None
    start_grouped: Callable | None = None
    token_logp_shared: Callable | None = None


def _lm_init(model: TransformerLM, key, obs):
    return model.init(key, obs[:1, :1])


def _lm_start(model: TransformerLM, prompt_len: int, params, obs):
    logits, cache = model.apply(params, obs[:, :prompt_len], method=TransformerLM.prefill)
    return cache, logits[:, -1]


def _lm_step(model: TransformerLM, prompt_len: int, params, cache, obs, action, t):
    logits, cache = model.apply(params, action.astype(jnp.int32), prompt_len + t, cache, method=TransformerLM.decode)
    return cache, logits


def _lm_extend(model: TransformerLM, params, cache, tokens, pos):
    logits, cache = model.apply(params, tokens.astype(jnp.int32), pos, cache, method=TransformerLM.extend)
    return cache, logits


def _lm_sequence_logits(model: TransformerLM, prompt_len: int, params, obs, actions):
    del actions  # the dialogue obs [N, L] holds them: actions == obs[:, prompt_len:]
    logits = model.apply(params, obs[:, :-1].astype(jnp.int32))
    return logits[:, prompt_len - 1 :]


def transformer_policy(model: TransformerLM, prompt_len: int) -> Policy:
    """A causal LM over a token task: the prompt is ``obs[:prompt_len]``, actions are tokens."""
    return Policy(
        functools.partial(_lm_init, model),
        functools.partial(_lm_start, model, prompt_len),
        functools.partial(_lm_step, model, prompt_len),
        functools.partial(_lm_sequence_logits, model, prompt_len),
        functools.partial(_lm_extend, model),
    )


class MLPPolicy(nn.Module):
    """Logits of a categorical policy from a flat observation (torso: :class:`jaxrl.models.networks.MLP`)."""

    num_actions: int
    hidden: tuple[int, ...] = (64, 64)

    @nn.compact
    def __call__(self, obs: Array) -> Array:
        x = jnp.asarray(obs, jnp.float32)
        h = MLP(self.hidden, "tanh", name="torso")(x)
        return nn.Dense(self.num_actions, kernel_init=orthogonal(0.01), name="head")(h)


def _mlp_init(model, key, obs):
    return model.init(key, obs[:1])


def _mlp_start(model, params, obs):
    return (), model.apply(params, obs)


def _mlp_step(model, params, carry, obs, action, t):
    return carry, model.apply(params, obs)


def _mlp_sequence_logits(model, params, obs, actions):
    return model.apply(params, obs)


def _masked_start(policy: Policy, mask_fn, params, obs):
    carry, logits = policy.start(params, obs)
    return carry, mask_logits(logits, mask_fn(obs))


def _masked_step(policy: Policy, mask_fn, params, carry, obs, action, t):
    carry, logits = policy.step(params, carry, obs, action, t)
    return carry, mask_logits(logits, mask_fn(obs))


def _masked_sequence_logits(policy: Policy, mask_fn, params, obs, actions):
    return mask_logits(policy.sequence_logits(params, obs, actions), mask_fn(obs))


def masked_policy(policy: Policy, mask_fn) -> Policy:
    """``policy`` (over a control env) whose logits give illegal actions of each observation
    probability 0 (:func:`jaxrl.algos.common.masks.mask_logits`), in rollouts and in the
    loss alike; ``policy`` itself when ``mask_fn`` is ``None``."""
    if mask_fn is None:
        return policy
    return policy._replace(
        start=functools.partial(_masked_start, policy, mask_fn),
        step=functools.partial(_masked_step, policy, mask_fn),
        sequence_logits=functools.partial(_masked_sequence_logits, policy, mask_fn),
    )


def mlp_policy(model: MLPPolicy) -> Policy:
    """A memoryless MLP over flat observations (control envs)."""
    return Policy(
        functools.partial(_mlp_init, model),
        functools.partial(_mlp_start, model),
        functools.partial(_mlp_step, model),
        functools.partial(_mlp_sequence_logits, model),
    )
