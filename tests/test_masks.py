"""Legal-action masks (docs/masks.md): the masked distributions against NumPy, and PPO
(feed-forward, recurrent, MultiDiscrete), DQN, PQN and GRPO on a probe env whose illegal
actions cost -100, so any illegal action shows up in a batch's mean return.

References are independent: probabilities and entropies are recomputed in NumPy from the
logits restricted to the legal actions; the PPO gradient with an all-True mask is compared
with the unmasked network's. JobShop's ``check_env`` runs with ``JAXRL_FULL_JUMANJI=1``
(as every Jumanji id's in tests/test_jumanji.py).
"""

from __future__ import annotations

import dataclasses
import functools
import os
from typing import ClassVar

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import struct

from jaxrl.algos import dqn, ppo, pqn
from jaxrl.algos.common import masks
from jaxrl.algos.common.acting import epsilon_greedy
from jaxrl.algos.contract import EnvSetup
from jaxrl.algos.ppo import losses
from jaxrl.algos.ppo.config import loss_hyperparams
from jaxrl.algos.ppo.state import Batch
from jaxrl.core import spaces
from jaxrl.core.check import check_env
from jaxrl.core.env import Environment, Range, check_action_shape, first_timestep, transition
from jaxrl.models import normalize
from jaxrl.models.distributions import Categorical, MultiCategorical

FAST = {"xla_backend_optimization_level": 0}


def _np_legal_entropy(logits, mask):
    legal = mask | ~mask.any(-1, keepdims=True)
    z = np.where(legal, logits, -np.inf).astype(np.float64)
    p = np.exp(z - z.max(-1, keepdims=True))
    p /= p.sum(-1, keepdims=True)
    return -np.sum(np.where(legal, p * np.log(np.where(legal, p, 1.0)), 0.0), -1), p


LOGITS = np.array([[3.0, 0.5, -1.0, 2.0], [0.0, 0.0, 0.0, 0.0], [9.0, -2.0, 1.0, 0.3]], np.float32)
MASK = np.array([[False, True, True, False], [True, False, False, False], [False, False, False, False]])


def test_illegal_actions_have_probability_exactly_zero_and_are_never_sampled_or_chosen():
    dist = Categorical(jnp.asarray(LOGITS), jnp.asarray(MASK))
    probs = np.asarray(jax.nn.softmax(dist.masked_logits, axis=-1))
    _, ref = _np_legal_entropy(LOGITS, MASK)
    assert np.all(probs[:2][~MASK[:2]] == 0.0)  # exactly zero, not just small
    np.testing.assert_allclose(probs, ref, rtol=1e-6)
    logp_all = np.stack([np.asarray(dist.log_prob(jnp.full((3,), a))) for a in range(4)], -1)
    assert np.all(np.exp(logp_all)[:2][~MASK[:2]] == 0.0)
    draws = np.asarray(jax.vmap(dist.sample)(jax.random.split(jax.random.PRNGKey(0), 20_000)))  # [S, 3]
    for row in range(2):
        assert set(np.unique(draws[:, row])) <= set(np.flatnonzero(MASK[row]))
    freq = np.mean(draws[:, 0] == 1)  # legal 1 vs 2: softmax of (0.5, -1.0)
    assert abs(freq - ref[0, 1]) < 0.02
    assert np.asarray(dist.mode()).tolist()[:2] == [1, 0]  # the illegal argmax (3.0) is skipped


def test_entropy_is_the_renormalised_legal_entropy_and_all_masked_rows_stay_finite():
    dist = Categorical(jnp.asarray(LOGITS), jnp.asarray(MASK))
    ref, _ = _np_legal_entropy(LOGITS, MASK)
    np.testing.assert_allclose(np.asarray(dist.entropy()), ref, rtol=1e-5, atol=1e-7)
    assert float(dist.entropy()[1]) == 0.0  # one legal action: no entropy
    # the all-masked row acts as unmasked
    np.testing.assert_allclose(np.asarray(dist.entropy()[2]), np.asarray(Categorical(jnp.asarray(LOGITS[2])).entropy()),
                               rtol=1e-6)

    def objective(logits):
        d = Categorical(logits, jnp.asarray(MASK))
        return jnp.sum(d.entropy()) + jnp.sum(d.log_prob(jnp.array([1, 0, 2])))

    value, grad = jax.value_and_grad(objective)(jnp.asarray(LOGITS))
    assert np.isfinite(float(value)) and np.all(np.isfinite(np.asarray(grad)))
    assert np.all(np.asarray(grad)[:2][~MASK[:2]] == 0.0)  # no gradient reaches an illegal logit


