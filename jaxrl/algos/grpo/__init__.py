"""The GRPO family (grpo, dr_grpo, dapo, rloo, cispo, gspo) on the shared env contract.

Group rollouts, group-relative advantages and the clipped surrogates of LLM post-training,
generation, scoring and the update inside one XLA program. One concern per module:
:mod:`~jaxrl.algos.grpo.config`, :mod:`~jaxrl.algos.grpo.losses`,
:mod:`~jaxrl.algos.grpo.policy`, :mod:`~jaxrl.algos.grpo.rollout`,
:mod:`~jaxrl.algos.grpo.update`, :mod:`~jaxrl.algos.grpo.evaluate`. Token tasks
(:class:`~jaxrl.core.tokens.TokenTask`) get a causal transformer (a loaded checkpoint:
:mod:`jaxrl.algos.common.lm`); any other env with discrete actions an MLP, so GRPO also
trains CartPole. :data:`ENTRY` registers
``algo: grpo``.
"""

from __future__ import annotations

import dataclasses
import functools

import jax
import jax.numpy as jnp

from jaxrl.algos.common.lm import program as lm_program
from jaxrl.algos.common.lm.model import load_model, lora_config
from jaxrl.algos.common.lm import policy as token_policy  # not `lm_policy`: jaxrl.algos.grpo.lm_policy is a moved module's path
from jaxrl.algos.common.lm.policy import LMSpec, TokenPolicy
from jaxrl.algos.common.masks import action_mask_fn, mask_logits
from jaxrl.algos.contract import (
    Alert, AlgoEntry, BatchSize, Curve, EnvSetup, LMHooks, ModelParams, Monitor, Plan, Policy, Program, no_carry,
    replicated_axes,
)
from jaxrl.algos.grpo import config, evaluate, losses, offpolicy, policy, rollout, update
from jaxrl.algos.grpo.config import GRPOConfig, GRPOHyper, hyperparams
from jaxrl.algos.grpo.policy import MLPPolicy, masked_policy, mlp_policy, transformer_policy
from jaxrl.algos.grpo.update import GRPOState, Setup
from jaxrl.core.env import Environment
from jaxrl.core.tokens import TokenTask
from jaxrl.models.transformer import TransformerLM

__all__ = [
    "ENTRY", "GRPOConfig", "GRPOHyper", "GRPOState", "Setup", "auto_choices", "build", "build_policy", "config",
    "evaluate", "hyperparams", "loss_pass_plan", "losses", "make_setup", "micro_batch_counts", "offpolicy", "policy",
    "resolved", "rollout", "rollout_length", "update",
]


def rollout_length(env: Environment, env_params, cfg: GRPOConfig) -> int:
    """T: a token task's dialogue after the prompt, else ``sampling.max_steps``, else the env's limit."""
    if isinstance(env, TokenTask):
        if cfg.sampling.max_steps:
            raise ValueError(f"sampling.max_steps: a token task's length is its dialogue's ({env.name}); leave it at 0")
        return int(env.dialogue_len - env.prompt_len)
    if cfg.sampling.max_steps:
        return int(cfg.sampling.max_steps)
    limit = env.episode_bound(env_params)
    if limit is None:
        raise ValueError(f"sampling.max_steps: {env.name} has no step limit; set grpo.sampling.max_steps")
    return int(limit)


def _hf_policy(env: Environment, cfg: GRPOConfig):
    """A loaded checkpoint (``model.policy: hf``) over a token task in its tokenizer's ids, and
    how its loss pass runs (:func:`loss_pass_plan`)."""
    m = cfg.model
    if not isinstance(env, TokenTask):
        raise ValueError(f"model.policy: 'hf' needs a token task, {env.name} is not one")
    model, weights = load_model(m, env.vocab_size, env.name)
    plan = loss_pass_plan(model.config, cfg, env.dialogue_len, env.prompt_len)
    spec = LMSpec(model, lora_config(m.lora), env.pad_id, env.prompt_len, env.dialogue_len, plan.head_chunk, plan.remat)
    return token_policy.lm_policy(spec, weights), plan


def loss_pass_plan(lm_config, cfg: GRPOConfig, seq_len: int, prompt_len: int = 0):
    """Rematerialisation, head chunking and micro-batches of a loaded model's loss pass
    (:func:`jaxrl.models.lm.memory.plan_loss_pass`): remat off, the head whole and one
    micro-batch when the memory estimate of one update fits this machine's device, unless
    ``model.remat`` / ``model.head_chunk`` / ``micro_batches`` say; else the fewest
    :func:`micro_batch_counts` that fit, after remat and chunking."""
    from jaxrl.models.lm.memory import available_bytes, plan_loss_pass

    m, k = cfg.model, cfg.micro_batches
    have, where = available_bytes()
    return plan_loss_pass(
        functools.partial(_estimate, lm_config, cfg, seq_len, 1, 1, "tp", prompt_len=prompt_len), have,
        remat=None if m.remat == "auto" else bool(m.remat),
        head_chunk=None if m.head_chunk == "auto" else int(m.head_chunk),
        micro_batches=micro_batch_counts(cfg) if k == "auto" else int(k), where=where)


