"""Conv torsos (jaxrl.models.conv), their config keys and the FrameStack wrapper.

Shapes and parameter counts are checked against the published architectures, computed here
by hand; the frame stack against a NumPy reference built from the unstacked env's own
observations over episodes that auto-reset.
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections import deque
from pathlib import Path

import jax
import jax.numpy as jnp
import flax.linen as nn
import numpy as np
import pytest
from flax import struct

from jaxrl.algos import dqn, ppo, pqn
from jaxrl.algos.common.network import QNetworkConfig
from jaxrl.algos.contract import EnvSetup
from jaxrl.algos.ppo.config import NetworkConfig, PPOConfig
from jaxrl.core import spaces
from jaxrl.core.env import Environment, first_timestep, transition
from jaxrl.core.wrappers import AutoReset, FrameStack
from jaxrl.models.conv import Conv, ConvTorso, check_image
from jaxrl.models.networks import ActorCritic, init_params
from jaxrl.models.qnetworks import QNetwork
from jaxrl.run.build import build
from jaxrl.run.config import ConfigError, config_from_dict, load_config

REPO = Path(__file__).resolve().parent.parent


@struct.dataclass
class PixelParams:
    max_steps_in_episode: int = struct.field(pytree_node=False, default=3)


@struct.dataclass
class PixelState:
    pos: jax.Array  # int32 [], the lit pixel
    t: jax.Array  # int32 [], steps taken


@dataclasses.dataclass(frozen=True)
class PixelEnv(Environment):
    """6x6x2 frames: channel 0 lights one random pixel, channel 1 holds the step count.
    Reward 1 for action 1 when the pixel is in the left half; episodes terminate after 3."""

    @property
    def default_params(self):
        return PixelParams()

    def _obs(self, state):
        lit = jax.nn.one_hot(state.pos, 36, dtype=jnp.float32).reshape(6, 6)
        return jnp.stack([lit, jnp.full((6, 6), state.t, jnp.float32)], axis=-1)

    def reset(self, key, params):
        state = PixelState(jax.random.randint(key, (), 0, 36), jnp.zeros((), jnp.int32))
        return state, first_timestep(self._obs(state))

    def step(self, key, state, action, params):
        reward = (action == (state.pos % 6 < 3)).astype(jnp.float32)
        state = PixelState(jax.random.randint(key, (), 0, 36), state.t + 1)
        return state, transition(self._obs(state), reward, state.t >= params.max_steps_in_episode, False)

    def observation_space(self, params):
        return spaces.Box(0.0, 100.0, (6, 6, 2))

    def action_space(self, params):
        return spaces.Discrete(2)


def _shapes(tree) -> dict:
    return {"/".join(str(getattr(k, "key", k)) for k in path): tuple(leaf.shape)
            for path, leaf in jax.tree_util.tree_leaves_with_path(tree)}


@pytest.mark.parametrize("kind, hw, features", [
    # nature: 36 -> (36-8)/4+1 = 8 -> (8-4)/2+1 = 3 -> 3-3+1 = 1; 1*1*64
    ("nature_cnn", 36, 64),
    # minatar: 6 -> 6-3+1 = 4; 4*4*16
    ("minatar_cnn", 6, 256),
    # impala: 6 -> 3 -> 2 -> 1 (SAME pooling, stride 2); 1*1*32
    ("impala", 6, 32),
])
def test_torso_output_shapes(kind, hw, features):
    x = jnp.zeros((2, 5, hw, hw, 3))
    out = jax.eval_shape(lambda: ConvTorso(kind).init_with_output(jax.random.PRNGKey(0), x)[0])
    assert out.shape == (2, 5, features)
    single = jax.eval_shape(lambda: ConvTorso(kind).init_with_output(jax.random.PRNGKey(0), x[0, 0])[0])
    assert single.shape == (features,)


def test_conv_layer_equals_flax_conv():
    """The im2col convolution gives flax's ``nn.Conv`` output with the same params."""
    for size, kernel, stride, padding in ((10, 3, 1, "VALID"), (12, 8, 4, "VALID"), (7, 3, 2, "SAME")):
        keys = jax.random.split(jax.random.PRNGKey(size), 3)
        x = jax.random.normal(keys[0], (2, size, size, 3))
        params = {"params": {"kernel": jax.random.normal(keys[1], (kernel, kernel, 3, 5)),
                             "bias": jax.random.normal(keys[2], (5,))}}
        ref = nn.Conv(5, (kernel, kernel), (stride, stride), padding=padding)
        ours = Conv(5, kernel, stride, padding, nn.initializers.zeros)
        got, want = jax.jit(lambda p, x: (ours.apply(p, x), ref.apply(p, x)))(params, x)
        np.testing.assert_allclose(got, want, atol=1e-4, err_msg=f"{size} {kernel} {stride} {padding}")


