"""One GRPO update as a pure function of :class:`GRPOState`.

1. **Group rollout.** ``P`` reset keys, each used ``G`` times: the members of a group start
   from the *same* prompt / start state and sample with different keys.
2. **Batch shaping** (DAPO): optional soft overlong punishment, then dynamic sampling with
   static shapes (over-generate ``oversample * P`` groups, keep ``P``, mask zero-spread ones).
3. **Advantages**: group-relative, per sequence or (``token_credit``) per token.
4. **Optimisation**: ``num_epochs`` x ``num_minibatches`` steps on the clipped surrogate
   with importance ratios against the behaviour log-probs, and optionally a k3 KL penalty
   to the frozen initial policy.

With ``off_policy.staleness: k > 0`` (:mod:`~jaxrl.algos.grpo.offpolicy`) step 1 samples
with the parameters of update ``t - k`` from a ring in the state, and the loss weighs each
sample from its sampling log-probs toward those of the parameters at the update's start (the
ratio's denominator): the first minibatch step's own loss pass gives its rows' (it runs at
those parameters), one pass before the steps the other rows'. With ``off_policy.overlap`` the rollout of
update ``t + 1`` is generated during update ``t`` (:func:`overlapped_update`), on its own device
when the run has a 2-device data mesh, and waits in the state (``GRPOState.pending``).
"""

from __future__ import annotations

import functools
from typing import Any, NamedTuple

import jax
import jax.numpy as jnp
import optax
from flax import struct

from jaxrl.algos.common import batching, optim
from jaxrl.algos.common.lm.policy import TokenPolicy
from jaxrl.algos.common.optim import Schedule
from jaxrl.algos.common.train import epochs
from jaxrl.algos.grpo import offpolicy
from jaxrl.algos.grpo.config import GRPOConfig, GRPOHyper, hyperparams
from jaxrl.algos.grpo.losses import (
    _token_mean, advantage_kind, group_advantages, overlong_shaping, policy_loss, select_groups, token_advantages,
)
from jaxrl.algos.grpo.rollout import Rollout, group_rollout
from jaxrl.core.curriculum import Curriculum
from jaxrl.core.env import Environment
from jaxrl.text.mix import source_metrics

Array = jax.Array


@struct.dataclass
class GRPOState:
    """Everything a GRPO run depends on (checkpointed whole; exact resume)."""

    params: Any  # policy parameters
    ref_params: Any  # frozen reference policy (the initial parameters) for the KL term
    opt_state: Any  # jaxrl.algos.common.optim.adam state (holds the traced lr, max_grad_norm)
    hyper: GRPOHyper  # traced loss and sampling hyperparameters
    key: Array  # PRNG key
    update_step: Array  # int32 [], updates done
    level: Array  # int32 [], curriculum level (the value of the curriculum's param; 0 without one)
    frozen: Any = None  # weights the policy reads but never trains (a loaded model's base under LoRA)
    # off_policy.staleness k > 0: [k, ...] snapshots of params, the ring that samples (offpolicy); None for k = 0
    behaviour: Any = None
    # off_policy.overlap: the Rollout of update update_step, generated during the update before (or
    # by init for update 0) and not trained on yet; None without overlap
    pending: Any = None
    # off_policy.overlap with beta > 0: the reference log-probs of pending's kept rows, computed
    # beside its generation (the reference never changes); None otherwise
    pending_ref: Any = None


class Setup(NamedTuple):
    """Static pieces of one configured run (hashable parts and pure functions)."""

    cfg: GRPOConfig
    env: Environment
    env_params: Any  # training params (the curriculum changes them in the update)
    eval_params: Any  # held-out / evaluation params
    policy: TokenPolicy
    num_steps: int  # T
    optimizer: optax.GradientTransformation
    schedule: Schedule  # the learning-rate schedule (static)
    curriculum: Curriculum | None
    # > 1: the loss pass computes each group's prompt once (the policy's token_logp_shared), and
    # minibatches and micro-batches hold whole groups of this many rows; 1: every row whole
    prefix_group: int = 1
    notes: tuple[str, ...] = ()  # lines for the run's log (how a loaded model's loss pass runs)
    # ascending completion lengths, the last the whole T: a micro-batch's loss pass runs at the
    # shortest holding its longest scored completion (:func:`loss_lengths`); (): always T
    loss_lengths: tuple[int, ...] = ()


