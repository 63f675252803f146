"""The off-policy pieces in process: the replay buffer (order, wrap-around, uniform reach,
sequences, memory check), the value targets by hand, and short learning runs on probe
envs whose optimal values are known (DQN, PQN, SAC)."""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl
from jaxrl.algos import dqn, pqn, sac
from jaxrl.algos.common import replay
from jaxrl.algos.common.train import program_on, train
from jaxrl.algos.dqn.losses import n_step_targets
from jaxrl.algos.pqn.losses import lambda_returns
from jaxrl.models.qnetworks import QNetwork


def _filled(rows_written: int, capacity: int = 8, envs: int = 2) -> replay.Replay:
    """A buffer whose env ``b``, step ``t`` transition holds the value ``100 b + t``."""
    buf = replay.init(jnp.zeros((), jnp.float32), capacity, envs)
    steps = jnp.arange(rows_written, dtype=jnp.float32)[:, None] + 100.0 * jnp.arange(envs)[None]
    for t in range(rows_written):  # one row per call, as a one-step update adds them
        buf = replay.add(buf, steps[t:t + 1])
    return buf


def test_replay_wraps_and_samples_only_stored_rows():
    buf = _filled(6)  # 4 rows per env: steps 2..5 survive, 0 and 1 were overwritten
    assert int(buf.size) == 4 and int(buf.pos) == 2
    draws = np.asarray(replay.sample(buf, jax.random.PRNGKey(0), 400))  # [B, n, 1]
    assert draws.shape == (2, 400, 1)
    assert set(draws[0].ravel()) == {2.0, 3.0, 4.0, 5.0}  # every stored row reached, nothing else
    assert set(draws[1].ravel()) == {102.0, 103.0, 104.0, 105.0}  # env 1 reads only its own column
    counts = np.unique(draws[0], return_counts=True)[1]
    assert counts.min() > 60  # uniform: 100 expected per row


def test_replay_sequences_are_consecutive_in_time():
    buf = _filled(7)  # stored steps 3..6, physically wrapped
    seqs = np.asarray(replay.sample(buf, jax.random.PRNGKey(1), 200, length=3))  # [B, n, 3]
    assert np.all(np.diff(seqs, axis=-1) == 1.0)
    assert set(seqs[0, :, 0]) == {3.0, 4.0}  # starts whose two successors are stored


def test_replay_adds_a_rollout_at_once_and_declares_env_axis():
    buf = replay.init(replay.Transition(jnp.zeros(3), 0, 0.0, jnp.zeros(3), False, False), 12, 4)
    assert buf.data.obs.shape == (3, 4, 3) and buf.data.action.dtype == jnp.int32
    batch = jax.tree_util.tree_map(lambda x: jnp.ones((2, 4) + x.shape[2:], x.dtype), buf.data)
    buf = replay.add(buf, batch)
    assert int(buf.size) == 2 and int(buf.pos) == 2
    axes = replay.batch_axes(buf)
    assert axes.pos == -1 and set(jax.tree_util.tree_leaves(axes.data)) == {1}


def test_memory_check_names_the_key():
    example = replay.Transition(jnp.zeros(4), 0, 0.0, jnp.zeros(4), False, False)
    assert replay.transition_bytes(example) == 4 * 4 + 4 + 4 + 4 * 4 + 1 + 1
    with pytest.raises(ValueError, match=r"^buffer_size: 1,000,000 transitions x 42 bytes .* lower buffer_size$"):
        replay.check_memory(1_000_000, example, "buffer_size", limit=2**20)
    assert replay.check_memory(1000, example, "buffer_size", limit=2**20) == 42_000
    env, params = jaxrl.make("CartPole-v1")
    with pytest.raises(ValueError, match="buffer_size: .* exceeds 50% of the"):
        program_on(dqn, env, params, dqn.DQNConfig(num_envs=1, buffer_size=10**12))


def test_n_step_targets_by_hand():
    """gamma 0.5, three sequences of L = 3 steps, rewards 1 each, bootstrap values 8."""
    reward = jnp.ones((3, 3))
    boot = jnp.full((3, 3), 8.0)
    f, t = False, True
    terminated = jnp.array([[f, f, f], [f, t, f], [f, f, f]])
    done = jnp.array([[f, f, f], [f, t, f], [t, f, f]])  # row 2: truncated at step 0
    g = n_step_targets(reward, terminated, done, boot, 0.5)
    # row 0: 1 + .5 + .25 + .125 * 8 = 2.75; row 1: 1 + .5 * 1 = 1.5 (terminated at k=1);
    # row 2: 1 + .5 * 8 = 5 (truncated at k=0: bootstrap from its final observation)
    np.testing.assert_allclose(np.asarray(g), [2.75, 1.5, 5.0])