def test_nature_cnn_is_mnih_2015():
    """84x84x4 frames, 32 8x8/4, 64 4x4/2, 64 3x3/1, dense 512 (Mnih et al. 2015): the torso
    has 1,684,128 weights and biases, the 18-action heads 512*18+18 and 512+1 more."""
    net = ActorCritic(18, hidden=(512,), activation="relu", shared_torso=True, obs_ndim=3, conv="nature_cnn")
    params = jax.eval_shape(lambda: init_params(net, jax.random.PRNGKey(0), jnp.zeros((84, 84, 4))))
    shapes = _shapes(params)
    assert shapes["params/conv/conv_0/kernel"] == (8, 8, 4, 32)
    assert shapes["params/conv/conv_1/kernel"] == (4, 4, 32, 64)
    assert shapes["params/conv/conv_2/kernel"] == (3, 3, 64, 64)
    assert shapes["params/torso/dense_0/kernel"] == (7 * 7 * 64, 512)
    torso = (8 * 8 * 4 * 32 + 32) + (4 * 4 * 32 * 64 + 64) + (3 * 3 * 64 * 64 + 64) + (3136 * 512 + 512)
    assert torso == 1_684_128
    heads = 512 * 18 + 18 + 512 + 1
    assert sum(math.prod(s) for s in shapes.values()) == torso + heads


def test_conv_kernels_are_orthogonal_with_relu_gain():
    net = ActorCritic(2, hidden=(8,), obs_ndim=3, conv="minatar_cnn")
    params = jax.jit(functools.partial(init_params, net))(jax.random.PRNGKey(3), jnp.zeros((6, 6, 2)))
    k = np.asarray(params["params"]["actor_conv"]["conv_0"]["kernel"]).reshape(-1, 16)  # [18, 16]
    np.testing.assert_allclose(k.T @ k, 2.0 * np.eye(16), atol=1e-4)


def test_frame_stack_matches_numpy_reference_across_auto_resets():
    env, params, k = PixelEnv(), PixelParams(), 3
    stacked, raw = AutoReset(FrameStack(env, k)), AutoReset(env)
    assert stacked.observation_space(params).shape == (6, 6, 6)
    keys = jax.random.split(jax.random.PRNGKey(7), 9)
    s_state, s_ts = jax.jit(stacked.reset, static_argnums=1)(keys[0], params)
    r_state, r_ts = jax.jit(raw.reset, static_argnums=1)(keys[0], params)
    frames = deque([np.asarray(r_ts.obs)] * k, maxlen=k)
    np.testing.assert_array_equal(s_ts.obs, np.concatenate(frames, axis=-1))
    step_s, step_r = jax.jit(stacked.step, static_argnums=3), jax.jit(raw.step, static_argnums=3)
    dones = 0
    for key in keys[1:]:
        s_state, s_ts = step_s(key, s_state, jnp.int32(1), params)
        r_state, r_ts = step_r(key, r_state, jnp.int32(1), params)
        frames.append(np.asarray(r_ts.info["final_obs"]))
        np.testing.assert_array_equal(s_ts.info["final_obs"], np.concatenate(frames, axis=-1))
        if bool(r_ts.done):
            dones += 1
            frames = deque([np.asarray(r_ts.obs)] * k, maxlen=k)
        np.testing.assert_array_equal(s_ts.obs, np.concatenate(frames, axis=-1))
        assert float(s_ts.reward) == float(r_ts.reward)
    assert dones == 2  # two episodes ended inside the 8 steps


def test_conv_on_a_non_image_space_is_refused_in_one_line():
    raw = {"algo": "ppo", "env": {"id": "CartPole-v1"}, "ppo": {"network": {"conv": "minatar_cnn"}}}
    with pytest.raises(ConfigError, match=r"^ppo\.network\.conv: minatar_cnn needs image observations .*CartPole-v1 gives shape \(4,\)"):
        build(config_from_dict(raw))
    raw = {"algo": "dqn", "env": {"id": "CartPole-v1"}, "dqn": {"network": {"conv": "impala"}}}
    with pytest.raises(ConfigError, match=r"^dqn\.network\.conv: impala needs image"):
        build(config_from_dict(raw))
    with pytest.raises(ValueError, match="nature_cnn does not fit the 6x6 frames"):
        check_image("nature_cnn", (6, 6, 2))


