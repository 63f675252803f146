"""The orthogonal initialiser and the guard that no training program calls LAPACK.

Batched LAPACK custom calls (``jnp.linalg.qr`` under ``vmap``) split their batch over
XLA's CPU intra-op pool from inside a task of that pool and deadlocked vmapped-seed
training on 2-core machines (jaxlib 0.10). The programs must stay free of them.
"""

from __future__ import annotations

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from flax import linen as nn

from jaxrl.run import config as C
from jaxrl.run import trainer
from jaxrl.models.networks import orthogonal

SHAPES = [(4, 64), (64, 64), (64, 2), (64, 1), (3, 5, 7), (128, 256)]


@pytest.mark.parametrize("shape", SHAPES)
def test_orthogonal_equals_jax_initializer(shape):
    for seed in range(3):
        key = jax.random.PRNGKey(seed)
        ours = np.asarray(orthogonal(1.7)(key, shape))
        ref = np.asarray(jax.nn.initializers.orthogonal(1.7)(key, shape))
        assert ours.shape == shape and ours.dtype == np.float32
        np.testing.assert_allclose(ours, ref, atol=2e-5)


@pytest.mark.parametrize("shape", [(64, 64), (4, 64), (64, 2), (200, 3)])
def test_orthogonal_is_semi_orthogonal(shape):
    w = np.asarray(orthogonal(1.0)(jax.random.PRNGKey(7), shape), np.float64)
    small = min(shape)
    gram = w.T @ w if shape[0] >= shape[1] else w @ w.T
    np.testing.assert_allclose(gram, np.eye(small), atol=1e-5)


def test_orthogonal_rejects_a_vector_shape():
    with pytest.raises(ValueError, match="rank >= 2"):
        orthogonal()(jax.random.PRNGKey(0), (5,))


def _lowered_text(fn, *args) -> str:
    return jax.jit(fn).lower(*args).as_text()


def _vmapped_train_text(raw: dict) -> str:
    cfg = C.config_from_dict(raw)
    train = trainer.make_train(cfg)
    return _lowered_text(jax.vmap(train), trainer.seed_keys(0, 4))


@pytest.mark.parametrize(
    "raw",
    [
        {"algo": "ppo", "env": {"id": "CartPole-v1"}, "ppo": {"num_envs": 4, "num_steps": 8, "total_env_steps": 64, "num_minibatches": 2}},
        {"algo": "ppo", "env": {"id": "Pendulum-v1"}, "ppo": {"num_envs": 4, "num_steps": 8, "total_env_steps": 64, "num_minibatches": 2}},
    ],
    ids=["ppo-cartpole", "ppo-pendulum"],
)
def test_vmapped_training_program_has_no_lapack_call(raw):
    text = _vmapped_train_text(raw)
    assert "while" in text  # really the training program
    assert "lapack" not in text.lower()


def test_the_guard_sees_a_lapack_call():
    """Control: flax's own orthogonal initialiser, vmapped, lowers to a LAPACK QR."""
    init = jax.vmap(lambda k: nn.initializers.orthogonal(1.0)(k, (8, 8)))
    assert "lapack" in _lowered_text(init, jax.random.split(jax.random.PRNGKey(0), 4)).lower()
    ours = jax.vmap(lambda k: orthogonal(1.0)(k, (8, 8)))
    assert "lapack" not in _lowered_text(ours, jax.random.split(jax.random.PRNGKey(0), 4)).lower()


@pytest.mark.parametrize("name", ["grpo_reverse", "grpo_cartpole"])
def test_vmapped_grpo_program_has_no_lapack_call(name):
    from pathlib import Path

    cfg = C.load_config(str(Path(__file__).parents[1] / "configs" / f"{name}.yaml"))
    text = _lowered_text(jax.vmap(trainer.make_train(cfg)), trainer.seed_keys(0, 2))
    assert "while" in text
    assert "lapack" not in text.lower()


@pytest.mark.parametrize("kwargs", [{}, {"shared_torso": True}, {"dist": "gaussian", "log_std": "learned", "init_log_std": -0.5}])
def test_init_params_draws_gained_orthogonal_kernels(kwargs):
    from flax import traverse_util

    from jaxrl.models.networks import ActorCritic, init_params, kernel_gain

    net = ActorCritic(action_dim=3, hidden=(32, 16), **kwargs)
    x = jnp.zeros(5)
    ours = traverse_util.flatten_dict(init_params(net, jax.random.key(0), x))
    ref = traverse_util.flatten_dict(net.init(jax.random.key(0), x))
    assert ours.keys() == ref.keys()
    for path, leaf in ours.items():
        assert leaf.shape == ref[path].shape and leaf.dtype == ref[path].dtype, path
        w = np.asarray(leaf, np.float64)
        if path[-1] == "kernel":
            gram = w.T @ w if w.shape[0] >= w.shape[1] else w @ w.T
            np.testing.assert_allclose(gram, kernel_gain(path[-2]) ** 2 * np.eye(len(gram)), atol=1e-5 * kernel_gain(path[-2]) ** 2 + 1e-7)
        else:  # biases zero, log_std its constant: exactly what network.init gives
            np.testing.assert_array_equal(w, np.asarray(ref[path]))
    other = traverse_util.flatten_dict(init_params(net, jax.random.key(1), x))
    assert not np.allclose(other[("params", "policy_head", "kernel")], ours[("params", "policy_head", "kernel")])


def test_orthogonal_matrices_are_independent_of_padding():
    """A layer's matrix is orthogonal whatever the other (larger) layers in the batch are."""
    from jaxrl.models.networks import orthogonal_matrices

    mats = orthogonal_matrices(jax.random.key(4), [(3, 1), (2, 50), (40, 30), (1, 1)])
    for m in mats:
        m = np.asarray(m, np.float64)
        gram = m.T @ m if m.shape[0] >= m.shape[1] else m @ m.T
        np.testing.assert_allclose(gram, np.eye(len(gram)), atol=1e-5)
    assert [m.shape for m in mats] == [(3, 1), (2, 50), (40, 30), (1, 1)]
