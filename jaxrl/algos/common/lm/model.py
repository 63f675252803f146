"""A loaded Hugging Face checkpoint as an algorithm's model: the pieces every algorithm that
trains one shares (GRPO's ``policy: hf``, SFT).

An algorithm's ``model`` config section (:class:`~jaxrl.algos.common.lm.config.ModelSection`)
has the keys ``path`` (a local checkpoint directory), ``dtype`` (``float32`` or
``bfloat16``), ``lora: {rank, alpha, targets}`` (rank 0: full fine-tuning), ``head_chunk``
and ``remat``. From such a section :func:`load_model` reads the
checkpoint and checks it speaks the task's vocabulary; :func:`lm_dtype` and
:func:`lora_config` turn the keys into what :mod:`jaxrl.models.lm` takes; :func:`trainable`
and :func:`split` are the one convention for what a train state holds: float32 master
weights (full fine-tuning) or LoRA adapters beside the frozen base, passed to the forward as
``{"base": frozen, "lora": adapters}`` and cast to the compute dtype. :func:`model_mismatch`
says whether one algorithm's run can start from another's (``--init-from``).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

import jax
import jax.numpy as jnp


def lm_dtype(name: str):
    """The compute dtype of a ``model.dtype`` value."""
    return jnp.bfloat16 if name == "bfloat16" else jnp.float32


def lora_config(lora: Any):
    """A ``model.lora`` section (``rank``, ``alpha``, ``targets``) as a
    :class:`jaxrl.models.lm.LoRAConfig`, or ``None`` at rank 0 (full fine-tuning)."""
    from jaxrl.models import lm

    return lm.LoRAConfig(lora.rank, lora.alpha, tuple(lora.targets)) if lora.rank > 0 else None


def load_model(section: Any, vocab_size: int, task_name: str):
    """``(model, weights)`` of the checkpoint ``section.path`` in ``section.dtype``; a
    ``ValueError`` naming ``model.path`` when it does not load or its vocabulary is not the task's."""
    from jaxrl.models import lm

    try:
        model, weights = lm.load_lm(section.path, dtype=lm_dtype(section.dtype))
    except ValueError as exc:  # one line naming the file; the key in front
        raise ValueError(f"model.path: {exc}") from None
    if vocab_size != model.config.vocab_size:
        raise ValueError(
            f"model.path: the checkpoint's vocabulary has {model.config.vocab_size} ids, the task {task_name} {vocab_size}; "
            "give the task the checkpoint's tokenizer (env.tokenizer)")
    return model, weights


def trainable(key: jax.Array, model, lcfg, weights):
    """The trained parameters of a fresh run: float32 master copies of ``weights`` (full
    fine-tuning, ``lcfg`` None) or fresh adapters (:func:`jaxrl.models.lm.init_lora`)."""
    from jaxrl.models import lm

    if lcfg is None:
        return jax.tree_util.tree_map(lambda x: jnp.asarray(x, jnp.float32), weights)
    return lm.init_lora(key, model, lcfg)


def split(model, params) -> tuple[Any, Any]:
    """``(base weights, adapters or None)`` of ``params`` (the weights, or ``{"base", "lora"}``)
    in ``model``'s compute dtype."""
    if isinstance(params, dict) and "base" in params:
        base, adapters = params["base"], params["lora"]
    else:
        base, adapters = params, None
    cast = lambda tree: jax.tree_util.tree_map(lambda x: x.astype(model.dtype), tree)  # noqa: E731
    return cast(base), (None if adapters is None else cast(adapters))


#: The keys of a ``model`` section that must agree when one algorithm's run starts from
#: another's (``--init-from``): the same checkpoint, compute dtype and adapters.
SHARED_MODEL_KEYS = ("path", "dtype", "lora")


def _flat(d: dict, prefix: str = "") -> dict:
    out = {}
    for k, v in d.items():
        out.update(_flat(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v})
    return out


def _same(key: str, x, y) -> bool:
    if key == "path":
        return os.path.realpath(str(x)) == os.path.realpath(str(y))
    plain = lambda v: list(v) if isinstance(v, (list, tuple)) else v  # noqa: E731  (YAML reads tuples as lists)
    return plain(x) == plain(y)


def _loaded_model(section: Any) -> dict | None:
    """The ``model`` mapping of an algorithm's config when it trains a loaded checkpoint (a
    ``path``, and ``policy: hf`` where the section has a policy), else ``None``."""
    section = dataclasses.asdict(section) if dataclasses.is_dataclass(section) else section
    model = section.get("model") if isinstance(section, dict) else None
    if not isinstance(model, dict) or not model.get("path") or model.get("policy", "hf") != "hf":
        return None
    return model


def model_mismatch(src_algo: str, src: Any, dst_algo: str, dst: Any) -> str | None:
    """Why a run of ``dst_algo`` (its config dataclass ``dst``) cannot start from a
    ``src_algo`` run's weights (config ``src``), or ``None`` when it can: both train the same
    loaded model (a ``model`` section with a ``path``, and ``policy: hf`` where it has a
    policy, with equal :data:`SHARED_MODEL_KEYS`), or, for one algorithm, neither trains a
    loaded model (its own network: the state shapes are compared instead). Two runs of one
    algorithm on different checkpoints are refused too: the new run would otherwise take the
    other run's base weights (LoRA's frozen base) for its own. The reason names both values."""
    models = [_loaded_model(src), _loaded_model(dst)]
    if src_algo == dst_algo and models == [None, None]:
        return None
    for algo, model in zip((src_algo, dst_algo), models):
        if model is None:
            return f"both must train a loaded checkpoint ({algo}.model.path, policy hf)"
    a, b = (_flat({k: m.get(k) for k in SHARED_MODEL_KEYS}) for m in models)
    for key in sorted(set(a) | set(b)):
        if not _same(key, a.get(key), b.get(key)):
            return (f"{src_algo}.model.{key}={a.get(key)!r} there, {dst_algo}.model.{key}={b.get(key)!r} here; "
                    f"the model must be the same ({', '.join(SHARED_MODEL_KEYS)})")
    return None