@pytest.mark.parametrize("network, message", [
    ({"conv": "resnet"}, r"ppo\.network\.conv: expected null or one of \['nature_cnn'"),
    ({"conv": "nature_cnn", "channels": [32, 64]}, r"ppo\.network\.channels: nature_cnn has 3 conv layers"),
    ({"channels": [16]}, r"ppo\.network\.channels: set only with a conv torso"),
])
def test_bad_conv_keys_are_refused(network, message):
    raw = {"algo": "ppo", "env": {"id": "CartPole-v1"}, "ppo": {"network": network}}
    with pytest.raises(ConfigError, match=message):
        config_from_dict(raw)


def _envs():
    env, params = PixelEnv(), PixelParams()
    return EnvSetup(env, params, params, None, "auto")


def _one_update(program):
    state = jax.jit(program.init)(jax.random.PRNGKey(0))
    state, metrics = jax.jit(program.update)(state)
    return {k: float(v) for k, v in metrics.items()}


@pytest.mark.parametrize("network", [
    NetworkConfig(conv="minatar_cnn", channels=(4,)),
    NetworkConfig(torso="gru", cell_size=8, conv="minatar_cnn", channels=(2,)),
], ids=["ppo-minatar_cnn", "ppo-gru-minatar_cnn"])
def test_ppo_with_a_conv_torso_runs_an_update(network):
    cfg = PPOConfig(num_envs=4, num_steps=4, total_env_steps=32, update_epochs=1, num_minibatches=2,
                    hidden=(8,), activation="relu", network=network, eval_episodes=2, eval_max_steps=4)
    metrics = _one_update(ppo.build(_envs(), cfg))
    assert all(np.isfinite(v) for v in metrics.values())
    assert metrics["grad_norm"] > 0.0


def test_q_learners_with_a_conv_torso_run_an_update():
    net = QNetworkConfig(conv="minatar_cnn", channels=(4,))
    dqn_cfg = dqn.DQNConfig(num_envs=2, steps_per_update=2, total_env_steps=16, gradient_steps=1, batch_size=4,
                            buffer_size=16, learning_starts=0, n_step=1, hidden=(8,), network=net, eval_episodes=2)
    pqn_cfg = pqn.PQNConfig(num_envs=2, num_steps=4, total_env_steps=16, update_epochs=1, num_minibatches=2,
                            hidden=(8,), network=net, eval_episodes=2)
    dqn_cfg.validate()
    metrics = _one_update(dqn.build(_envs(), dqn_cfg))
    assert all(np.isfinite(v) for v in metrics.values()), metrics
    pqn_cfg.validate()  # PQN's program on the same QNetwork: traced (shapes), not compiled
    program = pqn.build(_envs(), pqn_cfg)
    state = jax.eval_shape(program.init, jax.random.PRNGKey(0))
    _, metrics = jax.eval_shape(program.update, state)
    assert all(v.shape == () for v in metrics.values())


def test_q_network_conv_features_feed_the_hidden_layers():
    q = QNetwork(3, hidden=(8,), obs_ndim=3, conv="minatar_cnn", channels=(4,))
    shapes = _shapes(jax.eval_shape(functools.partial(q.init, jax.random.PRNGKey(0)), jnp.zeros((6, 6, 2))))
    assert shapes["params/conv/conv_0/kernel"] == (3, 3, 2, 4)
    assert shapes["params/Torso_0/Dense_0/kernel"] == (4 * 4 * 4, 8)


def test_minatar_cnn_recipe_loads_and_builds():
    cfg = load_config(str(REPO / "configs" / "ppo_minatar_breakout_cnn.yaml"))
    net = cfg.algo_config.network
    assert (net.conv, net.channels, cfg.algo_config.hidden, cfg.algo_config.shared_torso) == ("minatar_cnn", None, (128,), False)
    pytest.importorskip("gymnax")
    program = build(cfg).program
    params = jax.eval_shape(program.init, jax.random.PRNGKey(0)).agent.params
    # per head: conv 3*3*4*16+16 and dense (8*8*16)*128+128; heads 128*3+3 and 128+1
    assert sum(math.prod(x.shape) for x in jax.tree_util.tree_leaves(params)) == 2 * (592 + 131_200) + 387 + 129