def test_multi_categorical_factorises_per_dimension_and_never_draws_padding():
    nvec = (3, 2)
    logits = jnp.asarray(np.random.default_rng(0).normal(size=(5, 2 * 3)), jnp.float32)
    mask = np.ones((5, 2, 3), bool)
    mask[:, 0, 0] = False
    dist = MultiCategorical.from_flat(logits, nvec, jnp.asarray(mask))
    draws = np.asarray(jax.vmap(dist.sample)(jax.random.split(jax.random.PRNGKey(1), 4000)))  # [S, 5, 2]
    assert draws[..., 0].min() == 1 and draws[..., 1].max() == 1  # masked class and padding never drawn
    shaped = np.asarray(logits).reshape(5, 2, 3)
    ent0, p0 = _np_legal_entropy(shaped[:, 0], mask[:, 0])
    ent1, p1 = _np_legal_entropy(shaped[:, 1, :2], np.ones((5, 2), bool))
    np.testing.assert_allclose(np.asarray(dist.entropy()), ent0 + ent1, rtol=1e-5)
    action = jnp.array([[1, 0]] * 5)
    np.testing.assert_allclose(np.asarray(dist.log_prob(action)), np.log(p0[:, 1] * p1[:, 0]), rtol=1e-5)
    space = spaces.MultiDiscrete([3, 2])
    assert bool(space.contains(jnp.array([2, 1], jnp.int32))) and not bool(space.contains(jnp.array([0, 2], jnp.int32)))
    samples = np.asarray(jax.vmap(space.sample)(jax.random.split(jax.random.PRNGKey(2), 200)))
    assert samples.shape == (200, 2) and samples[:, 0].max() == 2 and samples[:, 1].max() == 1


def test_epsilon_greedy_and_masked_q_range_over_legal_actions_only():
    q = jnp.asarray(LOGITS)
    key = jax.random.PRNGKey(3)
    greedy = epsilon_greedy(q, 0.0, key, jnp.asarray(MASK))
    assert np.asarray(greedy).tolist() == [1, 0, 0]  # row 2 all-masked: plain argmax
    explore = np.asarray(jax.vmap(lambda k: epsilon_greedy(q, 1.0, k, jnp.asarray(MASK)))(jax.random.split(key, 2000)))
    assert set(np.unique(explore[:, 0])) == {1, 2} and set(np.unique(explore[:, 1])) == {0}
    assert set(np.unique(explore[:, 2])) == {0, 1, 2, 3}
    np.testing.assert_array_equal(np.max(np.asarray(masks.legal_q(q, jnp.asarray(MASK))), -1)[:2], [0.5, 0.0])


# ------------------------------------------------------------------ a probe env with a mask


@struct.dataclass
class _Params:
    max_steps_in_episode: int = 1
    bounds: ClassVar[dict] = {"max_steps_in_episode": Range(ge=1)}


@dataclasses.dataclass(frozen=True)
class LegalBandit(Environment):
    """One step: obs = [legal mask (4), target one-hot (4)]; two actions are legal, the
    target among them. Reward +1 for the target, 0 for the other legal action, -100 for an
    illegal one (so an illegal action anywhere in a batch makes its mean return negative)."""

    invalid_action_rule = "clip"

    @property
    def default_params(self):
        return _Params()

    def _obs(self, key):
        perm = jax.random.permutation(key, 4)
        legal = jnp.zeros(4).at[perm[:2]].set(1.0)
        return jnp.concatenate([legal, jax.nn.one_hot(perm[0], 4)]).astype(jnp.float32)

    def reset(self, key, params):
        obs = self._obs(key)
        return obs, first_timestep(obs, {})

    def step(self, key, state, action, params):
        check_action_shape(self.name, action, ())
        a = jnp.clip(action, 0, 3)
        reward = jnp.where(state[4 + a] > 0, 1.0, jnp.where(state[a] > 0, 0.0, -100.0))
        return state, transition(state, reward, jnp.bool_(True), jnp.bool_(False), {})

    def action_mask(self, obs):
        return obs[:4] > 0.5

    def observation_space(self, params):
        return spaces.Box(0.0, 1.0, (8,))

    def action_space(self, params):
        return spaces.Discrete(4)


@dataclasses.dataclass(frozen=True)
class Pick2(LegalBandit):
    """The bandit with a ``MultiDiscrete([4, 2])`` action: the second component is free and
    masked to 0 (its 1 would be illegal)."""

    def step(self, key, state, action, params):
        check_action_shape(self.name, action, (2,))
        state, ts = super().step(key, state, action[0], params)
        return state, ts.replace(reward=jnp.where(action[1] == 0, ts.reward, -100.0))

    def action_mask(self, obs):
        return jnp.stack([obs[:4] > 0.5, jnp.array([True, False, False, False])])

    def action_space(self, params):
        return spaces.MultiDiscrete([4, 2])


