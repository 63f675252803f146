"""The token policy: the named tuple of pure functions through which GRPO, SFT and evaluation drive a network, and a loaded checkpoint as one.

:class:`TokenPolicy` is how rollouts, dialogues, tools and every loss talk to a network
(prefill, extend, the loss pass's token log-probs, and :meth:`TokenPolicy.decode`, the one
decode loop); GRPO builds one for the small transformer and the MLP of control envs too
(:mod:`jaxrl.algos.grpo.policy`). :func:`lm_policy` is a loaded Hugging Face checkpoint over a
token task in its tokenizer's ids:

* ``start`` prefills the prompt once per group of samples (left-padded: the task's pad id is "no token", never
  attended and taking no position, as transformers' ``generate`` treats a padded batch);
* ``extend`` / ``step`` write turn tokens and environment replies into the key/value cache at
  their dialogue slots; pad ids (a turn's unused slots, a reply's padding) stay invisible;
* ``token_logp`` runs one forward pass over the whole dialogue (same mask, same positions)
  and the LM head (:func:`jaxrl.models.lm.token_logprobs`, in chunks unless ``head_chunk`` is
  0); ``token_logp_shared`` is the same with each group's prompt computed once, its
  keys/values read by the group's ``G`` completions (gradients through it summed).

Trainable parameters are either the whole model (full fine-tuning, float32 master weights cast
to the compute dtype in the forward) or LoRA adapters beside a frozen base
(:attr:`TokenPolicy.frozen`); with LoRA the KL reference is the base with the adapters off.
"""

from __future__ import annotations

import functools
from typing import Any, Callable, NamedTuple

import jax
import jax.numpy as jnp

from jaxrl.algos.common.lm.decode import decode_turn
from jaxrl.algos.common.lm.model import split, trainable
from jaxrl.models import lm

Array = jax.Array


class TokenPolicy(NamedTuple):
    """How a rollout, an evaluation and a loss talk to a network.

    * ``init(key, obs) -> params`` with ``obs [N, *obs_shape]``.
    * ``start(params, obs [N, ...]) -> (carry, logits [N, A])`` on the first observation (a
      token task: the prefill of the prompt ``obs[:, :prompt_len]``, the carry its cache).
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
    * ``decode_params(params) -> params``: what :meth:`decode`'s ``extend`` reads, made once
      per turn (a loaded model's float32 adapters folded into its base: one matmul per
      projection per token instead of three; ``None``: ``params`` as they are).
    * ``pads_invisible``: pad ids are no token to the network (never attended, taking no
      position), so a turn's decode loop may stop once every row has ended it and leave the
      pad slots after unwritten: later turns read the same cache as the loss pass's one
      pass. False (the project's transformer, which reads pad ids as tokens): every turn
      with another one after it runs all its steps.

    Token tasks write their turns with :meth:`decode` (``extend`` token by token).
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
    decode_params: Callable | None = None
    pads_invisible: bool = False

    def decode(self, params, cache, logits: Array, writing: Array, key: Array, base, temperature, greedy: bool,
               steps: int, end_of_turn: int, pad_id: int, stop_early: bool = True):
        """One turn of up to ``steps`` tokens written from dialogue position ``base`` through
        ``extend``: :func:`jaxrl.algos.common.lm.decode.decode_turn`'s ``(cache, logits, key,
        tokens, logp, mask, entropy)``."""
        if self.decode_params is not None:
            params = self.decode_params(params)
        return decode_turn(functools.partial(self.extend, params), cache, logits, writing, key, base, temperature,
                           greedy, steps, end_of_turn, pad_id, stop_early)


class LMSpec(NamedTuple):
    """The static pieces of a loaded-model policy (hashable)."""

    model: Any  # jaxrl.models.lm.LM
    lora: Any  # jaxrl.models.lm.LoRAConfig, or None for full fine-tuning
    pad_id: int
    prompt_len: int
    dialogue_len: int
    head_chunk: int  # sequence positions per chunk of the LM head in the loss (0: the whole sequence at once)
    remat: bool = True  # the loss pass recomputes each layer's inside in its backward pass


def _start(spec: LMSpec, params, obs):
    base, adapters = split(spec.model, params)
    prompt = obs[:, : spec.prompt_len].astype(jnp.int32)
    logits, cache = spec.model.prefill(base, prompt, prompt != spec.pad_id, spec.dialogue_len, lora=adapters)
    return cache, logits[:, -1]


def _start_grouped(spec: LMSpec, params, obs, group: int):
    cache, logits = _start(spec, params, obs)
    repeat = functools.partial(jnp.repeat, repeats=group)
    cache = cache.replace(k=repeat(cache.k, axis=1), v=repeat(cache.v, axis=1), valid=repeat(cache.valid, axis=0),
                          count=repeat(cache.count, axis=0))
    return cache, repeat(logits, axis=0)


def _extend(spec: LMSpec, params, cache, tokens, pos):
    base, adapters = split(spec.model, params)
    tokens = tokens.astype(jnp.int32)
    logits, cache = spec.model.extend(base, cache, tokens, pos, tokens != spec.pad_id, lora=adapters)
    return cache, logits


def _step(spec: LMSpec, params, cache, obs, action, t):
    del obs
    cache, logits = _extend(spec, params, cache, action[:, None], spec.prompt_len + t)
    return cache, logits[:, -1]


def _dialogue_hidden(spec: LMSpec, base, adapters, obs) -> Array:
    """Final hidden states ``[N, T, D]`` of the positions that predict the dialogue's actions."""
    ids = obs[:, :-1].astype(jnp.int32)
    hidden = spec.model.hidden(base, ids, ids != spec.pad_id, lora=adapters, remat=spec.remat)
    return hidden[:, spec.prompt_len - 1 :]


