"""Recurrent PPO (``ppo.network.torso: gru | lstm``): the carry is reset at every episode
start inside the rollout, learning over stored sequences recomputes the rollout's values
and log-probabilities, a GRU solves the MemoryCue-v0 probe that an MLP cannot, acting
outside training threads the carry, and bad settings name their key."""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import jaxrl
from jaxrl.algos import ppo
from jaxrl.algos.common.train import COMPILER_OPTIONS, program_on, train_on
from jaxrl.algos.contract import Policy
from jaxrl.algos.ppo import acting, update
from jaxrl.algos.ppo.config import NetworkConfig, PPOConfig, PPOOptim
from jaxrl.algos.ppo.losses import sequence_loss
from jaxrl.algos.ppo.state import Batch, SequenceBatch
from jaxrl.core import rollout
from jaxrl.run.evaluate import episode_actor


def _cfg(torso="gru", **kw) -> PPOConfig:
    """A tiny config; ``torso`` ``"gru+prev"`` is a GRU fed the previous action."""
    base = dict(num_envs=4, num_steps=12, total_env_steps=48, update_epochs=1, num_minibatches=2, hidden=(16,))
    base.update(kw)
    cell, _, prev = torso.partition("+")
    cfg = PPOConfig(network=NetworkConfig(torso=cell, cell_size=8, prev_action=prev == "prev"), **base)
    cfg.validate()
    return cfg


@functools.lru_cache(maxsize=None)
def _rollout(torso: str, delay: int = 2):
    """A fresh program on MemoryCue-v0 (``delay + 1`` steps per episode): its setup, the
    state after one update (a carry mid-episode), and a rollout from that state."""
    env, params = jaxrl.make("MemoryCue-v0")
    params = params.replace(delay=delay)
    cfg = _cfg(torso)
    setup = ppo.make_setup(env, params, cfg)
    state = update.init(setup, jax.random.PRNGKey(0))
    state, _ = update.update(setup, state)
    policy = functools.partial(acting.recurrent_policy_step, setup.network, cfg, state.agent)
    out = rollout.collect_recurrent(policy, setup.env, params, state.env, state.memory, jax.random.PRNGKey(1), 12)
    return setup, state, out


@pytest.mark.parametrize("torso", ["gru", "lstm"])
def test_carry_is_reset_at_every_episode_start(torso):
    """Each episode's values in the rollout equal the network run on that episode alone from
    a zero carry: without the reset, the previous episode's memory would leak in."""
    setup, state, (_, memory, traj, _) = _rollout(torso)
    starts = np.asarray(rollout.start_flags(state.memory, traj))
    assert starts.sum() >= 8  # 12 steps of 3-step episodes: several starts per env
    np.testing.assert_array_equal(np.asarray(memory.start), np.asarray(traj.terminated[-1]))
    net, params = setup.network, state.agent.params

    @jax.jit
    def values_from(obs, t0):
        """Values of ``obs[t0:]`` from a zero carry with no reset (one compile: the tail is
        padded with zeros, which a causal network cannot see from earlier steps)."""
        tail = jnp.roll(obs, -t0, axis=0) * (jnp.arange(obs.shape[0]) < obs.shape[0] - t0)[:, None]
        return net.apply(params, net.initial_carry(), tail, jnp.zeros((obs.shape[0],), bool))[2]

    leaked = 0.0
    for b in range(4):
        begins = [t for t in range(12) if starts[t, b]]
        for t0, t1 in zip(begins, begins[1:] + [12]):
            fresh = np.asarray(values_from(traj.obs[:, b], t0))[: t1 - t0]
            np.testing.assert_allclose(traj.value[t0:t1, b], fresh, atol=1e-5)
            # the same steps with the carry the previous episode left (no reset) differ
            if t0 > 0:
                prev = begins[begins.index(t0) - 1]
                both = np.asarray(values_from(traj.obs[:, b], prev))[t0 - prev : t1 - prev]
                leaked = max(leaked, float(np.max(np.abs(both - fresh))))
    assert leaked > 1e-3  # the check above can fail: memory does change the values


