"""One turn of ``P x G`` (prompt, sample) pairs decoded on ``R`` rows, a finished row refilled with the next pair.

:func:`decode_queue` is the continuous-batching form of a single-turn rollout's decode
(:func:`jaxrl.algos.common.lm.decode.decode_turn`): the ``P`` prompts are prefilled once,
``R`` rows decode, and a row whose pair has ended takes the next queued pair (its prompt's
cache and logits copied in) inside the same ``while_loop``
(:func:`jaxrl.models.lm.generate.refill_loop`). Shapes are static: one compile.

The draws do not depend on which row serves a pair, nor when: step ``s`` of pair ``q``
draws by inversion with the uniform ``uniform(k_act_s, (P x G,))[q]``, where ``k_act_s`` is
the action key :func:`~jaxrl.algos.common.lm.decode.decode_turn` splits off the rollout key
at step ``s``: made alone from ``fold_in(k_act_s, q)`` (the same hash of counter ``q``,
its two words xor-ed). So the samples equal ``decode_turn``'s, key for key, and the key
both hand on is the same. :func:`decode_pairs` is the fixed-length loop
(:func:`jaxrl.models.lm.generate.decode_loop`) drawing row by row the same way.
"""

from __future__ import annotations

import functools
from typing import Callable

import jax
import jax.numpy as jnp

from jaxrl.algos.common.lm.decode import sample
from jaxrl.core import prng
from jaxrl.core.threefry import threefry2x32_unrolled
from jaxrl.models.lm.generate import decode_loop, refill_loop

Array = jax.Array


def step_keys(key: Array, steps: int) -> tuple[Array, Array]:
    """``(k_act [steps], key after steps)``: the action keys :func:`~jaxrl.algos.common.lm.decode.decode_turn`'s
    draw splits off the rollout key, step by step, and the key it hands on."""
    def one(k, _):
        k, k_act, _ = jax.random.split(k, 3)  # decode_turn's split (prng.split: the same bits)
        return k, k_act

    key, k_act = jax.lax.scan(one, key, None, length=steps)
    return k_act, key


def batch_axes(start: Callable, params, obs: Array):
    """The batch axis of every leaf of the cache ``start(params, obs)`` returns (traced
    shapes only: the axis that grows with the number of prompts)."""
    one = jax.eval_shape(start, params, obs[:1])[0]
    two = jax.eval_shape(start, params, jnp.concatenate([obs[:1], obs[:1]]))[0]

    def axis(a, b):
        diff = [i for i, (x, y) in enumerate(zip(a.shape, b.shape)) if x != y]
        if len(diff) != 1:
            raise ValueError(f"decode_queue: cannot tell the batch axis of a cache leaf of shape {a.shape}")
        return diff[0]

    return jax.tree_util.tree_map(axis, one, two)


def _take(axes, tree, index: Array):
    return jax.tree_util.tree_map(lambda ax, x: jnp.take(x, index, axis=ax), axes, tree)


def _select(axes, take: Array, new, old):
    def one(ax, a, b):
        shape = [1] * a.ndim
        shape[ax] = take.shape[0]
        return jnp.where(take.reshape(shape), a, b)

    return jax.tree_util.tree_map(one, axes, new, old)


def pair_keys(k_act: Array, pair: Array, step: Array) -> Array:
    """The keys of pairs ``pair [R]`` at their steps ``step [R]``: ``fold_in(k_act[step], pair)``
    (for raw Threefry keys, that hash of counters ``(0, pair)`` written out: one fused kernel on CPU)."""
    keys, data = k_act[step], pair.astype(jnp.uint32)
    if jax.dtypes.issubdtype(keys.dtype, jax.dtypes.prng_key) or jax.config.jax_default_prng_impl != "threefry2x32":
        return jax.vmap(jax.random.fold_in)(keys, data)
    return jnp.stack(threefry2x32_unrolled(keys[:, 0], keys[:, 1], jnp.zeros_like(data), data), axis=1)


def _draw(k_act, temperature, greedy: bool, logits, pair, step):
    keys = pair_keys(k_act, pair, step)
    data = jax.random.key_data(keys) if jax.dtypes.issubdtype(keys.dtype, jax.dtypes.prng_key) else keys
    u = prng.uniform_of_bits(data[:, 0] ^ data[:, 1])  # row `pair` of uniform(k_act[step], (n,)): decode_turn's

    def one(row_logits, row_u):
        token, logp, entropy = sample(row_logits[None], temperature, greedy, None, invert=True, u=row_u[None])
        return token[0], (logp[0], entropy[0])

    return jax.vmap(one)(logits, u)