def _shared_hidden(spec: LMSpec, base, adapters, obs, group: int) -> Array:
    """:func:`_dialogue_hidden` of ``P * group`` dialogues whose consecutive runs of ``group``
    share a prompt, each prompt computed once (:meth:`jaxrl.models.lm.LM.hidden_shared`)."""
    ids = obs.astype(jnp.int32)
    prompt = ids[::group, : spec.prompt_len]
    rest = ids[:, spec.prompt_len : -1]
    prompt_h, rest_h = spec.model.hidden_shared(base, prompt, prompt != spec.pad_id, rest, rest != spec.pad_id, group,
                                                lora=adapters, remat=spec.remat)
    last = jnp.repeat(prompt_h[:, -1:], group, axis=0)  # the prompt's last position predicts the first action
    return jnp.concatenate([last, rest_h], axis=1)


def _token_logp(spec: LMSpec, params, obs, actions, temperature):
    base, adapters = split(spec.model, params)
    hidden = _dialogue_hidden(spec, base, adapters, obs)
    return lm.token_logprobs(spec.model, base, hidden, actions.astype(jnp.int32), temperature, chunk_size=spec.head_chunk)


def _token_logp_shared(spec: LMSpec, params, obs, actions, temperature, group: int):
    base, adapters = split(spec.model, params)
    hidden = _shared_hidden(spec, base, adapters, obs, group)
    return lm.token_logprobs(spec.model, base, hidden, actions.astype(jnp.int32), temperature, chunk_size=spec.head_chunk)


def _sequence_logits(spec: LMSpec, params, obs, actions):
    del actions
    base, adapters = split(spec.model, params)
    ids = obs[:, :-1].astype(jnp.int32)
    return spec.model.apply(base, ids, ids != spec.pad_id, lora=adapters)[:, spec.prompt_len - 1 :]


def _init(spec: LMSpec, weights, key, obs):
    del obs
    return trainable(key, spec.model, spec.lora, weights)  # float32 master weights, or fresh adapters


def _frozen(weights):
    return weights


def _decode_params(spec: LMSpec, params):
    """The adapters folded into the base (``kernel + scale * a @ b``) for decoding, when the
    model computes in float32; in bfloat16 the fold would round the adapters' small updates
    away, so the factored form stays."""
    base, adapters = split(spec.model, params)
    if adapters is None or jnp.dtype(spec.model.dtype) != jnp.float32:
        return params
    return {"base": lm.merge_lora(spec.model, base, adapters, spec.lora), "lora": None}


def lm_policy(spec: LMSpec, weights) -> TokenPolicy:
    """The policy of a loaded model ``spec.model`` with weights ``weights`` (see the module docstring)."""
    return TokenPolicy(
        functools.partial(_init, spec, weights),
        functools.partial(_start, spec),
        functools.partial(_step, spec),
        functools.partial(_sequence_logits, spec),
        functools.partial(_extend, spec),
        functools.partial(_token_logp, spec),
        None if spec.lora is None else functools.partial(_frozen, weights),
        functools.partial(_start_grouped, spec),
        functools.partial(_token_logp_shared, spec),
        None if spec.lora is None else functools.partial(_decode_params, spec),
        pads_invisible=True,
    )