@pytest.mark.parametrize("torso", ["gru", "lstm", "gru+prev"])
def test_sequence_forward_equals_the_rollout(torso):
    """The loss's forward over the stored ``[B, T]`` sequences from the stored initial carry
    and start flags gives the rollout's values and log-probabilities, and ``V(next_obs)``
    inside an episode equals the next step's value."""
    setup, state, (_, _, traj, carries) = _rollout(torso)
    starts = rollout.start_flags(state.memory, traj)
    env_major = lambda x: jnp.swapaxes(x, 0, 1)  # noqa: E731
    steps = Batch(traj.obs, traj.action, traj.log_prob, traj.value, traj.value * 0, traj.value)
    seq = SequenceBatch(jax.tree_util.tree_map(env_major, steps), env_major(starts), state.memory.carry)
    x = acting.prepare_obs(setup.cfg, state.agent.obs_stats, traj.obs)
    _, dist, values = setup.network.apply(state.agent.params, seq.carry, x, starts, traj.action)
    np.testing.assert_allclose(values, traj.value, atol=1e-5)
    np.testing.assert_allclose(dist.log_prob(traj.action), traj.log_prob, atol=1e-5)
    _, metrics = sequence_loss(state.agent.params, setup.network, state.agent.obs_stats, setup.cfg, state.hyper, seq)
    assert abs(float(metrics["approx_kl"])) < 1e-6 and float(metrics["clip_frac"]) == 0.0  # ratio 1
    next_values = acting.recurrent_values(setup.network, setup.cfg, state.agent, carries, traj.next_obs)
    inside = ~np.asarray(starts[1:])
    np.testing.assert_allclose(np.asarray(next_values[:-1])[inside], np.asarray(traj.value[1:])[inside], atol=1e-5)


def _memory_run(torso: str):
    env, params = jaxrl.make("MemoryCue-v0")
    cfg = PPOConfig(
        num_envs=32, num_steps=16, total_env_steps=32 * 16 * 24, update_epochs=4, num_minibatches=4,
        optim=PPOOptim(lr=3e-3, lr_end_frac=1.0), hidden=(32,), network=NetworkConfig(torso=torso, cell_size=32), eval_episodes=64,
        eval_max_steps=8,
    )
    program = program_on(ppo, env, params, cfg)
    train = jax.jit(train_on(ppo, env, params, cfg), compiler_options=COMPILER_OPTIONS)
    state, _ = train(jax.random.PRNGKey(0))
    return jax.jit(program.evaluate)(state, jax.random.PRNGKey(1))


def test_gru_remembers_the_cue_and_mlp_cannot():
    """MemoryCue-v0 (cue at t=0, asked at t=4): the GRU names it every time (return 1);
    the MLP sees the same query whatever the cue and stays near chance (0)."""
    gru = _memory_run("gru")
    assert float(gru["return_mean"]) >= 0.95, gru["episode_returns"]
    mlp = _memory_run("mlp")
    assert abs(float(mlp["return_mean"])) <= 0.5 and float(mlp["return_mean_stochastic"]) <= 0.5


def test_policy_act_threads_the_carry():
    """The program's policy and :func:`episode_actor` (render) carry the state: a GRU run
    from its init carry step by step equals the network over the whole sequence."""
    env, params = jaxrl.make("CartPole-POMDP-v1")
    cfg = _cfg("gru")
    program = program_on(ppo, env, params, cfg)
    agent = program.policy.params(program.init(jax.random.PRNGKey(0)))
    obs = jax.random.uniform(jax.random.PRNGKey(2), (5, 2), minval=-0.1, maxval=0.1)
    carry = program.policy.init_carry(agent)
    for t in range(5):
        carry, action = program.policy.act(agent, carry, obs[t], jax.random.PRNGKey(t), True)
        assert action.shape == () and action.dtype == jnp.int32
    net = ppo.build_network(env, params, cfg)
    whole, _, _ = net.apply(agent.params, net.initial_carry(), obs, jnp.zeros((5,), bool))
    np.testing.assert_allclose(carry, whole, atol=1e-6)

    counter = Policy(env, lambda s: s, lambda agent: jnp.zeros((), jnp.int32),
                     lambda agent, c, obs, key, det: (c + 1, c + 1))
    act = episode_actor(counter, None)
    assert [int(act(jax.random.PRNGKey(0), None)) for _ in range(3)] == [1, 2, 3]


def test_mlp_state_has_no_memory_and_recurrent_state_shards_it():
    env, params = jaxrl.make("CartPole-v1")
    mlp = program_on(ppo, env, params, _cfg("mlp"))
    assert mlp.init(jax.random.PRNGKey(0)).memory is None
    rnn = program_on(ppo, env, params, _cfg("lstm"))
    state = jax.eval_shape(rnn.init, jax.random.PRNGKey(0))
    assert state.memory.carry[0].shape == (4, 8) and state.memory.start.shape == (4,)
    axes = rnn.batch_axes(state)
    assert jax.tree_util.tree_leaves(axes.memory) == [0, 0, 0]
    with pytest.raises(ValueError, match="make_act: a lstm policy needs its carry"):
        ppo.make_act(env, params, _cfg("lstm"))


