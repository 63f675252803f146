"""PPO loss terms against hand computations; config validation and derived counts."""

import dataclasses
import math

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl
from jaxrl.models import normalize
from jaxrl.algos import ppo
from jaxrl.algos.common import optim
from jaxrl.algos.common.train import program_on as program, train_on as train_fn

RATIOS = np.array([1.0, 1.5, 0.5, 1.1])
ADV = jnp.array([1.0, 1.0, -1.0, -2.0])


def test_policy_loss_hand_computed():
    # eps 0.2: min(rA, clip(r)A) = [1, min(1.5, 1.2), min(-0.5, -0.8), min(-2.2, -2.2)]
    #        = [1, 1.2, -0.8, -2.2]; loss = -mean = 0.2.
    logp = jnp.log(jnp.asarray(RATIOS, jnp.float32))
    loss, m = ppo.losses.policy_loss(logp, jnp.zeros(4), ADV, 0.2)
    np.testing.assert_allclose(loss, 0.2, rtol=1e-6)
    np.testing.assert_allclose(m["clip_frac"], 0.5)  # |r - 1| > 0.2 for 1.5 and 0.5
    kl = np.mean((RATIOS - 1) - np.log(RATIOS))
    np.testing.assert_allclose(m["approx_kl"], kl, rtol=1e-5)


def test_policy_loss_gradient_vanishes_on_clipped_samples():
    # d loss / d logp_i = -r_i A_i / N where the unclipped term is the min, else 0:
    # [-0.25, 0 (clipped), 0 (clipped), -(1.1 * -2) / 4 = 0.55]
    logp = jnp.log(jnp.asarray(RATIOS, jnp.float32))
    g = jax.grad(lambda lp: ppo.losses.policy_loss(lp, jnp.zeros(4), ADV, 0.2)[0])(logp)
    np.testing.assert_allclose(g, [-0.25, 0.0, 0.0, 0.55], rtol=1e-6, atol=1e-7)


def test_value_loss_hand_computed():
    v, old, t = jnp.array([1.0, 2.0, 0.0]), jnp.array([0.5, 1.0, 0.0]), jnp.array([2.0, 0.0, 1.0])
    # unclipped: 0.5 * mean([1, 4, 1]) = 1
    loss, m = ppo.losses.value_loss(v, old, t, None)
    np.testing.assert_allclose(loss, 1.0)
    assert m["value_loss"] == loss
    # clipped (eps 0.2): v_c = [0.7, 1.2, 0]: errors [1.69, 1.44, 1]; max with unclipped
    # = [1.69, 4, 1]; 0.5 * mean = 1.115
    loss, _ = ppo.losses.value_loss(v, old, t, 0.2)
    np.testing.assert_allclose(loss, 1.115, rtol=1e-6)


def test_entropy_loss_and_advantage_normalisation():
    loss, m = ppo.losses.entropy_loss(jnp.array([0.5, 1.5]))
    np.testing.assert_allclose(loss, -1.0)
    np.testing.assert_allclose(m["entropy"], 1.0)
    a = ppo.losses.normalize_advantages(jnp.array([1.0, 2.0, 3.0, 4.0]))
    np.testing.assert_allclose(a, (np.arange(1, 5) - 2.5) / np.std(np.arange(1, 5)), rtol=1e-6)


def test_ppo_loss_combines_terms_with_coefficients():
    env, params = jaxrl.make("CartPole-v1")
    cfg = ppo.PPOConfig(vf_clip_eps=0.3, hidden=(8,), normalize_advantages=False)
    net = ppo.build_network(env, params, cfg)
    theta = net.init(jax.random.key(0), jnp.zeros(4))
    rng = np.random.default_rng(0)
    obs = jnp.asarray(rng.normal(size=(6, 4)), jnp.float32)
    batch = ppo.Batch(
        obs=obs, action=jnp.array([0, 1, 1, 0, 1, 0]), log_prob=jnp.full(6, math.log(0.5)),
        value=jnp.zeros(6), advantage=jnp.asarray(rng.normal(size=6), jnp.float32),
        target=jnp.asarray(rng.normal(size=6), jnp.float32),
    )
    hyper = ppo.config.loss_hyperparams(cfg, ent_coef=0.05, vf_coef=0.7)
    loss, m, expected = jax.jit(_loss_and_hand_sum, static_argnums=(1, 2))(theta, net, cfg, hyper, batch)
    np.testing.assert_allclose(loss, expected, rtol=1e-5)
    assert set(m) == {"loss", "policy_loss", "approx_kl", "clip_frac", "value_loss", "entropy"}