@struct.dataclass
class Batch:
    """One minibatch of sequences for the loss."""

    obs: Array  # [n, T, *obs_shape]
    actions: Array  # int32 [n, T]
    old_logp: Array  # float32 [n, T]
    ref_logp: Array  # float32 [n, T] (zeros when beta == 0)
    mask: Array  # bool [n, T]
    advantages: Array  # float32 [n], or [n, T] with token_credit
    is_weight: Array | None = None  # float32 [n, T], off-policy correction (off_policy.staleness > 0 and a correction)
    version: Array | None = None  # int32 [n], the policy version (update) that sampled each row (off_policy.staleness > 0)
    # off_policy.staleness > 0: the log-probs of the parameters that sampled (the weights' denominator), float32 [n, T]
    behaviour_logp: Array | None = None
    # off_policy.staleness > 0, bool [n]: rows whose old_logp is not computed yet, their pi_old being the log-probs
    # of the loss pass itself (the update's first minibatch step runs at the update's start parameters)
    fresh: Array | None = None


def policy_params(frozen, params):
    """What the policy functions take: ``params``, or ``{"base": frozen, "lora": params}``
    when the policy has frozen weights (``params=None``: the base alone, the KL reference)."""
    return params if frozen is None else {"base": frozen, "lora": params}


def reference_params(state: GRPOState):
    """The KL reference: the base with adapters off (LoRA), else the frozen initial copy."""
    return policy_params(state.frozen, None) if state.frozen is not None else state.ref_params


def acting_params(state: GRPOState):
    """The policy's parameters as the rollout and evaluation take them."""
    return policy_params(state.frozen, state.params)


def sampling_params(setup: Setup, state: GRPOState):
    """The parameters that sample update ``state.update_step``'s rollouts: the acting ones, or
    with ``off_policy.staleness: k > 0`` the ring's slot of update ``t - k``
    (:func:`~jaxrl.algos.grpo.offpolicy.behaviour_slot`)."""
    k = setup.cfg.off_policy.staleness
    if k == 0:
        return acting_params(state)
    return policy_params(state.frozen, offpolicy.behaviour_slot(state.behaviour, state.update_step, k))


def whole_groups(cfg: GRPOConfig) -> int:
    """``cfg.group_size`` when every micro-batch holds whole groups (``num_prompts`` divisible
    by ``num_minibatches * micro_batches``), else 1."""
    return 1 if cfg.num_prompts % (cfg.num_minibatches * cfg.micro_batches) else cfg.group_size


def shared_prefix_group(policy: TokenPolicy, cfg: GRPOConfig) -> int:
    """The group size whose prompt the loss pass computes once (:attr:`Setup.prefix_group`):
    :func:`whole_groups` when the policy can share a prompt, else 1."""
    return 1 if policy.token_logp_shared is None else whole_groups(cfg)