@pytest.mark.parametrize(
    "kw, message",
    [
        (dict(network=NetworkConfig(torso="rnn")), "network.torso: expected one of \\['mlp', 'gru', 'lstm'\\]"),
        (dict(network=NetworkConfig(torso="gru", cell_size=0)), "network.cell_size: expected a positive integer"),
        (dict(network=NetworkConfig(torso="gru"), num_envs=6, num_minibatches=4, num_steps=8, total_env_steps=48),
         "num_minibatches: 4 does not divide num_envs = 6"),
        (dict(network=NetworkConfig(torso="gru"), shared_torso=True), "shared_torso: a gru torso is always shared"),
        (dict(network=NetworkConfig(prev_action=True)), "network.prev_action: the previous action is fed to a recurrent"),
        (dict(network=NetworkConfig(torso="gru", prev_action=1)), "network.prev_action: expected true or false"),
    ],
)
def test_validate_names_the_key(kw, message):
    with pytest.raises(ValueError, match=message):
        PPOConfig(**kw).validate()


def test_sequence_gru_equals_flax_gru_cell_scanned():
    """The GRU torso (input transforms before the scan, one fused recurrent matmul per step)
    computes what flax's ``GRUCell`` scanned step by step computes, with the same params,
    including the carry reset where ``start`` is set."""
    from jaxrl.models import networks, recurrent

    net = recurrent.RecurrentActorCritic(
        action_dim=2, dist="categorical", hidden=(16,), activation="relu", obs_ndim=1, cell="gru", cell_size=8
    )
    t, b = 9, 5
    obs = jax.random.normal(jax.random.PRNGKey(0), (t, b, 2))
    start = jax.random.bernoulli(jax.random.PRNGKey(1), 0.3, (t, b))
    carry0 = jax.random.normal(jax.random.PRNGKey(3), (b, 8))  # a carry mid-episode
    params = networks.init_params(net, jax.random.PRNGKey(2), carry0, obs, start)["params"]
    carry, _, _ = net.apply({"params": params}, carry0, obs, start)
    x = jax.nn.relu(obs @ params["embed"]["kernel"] + params["embed"]["bias"])
    reference = recurrent._ScannedCell("gru", 8)  # flax.linen.GRUCell under nn.scan
    want_carry, _ = reference.apply({"params": params[networks.RECURRENT_SCOPE]}, carry0, (x, start))
    np.testing.assert_allclose(np.asarray(carry), np.asarray(want_carry), rtol=1e-5, atol=1e-6)
    leaked = reference.apply({"params": params[networks.RECURRENT_SCOPE]}, carry0, (x, jnp.zeros_like(start)))[0]
    assert not np.allclose(np.asarray(leaked), np.asarray(want_carry), atol=1e-4)  # the resets matter here


def test_prev_action_reaches_the_torso_and_is_reset_at_episode_starts():
    """With ``prev_action`` the carry holds the last action (one-hot) and the action taken
    at step ``t`` changes the outputs from step ``t + 1`` on, but not before, and not at an
    episode start (where the cell's carry and the previous action are both zeroed)."""
    from jaxrl.models import networks, recurrent

    net = recurrent.RecurrentActorCritic(
        action_dim=3, dist="categorical", hidden=(16,), activation="relu", obs_ndim=1, cell="gru", cell_size=8,
        prev_action=True,
    )
    t, b = 6, 4
    carry0 = net.initial_carry((b,))
    assert carry0[0].shape == (b, 8) and carry0[1].shape == (b, 3)
    obs = jax.random.normal(jax.random.PRNGKey(0), (t, b, 2))
    params = networks.init_params(net, jax.random.PRNGKey(1), carry0, obs, jnp.zeros((t, b), bool), jnp.zeros((t, b), jnp.int32))
    actions = jnp.zeros((t, b), jnp.int32)
    other = actions.at[2].set(2)  # a different action at step 2 only
    start = jnp.zeros((t, b), bool).at[3, 1].set(True)  # env 1 starts a new episode at step 3
    apply = jax.jit(net.apply)
    carry, dist, values = apply(params, carry0, obs, start, actions)
    _, dist2, values2 = apply(params, carry0, obs, start, other)
    assert carry[0].shape == (b, 8) and values.shape == (t, b) and dist.logits.shape == (t, b, 3)
    np.testing.assert_array_equal(carry[1], jax.nn.one_hot(actions[-1], 3))
    np.testing.assert_allclose(values[:3], values2[:3])  # causal: steps 0..2 cannot see it
    moved = np.abs(np.asarray(values[3] - values2[3]))
    assert moved[0] > 1e-4 and moved[2] > 1e-4  # the previous action reached the torso
    assert moved[1] == 0.0  # env 1 reset at step 3: no previous action, no memory
    # step by step (acting: record the action taken) equals the sequence call
    step_carry, step_values = carry0, []
    for i in range(t):
        step_carry, _, v = apply(params, step_carry, obs[i : i + 1], start[i : i + 1])
        step_carry = net.record_action(step_carry, actions[i])
        step_values.append(v[0])
    np.testing.assert_allclose(np.stack(step_values), values, atol=1e-5)
    np.testing.assert_allclose(step_carry[0], carry[0], atol=1e-5)