def test_lambda_returns_by_hand():
    """gamma 0.5, lambda 0.5, one env, three steps: truncated at t=0, terminated at t=2."""
    reward = jnp.ones((3, 1))
    q_next = jnp.array([[4.0], [2.0], [6.0]])
    term = jnp.array([[False], [False], [True]])
    trunc = jnp.array([[True], [False], [False]])
    g = lambda_returns(reward, q_next, term, trunc, 0.5, 0.5)
    # G2 = 1 (terminated); G1 = 1 + .5 * (.5 * 2 + .5 * G2) = 1.75; G0 = 1 + .5 * 4 = 3 (truncated)
    np.testing.assert_allclose(np.asarray(g)[:, 0], [3.0, 1.75, 1.0])


def _trained(module, env_id, cfg, seeds=2):
    env, params = jaxrl.make(env_id)
    program = program_on(module, env, params, cfg)
    keys = jax.random.split(jax.random.PRNGKey(0), seeds)
    state, _ = jax.jit(jax.vmap(lambda k: train(program, program.plan.num_updates, k)))(keys)
    return state


PROBE_Q = dict(hidden=(32,), eval_episodes=2, eval_max_steps=20)


def test_dqn_learns_q_star_of_one_and_two_step_probes():
    """ActionMatch (one step): Q*(+1, 1) = Q*(-1, 0) = 1, the others -1. TwoStep:
    Q*(0, .) = gamma = 0.9, Q*(1, .) = 1 (bootstrapping over a non-terminal step)."""
    base = dict(num_envs=4, steps_per_update=2, gradient_steps=2, batch_size=32, buffer_size=400, learning_starts=64,
                optim=dqn.config.DQNOptim(lr=3e-3), gamma=0.9, tau=0.1, target_update_every=1, epsilon_start=1.0, epsilon_end=1.0, n_step=1,
                dueling=False, **PROBE_Q)
    state = _trained(dqn, "ProbeActionMatch-v0", dqn.DQNConfig(total_env_steps=2000, **base))
    net = QNetwork(2, (32,))
    q = jax.vmap(net.apply, in_axes=(0, None))(state.params, jnp.array([[1.0], [-1.0]]))
    np.testing.assert_allclose(np.asarray(q), np.broadcast_to([[-1.0, 1.0], [1.0, -1.0]], q.shape), atol=0.1)
    state = _trained(dqn, "ProbeTwoStep-v0", dqn.DQNConfig(total_env_steps=2000, **{**base, "n_step": 2}))
    q = jax.vmap(net.apply, in_axes=(0, None))(state.params, jnp.array([[0.0], [1.0]]))
    np.testing.assert_allclose(np.asarray(q), np.broadcast_to([[0.9, 0.9], [1.0, 1.0]], q.shape), atol=0.05)


def test_pqn_learns_q_star_with_truncation_bootstrap():
    """TwoStep: Q*(0, .) = 0.9, Q*(1, .) = 1. TimeLimit (reward 1 forever, truncated at 10
    steps; gamma 0.8 there): Q* = 1 / (1 - gamma) = 5 only if truncation bootstraps from the
    final obs (ending the sum there would give at most (1 - 0.8^10) / 0.2 = 4.46)."""
    base = dict(num_envs=8, num_steps=16, update_epochs=2, num_minibatches=2, optim=pqn.config.PQNOptim(lr=3e-3, lr_end_frac=1.0),
                gamma=0.9, td_lambda=0.8, epsilon_start=1.0, epsilon_end=1.0, **PROBE_Q)
    net = QNetwork(2, (32,), layer_norm=True)
    state = _trained(pqn, "ProbeTwoStep-v0", pqn.PQNConfig(total_env_steps=8192, **base))
    q = jax.vmap(net.apply, in_axes=(0, None))(state.params, jnp.array([[0.0], [1.0]]))
    np.testing.assert_allclose(np.asarray(q), np.broadcast_to([[0.9, 0.9], [1.0, 1.0]], q.shape), atol=0.05)
    # The probe's observation is always 0, so only biases carry the value. Zero biases give
    # LayerNorm a constant input and ReLU a zero gradient; tanh without LayerNorm lets the
    # hidden biases and the head's weights grow it together (a lone bias moves slowly).
    cfg = pqn.PQNConfig(total_env_steps=16384, **{**base, "gamma": 0.8, "layer_norm": False, "activation": "tanh",
                                                   "optim": pqn.config.PQNOptim(lr=1e-2, lr_end_frac=1.0)})
    state = _trained(pqn, "ProbeTimeLimit-v0", cfg)
    net = net.clone(layer_norm=False, activation="tanh")
    q = jax.vmap(net.apply, in_axes=(0, None))(state.params, jnp.array([[0.0]]))
    np.testing.assert_allclose(np.asarray(q), 5.0, atol=0.2)


