"""The tiny causal transformer: KV-cache decoding equals the one-pass forward, causality, size."""

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl.algos.contract import EnvSetup
from jaxrl.algos import grpo
from jaxrl.models.transformer import TransformerLM, num_params, smear
from jaxrl_envs.text import Reverse

MODELS = {p: TransformerLM(vocab_size=41, max_len=12, positions=p) for p in ("learned", "rope")}
# smeared keys with a tied head, over both position encodings: the cache must keep raw keys
MODELS |= {f"smear_tied_{p}": TransformerLM(vocab_size=41, max_len=12, positions=p, smear_keys=True, tie_embeddings=True)
           for p in ("learned", "rope")}
MODEL = MODELS["learned"]


@pytest.fixture(scope="module", params=sorted(MODELS))
def model_params(request):
    model = MODELS[request.param]
    return model, model.init(jax.random.PRNGKey(0), jnp.zeros((1, 12), jnp.int32))


@pytest.fixture(scope="module")
def params():
    return MODEL.init(jax.random.PRNGKey(0), jnp.zeros((1, 12), jnp.int32))


def _decode_all(model, params, tokens, prompt_len):
    """Logits for positions prompt_len-1 .. L-2 via prefill + one cached decode per token."""
    logits, cache = model.apply(params, tokens[:, :prompt_len], method=TransformerLM.prefill)
    out = [logits[:, -1]]

    def body(cache, t):
        lg, cache = model.apply(params, tokens[:, t], t, cache, method=TransformerLM.decode)
        return cache, lg

    _, rest = jax.lax.scan(body, cache, jnp.arange(prompt_len, tokens.shape[1] - 1))
    return jnp.concatenate([out[0][:, None], jnp.swapaxes(rest, 0, 1)], axis=1)


def test_kv_cache_decoding_equals_one_pass(model_params):
    model, params = model_params
    tokens = jax.random.randint(jax.random.PRNGKey(1), (4, 12), 0, 41)
    full = jax.jit(model.apply)(params, tokens)
    cached = jax.jit(_decode_all, static_argnums=(0, 3))(model, params, tokens, 5)
    np.testing.assert_allclose(cached, full[:, 4:11], atol=2e-5, rtol=1e-5)
    lp_full = jax.nn.log_softmax(full[:, 4:11])
    lp_cached = jax.nn.log_softmax(cached)
    np.testing.assert_allclose(lp_cached, lp_full, atol=2e-5)


def test_causal_future_tokens_do_not_change_past_logits(model_params):
    model, params = model_params
    tokens = jax.random.randint(jax.random.PRNGKey(2), (2, 12), 0, 41)
    changed = tokens.at[:, 8:].set((tokens[:, 8:] + 7) % 41)
    a, b = model.apply(params, tokens), model.apply(params, changed)
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
    setup = grpo.make_setup(EnvSetup(env, env.default_params, env.default_params), cfg)
    state = grpo.update.init(setup, jax.random.PRNGKey(0))

    def both(params, key):
        keys = jnp.repeat(jax.random.split(key, 2), 2, axis=0)
        ro = grpo.rollout.group_rollout(setup.policy, env, env.default_params, params, keys, key, setup.num_steps, jnp.float32(1.3))
        lp, _ = grpo.update._token_logp(setup.policy, params, ro.obs, ro.actions, jnp.float32(1.3))
        return ro, lp

    ro, lp = jax.jit(both)(state.params, jax.random.PRNGKey(5))
    np.testing.assert_allclose(np.where(ro.mask, lp, 0.0), np.where(ro.mask, ro.logp, 0.0), atol=2e-5)
    # members of a group share the prompt, and sampled different completions somewhere
    np.testing.assert_array_equal(ro.obs[0, : env.prompt_len], ro.obs[1, : env.prompt_len])
    assert not np.array_equal(ro.actions, ro.actions[::-1])


def test_rope_scores_depend_on_relative_position_only():
    from jaxrl.models.transformer import rope

    q = jax.random.normal(jax.random.PRNGKey(3), (1, 1, 1, 8))
    k = jax.random.normal(jax.random.PRNGKey(4), (1, 1, 1, 8))
    score = lambda i, j: float(jnp.sum(rope(q, jnp.array([i])) * rope(k, jnp.array([j]))))  # noqa: E731
    assert score(5, 2) == pytest.approx(score(9, 6), abs=1e-5)  # same distance, same score
    assert score(5, 2) != pytest.approx(score(5, 3), abs=1e-3)
    assert score(0, 0) == pytest.approx(float(jnp.sum(q * k)), abs=1e-6)  # position 0: no rotation
    # no position table: the rope model has fewer parameters and refuses odd head sizes
    n_rope = num_params(MODELS["rope"].init(jax.random.PRNGKey(0), jnp.zeros((1, 12), jnp.int32)))
    n_learned = num_params(MODEL.init(jax.random.PRNGKey(0), jnp.zeros((1, 12), jnp.int32)))
    assert n_learned - n_rope == 12 * 64
    with pytest.raises(ValueError, match="even head size"):
        TransformerLM(41, 8, d_model=12, n_heads=4, positions="rope").init(jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32))
    with pytest.raises(ValueError, match="positions"):
        TransformerLM(41, 8, positions="alibi").init(jax.random.PRNGKey(0), jnp.zeros((1, 8), jnp.int32))


def test_smear_mixes_each_key_with_the_previous_one():
    k = jnp.arange(1.0, 7.0).reshape(1, 3, 2, 1)  # [B=1, L=3, H=2, D=1]: keys 1..6
    gate = jnp.array([[1.0], [0.25]])  # head 0 keeps its keys, head 1 leans on the previous
    out = smear(k, gate)[0, :, :, 0]
    np.testing.assert_allclose(out[:, 0], [1.0, 3.0, 5.0])
    np.testing.assert_allclose(out[:, 1], [0.25 * 2, 0.25 * 4 + 0.75 * 2, 0.25 * 6 + 0.75 * 4])


def test_tied_head_has_no_head_matrix_and_reads_the_embedding():
    tied = MODELS["smear_tied_learned"]
    p_tied = tied.init(jax.random.PRNGKey(0), jnp.zeros((1, 12), jnp.int32))
    p_plain = MODEL.init(jax.random.PRNGKey(0), jnp.zeros((1, 12), jnp.int32))
    # no 64 x 41 head (+ 41 bias); one gate logit per head and layer
    assert num_params(p_plain) - num_params(p_tied) == 64 * 41 + 41 - 2 * 4
    assert "head" not in p_tied["params"]
    # the logits are the final LayerNorm's output against the embedding table
    tokens = jax.random.randint(jax.random.PRNGKey(5), (2, 12), 0, 41)
    logits, captured = tied.apply(p_tied, tokens, capture_intermediates=lambda mdl, _: mdl.name == "ln_f",
                                  mutable=["intermediates"])
    (feats,) = captured["intermediates"]["ln_f"]["__call__"]
    emb = p_tied["params"]["embed"]["embedding"]
    np.testing.assert_allclose(logits, feats @ emb.T, atol=1e-5)