PPO_CFG = ppo.PPOConfig(num_envs=16, num_steps=4, total_env_steps=16 * 4 * 16, update_epochs=4, num_minibatches=2,
                        optim=ppo.config.PPOOptim(lr=1e-2, lr_end_frac=1.0), ent_coef=0.0, eval_episodes=16, eval_max_steps=1, hidden=(32,))


def _train(env, cfg, updates):
    program = ppo.build(EnvSetup(env, env.default_params, env.default_params), cfg)
    state = program.init(jax.random.PRNGKey(0))
    step = jax.jit(program.update, compiler_options=FAST)
    returns = []
    for _ in range(updates):
        state, metrics = step(state)
        returns.append(float(metrics["episode_return"]))
    return program, state, returns


@pytest.mark.parametrize("env", [LegalBandit(), Pick2()], ids=["discrete", "multidiscrete"])
def test_masked_ppo_never_acts_illegally_and_solves_the_probe(env):
    program, state, returns = _train(env, PPO_CFG, 16)
    assert min(returns) >= 0.0, returns  # one illegal action would make that update's mean negative
    assert returns[0] < 0.75 and np.mean(returns[-3:]) > 0.95, returns  # random legal: 0.5; learned: 1
    out = jax.jit(program.evaluate, compiler_options=FAST)(state, jax.random.PRNGKey(1))
    assert float(np.min(out["episode_returns"])) == 1.0 and float(np.min(out["episode_returns_stochastic"])) >= 0.0


def test_recurrent_ppo_never_acts_illegally():
    cfg = dataclasses.replace(PPO_CFG, num_minibatches=2, network=ppo.config.NetworkConfig(torso="gru", cell_size=16))
    program, state, returns = _train(LegalBandit(), cfg, 3)
    assert min(returns) >= 0.0, returns
    out = jax.jit(program.evaluate, compiler_options=FAST)(state, jax.random.PRNGKey(1))
    assert float(np.min(out["episode_returns"])) >= 0.0 and float(np.min(out["episode_returns_stochastic"])) >= 0.0


def test_ppo_loss_gradient_with_an_all_true_mask_equals_the_unmasked_one():
    env = LegalBandit()
    cfg = PPO_CFG
    plain = ppo.build_network(env, env.default_params, dataclasses.replace(cfg, action_mask=False))
    assert isinstance(ppo.build_network(env, env.default_params, cfg), masks.MaskedPolicy)
    assert not isinstance(plain, masks.MaskedPolicy)  # ppo.action_mask: false turns masks off
    full = masks.MaskedPolicy(plain, lambda obs: jnp.ones(obs.shape[:-1] + (4,), bool))
    rng = np.random.default_rng(0)
    obs = jnp.asarray(rng.uniform(size=(32, 8)), jnp.float32)
    params = plain.init(jax.random.PRNGKey(0), obs[0])
    batch = Batch(obs, jnp.asarray(rng.integers(0, 4, 32), jnp.int32), jnp.asarray(rng.normal(size=32) - 1.4, jnp.float32),
                  jnp.zeros(32), jnp.asarray(rng.normal(size=32), jnp.float32), jnp.asarray(rng.normal(size=32), jnp.float32))
    hyper = loss_hyperparams(dataclasses.replace(cfg, ent_coef=0.01))
    stats = normalize.init_stats((8,))
    grad = [jax.jit(jax.grad(lambda p, n=n: losses.ppo_loss(p, n, stats, cfg, hyper, batch)[0]))(params)
            for n in (plain, full)]
    for a, b in zip(jax.tree_util.tree_leaves(grad[0]), jax.tree_util.tree_leaves(grad[1])):
        np.testing.assert_array_equal(np.asarray(a), np.asarray(b))


def test_pqn_greedy_and_exploration_respect_the_mask():
    env = LegalBandit()
    cfg = pqn.PQNConfig(num_envs=8, num_steps=2, total_env_steps=8 * 2 * 4, num_minibatches=2, hidden=(16,),
                        eval_episodes=64, eval_max_steps=1)
    program = pqn.build(EnvSetup(env, env.default_params, env.default_params), cfg)
    state = program.init(jax.random.PRNGKey(0))
    step = jax.jit(program.update, compiler_options=FAST)
    for _ in range(3):
        state, metrics = step(state)
        assert float(metrics["episode_return"]) >= 0.0
    assert float(np.min(jax.jit(program.evaluate, compiler_options=FAST)(state, jax.random.PRNGKey(1))["episode_returns"])) >= 0.0


