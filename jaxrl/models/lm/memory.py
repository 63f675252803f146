"""Per-device memory of training a decoder, estimated from its config before anything runs.

:func:`estimate_memory` counts, per device of a ``data x model`` mesh: the weights (base in
their dtype, LoRA adapters in float32), the gradients of the trained parameters and Adam's
two moments (float32), the KV cache of generation, and the activations the loss pass keeps
for its backward pass with a chunked LM head (one chunk of float32 logits, never
``[B, L, V]``). It is arithmetic on the config (layers are stacked, so a 100k-layer model
costs the same to estimate), split by the same rules as
:func:`jaxrl.parallel.sharding.param_specs` (``tp``: heads, MLP width and vocabulary split;
``fsdp``: every leaf on its largest divisible axis, activations not split).
:func:`check_fits` refuses an estimate above the memory available, with the numbers; the
figures and what they leave out: ``docs/scale_out.md``.
"""

from __future__ import annotations

import dataclasses
import itertools
import os
from typing import TYPE_CHECKING

if TYPE_CHECKING:  # the config class; only its field names are read here
    from jaxrl.models.lm.config import LMConfig

LORA_TARGETS = ("q_proj", "k_proj", "v_proj", "o_proj", "gate_proj", "up_proj", "down_proj")
# Tensor parallelism's split of each named leaf (axis counted from the end), as in
# jaxrl.parallel.sharding.TP_RULES: column layers on their output, row layers on their input.
_COLUMN = ("q_proj", "k_proj", "v_proj", "gate_proj", "up_proj")
_TP_AXIS = {
    **{(m, leaf): -1 for m in _COLUMN for leaf in ("kernel", "bias", "b")},
    **{(m, leaf): -2 for m in ("o_proj", "down_proj") for leaf in ("kernel", "a")},
    ("lm_head", "kernel"): -1,
    ("embed_tokens", ""): -2,
}
_VOCAB = (("lm_head", "kernel"), ("embed_tokens", ""))
F32 = 4


def base_shapes(cfg: "LMConfig") -> dict[tuple[str, str], tuple[int, ...]]:
    """``{(module, leaf): shape}`` of the base parameters, layers stacked in front (the
    layout of :mod:`jaxrl.models.lm`; ``leaf`` is ``""`` for a bare array)."""
    L, D, F, V = cfg.num_layers, cfg.hidden_size, cfg.intermediate_size, cfg.vocab_size
    q, kv = cfg.num_heads * cfg.head_dim, cfg.num_kv_heads * cfg.head_dim
    out = {("embed_tokens", ""): (V, D), ("input_layernorm", ""): (L, D)}
    for name, width in (("q_proj", q), ("k_proj", kv), ("v_proj", kv)):
        out[(name, "kernel")] = (L, D, width)
        if cfg.attention_bias:
            out[(name, "bias")] = (L, width)
    out[("o_proj", "kernel")] = (L, q, D)
    if cfg.o_bias:
        out[("o_proj", "bias")] = (L, D)
    if cfg.qk_norm:
        out[("q_norm", "")] = out[("k_norm", "")] = (L, cfg.head_dim)
    out[("post_attention_layernorm", "")] = (L, D)
    out[("gate_proj", "kernel")] = out[("up_proj", "kernel")] = (L, D, F)
    out[("down_proj", "kernel")] = (L, F, D)
    out[("norm", "")] = (D,)
    if not cfg.tie_word_embeddings:
        out[("lm_head", "kernel")] = (D, V)
    return out


def lora_shapes(cfg: "LMConfig", rank: int, targets=LORA_TARGETS) -> dict[tuple[str, str], tuple[int, ...]]:
    """``{(target, "a" | "b"): shape}`` of LoRA adapters: ``a [L, in, r]``, ``b [L, r, out]``."""
    base = base_shapes(cfg)
    out = {}
    for t in targets:
        L, fan_in, fan_out = base[(t, "kernel")]
        out[(t, "a")], out[(t, "b")] = (L, fan_in, rank), (L, rank, fan_out)
    return out


def count(shapes: dict) -> int:
    """Number of elements in ``shapes``' leaves."""
    total = 0
    for shape in shapes.values():
        n = 1
        for s in shape:
            n *= s
        total += n
    return total


def _local(key: tuple[str, str], shape: tuple[int, ...], model: int, strategy: str) -> int:
    """Elements of one leaf held by each device of the model axis."""
    n = count({key: shape})
    if model == 1:
        return n
    if strategy == "fsdp":
        return n // model if any(s >= model and s % model == 0 for s in shape) else n
    axis = _TP_AXIS.get(key)
    if axis is None:
        return n
    if shape[axis] % model:
        if key in _VOCAB:  # an odd vocabulary stays whole
            return n
        raise ValueError(f"mesh.model={model}: tensor parallelism splits {key[0]} {key[1]} {shape} on a dimension of "
                         f"{shape[axis]}, not divisible by {model}; use mesh.strategy: fsdp")
    return n // model


