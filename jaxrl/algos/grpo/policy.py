"""The networks GRPO drives, each as a :class:`~jaxrl.algos.common.lm.policy.TokenPolicy`.

A causal transformer over token tasks (prefill the prompt, decode token by token and
prefill environment replies into a key/value cache, one pass over the whole dialogue for the
loss) — the small one of :mod:`jaxrl.models.transformer` here, a loaded Hugging Face
checkpoint in :func:`jaxrl.algos.common.lm.policy.lm_policy` — or an MLP over flat
observations (control envs), whose actions stand where a token task's tokens do.
"""

from __future__ import annotations

import functools

import flax.linen as nn
import jax
import jax.numpy as jnp

from jaxrl.algos.common.lm.policy import TokenPolicy
from jaxrl.algos.common.masks import mask_logits
from jaxrl.models.networks import MLP, orthogonal
from jaxrl.models.transformer import TransformerLM

Array = jax.Array


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


def transformer_policy(model: TransformerLM, prompt_len: int) -> TokenPolicy:
    """A causal LM over a token task: the prompt is ``obs[:prompt_len]``, actions are tokens."""
    return TokenPolicy(
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


def _masked_start(policy: TokenPolicy, mask_fn, params, obs):
    carry, logits = policy.start(params, obs)
    return carry, mask_logits(logits, mask_fn(obs))


def _masked_step(policy: TokenPolicy, mask_fn, params, carry, obs, action, t):
    carry, logits = policy.step(params, carry, obs, action, t)
    return carry, mask_logits(logits, mask_fn(obs))


def _masked_sequence_logits(policy: TokenPolicy, mask_fn, params, obs, actions):
    return mask_logits(policy.sequence_logits(params, obs, actions), mask_fn(obs))


def masked_policy(policy: TokenPolicy, mask_fn) -> TokenPolicy:
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


def mlp_policy(model: MLPPolicy) -> TokenPolicy:
    """A memoryless MLP over flat observations (control envs)."""
    return TokenPolicy(
        functools.partial(_mlp_init, model),
        functools.partial(_mlp_start, model),
        functools.partial(_mlp_step, model),
        functools.partial(_mlp_sequence_logits, model),
    )


def __getattr__(name: str):
    """``Policy``, the 0.5 name of :class:`~jaxrl.algos.common.lm.policy.TokenPolicy`, with a warning."""
    from jaxrl import _compat

    return _compat.moved_name(__name__, name)