def _loss_and_hand_sum(theta, net, cfg, hyper, batch):
    loss, m = ppo.losses.ppo_loss(theta, net, normalize.init_stats((4,)), cfg, hyper, batch)
    dist, values = net.apply(theta, batch.obs)
    pi, _ = ppo.losses.policy_loss(dist.log_prob(batch.action), batch.log_prob, batch.advantage, 0.2)
    vf, _ = ppo.losses.value_loss(values, batch.value, batch.target, 0.3)
    return loss, m, pi + hyper.vf_coef * vf - hyper.ent_coef * jnp.mean(dist.entropy())


BAD = [
    (dict(num_minibatches=3), "num_minibatches: 3 does not divide the batch num_envs * num_steps = 512"),
    (dict(total_env_steps=5000), "total_env_steps: 5000 is not a multiple of num_envs * num_steps = 512"),
    (dict(num_envs=0), "num_envs: expected a positive integer, got 0"),
    (dict(update_epochs=2.5), "update_epochs: expected a positive integer, got 2.5"),
    (dict(gamma=1.5), "gamma: expected 0 < gamma <= 1, got 1.5"),
    (dict(gae_lambda=-0.1), "gae_lambda: expected 0 <= gae_lambda <= 1"),
    (dict(optim=ppo.config.PPOOptim(lr=0.0)), "optim.lr: expected > 0"),
    (dict(clip_eps=0.0), "clip_eps: expected clip_eps > 0"),
    (dict(vf_clip_eps=-1.0), "vf_clip_eps: expected null (no value clipping) or > 0"),
    (dict(optim=ppo.config.PPOOptim(max_grad_norm=0.0)), "optim.max_grad_norm: expected > 0"),
    (dict(hidden=()), "hidden: expected a non-empty list of positive integers"),
    (dict(activation="swish2"), "activation: expected one of"),
    (dict(dist="beta"), "dist: expected one of"),
    (dict(log_std="per_state"), "log_std: expected one of"),
    (dict(eval_max_steps=0), "eval_max_steps: expected null or a positive integer"),
]


@pytest.mark.parametrize("overrides,message", BAD)
def test_validate_rejects_bad_configs(overrides, message):
    cfg = dataclasses.replace(ppo.PPOConfig(), **overrides)
    with pytest.raises(ValueError) as err:
        ppo.config.validate(cfg)
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value)


def test_derive_counts_and_config_not_mutated():
    cfg = ppo.PPOConfig(num_envs=8, num_steps=64, total_env_steps=512 * 10, update_epochs=3, num_minibatches=8)
    before = dataclasses.asdict(cfg)
    plan = ppo.config.plan(cfg)
    assert (plan.num_updates, plan.env_steps_per_update, plan.grad_steps_per_update) == (10, 512, 24)
    assert plan.total_env_steps == 5120 and plan.total_grad_steps == 240
    assert ppo.config.minibatch_size(cfg) == 64
    assert dataclasses.asdict(cfg) == before


def test_dist_must_fit_action_space_and_hyperparams_reject_unknown():
    env, params = jaxrl.make("CartPole-v1")
    with pytest.raises(ValueError, match="dist: 'gaussian' does not fit the action space"):
        program(ppo, env, params, ppo.PPOConfig(dist="gaussian"))
    with pytest.raises(ValueError, match="unknown PPO hyperparameter"):
        ppo.hyperparams(ppo.PPOConfig(), learning_rate=1e-3)
    h = ppo.hyperparams(ppo.PPOConfig(optim=ppo.config.PPOOptim(lr=1e-3)))
    assert h["lr"].dtype == jnp.float32 and float(h["vf_clip_eps"]) == math.inf


def test_optimizer_clips_global_norm_and_anneals():
    cfg = ppo.PPOConfig(num_envs=1, num_steps=4, total_env_steps=8, update_epochs=1, num_minibatches=1,
                        optim=ppo.config.PPOOptim(lr=0.1))
    plan = ppo.config.plan(cfg)  # 2 optimiser steps in the run
    opt = ppo.update.make_optimizer(cfg, plan, max_grad_norm=1.0)
    p = jnp.zeros(2)
    state = opt.init(p)
    g = jnp.array([30.0, 40.0])  # norm 50, clipped to norm 1: [0.6, 0.8]
    u1, state = opt.update(g, state, p)
    # Adam's first step moves each coordinate by lr (sign of the gradient): -0.1 each.
    np.testing.assert_allclose(u1, [-0.1, -0.1], rtol=1e-4)
    u2, state = opt.update(g, state, p)
    np.testing.assert_allclose(u2, [-0.05, -0.05], rtol=1e-4)  # lr annealed to 0.1 * (1 - 1/2)
    # both steps taken: the traced rate the optimiser state reports has decayed to 0
    np.testing.assert_allclose(optim.current_lr(state, ppo.update.schedule(cfg, plan)), 0.0, atol=1e-8)