def _gib(n: float) -> str:
    return f"{n / 2**30:,.2f} GiB" if n >= 2**30 else f"{n / 2**20:,.1f} MiB"


@dataclasses.dataclass(frozen=True)
class MemoryEstimate:
    """Bytes per device, by what holds them (see the module docstring)."""

    weights: int  # base parameters in their dtype (+ LoRA adapters in float32)
    grads: int  # float32 gradients of the trained parameters
    optimizer: int  # Adam's mu and nu, float32
    kv_cache: int  # keys and values of every layer for generation
    activations: int  # what the loss pass keeps for backward, plus one chunk of logits
    params: int  # parameters of the model (whole, not per device)
    trainable: int  # trained parameters (whole)
    setup: str  # the mesh and batch the figures are for

    @property
    def total(self) -> int:
        """The state, the gradients and the larger of generation (KV cache) and the loss
        pass (activations): the two phases do not hold their buffers at once."""
        return self.weights + self.grads + self.optimizer + max(self.kv_cache, self.activations)

    def parts(self) -> str:
        """One line: ``weights 1.0 GiB + grads ... + max(KV cache ..., activations ...) = total``."""
        items = [("weights", self.weights), ("grads", self.grads), ("Adam", self.optimizer)]
        return (" + ".join(f"{k} {_gib(v)}" for k, v in items)
                + f" + max(KV cache {_gib(self.kv_cache)}, activations {_gib(self.activations)}) = {_gib(self.total)}")

    def table(self) -> str:
        """A small text table of the figures, per device."""
        rows = [("weights", self.weights), ("gradients (f32)", self.grads), ("Adam mu, nu (f32)", self.optimizer),
                ("KV cache", self.kv_cache), ("activations", self.activations), ("total (KV or act.)", self.total)]
        head = f"per device, {self.setup}; {self.params:,} parameters, {self.trainable:,} trained"
        return "\n".join([head] + [f"  {k:<18} {v:>16,} B  {_gib(v):>11}" for k, v in rows])


#: Bytes the loss pass keeps per token and layer for its backward pass, as a multiple of
#: ``(4 D + (2 Hq + 2 Hkv) hd + 3 F) x dtype bytes``: fitted to XLA's buffer assignment of
#: the GRPO update (CPU, float32, layers 2 and 4: 16 MiB and 4.45 MiB a layer at 624 and 156
#: loss tokens of hidden 256 / MLP 704; ``bench/results/lm_memory_grid.md``). XLA keeps more
#: than the named tensors (rotated q/k, norm statistics, transposed copies for the backward dots).
KEEP_FACTOR = 1.7
#: Float32 ``[positions, V]`` arrays alive at once in the LM head's backward pass (the logits,
#: the softmax and its gradient).
HEAD_COPIES = 3