def loss_lengths(cfg: GRPOConfig, num_steps: int) -> tuple[int, ...]:
    """:attr:`Setup.loss_lengths` of a loaded model (``model.length_buckets``; ``auto``: a
    quarter and a half of ``num_steps`` rounded up to a multiple of 8, from 64 steps up)."""
    if cfg.model.policy != "hf":
        return ()
    buckets = cfg.model.length_buckets
    if buckets == "auto":
        buckets = tuple(-(-num_steps // d // 8) * 8 for d in (4, 2)) if num_steps >= 64 else ()
    shorter = sorted({int(n) for n in buckets if 0 < int(n) < num_steps})
    return (*shorter, num_steps) if shorter else ()


def used_length(mask: Array) -> Array:
    """int32: positions up to the last scored token of any row of ``mask [n, T]`` (0: none)."""
    t = mask.shape[-1]
    return jnp.max(jnp.where(mask, jnp.arange(1, t + 1, dtype=jnp.int32), 0))


def _token_logp(policy: TokenPolicy, params, obs, actions, temperature, group: int = 1, mask: Array | None = None,
                lengths: tuple[int, ...] = ()) -> tuple[Array, Array]:
    """Log-probs and entropies ``[n, T]`` of ``actions``; with ``lengths`` (a token task's
    dialogues, a causal model) the pass runs only the first ``lengths[i]`` completion positions,
    the shortest holding every scored token of ``mask``: the positions after are zeros (masked
    out wherever they are read), the ones before equal the whole pass's."""
    if mask is None or not lengths:
        return _token_logp_whole(policy, params, obs, actions, temperature, group)
    t = actions.shape[1]

    def at(n: int):
        def run(params, obs, actions):
            logp, entropy = _token_logp_whole(policy, params, obs[:, : obs.shape[1] - t + n], actions[:, :n],
                                              temperature, group)
            return jnp.pad(logp, ((0, 0), (0, t - n))), jnp.pad(entropy, ((0, 0), (0, t - n)))
        return run

    index = jnp.sum(used_length(mask) > jnp.asarray(lengths[:-1], jnp.int32))
    return jax.lax.switch(index, [at(n) for n in lengths], params, obs, actions)


def _token_logp_whole(policy: TokenPolicy, params, obs, actions, temperature, group: int = 1) -> tuple[Array, Array]:
    if group > 1 and policy.token_logp_shared is not None:
        return policy.token_logp_shared(params, obs, actions, temperature, group)
    if policy.token_logp is not None:
        return policy.token_logp(params, obs, actions, temperature)
    logits = policy.sequence_logits(params, obs, actions).astype(jnp.float32) / temperature
    log_probs = jax.nn.log_softmax(logits)
    logp = jnp.take_along_axis(log_probs, actions[..., None].astype(jnp.int32), axis=-1)[..., 0]
    entropy = -jnp.sum(jnp.exp(log_probs) * log_probs, axis=-1)
    return logp, entropy


def loss_fn(setup: Setup, hyper: GRPOHyper, params, batch: Batch, frozen=None) -> tuple[Array, dict]:
    """:func:`policy_loss` of the trainable ``params`` (beside ``frozen`` weights, if any) on
    ``batch``, plus its token entropy."""
    logp, entropy = _token_logp(setup.policy, policy_params(frozen, params), batch.obs, batch.actions, hyper.temperature,
                                setup.prefix_group, batch.mask, setup.loss_lengths)
    ref = batch.ref_logp if setup.cfg.loss.beta > 0 else None
    old_logp, is_weight, off = batch.old_logp, batch.is_weight, {}
    if batch.behaviour_logp is not None:
        old_logp, is_weight, off = _stale_terms(setup, batch, jax.lax.stop_gradient(logp))
    loss, metrics = policy_loss(
        logp, old_logp, ref, batch.advantages, batch.mask, hyper, setup.cfg.loss.type, setup.cfg.loss.cispo_clip_low,
        is_weight)
    return loss, {**metrics, **off, "entropy": _token_mean(jax.lax.stop_gradient(entropy), batch.mask)}


#: The prefix of the loss's auxiliary outputs that are :func:`offpolicy.weight_sums`' sums (turned
#: into the ``off_policy/`` metrics by :func:`learn`, never logged themselves).
_SUMS = "_off_policy_sums/"


def _stale_terms(setup: Setup, batch: Batch, own_logp: Array) -> tuple[Array, Array | None, dict]:
    """``(old_logp, is_weight, sums)`` of a stale minibatch: pi_old is ``batch.old_logp``, or on
    the rows marked ``fresh`` ``own_logp`` (the loss pass's own log-probs, no gradient); the
    weights correct from ``batch.behaviour_logp`` toward it."""
    op = setup.cfg.off_policy
    old_logp = batch.old_logp if batch.fresh is None else jnp.where(batch.fresh[:, None], own_logp, batch.old_logp)
    weights, sums = offpolicy.weight_sums(old_logp, batch.behaviour_logp, batch.mask, op.correction, op.level, op.cap)
    return old_logp, None if op.correction == "none" else weights, {_SUMS + k: v for k, v in sums.items()}


def _old_logp(setup: Setup, hyper: GRPOHyper, params, batch: Batch, group: int) -> Array:
    """pi_old ``[n, T]`` of ``batch``'s rows: their log-probs under ``params`` (the policy's, at
    the update's start), no gradient; ``group``: the rows hold whole groups in order, or 1."""
    old_logp, _ = _token_logp(setup.policy, params, batch.obs, batch.actions, hyper.temperature, group, batch.mask,
                              setup.loss_lengths)
    return jax.lax.stop_gradient(old_logp)


def _micro_grads(setup: Setup, hyper: GRPOHyper, frozen, params, batch: Batch):
    """Gradient of the minibatch loss, accumulated over ``micro_batches`` equal slices in a
    ``scan`` (one slice's activations live at a time): the mean of the slices' gradients."""
    grad_fn = jax.value_and_grad(functools.partial(loss_fn, setup, hyper, frozen=frozen), has_aux=True)
    k = setup.cfg.micro_batches
    if k == 1:
        return grad_fn(params, batch)
    micro = jax.tree_util.tree_map(lambda x: x.reshape((k, x.shape[0] // k) + x.shape[1:]), batch)
    micro = batching.constrain_batch(micro, axis=1)  # data mesh: each device takes its rows of every slice

    def body(acc, mb):
        (loss, metrics), grads = grad_fn(params, mb)
        return jax.tree_util.tree_map(jnp.add, acc, (loss, metrics, grads)), None

    shapes = jax.eval_shape(grad_fn, params, jax.tree_util.tree_map(lambda x: x[0], micro))
    (loss0, metrics0), grads0 = jax.tree_util.tree_map(lambda x: jnp.zeros(x.shape, x.dtype), shapes)
    (loss, metrics, grads), _ = jax.lax.scan(body, (loss0, metrics0, grads0), micro)
    return jax.tree_util.tree_map(lambda x: x / k, ((loss, metrics), grads))


def _sgd_step(setup: Setup, hyper: GRPOHyper, frozen, carry, batch: Batch):
    params, opt_state = carry
    (loss, metrics), grads = _micro_grads(setup, hyper, frozen, params, batch)
    updates, opt_state = setup.optimizer.update(grads, opt_state, params)
    params = optax.apply_updates(params, updates)
    return (params, opt_state), {**metrics, "loss": loss, "grad_norm": optax.tree.norm(grads)}


def _epoch(setup: Setup, hyper: GRPOHyper, frozen, batch: Batch, carry, key):
    n = batch.actions.shape[0]
    k = setup.cfg.num_minibatches
    g = setup.prefix_group
    if g > 1:  # whole groups: a minibatch's rows keep their group's shared prompt together
        perm = (jax.random.permutation(key, n // g)[:, None] * g + jnp.arange(g)[None]).reshape(-1)
    else:
        perm = jax.random.permutation(key, n)
    shuffled = jax.tree_util.tree_map(lambda x: x[perm].reshape((k, n // k) + x.shape[1:]), batch)
    shuffled = batching.constrain_batch(shuffled, axis=1)  # data mesh: each device steps on its slice
    if batch.fresh is not None and k > 1:  # a stale batch, one epoch: pi_old of every minibatch but the first
        rest = jax.tree_util.tree_map(lambda x: x[1:].reshape((-1,) + x.shape[2:]), shuffled)
        old = _old_logp(setup, hyper, policy_params(frozen, carry[0]), rest, setup.prefix_group)
        shuffled = shuffled.replace(old_logp=shuffled.old_logp.at[1:].set(old.reshape(shuffled.old_logp[1:].shape)),
                                    fresh=shuffled.fresh.at[1:].set(False))
    return jax.lax.scan(functools.partial(_sgd_step, setup, hyper, frozen), carry, shuffled)


#: A group's rewards count as all alike (``frac_reward_zero_std``) when their std is at most this
#: times the largest reward's magnitude (at least 1): eight float32 rewards of 0.1 have a std of 8e-9.
ZERO_STD_TOL = 1e-6


def _reward_metrics(rollout: Rollout, rewards: Array, group_rewards: Array, mask: Array) -> dict:
    std_g = jnp.std(group_rewards, axis=1, ddof=1)
    tol = ZERO_STD_TOL * jnp.maximum(1.0, jnp.max(jnp.abs(group_rewards), axis=1))
    metrics = {
        "reward": jnp.mean(rewards),
        "reward_std": jnp.mean(std_g),  # the mean within-group std
        "reward_std_batch": jnp.std(rewards, ddof=1),  # the std of the whole batch's rewards (TRL's reward_std)
        "return_mean": jnp.mean(rollout.returns),
        "frac_reward_zero_std": jnp.mean((std_g <= tol).astype(jnp.float32)),
        "completions/mean_length": jnp.mean(rollout.length.astype(jnp.float32)),
        "completions/clipped_ratio": jnp.mean(rollout.truncated.astype(jnp.float32)),
        "tokens_trained_frac": jnp.mean(mask.astype(jnp.float32)),
    }
    if rollout.turns is not None:
        metrics["completions/mean_turns"] = jnp.mean(rollout.turns.astype(jnp.float32))
    info, by_source = source_metrics(rollout.final_info, rewards)  # a mixed task's: reward/<source>/mean ...
    for name, value in info.items():
        metrics[f"rewards/{name}/mean"] = jnp.mean(value)
        metrics[f"rewards/{name}/std"] = jnp.std(value)
    return {**metrics, **by_source}


def _env_params_at(setup: Setup, level: Array):
    if setup.curriculum is None:
        return setup.env_params
    return setup.curriculum.params_at(setup.env_params, level)


def _next_level(setup: Setup, level: Array, rollout: Rollout) -> Array:
    if setup.curriculum is None:
        return level
    return setup.curriculum.next_level(level, rollout.final_info, rollout.returns)


def rollout_keys(setup: Setup, key: Array) -> tuple[Array, Array]:
    """``(reset_keys [P' * G], rollout key)`` of one update: each group's members share a key."""
    cfg = setup.cfg
    k_reset, k_roll = jax.random.split(key)
    reset_keys = jnp.repeat(jax.random.split(k_reset, cfg.sampling.oversample * cfg.num_prompts), cfg.group_size, axis=0)
    return batching.constrain_batch(reset_keys), k_roll  # whole groups per device on a data mesh; no-op otherwise


def collect(setup: Setup, state: GRPOState, key: Array) -> tuple[Rollout, Batch, dict]:
    """Group rollout, shaping, selection and advantages: the batch of one update."""
    return shape_batch(setup, state, _group_rollout(setup, state, key))


def _group_rollout(setup: Setup, state: GRPOState, key: Array) -> Rollout:
    """The group rollout of update ``state.update_step`` with the collect key ``key``."""
    reset_keys, k_roll = rollout_keys(setup, key)
    env_params = _env_params_at(setup, state.level)
    return group_rollout(setup.policy, setup.env, env_params, sampling_params(setup, state), reset_keys, k_roll,
                         setup.num_steps, state.hyper.temperature, group=setup.cfg.group_size,
                         decode_rows=setup.cfg.sampling.decode_rows)


def sample(setup: Setup, state: GRPOState) -> Rollout:
    """The group rollout :func:`update` collects from ``state`` (its collect key and sampling
    parameters), before shaping: what :func:`overlapped_update` keeps in flight."""
    _, k_collect, _ = jax.random.split(state.key, 3)
    return _group_rollout(setup, state, k_collect)


def sample_pending(setup: Setup, state: GRPOState) -> tuple[Rollout, Array | None]:
    """:func:`sample` and, with ``beta > 0``, the reference log-probs of the rows
    :func:`shape_batch` will keep: the generation half of :func:`overlapped_update`. The
    reference is the initial policy, so its pass needs nothing the update learns and runs
    beside generation rather than on the learner's critical path."""
    ro = sample(setup, state)
    if setup.cfg.loss.beta <= 0:
        return ro, None
    kept, _, group_valid, _, _ = _select(setup, ro)
    return ro, _reference_logp(setup, state, kept, _kept_mask(setup, kept, group_valid))


def _select(setup: Setup, ro: Rollout) -> tuple[Rollout, Array, Array, Array, Array]:
    """``(ro's kept groups' rows, their rewards [P, G], group_valid [P], members, penalty [N'])``:
    overlong shaping and (dynamic sampling) group selection of a group rollout."""
    cfg = setup.cfg
    p_all, g = cfg.sampling.oversample * cfg.num_prompts, cfg.group_size
    penalty = cfg.sampling.overlong_penalty * overlong_shaping(ro.length, setup.num_steps, cfg.sampling.overlong_buffer)
    rewards = ro.returns + penalty
    grouped = rewards.reshape(p_all, g)
    if cfg.sampling.dynamic_sampling:
        idx, group_valid = select_groups(grouped, cfg.num_prompts)
    else:
        idx, group_valid = jnp.arange(cfg.num_prompts), jnp.ones((cfg.num_prompts,), jnp.bool_)
    members = (idx[:, None] * g + jnp.arange(g)[None]).reshape(-1)
    return jax.tree_util.tree_map(lambda x: x[members], ro), grouped[idx], group_valid, members, penalty


def _kept_mask(setup: Setup, kept: Rollout, group_valid: Array) -> Array:
    """The loss mask of :func:`_select`'s kept rows: their tokens, in valid groups only."""
    return kept.mask & jnp.repeat(group_valid, setup.cfg.group_size)[:, None]


def _reference_logp(setup: Setup, state: GRPOState, kept: Rollout, mask: Array) -> Array:
    """The KL reference's log-probs ``[n, T]`` of the kept rows (whole groups in order)."""
    ref_logp, _ = _token_logp(setup.policy, reference_params(state), kept.obs, kept.actions, state.hyper.temperature,
                              setup.cfg.group_size, mask, setup.loss_lengths)
    return jax.lax.stop_gradient(ref_logp)


def shape_batch(setup: Setup, state: GRPOState, ro: Rollout, ref_logp: Array | None = None) -> tuple[Rollout, Batch, dict]:
    """Overlong shaping, group selection and advantages of a group rollout ``ro`` (with
    ``beta > 0``, ``ref_logp``: the kept rows' reference log-probs when already computed, by
    :func:`sample_pending`)."""
    cfg = setup.cfg
    g = cfg.group_size
    ro, grouped, group_valid, members, penalty = _select(setup, ro)
    valid = jnp.broadcast_to(group_valid[:, None], grouped.shape)
    if ro.failed is not None:  # an episode the env failed (a remote session) is no member of its group's statistics
        valid = valid & ~ro.failed.reshape(grouped.shape)
    if cfg.loss.token_credit:
        last = jnp.arange(setup.num_steps)[None] == (ro.length - 1)[:, None]  # the penalty lands on the last step
        step_r = (ro.rewards + penalty[members][:, None] * last).reshape(cfg.num_prompts, g, -1)
        adv = token_advantages(step_r, valid, advantage_kind(cfg.loss.type, cfg.loss.scale_rewards), cfg.loss.credit_discount).reshape(cfg.num_prompts * g, -1)
    else:
        adv = group_advantages(grouped, valid, advantage_kind(cfg.loss.type, cfg.loss.scale_rewards)).reshape(-1)
    mask = _kept_mask(setup, ro, group_valid)
    if cfg.loss.beta <= 0:
        ref_logp = jnp.zeros_like(ro.logp)
    elif ref_logp is None:
        ref_logp = _reference_logp(setup, state, ro, mask)
    batch = Batch(ro.obs, ro.actions, ro.logp, ref_logp, mask, adv)
    metrics = _reward_metrics(ro, grouped.reshape(-1), grouped, mask)
    if cfg.off_policy.staleness > 0:
        batch, off = _off_policy_batch(setup, state, batch)
        metrics.update(off)
    return ro, batch, metrics


def _off_policy_batch(setup: Setup, state: GRPOState, batch: Batch) -> tuple[Batch, dict]:
    """A stale batch: its sampling log-probs become ``behaviour_logp``, ``version`` is the update
    whose parameters sampled each row, and every row is ``fresh``: pi_old, the log-probs of the
    parameters at the update's start (the ratio's denominator), is left to :func:`learn`. Its
    first minibatch step runs at those parameters, so that step's loss pass gives its rows'
    pi_old and only the other rows need a pass of their own (:func:`_epoch`); the loss weighs
    each row from ``behaviour_logp`` toward pi_old (:func:`_stale_terms`)."""
    made_by = offpolicy.version(state.update_step, setup.cfg.off_policy.staleness)
    n = batch.actions.shape[0]
    batch = batch.replace(behaviour_logp=batch.old_logp, version=jnp.full((n,), made_by, jnp.int32),
                          fresh=jnp.ones((n,), jnp.bool_))
    return batch, {"off_policy/staleness": (state.update_step - made_by).astype(jnp.float32)}


def update(setup: Setup, state: GRPOState) -> tuple[GRPOState, dict]:
    """One GRPO update: collect a group batch, then epochs x minibatches of gradient steps
    (with ``off_policy.overlap``: :func:`overlapped_update`)."""
    if setup.cfg.off_policy.overlap:
        return overlapped_update(setup, state)
    _, k_collect, _ = jax.random.split(state.key, 3)
    return learn(setup, state, collect(setup, state, k_collect))


def _advance(setup: Setup, state: GRPOState, ro: Rollout) -> GRPOState:
    """Every field of the state after update ``state.update_step`` but the learned ones
    (``params``, ``opt_state``): the key, the counter, the curriculum level (from ``ro``, the
    update's kept rows) and the parameter ring; none of them waits for a gradient."""
    key, _, _ = jax.random.split(state.key, 3)
    level = _next_level(setup, state.level, ro)
    behaviour = offpolicy.push(state.behaviour, state.update_step, state.params, setup.cfg.off_policy.staleness)
    return state.replace(key=key, update_step=state.update_step + 1, level=level, behaviour=behaviour)


#: The mesh :func:`overlapped_update` runs its two halves on: one device per half.
OVERLAP_DEVICES = 2


def overlapped_update(setup: Setup, state: GRPOState) -> tuple[GRPOState, dict]:
    """One update with the next batch's generation beside it (``off_policy.overlap``).

    ``state.pending`` is update ``t``'s rollout, sampled earlier (with ``beta > 0`` its
    reference log-probs beside it, ``state.pending_ref``). The step learns on it
    (:func:`shape_batch`, :func:`learn`) and, independently, samples update ``t + 1``'s rollout
    (:func:`sample_pending` of the state after ``t`` but for its learned parameters: with staleness
    ``k >= 1`` the parameters that sample ``t + 1`` are in the ring, or for ``k = 1`` the ones at
    ``t``'s start, before the step learns anything). The values are those of :func:`update`
    at the same staleness: the same rollouts, the same keys, the same parameters.

    Traced under a 2-device data mesh (``devices: 2``; :func:`jaxrl.algos.common.batching.
    constrain_batch`'s), the halves run on disjoint devices inside one program: a
    ``shard_map`` over the data axis in which device 0 takes the generation branch of a
    ``lax.cond`` and device 1 the learning branch, each returning zeros for the other's
    outputs, combined by :func:`~jaxrl.algos.common.batching.psum_packed` (``x + 0``: exact).
    On one device they run one after the other, the same values; other meshes are refused.
    """
    def learner(s: GRPOState):
        new, metrics = learn(setup, s, shape_batch(setup, s, s.pending, s.pending_ref))
        return new.replace(pending=None, pending_ref=None), metrics

    def generator(s: GRPOState) -> tuple[Rollout, Array | None]:
        return sample_pending(setup, _advance(setup, s, _select(setup, s.pending)[0]))

    mesh = jax.sharding.get_abstract_mesh()
    sizes = {} if mesh.empty else dict(mesh.shape)
    if sizes.get(batching.DATA, 1) == 1 and all(n == 1 for n in sizes.values()):  # one device
        (new, metrics), (ro, ref) = learner(state), generator(state)
        return new.replace(pending=ro, pending_ref=ref), metrics
    if sizes.get(batching.DATA) != OVERLAP_DEVICES or any(n > 1 for a, n in sizes.items() if a != batching.DATA):
        raise ValueError(f"off_policy.overlap: generation and learning take one device each of a {OVERLAP_DEVICES}-device "
                         f"data mesh (devices: {OVERLAP_DEVICES}, mesh.model: 1); this run's mesh is "
                         f"{' x '.join(f'{a}={n}' for a, n in sizes.items())}")

    def halves(s: GRPOState):
        with jax.sharding.use_abstract_mesh(jax.sharding.AbstractMesh((), ())):  # inside: whole batches, no pinning
            learned, generated = jax.eval_shape(learner, s), jax.eval_shape(generator, s)
            zeros = lambda shapes: jax.tree_util.tree_map(lambda a: jnp.zeros(a.shape, a.dtype), shapes)  # noqa: E731
            out = jax.lax.cond(jax.lax.axis_index(batching.DATA) == 0, lambda s: (zeros(learned), generator(s)),
                               lambda s: (learner(s), zeros(generated)), s)
        return batching.psum_packed(out)  # x + 0: exact

    spec = jax.sharding.PartitionSpec()
    (new, metrics), (ro, ref) = jax.shard_map(halves, in_specs=spec, out_specs=spec, axis_names={batching.DATA})(state)
    return new.replace(pending=ro, pending_ref=ref), metrics


def learn(setup: Setup, state: GRPOState, collected: tuple[Rollout, Batch, dict]) -> tuple[GRPOState, dict]:
    """The optimisation half of :func:`update` on a collected ``(rollout, batch, metrics)``
    (a host-driven loop can collect its own and learn from it)."""
    _, _, k_epochs = jax.random.split(state.key, 3)
    ro, batch, metrics = collected
    metrics["lr"] = optim.current_lr(state.opt_state, setup.schedule)
    if batch.fresh is not None and setup.cfg.num_epochs > 1:  # later epochs revisit every row: pi_old of all now
        old = _old_logp(setup, state.hyper, acting_params(state), batch, setup.cfg.group_size)  # whole groups in order
        batch = batch.replace(old_logp=old, fresh=None)
    epoch = functools.partial(_epoch, setup, state.hyper, state.frozen, batch)
    (params, opt_state), losses = epochs(epoch, (state.params, state.opt_state), k_epochs, setup.cfg.num_epochs)
    losses = jax.tree_util.tree_map(jnp.mean, losses)
    sums = {k[len(_SUMS):]: losses.pop(k) for k in [k for k in losses if k.startswith(_SUMS)]}
    if sums:  # every row counted alike in each epoch: the means' ratios are the batch's
        losses.update(offpolicy.metrics_from_sums(sums, setup.cfg.off_policy.correction))
    metrics.update(losses)
    metrics["curriculum_level"] = state.level.astype(jnp.float32)
    new = _advance(setup, state, ro).replace(params=params, opt_state=opt_state)
    return new, {k: jnp.asarray(v, jnp.float32) for k, v in metrics.items()}


def init(setup: Setup, key: Array, hyper: dict | None = None) -> GRPOState:
    """A fresh state: random policy, reference = a copy of it, optimiser state, counters at 0,
    and with ``off_policy.staleness: k > 0`` a ring of ``k`` copies of the parameters (with
    ``off_policy.overlap`` also update 0's rollout, in flight).

    ``hyper``: traced hyperparameters from :func:`~jaxrl.algos.grpo.config.hyperparams`
    (default: the config's values).
    """
    cfg = setup.cfg
    optim_hyper, rest = optim.split_traced(hyperparams(cfg, **(hyper or {})))
    k_params, k_obs, key = jax.random.split(key, 3)
    _, ts = setup.env.reset(k_obs, setup.env_params)
    params = setup.policy.init(k_params, ts.obs[None])
    frozen = setup.policy.frozen() if setup.policy.frozen is not None else None
    ref = params if cfg.loss.beta > 0 and frozen is None else None  # with frozen weights the reference is the base
    level = setup.curriculum.first_level() if setup.curriculum is not None else jnp.zeros((), jnp.int32)
    optimizer = make_optimizer(cfg, optim_hyper["lr"], optim_hyper["max_grad_norm"])
    ring = offpolicy.init_ring(params, cfg.off_policy.staleness)
    state = GRPOState(params, ref, optimizer.init(params), GRPOHyper(**rest), key, jnp.zeros((), jnp.int32), level, frozen,
                      ring)
    return with_pending(setup, state)


def with_pending(setup: Setup, state: GRPOState) -> GRPOState:
    """``state`` with update ``state.update_step``'s rollout in flight (``off_policy.overlap``;
    :func:`sample_pending`), else unchanged."""
    if not setup.cfg.off_policy.overlap:
        return state
    ro, ref = sample_pending(setup, state)
    return state.replace(pending=ro, pending_ref=ref)


def schedule(cfg: GRPOConfig) -> Schedule:
    """Warm-up and decay in updates (every optimiser step of an update uses one rate)."""
    return optim.schedule(cfg.optim, cfg.num_updates, cfg.num_epochs * cfg.num_minibatches)


def make_optimizer(cfg: GRPOConfig, lr=None, max_grad_norm=None) -> optax.GradientTransformation:
    """:func:`jaxrl.algos.common.optim.adam` for ``cfg`` (``lr``/``max_grad_norm`` may be traced)."""
    return optim.from_config(cfg.optim, schedule(cfg), lr, max_grad_norm)