def micro_batch_counts(cfg: GRPOConfig) -> tuple[int, ...]:
    """The counts ``micro_batches: auto`` tries, fewest first: the divisors of the minibatch
    (``num_prompts * group_size / num_minibatches`` sequences) that keep every group whole in
    a micro-batch (its prompt computed once in the loss pass), then the ones that cut groups."""
    n = cfg.num_prompts * cfg.group_size // cfg.num_minibatches
    prompts = 0 if cfg.num_prompts % cfg.num_minibatches else cfg.num_prompts // cfg.num_minibatches
    divisors = [k for k in range(1, n + 1) if n % k == 0]
    whole = [k for k in divisors if prompts and prompts % k == 0]
    return tuple(whole + [k for k in divisors if k not in whole])


def resolved(cfg: GRPOConfig, plan=None) -> GRPOConfig:
    """``cfg`` with its ``auto`` loss-pass keys (``micro_batches``, ``model.remat``,
    ``model.head_chunk``) replaced by ``plan``'s choice (:func:`loss_pass_plan`); without a
    plan (the small networks) ``micro_batches: auto`` is 1 and the model keys are not read."""
    if plan is None:
        return cfg if cfg.micro_batches != "auto" else dataclasses.replace(cfg, micro_batches=1)
    model = dataclasses.replace(cfg.model, remat=plan.remat, head_chunk=plan.head_chunk)
    return dataclasses.replace(cfg, micro_batches=plan.micro_batches, model=model)


def auto_choices(cfg: GRPOConfig, chosen: GRPOConfig) -> tuple[tuple[str, object], ...]:
    """``(("grpo.<key>", value), ...)``: each loss-pass key ``cfg`` leaves at ``auto`` and the
    value ``chosen`` (:func:`resolved`) holds: what a resume must build with again
    (:attr:`jaxrl.algos.contract.LMHooks.chosen`)."""
    if cfg.model.policy != "hf":
        return ()
    pairs = (("micro_batches", cfg.micro_batches, chosen.micro_batches),
             ("model.remat", cfg.model.remat, chosen.model.remat),
             ("model.head_chunk", cfg.model.head_chunk, chosen.model.head_chunk))
    return tuple((f"grpo.{key}", value) for key, auto, value in pairs if auto == "auto")


def model_params(cfg: GRPOConfig, seq_len: int = 0, prompt_len: int = 0) -> ModelParams | None:
    """The leaves a ``model`` mesh axis splits: a loaded model's weights (trained, frozen and
    reference) and the optimiser moments that mirror them; ``None`` for the small networks."""
    if cfg.model.policy != "hf":
        return None
    return lm_program.model_params(cfg, "grpo", ("params", "ref_params", "frozen", "opt_state"),
                                   functools.partial(_memory, prompt_len=prompt_len), seq_len)


def _memory(lm_config, cfg: GRPOConfig, seq_len: int, data: int, model: int, strategy: str, remat=None,
            head_chunk=None, prompt_len: int = 0, micro_batches=None):
    """Per-device memory of one update of a loaded model (:func:`jaxrl.models.lm.memory.estimate_memory`)
    with the loss pass :func:`loss_pass_plan` chooses (or ``remat`` / ``head_chunk`` /
    ``micro_batches`` given); ``prompt_len``: the part of ``seq_len`` the LM head does not
    score (0: unknown, all scored)."""
    if remat is None or head_chunk is None or micro_batches is None:
        plan = loss_pass_plan(lm_config, cfg, seq_len, prompt_len)
        remat = plan.remat if remat is None else remat
        head_chunk = plan.head_chunk if head_chunk is None else head_chunk
        micro_batches = plan.micro_batches if micro_batches is None else micro_batches
    return _estimate(lm_config, cfg, seq_len, data, model, strategy, remat, head_chunk, micro_batches, prompt_len)