def test_pqn_minatar_cnn_recipe_loads_and_builds():
    cfg = load_config(str(REPO / "configs" / "pqn_minatar_breakout_cnn.yaml"))
    acfg = cfg.algo_config
    assert (acfg.network.conv, acfg.hidden, acfg.layer_norm, acfg.td_lambda) == ("minatar_cnn", (128,), True, 0.65)
    assert acfg.total_env_steps % (acfg.num_envs * acfg.num_steps) == 0
    pytest.importorskip("gymnax")
    shapes = _shapes(jax.eval_shape(build(cfg).program.init, jax.random.PRNGKey(0)).params["params"])
    assert shapes["conv/conv_0/kernel"] == (3, 3, 4, 16) and shapes["Torso_0/Dense_0/kernel"] == (8 * 8 * 16, 128)


def test_env_frame_stack_wraps_the_training_env_and_refuses_what_it_cannot_stack():
    cartpole = str(Path(__file__).resolve().parent.parent / "configs" / "ppo_cartpole.yaml")
    built = build(load_config(cartpole, ["env.frame_stack=4"]))
    env = built.envs.env
    assert isinstance(env, FrameStack) and env.num_frames == 4
    assert env.observation_space(built.envs.params).shape == (16,)  # CartPole's 4 floats x 4 frames
    assert build(load_config(cartpole)).envs.env.observation_space(built.envs.params).shape == (4,)
    for value, expected in (("0", "env.frame_stack: expected an integer in [1, 64]"), ("true", "env.frame_stack")):
        with pytest.raises(ConfigError, match=expected.replace("[", r"\[")):
            load_config(cartpole, [f"env.frame_stack={value}"])
    grpo = str(Path(__file__).resolve().parent.parent / "configs" / "grpo_reverse.yaml")
    with pytest.raises(ConfigError, match="env.frame_stack: text/Reverse-v0 is a token or multi-agent task"):
        build(load_config(grpo, ["env.frame_stack=2"]))


def test_frame_stack_keeps_the_inner_action_mask_of_the_newest_frame():
    class Masked(Environment):
        """Obs (3,): the legal actions of the next step are those with obs > 0."""

        default_params = None

        def reset(self, key, params):
            return (), first_timestep(jnp.array([1.0, -1.0, 1.0]), {})

        def step(self, key, state, action, params):
            return (), transition(jnp.array([-1.0, 1.0, -1.0]), 0.0, False, False, {})

        def observation_space(self, params):
            return spaces.Box(-1.0, 1.0, (3,), jnp.float32)

        def action_space(self, params):
            return spaces.Discrete(3)

        def action_mask(self, obs):
            return obs > 0

    stacked = FrameStack(Masked(), 2)
    _, ts = stacked.reset(jax.random.key(0), None)
    assert ts.obs.shape == (6,)
    np.testing.assert_array_equal(stacked.action_mask(ts.obs), [True, False, True])
    _, ts = stacked.step(jax.random.key(1), stacked.reset(jax.random.key(0), None)[0], 0, None)
    np.testing.assert_array_equal(stacked.action_mask(ts.obs), [False, True, False])  # the newest frame's, not the oldest's


# ------------------------------------------------------------------ a conv torso on one leaf of a flat observation

@dataclasses.dataclass(frozen=True)
class LeafEnv(PixelEnv):
    """PixelEnv's frames inside a flat structured observation: ``[t, frame 6x6x2, pos one-hot 3]``
    (the image leaf is not at the start, so the slice and the other leaves' order matter)."""

    LAYOUT = (("t", (), 0, 1), ("frame", (6, 6, 2), 1, 73), ("pos", (3,), 73, 76), ("flag", (2, 2), 76, 80))

    def _obs(self, state):
        frame = super()._obs(state)
        pos = jax.nn.one_hot(state.pos % 3, 3)
        return jnp.concatenate([state.t[None].astype(jnp.float32), jnp.ravel(frame), pos, jnp.ones(4)])

    def unflatten_obs(self, flat):
        flat = jnp.asarray(flat)
        return {n: flat[..., a:b].reshape(flat.shape[:-1] + s) for n, s, a, b in self.LAYOUT}

    def observation_space(self, params):
        return spaces.Box(0.0, 100.0, (80,))


def _leaf_cfg(**network):
    return PPOConfig(num_envs=4, num_steps=4, total_env_steps=32, update_epochs=1, num_minibatches=2, hidden=(8,),
                     activation="relu", shared_torso=True, network=NetworkConfig(**network), eval_episodes=2,
                     eval_max_steps=4, action_mask=False)