def test_sac_moves_its_action_to_the_continuous_probe_target():
    """ProbeContinuous: reward -(a - 0.5)^2, one step; the deterministic action -> 0.5."""
    cfg = sac.SACConfig(num_envs=4, steps_per_update=1, total_env_steps=2400, gradient_steps=1, batch_size=64,
                        buffer_size=800, learning_starts=64, optim=sac.config.SACOptim(lr=3e-3), init_alpha=0.05, **PROBE_Q)
    state = _trained(sac, "ProbeContinuous-v0", cfg)
    actor = sac.build.__globals__["SquashedGaussianActor"](1, (32,))
    mode = jax.vmap(lambda p: actor.apply(p, jnp.array([0.5])).mode())(state.learner.actor)
    np.testing.assert_allclose(np.asarray(mode)[:, 0], 0.5, atol=0.1)


def test_registered_through_entry_points_and_reject_wrong_spaces():
    from jaxrl.algos import registry

    for name, module in (("dqn", dqn), ("pqn", pqn), ("sac", sac)):
        assert registry.get_algorithm(name) is module.ENTRY
    cartpole, pendulum = jaxrl.make("CartPole-v1"), jaxrl.make("Pendulum-v1")
    with pytest.raises(ValueError, match="env: dqn needs a Discrete action space"):
        program_on(dqn, *pendulum, dqn.DQNConfig())
    with pytest.raises(ValueError, match="env: pqn needs a Discrete action space"):
        program_on(pqn, *pendulum, pqn.PQNConfig())
    with pytest.raises(ValueError, match="env: sac needs a Box action space"):
        program_on(sac, *cartpole, sac.SACConfig())


@pytest.mark.parametrize(
    "cls, field, value, message",
    [
        (dqn.DQNConfig, "batch_size", 100, "batch_size: 100 is not a multiple of num_envs = 8"),
        (dqn.DQNConfig, "total_env_steps", 1005, "total_env_steps: 1005 is not a multiple of num_envs"),
        (dqn.DQNConfig, "tau", 0.0, "tau: expected 0 < tau <= 1"),
        (dqn.DQNConfig, "loss", "l1", "loss: expected one of \\['mse', 'huber'\\], got 'l1'"),
        (dqn.DQNConfig, "optim", dqn.config.DQNOptim(lr_end_frac=1.5), "optim.lr_end_frac: expected 0 <= lr_end_frac <= 1"),
        (pqn.PQNConfig, "num_minibatches", 3, "num_minibatches: 3 does not divide the batch"),
        (pqn.PQNConfig, "td_lambda", 1.5, "td_lambda: expected 0 <= td_lambda <= 1"),
        (sac.SACConfig, "buffer_size", 0, "buffer_size: expected a positive integer"),
        (sac.SACConfig, "init_alpha", 0.0, "init_alpha: expected > 0"),
    ],
)
def test_validate_names_the_key(cls, field, value, message):
    cls().validate()  # the defaults are valid
    with pytest.raises(ValueError, match=message):
        cls(**{field: value}).validate()


def test_dqn_huber_loss_and_annealing_floor_by_hand():
    """One-step, terminated transitions: the target is the reward, so the TD error is
    ``Q(s, a) - r``. Half its square (mse) vs Huber(1): equal within 1, ``|td| - 0.5`` beyond."""
    net = QNetwork(2, (4,))
    params = net.init(jax.random.PRNGKey(0), jnp.zeros(1))
    obs = jnp.array([[[0.5]], [[-0.5]]])  # [N=2, L=1, 1]
    q = np.asarray(net.apply(params, obs[:, 0]))[:, 0]
    rewards = jnp.asarray([q[0] + 0.5, q[1] - 3.0])[:, None]  # td = -0.5 and +3.0
    batch = replay.Transition(obs, jnp.zeros((2, 1), jnp.int32), rewards, obs, jnp.ones((2, 1), bool),
                              jnp.ones((2, 1), bool))
    both = jax.jit(lambda p, b: [dqn.losses.dqn_loss(p, p, net, 0.99, True, b, huber=h)[0] for h in (False, True)])
    mse, huber = both(params, batch)
    np.testing.assert_allclose(float(mse), (0.5 * 0.25 + 0.5 * 9.0) / 2, rtol=1e-5)
    np.testing.assert_allclose(float(huber), (0.5 * 0.25 + (3.0 - 0.5)) / 2, rtol=1e-5)
    # A decay with a floor: the rate falls linearly to lr * lr_end_frac at the last update.
    cfg = dqn.DQNConfig(optim=dqn.config.DQNOptim(lr_end_frac=0.25), total_env_steps=3200)  # 100 updates x 4 grad steps
    sched = dqn.update.schedule(cfg)
    np.testing.assert_allclose(jax.jit(jax.vmap(sched.factor))(jnp.array([0, 200, 400, 800])), [1.0, 0.625, 0.25, 0.25])
    assert float(dqn.update.schedule(dqn.DQNConfig()).factor(10**6)) == 1.0  # not annealed: constant