def _estimate(lm_config, cfg: GRPOConfig, seq_len: int, data: int, model: int, strategy: str, remat: bool,
              head_chunk: int, micro_batches: int, prompt_len: int = 0):
    """:func:`_memory` of one choice of the loss pass."""
    from jaxrl.models.lm.memory import estimate_memory

    m = cfg.model
    cfg = dataclasses.replace(cfg, micro_batches=micro_batches)
    rows = cfg.num_prompts * cfg.group_size // (cfg.num_minibatches * micro_batches)
    completion = seq_len - prompt_len
    return estimate_memory(
        lm_config, batch=cfg.sampling.oversample * cfg.num_prompts * cfg.group_size, seq_len=seq_len,
        param_dtype_bytes=2 if m.dtype == "bfloat16" else 4, full_finetune=m.lora.rank == 0, lora_rank=m.lora.rank,
        lora_targets=tuple(m.lora.targets), data=data, model=model, strategy=strategy,
        grad_accum=cfg.num_minibatches * micro_batches,
        vocab_chunk=rows * min(head_chunk or completion, completion), remat=remat, completion_len=completion,
        group=update.whole_groups(cfg),
        reference=m.lora.rank == 0 and cfg.loss.beta > 0, platform=_platform(),
        eval_rows=cfg.eval_every_episodes if cfg.eval_every else 0,
    )


def _platform() -> str:
    """The first local device's kind (``cpu``, ``gpu``, ``tpu``)."""
    return jax.local_devices()[0].platform


def build_policy(env: Environment, env_params, cfg: GRPOConfig) -> TokenPolicy:
    """The transformer for token tasks (``model.policy: auto``), a loaded checkpoint
    (``hf``), else an MLP over flat obs."""
    kind, m = cfg.model.policy, cfg.model
    if kind == "hf":
        return _hf_policy(env, cfg)[0]
    is_token = isinstance(env, TokenTask)
    if kind == "auto":
        kind = "transformer" if is_token else "mlp"
    n_actions = getattr(env.action_space(env_params), "n", None)
    if n_actions is None:
        raise ValueError(f"model.policy: GRPO needs a Discrete action space, {env.name} has {env.action_space(env_params)}")
    if kind == "transformer":
        if not is_token:
            raise ValueError(f"model.policy: 'transformer' needs a token task, {env.name} is not one")
        model = TransformerLM(
            env.vocab_size, env.dialogue_len, m.d_model, m.n_layers, m.n_heads,
            positions=m.positions, tie_embeddings=m.tie_embeddings, smear_keys=m.smear_keys,
        )
        return transformer_policy(model, env.prompt_len)
    return masked_policy(mlp_policy(MLPPolicy(n_actions, tuple(m.hidden))), action_mask_fn(env, env_params, cfg.action_mask))


def make_setup(envs: EnvSetup, cfg: GRPOConfig) -> Setup:
    """The static pieces of one run; :attr:`Setup.cfg` is ``cfg`` :func:`resolved` (its
    ``auto`` loss-pass keys as chosen for this machine)."""
    env, params = envs.env, envs.params
    notes: tuple[str, ...] = ()
    if cfg.model.policy == "hf":
        pol, plan = _hf_policy(env, cfg)
        notes, cfg = (plan.reason,), resolved(cfg, plan)
    else:
        pol, cfg = build_policy(env, params, cfg), resolved(cfg)
    steps = rollout_length(env, params, cfg)
    if cfg.sampling.decode_rows:
        rollout.check_decode_rows(env, cfg.sampling.decode_rows)
    lengths = update.loss_lengths(cfg, steps)
    if lengths:
        notes += (f"loss pass: each micro-batch at the shortest of {', '.join(map(str, lengths))} completion "
                  f"positions holding its longest scored completion (grpo.model.length_buckets)",)
    return Setup(
        cfg, env, params, envs.eval_params, pol, steps,
        update.make_optimizer(cfg), update.schedule(cfg), envs.curriculum, update.shared_prefix_group(pol, cfg), notes,
        lengths,
    )


def _mlp_act(model: MLPPolicy, params, carry, obs, key, deterministic: bool = False, mask_fn=None):
    logits = mask_logits(model.apply(params, obs), None if mask_fn is None else mask_fn(obs))
    action = jnp.argmax(logits, axis=-1) if deterministic else jax.random.categorical(key, logits)
    return carry, action.astype(jnp.int32)


def _params(state: GRPOState):
    return state.params


def _acting_policy(envs: EnvSetup, cfg: GRPOConfig) -> Policy | None:
    """Acting outside training: the MLP policy of a control env; token tasks have none
    (their episodes are shown as transcripts, :attr:`LMHooks.samples`)."""
    if isinstance(envs.env, TokenTask):
        return None
    n_actions = envs.env.action_space(envs.params).n
    model = MLPPolicy(n_actions, tuple(cfg.model.hidden))
    mask_fn = action_mask_fn(envs.env, envs.params, cfg.action_mask)
    return Policy(envs.env, _params, no_carry, functools.partial(_mlp_act, model, mask_fn=mask_fn))