def estimate_memory(
    cfg: "LMConfig", *, batch: int, seq_len: int, param_dtype_bytes: int, full_finetune: bool, lora_rank: int = 0,
    lora_targets=LORA_TARGETS, data: int = 1, model: int = 1, strategy: str = "tp", grad_accum: int = 1,
    vocab_chunk: int = 1024, remat: bool = True, completion_len: int = 0, group: int = 1, reference: bool = False,
    platform: str = "gpu", eval_rows: int = 0,
) -> MemoryEstimate:
    """The per-device :class:`MemoryEstimate` of training ``cfg`` on ``batch`` sequences.

    Args:
      cfg: the decoder (:class:`jaxrl.models.lm.LMConfig`).
      batch: sequences per update (all devices), each ``seq_len`` tokens (prompt + completion).
      param_dtype_bytes: bytes per base weight (2: bf16, 4: float32); also activations and KV.
      full_finetune: train every weight (float32 master copies); else only the LoRA adapters
        (``lora_rank > 0``) beside the base in its dtype.
      data, model, strategy: the mesh (``strategy``: ``"tp"`` or ``"fsdp"``).
      grad_accum: micro-batches per update (activations are those of one micro-batch).
      vocab_chunk: token positions whose full-vocabulary float32 logits one LM-head chunk holds
        (the micro-batch's scored positions when the head is not chunked).
      remat: the loss pass recomputes each layer's inside in its backward pass (the
        activations of one layer at a time); ``False``: every layer's are kept.
      completion_len: the positions the LM head scores per sequence (0: ``seq_len``).
      group: sequences sharing a prompt that the loss pass computes once (1: none).
      reference: a frozen float32 copy of the trained weights is kept for the KL term (full
        fine-tuning with ``beta > 0``).
      eval_rows: sequences of an evaluation inside the update (GRPO's ``eval_every``), on
        every device (the evaluation is not split): their KV cache and one layer of their
        prompts' prefill are a phase of their own (counted in ``kv_cache`` when larger).
      platform: the device kind (``jax.Device.platform``). On ``"cpu"`` XLA computes bfloat16
        in float32: a bf16 model's activations take 4 bytes and its weights get a float32 copy
        among the temporaries (measured: ``bench/results/lm_memory_grid.md``).

    The loss pass's peak is the larger of two moments (buffers are reused between them): the
    LM head's backward (the kept layer activations plus :data:`HEAD_COPIES` logits-sized
    arrays) and, with ``remat``, one layer's recomputed inside. Generation's KV cache is dead
    by then: the larger of the two phases counts (``MemoryEstimate.total``).

    Raises ``ValueError`` for a split tensor parallelism cannot make (heads, widths).
    """
    if strategy not in ("tp", "fsdp"):
        raise ValueError(f"mesh.strategy: expected tp or fsdp, got {strategy!r}")
    if strategy == "tp" and model > 1:
        for name in ("num_heads", "num_kv_heads"):
            if getattr(cfg, name) % model:
                raise ValueError(f"mesh.model={model}: tensor parallelism splits attention heads, but the model's "
                                 f"{name}={getattr(cfg, name)} is not divisible by {model}; use mesh.strategy: fsdp")
    base = base_shapes(cfg)
    adapters = lora_shapes(cfg, lora_rank, lora_targets) if lora_rank else {}
    local_base = sum(_local(k, s, model, strategy) for k, s in base.items())
    local_lora = sum(_local(k, s, model, strategy) for k, s in adapters.items())
    trained = local_base if full_finetune else local_lora
    tp = model if strategy == "tp" else 1
    upcast = platform == "cpu" and param_dtype_bytes < F32
    act = F32 if upcast else param_dtype_bytes
    L, D, hd = cfg.num_layers, cfg.hidden_size, cfg.head_dim
    hq, hkv, F = cfg.num_heads // tp, cfg.num_kv_heads // tp, cfg.intermediate_size // tp
    seqs = -(-batch // data)  # sequences on one device
    kv = 2 * L * seqs * seq_len * hkv * hd * param_dtype_bytes
    micro = -(-seqs // grad_accum)
    scored = min(completion_len or seq_len, seq_len)
    prompt = seq_len - scored
    if eval_rows:  # its cache, and one layer of its prompts' prefill (the MLP's and attention's insides)
        evaluation = (2 * L * eval_rows * seq_len * hkv * hd * param_dtype_bytes
                      + eval_rows * prompt * (2 * D + 2 * F) * act + eval_rows * hq * prompt * prompt * F32)
        kv = max(kv, evaluation)
    tokens = (-(-micro // group) * prompt + micro * scored) if group > 1 else micro * seq_len
    per_layer = (KEEP_FACTOR * tokens * (4 * D + (2 * hq + 2 * hkv) * hd + 3 * F) * act
                 + micro * hq * scored * seq_len * F32)  # + the float32 attention probabilities
    inputs = L * tokens * D * act  # each layer's input (what remat keeps)
    vocab = cfg.vocab_size // tp if cfg.vocab_size % tp == 0 else cfg.vocab_size
    logits = HEAD_COPIES * min(vocab_chunk, micro * scored) * vocab * F32
    if remat:
        activations = max(inputs + logits, inputs + per_layer)
    else:
        activations = L * per_layer + logits
    weights = (local_base * F32 * (2 if reference else 1)) if full_finetune else local_base * param_dtype_bytes + local_lora * F32
    if upcast and not full_finetune:
        activations += local_base * F32  # the float32 copy XLA:CPU makes of the bf16 base
    if full_finetune and param_dtype_bytes < F32:  # the master weights cast to the compute dtype, and their gradient
        activations += 2 * local_base * param_dtype_bytes + (2 * local_base * F32 if upcast else 0)
    return MemoryEstimate(
        weights=int(weights),
        grads=trained * F32,
        optimizer=2 * trained * F32,
        kv_cache=kv,
        activations=int(activations),
        params=count(base),
        trainable=count(base) if full_finetune else count(adapters),
        setup=(f"mesh data={data} x model={model} ({strategy}), batch {batch} x {seq_len} tokens, "
               f"{grad_accum} micro-batch(es), {'full fine-tune' if full_finetune else f'LoRA rank {lora_rank}'}"
               f"{'' if remat else ', no remat'}"),
    )


#: The share of a device's memory the automatic loss-pass plan lets one update take: the
#: rest is left for what the estimate does not count (XLA's temporaries, fragmentation).
PLAN_SHARE = 0.5
#: Positions per LM-head chunk when the head must be chunked.
PLAN_HEAD_CHUNK = 64


@dataclasses.dataclass(frozen=True)
class LossPassPlan:
    """How the loss pass is run: ``remat`` (recompute each layer's inside in the backward
    pass), ``head_chunk`` (positions per LM-head chunk; 0 = the whole sequence at once),
    ``micro_batches`` (slices of a minibatch run one at a time; ``None``: left to the caller),
    the estimate of that choice and why it was chosen (one line for the run's log)."""

    remat: bool
    head_chunk: int
    estimate: MemoryEstimate
    reason: str
    micro_batches: int | None = None


def plan_loss_pass(estimate_for, available: int, remat=None, head_chunk=None, where: str = "",
                   micro_batches=None) -> LossPassPlan:
    """The cheapest loss pass that fits: the first option whose estimate is at most
    :data:`PLAN_SHARE` of ``available`` bytes (the last when nothing fits).

    For each micro-batch count in turn (fewest first), the options are: no rematerialisation
    and the LM head whole, the head in chunks of :data:`PLAN_HEAD_CHUNK`, rematerialisation
    with the head whole, then in chunks. More micro-batches come last because they alone can
    change an update (token-mean losses average per slice) and they shrink the matrix
    products; remat and chunking only recompute or reorder.

    ``estimate_for(remat, head_chunk)`` -> :class:`MemoryEstimate`; with ``micro_batches``
    given, ``estimate_for(remat, head_chunk, micro_batches)``: an int is kept as it is, a
    sequence of counts is tried in its order. ``remat`` / ``head_chunk`` / an int
    ``micro_batches`` given (not ``None``) are the config's overrides, kept as they are.
    """
    budget = int(PLAN_SHARE * available)
    remats = (remat,) if remat is not None else (False, True)
    chunks = (head_chunk,) if head_chunk is not None else (0, PLAN_HEAD_CHUNK)
    if micro_batches is None:
        counts, estimate = (None,), (lambda r, c, _k: estimate_for(r, c))
    else:
        counts = (micro_batches,) if isinstance(micro_batches, int) else tuple(micro_batches)
        estimate = estimate_for
        if not counts or not all(isinstance(k, int) and not isinstance(k, bool) and k >= 1 for k in counts):
            raise ValueError(f"micro_batches: expected a count >= 1 or a non-empty sequence of them, got {micro_batches!r}")
    for k, r, c in itertools.product(counts, remats, chunks):
        est = estimate(r, c, k)
        if est.total <= budget:
            break
    configured = (("remat", remat), ("head_chunk", head_chunk)) + (
        (("micro_batches", micro_batches),) if micro_batches is not None else ())
    forced = [name for name, v in configured if v is not None and not isinstance(v, (tuple, list))]
    what = f"remat {'on' if r else 'off'}, LM head {'whole' if c == 0 else f'in chunks of {c} positions'}"
    if k is not None:
        what += f", {k} micro-batch{'es' if k > 1 else ''}"
    if len(forced) == len(configured):
        why = "as configured"
    else:
        fits = est.total <= budget
        why = (f"estimate {_gib(est.total)} {'within' if fits else 'above'} {int(PLAN_SHARE * 100)}% of "
               f"{_gib(available)}{' of ' + where if where else ''}")
        if forced:
            why += f"; {', '.join(forced)} as configured"
    return LossPassPlan(r, c, est, f"loss pass: {what} ({why})", k)


def available_bytes(device=None) -> tuple[int, str]:
    """``(bytes, where)`` one device can hold: a GPU's ``bytes_limit``; on CPU the host's
    physical memory."""
    import jax

    device = device or jax.local_devices()[0]
    if device.platform != "cpu":
        try:
            limit = (device.memory_stats() or {}).get("bytes_limit")
        except Exception:  # a backend without memory statistics
            limit = None
        if limit:
            return int(limit), f"{device.platform} device memory"
    return os.sysconf("SC_PHYS_PAGES") * os.sysconf("SC_PAGE_SIZE"), "host physical memory"


def check_fits(estimate: MemoryEstimate, available: int | None = None, where: str = "") -> None:
    """Raise ``ValueError`` (one line, with the numbers) when ``estimate`` needs more than
    ``available`` bytes per device (``None``: :func:`available_bytes`)."""
    if available is None:
        available, where = available_bytes()
    if estimate.total <= available:
        return
    raise ValueError(
        f"not enough memory per device: {estimate.parts()}, more than the {_gib(available)} "
        f"{'of ' + where + ' ' if where else ''}available ({estimate.setup}); use LoRA, a smaller batch, more "
        "micro-batches (grad_accum) or a larger mesh.model"
    )
