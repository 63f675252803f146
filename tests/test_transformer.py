"""The tiny causal transformer: KV-cache decoding equals the one-pass forward, causality, size."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl.algos import grpo
from jaxrl.transformer import TransformerLM, num_params
from jaxrl_envs.text import Reverse

MODEL = TransformerLM(vocab_size=41, max_len=12)


@pytest.fixture(scope="module")
def params():
    return MODEL.init(jax.random.PRNGKey(0), jnp.zeros((1, 12), jnp.int32))


def _decode_all(params, tokens, prompt_len):
    """Logits for positions prompt_len-1 .. L-2 via prefill + one cached decode per token."""
    logits, cache = MODEL.apply(params, tokens[:, :prompt_len], method=TransformerLM.prefill)
    out = [logits[:, -1]]

    def body(cache, t):
        lg, cache = MODEL.apply(params, tokens[:, t], t, cache, method=TransformerLM.decode)
        return cache, lg

    _, rest = jax.lax.scan(body, cache, jnp.arange(prompt_len, tokens.shape[1] - 1))
    return jnp.concatenate([out[0][:, None], jnp.swapaxes(rest, 0, 1)], axis=1)


def test_kv_cache_decoding_equals_one_pass(params):
    tokens = jax.random.randint(jax.random.PRNGKey(1), (4, 12), 0, 41)
    full = jax.jit(MODEL.apply)(params, tokens)
    cached = jax.jit(_decode_all, static_argnums=2)(params, tokens, 5)
    np.testing.assert_allclose(cached, full[:, 4:11], atol=2e-5, rtol=1e-5)
    lp_full = jax.nn.log_softmax(full[:, 4:11])
    lp_cached = jax.nn.log_softmax(cached)
    np.testing.assert_allclose(lp_cached, lp_full, atol=2e-5)


def test_causal_future_tokens_do_not_change_past_logits(params):
    tokens = jax.random.randint(jax.random.PRNGKey(2), (2, 12), 0, 41)
    changed = tokens.at[:, 8:].set((tokens[:, 8:] + 7) % 41)
    a, b = MODEL.apply(params, tokens), MODEL.apply(params, changed)
    np.testing.assert_allclose(a[:, :8], b[:, :8], atol=1e-6)
    assert float(jnp.max(jnp.abs(a[:, 8:] - b[:, 8:]))) > 1e-4


def test_size_and_out_of_vocabulary_tokens(params):
    big = TransformerLM(vocab_size=41, max_len=18)
    n = num_params(big.init(jax.random.PRNGKey(0), jnp.zeros((1, 18), jnp.int32)))
    assert 90_000 < n < 120_000  # "about 100k parameters"
    weird = jnp.array([[-5, 2**31 - 1, 40, 41, 0, 3, 3, 3, 3, 3, 3, 3]], jnp.int32)
    assert np.all(np.isfinite(np.asarray(MODEL.apply(params, weird))))
    with pytest.raises(ValueError, match="divisible"):
        TransformerLM(41, 8, d_model=30, n_heads=4).init(jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32))


def test_rollout_log_probs_equal_one_pass_log_probs():
    """The GRPO rollout (prefill + cached decode + env steps) and the loss's one forward pass
    assign the same log-probability to every generated token (so ratios start at 1)."""
    env = Reverse(max_digits=4)
    cfg = grpo.GRPOConfig(num_prompts=2, group_size=2, eval_episodes=2)
    setup = grpo.make_setup(env, env.default_params, cfg)
    state = grpo.init(setup, jax.random.PRNGKey(0))

    def both(params, key):
        keys = jnp.repeat(jax.random.split(key, 2), 2, axis=0)
        ro = grpo.group_rollout(setup.policy, env, env.default_params, params, keys, key, setup.num_steps, jnp.float32(1.3))
        lp, _ = grpo._token_logp(setup.policy, params, ro.obs, ro.actions, jnp.float32(1.3))
        return ro, lp

    ro, lp = jax.jit(both)(state.params, jax.random.PRNGKey(5))
    np.testing.assert_allclose(np.where(ro.mask, lp, 0.0), np.where(ro.mask, ro.logp, 0.0), atol=2e-5)
    # members of a group share the prompt, and sampled different completions somewhere
    np.testing.assert_array_equal(ro.obs[0, 0], ro.obs[1, 0])
    assert not np.array_equal(ro.actions, ro.actions[::-1])