def _feed(extend: Callable, axes, base, cache, token, step):
    def one(c, t, s):
        c = jax.tree_util.tree_map(jnp.expand_dims, c, axes)
        c, logits = extend(c, t[None, None], base + s)
        return jax.tree_util.tree_map(lambda x, ax: jnp.squeeze(x, ax), c, axes), logits[0, -1].astype(jnp.float32)

    cache, logits = jax.vmap(one, in_axes=(axes, 0, 0), out_axes=(axes, 0))(cache, token, step)
    return logits, cache


def _refill(axes, group: int, prompt_cache, prompt_logits, logits, cache, take, pair):
    prompt = pair // group
    new = _take(axes, prompt_cache, prompt)
    return jnp.where(take[:, None], prompt_logits[prompt], logits), _select(axes, take, new, cache)


def decode_queue(policy, params, prompts: Array, group: int, key: Array, base, temperature, greedy: bool, steps: int,
                 end_of_turn: int, pad_id: int, rows: int):
    """``(key, tokens, logp, mask, entropy, iterations)`` of one turn of the ``P * group``
    (prompt, sample) pairs of ``prompts [P, ...]`` (pair ``q`` is sample ``q % group`` of
    prompt ``q // group``) decoded on ``rows`` rows.

    ``policy`` is a :class:`~jaxrl.algos.common.lm.policy.TokenPolicy`: ``start`` prefills
    the prompts once; ``extend`` runs per row (vmapped) at the row's own dialogue position
    ``base + step``. ``tokens`` int32 ``[P * group, steps]`` (pad after ``end_of_turn``),
    ``logp``, ``entropy`` float32 and ``mask`` bool: those of :func:`decode_pairs` on the
    ``P * group`` rows from the same ``key`` (0 where ``mask`` is False); ``key``: the key
    it hands on (:func:`~jaxrl.algos.common.lm.decode.decode_turn`'s); ``iterations``: the
    loop's.
    """
    n = prompts.shape[0] * group
    if not 1 <= rows < n:
        raise ValueError(f"decode_queue: {rows} rows for {n} (prompt, sample) pairs; expected 1 <= rows < {n}")
    axes = batch_axes(policy.start, params, prompts)
    prompt_cache, prompt_logits = policy.start(params, prompts)
    decode_params = params if policy.decode_params is None else policy.decode_params(params)  # as TokenPolicy.decode
    prompt_logits = prompt_logits.astype(jnp.float32)
    k_act, key = step_keys(key, steps)
    first = jnp.arange(rows, dtype=jnp.int32)
    logits, cache = prompt_logits[first // group], _take(axes, prompt_cache, first // group)
    tokens, mask, (logp, entropy), iterations = refill_loop(
        functools.partial(_draw, k_act, temperature, greedy),
        functools.partial(_feed, functools.partial(policy.extend, decode_params), axes, base),
        functools.partial(_refill, axes, group, prompt_cache, prompt_logits),
        logits, cache, pairs=n, steps=steps, pad_id=pad_id, end_ids=end_of_turn)
    return key, tokens, logp, mask, entropy, iterations


def _pairs_draw(k_act, temperature, greedy: bool, logits, key, j):
    pair = jnp.arange(logits.shape[0], dtype=jnp.int32)
    token, extras = _draw(k_act, temperature, greedy, logits, pair, jnp.full_like(pair, j))
    return key, token, extras


def _pairs_feed(extend: Callable, base, cache, token, j):
    cache, logits = extend(cache, token[:, None], base + j)
    return logits[:, -1].astype(jnp.float32), cache


def decode_pairs(extend: Callable, cache, logits: Array, writing: Array, key: Array, base, temperature, greedy: bool,
                 steps: int, end_of_turn: int, pad_id: int, stop_early: bool = True):
    """:func:`~jaxrl.algos.common.lm.decode.decode_turn` (same arguments and returns) with
    :func:`decode_queue`'s draws: row ``q`` is pair ``q``, drawing with its own key at
    each step. The fixed-length loop (``stop_early`` False) or the early-stopping one
    (:func:`~jaxrl.models.lm.generate.decode_loop`) of the samples refilling writes."""
    k_act, out_key = step_keys(key, steps)
    logits, cache, _, tokens, mask, (logp, entropy) = decode_loop(
        functools.partial(_pairs_draw, k_act, temperature, greedy), functools.partial(_pairs_feed, extend, base),
        logits, cache, writing, key, steps=steps, pad_id=pad_id, end_ids=end_of_turn, stop_early=stop_early)
    return cache, logits, out_key, tokens, logp, mask, entropy
