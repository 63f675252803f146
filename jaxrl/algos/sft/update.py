"""One SFT update as a pure function of :class:`SFTState`.

The demonstrations are two constant arrays of the program (prompts ``[N, Lp]``, completions
``[N, Lc]``). Update ``u`` takes rows ``u * B .. u * B + B - 1`` of an endless stream of
epochs, each epoch a fresh permutation drawn from the state's data key: every demonstration
is seen once per epoch, the batch is gathered on device (no host transfer inside a scanned
chunk), and a resumed run draws the same batches. One optimiser step per update, the batch
optionally cut into ``micro_batches`` slices whose gradients add up to the batch's.
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxrl.algos.common import optim
from jaxrl.algos.common.lm.model import split, trainable
from jaxrl.algos.common.lm.policy import TokenPolicy
from jaxrl.algos.common.optim import Schedule
from jaxrl.algos.sft.config import SFTConfig, hyperparams, loss_pass
from jaxrl.algos.sft.losses import completion_mask, sft_loss
from jaxrl.core.env import Environment

Array = jax.Array


@struct.dataclass
class SFTState:
    """Everything an SFT run depends on (checkpointed whole; exact resume). ``params`` and
    ``frozen`` mean what they mean in a GRPO state over the same model, so either algorithm
    can start from the other's run (``--init-from``)."""

    params: Any  # trained: float32 master weights (full fine-tuning) or LoRA adapters
    opt_state: Any  # jaxrl.algos.common.optim.adam state (holds the traced lr, max_grad_norm)
    key: Array  # the data key: epoch e's order is permutation(fold_in(key, e))
    update_step: Array  # int32 [], updates done
    frozen: Any = None  # the base weights under LoRA (None: full fine-tuning)


class Setup(NamedTuple):
    """Static pieces of one configured run."""

    cfg: SFTConfig
    env: Environment  # the token task (its verifier scores evaluation)
    eval_params: Any  # held-out params
    model: Any  # jaxrl.models.lm.LM
    lora: Any  # jaxrl.models.lm.LoRAConfig, or None (full fine-tuning)
    weights: Any  # the checkpoint's weights (model dtype)
    prompts: Any  # int32 [N, Lp], left-padded with the task's pad id
    completions: Any  # int32 [N, Lc], end-of-turn then pad id
    optimizer: optax.GradientTransformation
    schedule: Schedule
    policy: TokenPolicy  # the loaded model as a token policy (evaluation's prefill and decode)


def model_params(state: SFTState):
    """What the model's forward takes: the weights, or ``{"base": frozen, "lora": adapters}``."""
    return state.params if state.frozen is None else {"base": state.frozen, "lora": state.params}


def batch_indices(key: Array, step: Array, batch: int, n: int) -> Array:
    """int32 ``[batch]``: the demonstration rows of update ``step`` (module docstring)."""
    pos = step * batch + jnp.arange(batch)
    first = (step * batch) // n
    spans = batch // n + 2  # the epochs one batch can touch
    perms = jax.vmap(lambda e: jax.random.permutation(jax.random.fold_in(key, e), n))(first + jnp.arange(spans))
    return perms[pos // n - first, pos % n].astype(jnp.int32)


def _loss(setup: Setup, frozen, params, prompts, completions, mask, denom):
    base, adapters = split(setup.model, params if frozen is None else {"base": frozen, "lora": params})
    head_chunk, remat = loss_pass(setup.cfg.model)
    return sft_loss(setup.model, head_chunk, setup.env.pad_id, base, adapters, prompts, completions, mask, denom,
                    remat=remat)


def grads(setup: Setup, state: SFTState, prompts: Array, completions: Array):
    """``((loss, sums), gradient)`` of a batch, accumulated over ``micro_batches`` slices."""
    mask = completion_mask(completions, setup.env.end_of_turn)
    denom = jnp.maximum(jnp.sum(mask), 1).astype(jnp.float32)
    grad_fn = jax.value_and_grad(functools.partial(_loss, setup, state.frozen), has_aux=True)
    k = setup.cfg.micro_batches
    if k == 1:
        return grad_fn(state.params, prompts, completions, mask, denom), denom
    micro = jax.tree_util.tree_map(lambda x: x.reshape((k, x.shape[0] // k) + x.shape[1:]), (prompts, completions, mask))

    def body(acc, xs):
        out = grad_fn(state.params, *xs, denom)
        return jax.tree_util.tree_map(jnp.add, acc, out), None

    shapes = jax.eval_shape(grad_fn, state.params, *(x[0] for x in micro), denom)
    zero = jax.tree_util.tree_map(lambda x: jnp.zeros(x.shape, x.dtype), shapes)
    return jax.lax.scan(body, zero, micro)[0], denom


def update(setup: Setup, state: SFTState) -> tuple[SFTState, dict]:
    """One optimiser step on the next batch of demonstrations."""
    n, b = setup.prompts.shape[0], setup.cfg.batch_size
    idx = batch_indices(state.key, state.update_step, b, n)
    prompts, completions = jnp.asarray(setup.prompts)[idx], jnp.asarray(setup.completions)[idx]
    ((loss, sums), g), denom = grads(setup, state, prompts, completions)
    lr = optim.current_lr(state.opt_state, setup.schedule)
    updates, opt_state = setup.optimizer.update(g, state.opt_state, state.params)
    params = optax.apply_updates(state.params, updates)
    metrics = {
        "loss": loss,
        "token_accuracy": sums["hits"] / denom,
        "sequence_accuracy": sums["sequences_exact"] / b,
        "completion_tokens": denom / b,
        "grad_norm": optax.tree.norm(g),
        "lr": lr,
        "epoch": (state.update_step * b).astype(jnp.float32) / n,
    }
    new = state.replace(params=params, opt_state=opt_state, update_step=state.update_step + 1)
    return new, {k: jnp.asarray(v, jnp.float32) for k, v in metrics.items()}


def init(setup: Setup, key: Array, hyper: dict | None = None) -> SFTState:
    """A fresh state: the checkpoint's weights (or fresh adapters), the optimiser, step 0."""
    optim_hyper, _ = optim.split_traced(hyperparams(setup.cfg, **(hyper or {})))
    k_params, k_data = jax.random.split(key)
    params = trainable(k_params, setup.model, setup.lora, setup.weights)
    frozen = None if setup.lora is None else setup.weights
    optimizer = make_optimizer(setup.cfg, optim_hyper["lr"], optim_hyper["max_grad_norm"])
    return SFTState(params, optimizer.init(params), k_data, jnp.zeros((), jnp.int32), frozen)


def schedule(cfg: SFTConfig) -> Schedule:
    """Warm-up and decay in updates (one optimiser step per update)."""
    return optim.schedule(cfg.optim, cfg.num_updates, 1)


def make_optimizer(cfg: SFTConfig, lr=None, max_grad_norm=None) -> optax.GradientTransformation:
    """:func:`jaxrl.algos.common.optim.adam` for ``cfg`` (``lr``/``max_grad_norm`` may be traced)."""
    return optim.from_config(cfg.optim, schedule(cfg), lr, max_grad_norm)