#: What to try when groups stop carrying a gradient (docs/rlvr.md, "When training stalls").
STALL_HINT = (
    "a larger grpo.group_size, a higher grpo.sampling.temperature, a partial-credit reward (a dense rubric), "
    "a curriculum (env.curriculum), grpo.loss.scale_rewards (batch or none), or grpo.sampling.dynamic_sampling; "
    "see docs/rlvr.md#when-training-stalls"
)


def alerts(envs: EnvSetup, cfg: GRPOConfig, info: set) -> tuple[Alert, ...]:
    """The stalls the trainer reports once (``grpo.warn``): most groups without reward
    spread, or the sampling entropy collapsed, over ``warn.patience`` updates, not counting
    updates whose sampled exact match (``info`` keys: tasks that report one) shows it solved."""
    w = cfg.warn
    if w.patience == 0:
        return ()
    unless = ("rewards/exact_match/mean", w.solved_exact_match) if "exact_match" in info else None
    return (
        Alert("frac_reward_zero_std", True, w.zero_std_frac, w.patience,
              "most groups score all their members alike, so they carry no gradient", STALL_HINT, unless),
        Alert("entropy", False, w.min_entropy, w.patience,
              "the policy's sampling entropy collapsed: it answers the same whatever it samples", STALL_HINT, unless),
    )


def build(envs: EnvSetup, cfg: GRPOConfig) -> Program:
    """The GRPO family on ``envs.env`` as a :class:`~jaxrl.algos.contract.Program`."""
    setup = make_setup(envs, cfg)
    token = isinstance(envs.env, TokenTask)
    info = lm_program.info_keys(envs.env, envs.eval_params)  # exact_match?
    steps_per_update = cfg.sampling.oversample * cfg.num_prompts * cfg.group_size * setup.num_steps
    plan = Plan(cfg.num_updates, steps_per_update, cfg.num_epochs * cfg.num_minibatches,
                step_unit="tokens" if token else "env steps")
    lm = LMHooks(
        samples=functools.partial(evaluate.samples, setup),
        rollouts=functools.partial(evaluate.sampled_rollouts, setup),
        model_params=model_params(setup.cfg, envs.env.dialogue_len, envs.env.prompt_len),
        notes=setup.notes,
        chosen=auto_choices(cfg, setup.cfg),
    ) if token else LMHooks(model_params=model_params(cfg))
    return Program(
        update=functools.partial(evaluate.update_and_evaluate if cfg.eval_every else update.update, setup),
        evaluate=functools.partial(evaluate.evaluate, setup),
        plan=plan,
        batch_axes=replicated_axes,  # prompt groups are born inside the update and pinned there
        report=lm_program.greedy_report(envs.env, info, token),
        hyperparams=functools.partial(hyperparams, cfg),
        init_with=functools.partial(update.init, setup),
        batch=BatchSize("num_prompts", cfg.num_prompts, "prompt groups"),
        policy=_acting_policy(envs, cfg),
        load_params=functools.partial(load_params, setup=setup),
        monitor=Monitor(Curve("return_mean", "sampled reward" if token else "sampled return"), alerts(envs, cfg, info)),
        lm=lm,
    )


def load_params(fresh: update.GRPOState, trained, setup: Setup | None = None) -> update.GRPOState:
    """``fresh`` starting from ``trained``'s policy, which is also the KL reference.

    ``trained`` is a GRPO state or another algorithm's over the same loaded model (an SFT
    run: ``jaxrl train --init-from``), read through the two fields every such state has:
    ``params`` (the trained weights or LoRA adapters) and ``frozen`` (the base under LoRA).
    With ``off_policy.staleness > 0`` every slot of the parameter ring starts from them too,
    and with ``off_policy.overlap`` update 0's rollout in flight is sampled again with them
    (``setup``: the run's, needed then).
    """
    ref = trained.params if fresh.ref_params is not None else None
    ring = None if fresh.behaviour is None else jax.tree_util.tree_map(
        lambda r, p: jnp.broadcast_to(p[None], r.shape).astype(r.dtype), fresh.behaviour, trained.params)
    loaded = fresh.replace(params=trained.params, ref_params=ref, frozen=trained.frozen, behaviour=ring)
    if fresh.pending is None:
        return loaded
    if setup is None:
        raise ValueError("load_params: off_policy.overlap's rollout in flight is sampled again from the loaded "
                         "parameters, which needs the run's setup")
    return update.with_pending(setup, loaded)


ENTRY = AlgoEntry(
    name="grpo", config_cls=GRPOConfig, build=build,
    description="the GRPO family (grpo, dr_grpo, dapo, rloo, cispo, gspo) with group rollouts",
)