def test_image_leaf_torso_is_the_conv_on_the_unflattened_leaf():
    """The network's output equals a hand-written one: ``lax.conv`` (3x3 VALID, ReLU) on the
    leaf that ``unflatten_obs`` gives back, flattened, then the other leaves in layout order, the
    dense layer and the two heads, in NumPy."""
    env = LeafEnv()
    net = ppo.build_network(env, env.default_params, _leaf_cfg(conv="minatar_cnn", channels=(3,), image_leaf="frame"))
    assert net.image == (1, (6, 6, 2))
    obs = jax.random.uniform(jax.random.PRNGKey(1), (5, 80))
    params = init_params(net, jax.random.PRNGKey(0), obs[0])
    dist, value = jax.jit(net.apply)(params, obs)
    p = params["params"]
    leaves = env.unflatten_obs(obs)
    conv = jax.lax.conv_general_dilated(leaves["frame"], p["conv"]["conv_0"]["kernel"], (1, 1), "VALID",
                                        dimension_numbers=("NHWC", "HWIO", "NHWC"))
    feat = np.maximum(np.asarray(conv) + np.asarray(p["conv"]["conv_0"]["bias"]), 0.0).reshape(5, -1)
    x = np.concatenate([feat, np.asarray(leaves["t"])[:, None], leaves["pos"], np.asarray(leaves["flag"]).reshape(5, 4)], -1)
    d = p["torso"]["dense_0"]
    h = np.maximum(x @ np.asarray(d["kernel"]) + np.asarray(d["bias"]), 0.0)
    logits = h @ np.asarray(p["policy_head"]["kernel"]) + np.asarray(p["policy_head"]["bias"])
    v = (h @ np.asarray(p["value_head"]["kernel"]) + np.asarray(p["value_head"]["bias"]))[:, 0]
    assert feat.shape == (5, 4 * 4 * 3) and x.shape == (5, 48 + 8)
    np.testing.assert_allclose(value, v, rtol=1e-4, atol=1e-5)
    np.testing.assert_allclose(dist.logits, logits, rtol=1e-4, atol=1e-5)


def test_ppo_with_an_image_leaf_runs_an_update():
    env = LeafEnv()
    metrics = _one_update(ppo.build(EnvSetup(env, env.default_params, env.default_params, None, "auto"),
                                    _leaf_cfg(conv="minatar_cnn", channels=(2,), image_leaf="frame")))
    assert all(np.isfinite(v) for v in metrics.values()) and metrics["grad_norm"] > 0.0


@pytest.mark.parametrize("network, env, message", [
    ({"conv": "minatar_cnn", "image_leaf": "pixels"}, LeafEnv(),
     r"^network\.image_leaf: LeafEnv has no leaf 'pixels'; its leaves: \['flag', 'frame', 'pos', 't'\]$"),
    ({"conv": "minatar_cnn", "image_leaf": "flag"}, LeafEnv(),
     r"^network\.image_leaf: leaf 'flag' of LeafEnv has shape \(2, 2\), not an image \[H, W, C\]$"),
    ({"conv": "nature_cnn", "image_leaf": "frame"}, LeafEnv(), r"^network\.conv: nature_cnn does not fit the 6x6 frames of leaf 'frame'"),
    ({"conv": "minatar_cnn", "image_leaf": "frame"}, PixelEnv(),
     r"^network\.image_leaf: needs a flat observation with named leaves, PixelEnv gives shape \(6, 6, 2\)$"),
], ids=["no-such-leaf", "not-an-image", "too-small", "not-flat"])
def test_bad_image_leaves_are_refused_in_one_line(network, env, message):
    with pytest.raises(ValueError, match=message):
        ppo.build_network(env, env.default_params, _leaf_cfg(**network))


def test_image_leaf_needs_named_leaves_and_a_conv():
    raw = {"algo": "ppo", "env": {"id": "CartPole-v1"}, "ppo": {"network": {"conv": "minatar_cnn", "image_leaf": "grid"}}}
    with pytest.raises(ConfigError, match=r"^ppo\.network\.image_leaf: CartPole-v1 has a plain observation with no named leaves"):
        build(config_from_dict(raw))
    raw = {"algo": "ppo", "env": {"id": "CartPole-v1"}, "ppo": {"network": {"image_leaf": "grid"}}}
    with pytest.raises(ConfigError, match=r"^ppo\.network\.image_leaf: set only with a conv torso"):
        config_from_dict(raw)