def test_dqn_greedy_and_exploration_respect_the_mask():
    env = LegalBandit()
    cfg = dqn.DQNConfig(num_envs=8, steps_per_update=1, total_env_steps=8 * 40, learning_starts=8, batch_size=8,
                        buffer_size=64, hidden=(16,), eval_episodes=64, eval_max_steps=1)
    program = dqn.build(EnvSetup(env, env.default_params, env.default_params), cfg)
    state = program.init(jax.random.PRNGKey(0))
    step = jax.jit(program.update, compiler_options=FAST)
    for _ in range(4):  # epsilon near 1: exploration draws among legal actions only
        state, metrics = step(state)
        assert float(metrics["episode_return"]) >= 0.0
    out = jax.jit(program.evaluate, compiler_options=FAST)(state, jax.random.PRNGKey(1))
    assert float(np.min(out["episode_returns"])) >= 0.0  # greedy: never illegal


def test_jobshop_is_registered_as_multidiscrete_with_per_machine_masks():
    jumanji = pytest.importorskip("jumanji")
    import jaxrl
    from jaxrl.adapters import jumanji as jj

    assert "jumanji/JobShop-v0" in jaxrl.registered_ids() and "JobShop-v0" not in jj.EXCLUDED
    env, params = jaxrl.make("jumanji/JobShop-v0")
    raw = jumanji.make("JobShop-v0")
    assert env.action_space(params) == spaces.MultiDiscrete([21] * 10)
    _, raw_ts = jax.jit(raw.reset)(jax.random.PRNGKey(0))
    _, ts = jax.jit(functools.partial(env.reset, params=params))(jax.random.PRNGKey(0))
    np.testing.assert_array_equal(np.asarray(env.action_mask(ts.obs)), np.asarray(raw_ts.observation.action_mask))
    assert masks.action_mask_fn(env, params) is not None
    if os.environ.get("JAXRL_FULL_JUMANJI") == "1":  # as tests/test_jumanji.py: every id's check_env is slow
        report = check_env(env, params, num_steps=8, num_envs=2, verbose=False, compiler_options=FAST)
        assert report.passed, str(report)


def test_grpo_control_policy_samples_legal_actions_and_its_loss_logits_match():
    from jaxrl.algos import grpo
    from jaxrl.algos.grpo.rollout import group_rollout as rollout

    env = LegalBandit()
    params = env.default_params
    cfg = grpo.GRPOConfig(num_prompts=2, group_size=2, model=grpo.config.ModelConfig(hidden=(16,)))
    policy = grpo.build_policy(env, params, cfg)
    net = policy.init(jax.random.PRNGKey(0), jnp.zeros((1, 8)))
    keys = jax.random.split(jax.random.PRNGKey(1), 512)
    run = jax.jit(lambda k: rollout(policy, env, params, net, keys, k, 1, jnp.float32(0.7)))
    out = run(jax.random.PRNGKey(2))
    assert float(np.min(np.asarray(out.returns))) >= 0.0  # never the -100 of an illegal action
    np.testing.assert_allclose(np.asarray(out.entropy)[:, 0], np.log(2.0), atol=1e-3)  # two legal, near-uniform
    probs = np.asarray(jax.nn.softmax(policy.sequence_logits(net, out.obs, out.actions) / 0.7))  # [N, 1, 4]
    legal = np.asarray(out.obs)[..., :4] > 0.5
    assert np.all(probs[~legal] == 0.0)
    unmasked = grpo.build_policy(env, params, dataclasses.replace(cfg, action_mask=False))
    assert float(np.min(np.asarray(jax.jit(lambda k: rollout(unmasked, env, params, net, keys, k, 1, 0.7))(
        jax.random.PRNGKey(2)).returns))) == -100.0


def test_snake_cnn_recipe_reads_jumanjis_grid_leaf():
    """configs/ppo_jumanji_snake_cnn.yaml: the conv torso reads the slice of the flat
    observation that holds Jumanji's own ``grid`` (shape from Jumanji's observation spec;
    values from a reset, compared with the raw env's), under a legal-action mask."""
    jumanji = pytest.importorskip("jumanji")
    from pathlib import Path

    from jaxrl.run.build import build
    from jaxrl.run.config import load_config

    cfg = load_config(Path(__file__).resolve().parent.parent / "configs" / "ppo_jumanji_snake_cnn.yaml")
    built = build(cfg)
    env, params = built.envs.env, built.envs.params
    net = ppo.build_network(env, params, cfg.algo_config)
    raw = jumanji.make("Snake-v1")
    grid_shape = tuple(raw.observation_spec.grid.shape)
    assert isinstance(net, masks.MaskedPolicy) and net.network.image[1] == grid_shape == (12, 12, 5)
    start = net.network.image[0]
    key = jax.random.PRNGKey(0)
    _, ts = env.reset(key, params)
    raw_state, raw_ts = raw.reset(key)
    np.testing.assert_array_equal(np.asarray(ts.obs)[start:start + 720].reshape(grid_shape), raw_ts.observation.grid)
