"""jaxrl.models.lm against transformers: logits and greedy generate of four tiny real
checkpoints (tests/fixtures/lm, made by make_fixtures.py with torch + transformers), the KV
cache against the full forward, the loader's errors, LoRA and the chunked head.

Each model is compiled once per module (module-scoped fixtures) and the shapes are kept the
same across tests, so the file stays cheap on a 2-core CI box.
"""

import dataclasses
import functools
import json
import os
import shutil

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxrl.models.lm import (LMConfig, LoRAConfig, generate, init_lora, load_lm, load_tokenizer, merge_lora,
                             sample_token, token_logprobs)
from jaxrl.models.lm.generate import _generate
from jaxrl.models.lm.load import load_params

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "lm")
MODELS = ("qwen2", "qwen3", "llama3", "mistral")


def _ref(name):
    with np.load(os.path.join(FIXTURES, "reference", f"{name}.npz")) as z:
        return {k: z[k] for k in z.files}


@functools.cache
def jitted_apply(model):
    """One jitted ``model.apply`` per (hashable) model, shared by every test of the module."""
    return jax.jit(model.apply)


def _max_err(logits, ref):
    mask = ref["attention_mask"].astype(bool)
    return float(np.abs(np.asarray(logits) - ref["logits"])[mask].max())


@pytest.fixture(scope="module", params=MODELS)
def loaded(request):
    """(name, model, params, jitted apply, reference) in float32."""
    model, params = load_lm(os.path.join(FIXTURES, request.param))
    return request.param, model, params, jitted_apply(model), _ref(request.param)


# -- parity with transformers ----------------------------------------------------------------

def test_logits_match_transformers(loaded):
    name, model, params, apply, ref = loaded
    logits = apply(params, ref["input_ids"], ref["attention_mask"])
    assert logits.dtype == jnp.float32 and logits.shape == ref["logits"].shape
    assert np.isfinite(np.asarray(logits)).all()        # padded query rows included
    assert _max_err(logits, ref) <= 1e-4, name


def test_greedy_generate_matches_transformers(loaded):
    name, model, params, _, ref = loaded
    out = np.asarray(generate(model, params, ref["gen_input_ids"], ref["gen_attention_mask"],
                              max_new_tokens=int(ref["max_new_tokens"])))
    gen = ref["gen_tokens"]        # transformers stops when every row has ended: pad the rest
    assert out.shape[1] >= gen.shape[1]
    np.testing.assert_array_equal(out[:, :gen.shape[1]], gen)
    assert (out[:, gen.shape[1]:] == model.pad_id).all()
    # another prompt of the same shape reuses the compiled program (no retrace)
    traces = _generate._cache_size()
    generate(model, params, ref["gen_input_ids"][::-1], ref["gen_attention_mask"][::-1],
             max_new_tokens=int(ref["max_new_tokens"]))
    assert _generate._cache_size() == traces


def _cached_logits(model, params, ids, mask):
    """Logits of ``ids [3, 40]`` through the cache: prompt prefill (slots 0..29), a 6-token extend
    in which row 1 has a padded token first (written nowhere visible, no position consumed),
    one decode that writes row 1's 36th token (rows 0 and 2 masked: written invisibly), then
    4 decode steps. Returns logits [3, 40, V] in sequence order and the final cache."""
    logits, cache = model.prefill(params, ids[:, :30], mask[:, :30], 48)
    shifted = jnp.concatenate([jnp.full((1,), 123), ids[1, 30:35]])
    ext = jnp.stack([ids[0, 30:36], shifted, ids[2, 30:36]])
    ext_mask = jnp.stack([mask[0, 30:36], jnp.concatenate([jnp.zeros(1, bool), mask[1, 30:35]]), mask[2, 30:36]])
    ext_logits, cache = model.extend(params, cache, ext, 30, ext_mask)
    chunks = [logits, jnp.stack([ext_logits[0, :5], ext_logits[1, 1:6], ext_logits[2, :5]])]

    def body(cache, xs):
        token, slot, token_mask = xs
        step, cache = model.decode(params, cache, token, slot, token_mask)
        return cache, step

    # row 1 decodes its token 35 into slot 36 while rows 0 and 2 write there invisibly
    masks = jnp.ones((5, 3), bool).at[0].set(jnp.asarray([False, True, False]))
    cache, steps = jax.lax.scan(body, cache, (ids[:, 35:40].T, jnp.arange(36, 41), masks))
    steps = steps.swapaxes(0, 1)
    chunks.append(jnp.stack([ext_logits[0, 5], steps[1, 0], ext_logits[2, 5]])[:, None])
    return jnp.concatenate(chunks + [steps[:, 1:]], axis=1), cache


def test_cached_prefill_extend_decode_equal_full_forward(loaded):
    name, model, params, apply, ref = loaded
    ids, mask = ref["input_ids"][:, :40], ref["attention_mask"][:, :40].astype(bool)
    assert mask[:, 30:].all()
    # causal: the first 40 positions of the 72-position forward (compiled once for the module)
    full = np.asarray(apply(params, ref["input_ids"], ref["attention_mask"]))[:, :40]
    cached, cache = jax.jit(functools.partial(_cached_logits, model))(params, ids, mask)
    assert np.asarray(cache.count).tolist() == mask.sum(1).tolist()
    assert np.asarray(cache.valid).sum(1).tolist() == mask.sum(1).tolist()
    # float32 rounding of two op orders (cache vs one pass): up to 1.2e-5 on this project's CI
    # CPU model; a wrong mask or position is off by orders of magnitude more
    assert float(np.abs(np.asarray(cached) - full)[mask].max()) <= 3e-5, name


def test_bf16_within_bf16_rounding(loaded):
    """bf16 parameters and activations: the error against the float32 reference is of the size
    torch's own bf16 forward makes (its logits are stored as logits_bf16), at most 1.5 x its
    max and mean error: bf16 keeps 8 significant bits, so both implementations round at every
    matmul and norm, differently, and neither is closer to float32 by design."""
    name, _, _, _, ref = loaded
    model, params = load_lm(os.path.join(FIXTURES, name), dtype=jnp.bfloat16)
    assert params["embed_tokens"].dtype == jnp.bfloat16
    logits = np.asarray(jax.jit(model.apply)(params, ref["input_ids"], ref["attention_mask"]))
    mask = ref["attention_mask"].astype(bool)
    ours = np.abs(logits - ref["logits"])[mask]
    torch_bf16 = np.abs(ref["logits_bf16"] - ref["logits"])[mask]
    assert logits.dtype == np.float32 and np.isfinite(logits).all()
    assert ours.max() <= 1.5 * torch_bf16.max(), (name, ours.max(), torch_bf16.max())
    assert ours.mean() <= 1.5 * torch_bf16.mean(), (name, ours.mean(), torch_bf16.mean())


# -- the parity test catches the usual mistakes ------------------------------------------------

def _copy_with_config(tmp_path, name, edit):
    out = tmp_path / name
    shutil.copytree(os.path.join(FIXTURES, name), out)
    cfg = json.loads((out / "config.json").read_text())
    edit(cfg)
    (out / "config.json").write_text(json.dumps(cfg))
    return out


def _wrong_theta(cfg):
    if "rope_parameters" in cfg:
        cfg["rope_parameters"]["rope_theta"] = 10_000.0 if cfg["rope_parameters"]["rope_theta"] != 10_000.0 else 1e6
    else:
        cfg["rope_theta"] = 10_000.0


def _drop_llama3_scaling(cfg):
    cfg["rope_parameters"] = {"rope_type": "default", "rope_theta": cfg["rope_parameters"]["rope_theta"]}


@pytest.mark.parametrize("name,edit", [("qwen2", _wrong_theta), ("llama3", _drop_llama3_scaling)])
def test_wrong_rope_is_caught_by_parity(tmp_path, name, edit):
    model, params = load_lm(_copy_with_config(tmp_path, name, edit))
    ref = _ref(name)
    assert _max_err(jax.jit(model.apply)(params, ref["input_ids"], ref["attention_mask"]), ref) > 1e-2


def test_swapped_tying_is_caught_by_parity():
    """qwen3 has its own head: read as tied (the head taken from the embedding table) it must
    fail parity; the loader also refuses its lm_head.weight then (an unexpected tensor)."""
    model, params = load_lm(os.path.join(FIXTURES, "qwen3"))
    tied = dataclasses.replace(model, config=dataclasses.replace(model.config, tie_word_embeddings=True))
    without_head = {k: v for k, v in params.items() if k != "lm_head"}
    ref = _ref("qwen3")
    assert _max_err(jax.jit(tied.apply)(without_head, ref["input_ids"], ref["attention_mask"]), ref) > 1e-2
    with pytest.raises(ValueError, match="unexpected tensor 'lm_head.weight'"):
        load_params(os.path.join(FIXTURES, "qwen3"), tied.config)


# -- configs and loader errors ---------------------------------------------------------------

def test_config_reads_both_rope_layouts_and_defaults():
    q2 = LMConfig.from_hf(json.load(open(os.path.join(FIXTURES, "qwen2", "config.json"))))
    assert (q2.rope.theta, q2.rope.rope_type, q2.attention_bias, q2.tie_word_embeddings) == (1e6, "default", True, True)
    l3 = LMConfig.from_hf(json.load(open(os.path.join(FIXTURES, "llama3", "config.json"))))
    assert l3.rope.rope_type == "llama3" and l3.rope.get("factor") == 8.0 and l3.num_kv_heads == 1
    old = {"architectures": ["LlamaForCausalLM"], "vocab_size": 8, "hidden_size": 8, "intermediate_size": 8,
           "num_hidden_layers": 1, "num_attention_heads": 2, "rope_theta": 5e5,
           "rope_scaling": {"type": "linear", "factor": 2.0}}
    c = LMConfig.from_hf(old)
    assert (c.rope.theta, c.rope.rope_type, c.rope.get("factor"), c.head_dim, c.num_kv_heads) == (5e5, "linear", 2.0, 4, 2)
    assert LMConfig.from_hf({**old, "architectures": ["Qwen3ForCausalLM"]}).head_dim == 128   # Qwen3's default
    assert LMConfig.from_hf(l3.to_hf()) == l3
    mistral = LMConfig.from_hf({**old, "architectures": ["MistralForCausalLM"], "sliding_window": 4})
    assert mistral.sliding_window == 4 and mistral.sliding_layers == (True,)


@pytest.mark.parametrize("edit,match", [
    (lambda c: c.update(architectures=["GPT2LMHeadModel"]), "architectures"),
    (lambda c: c.pop("hidden_size"), "hidden_size"),
    (lambda c: c.update(rope_parameters={"rope_type": "dynamic", "factor": 2.0}), "rope_type"),
    (lambda c: c.update(rope_parameters={"rope_type": "llama3", "rope_theta": 1.0}), "factor"),
])
def test_config_errors_name_the_key(tmp_path, edit, match):
    path = _copy_with_config(tmp_path, "qwen3", edit)
    with pytest.raises(ValueError, match=match) as err:
        load_lm(path)
    assert "config.json" in str(err.value) and "\n" not in str(err.value)


def test_loader_errors_name_the_file_or_tensor(tmp_path):
    with pytest.raises(ValueError, match="not found"):
        load_lm(tmp_path / "nowhere")
    path = tmp_path / "qwen3"
    shutil.copytree(os.path.join(FIXTURES, "qwen3"), path)
    cfg = LMConfig.from_hf(json.loads((path / "config.json").read_text()))
    # a missing tensor: the same checkpoint read as if it had q/k/v bias
    with pytest.raises(ValueError, match=r"missing tensor 'model\.layers\.0\.self_attn\.k_proj\.bias'"):
        load_params(str(path), dataclasses.replace(cfg, attention_bias=True))
    # an unexpected tensor: the qk-norm weights of a checkpoint read without qk-norm
    with pytest.raises(ValueError, match=r"unexpected tensor 'model\.layers\.0\.self_attn\.k_norm\.weight'"):
        load_params(str(path), dataclasses.replace(cfg, qk_norm=False))
    with pytest.raises(ValueError, match=r"tensor 'model\.embed_tokens\.weight' has shape"):
        load_params(str(path), dataclasses.replace(cfg, vocab_size=cfg.vocab_size + 1))
    (path / "model.safetensors").unlink()
    with pytest.raises(ValueError, match=r"model\.safetensors: file not found"):
        load_lm(path)
    (path / "config.json").unlink()
    with pytest.raises(ValueError, match=r"config\.json: file not found"):
        load_lm(path)


def test_sharded_checkpoint_loads_every_shard():
    index = json.load(open(os.path.join(FIXTURES, "llama3", "model.safetensors.index.json")))
    assert len(set(index["weight_map"].values())) > 1
    _, params = load_lm(os.path.join(FIXTURES, "llama3"))
    assert params["layers"]["q_proj"]["kernel"].shape == (3, 64, 64)
    assert params["layers"]["k_proj"]["kernel"].shape == (3, 64, 16)


def test_tokenizer_matches_transformers():
    cases = json.load(open(os.path.join(FIXTURES, "reference", "tokenizer_cases.json")))
    tok = load_tokenizer(os.path.join(FIXTURES, "qwen2"))
    for case in cases["encode"]:
        assert tok.encode(case["text"]) == case["ids"], case["text"]
    for case in cases["decode"]:
        assert tok.decode(case["ids"]) == case["text"]
    assert tok.special_tokens["eos_token"] == cases["eos_token"] and tok.token_id("eos_token") == 399
    assert tok.chat_template.startswith("{%-")
    for case in cases["chat"]:
        assert tok.encode(case["text"]) == case["ids"]
    assert [b.hex() for b in tok.token_bytes()] == cases["token_bytes_hex"]


# -- LoRA and the chunked head (one small model, the shapes of the parity tests) ----------------

@pytest.fixture(scope="module")
def qwen3():
    model, params = load_lm(os.path.join(FIXTURES, "qwen3"))
    return model, params, jitted_apply(model), _ref("qwen3")


def test_lora_zero_b_is_base_merged_equals_unmerged_and_gradients_reach_b(qwen3):
    model, params, apply, ref = qwen3
    lcfg = LoRAConfig(rank=4, alpha=8.0)
    lora = init_lora(jax.random.PRNGKey(0), model, lcfg)
    assert lora["q_proj"]["a"].shape == (2, 64, 4) and lora["down_proj"]["b"].shape == (2, 4, 64)
    bound = 1 / np.sqrt(64)
    assert 0.8 * bound < float(jnp.abs(lora["q_proj"]["a"]).max()) <= bound
    ids, mask = ref["input_ids"], ref["attention_mask"]

    @jax.jit
    def logits_and_grads(lora):   # one program: the adapted forward and its gradient
        def loss(lora):
            logits = model.apply(params, ids, mask, lora=lora)
            return -jax.nn.log_softmax(logits)[..., 3].mean(), logits
        return jax.grad(loss, has_aux=True)(lora)

    grads, logits = logits_and_grads(lora)
    base = np.asarray(apply(params, ids, mask))
    np.testing.assert_allclose(np.asarray(logits), base, atol=1e-5)  # b = 0: the base (another program)
    assert type(grads) is type(lora) and grads.scale == lora.scale
    assert float(jnp.abs(grads["q_proj"]["b"]).max()) > 0           # b = 0 still gets a gradient
    # give b values: the adapters change the output, and merging them gives the same logits
    rng = np.random.default_rng(1)
    lora = jax.tree.map(lambda x: np.asarray(x) + 0.05 * rng.standard_normal(x.shape, np.float32), lora)
    assert lora.scale == 2.0                        # the static scale survives tree maps
    unmerged = np.asarray(logits_and_grads(lora)[1])
    merged = np.asarray(apply(merge_lora(model, params, lora, lcfg), ids, mask))
    m = mask.astype(bool)
    assert np.abs(unmerged - base)[m].max() > 1e-2
    assert np.abs(unmerged - merged)[m].max() <= 1e-4


@pytest.mark.parametrize("dtype", [jnp.float32, jnp.bfloat16])
def test_lora_delta_gradients_equal_autodiffs(dtype):
    """lora_delta's backward (its two dots' written out) gives autodiff's gradients of
    ``scale * (x @ a) @ b``, for x, a and b, in x's dtype."""
    from jaxrl.models.lm.lora import lora_delta

    k = jax.random.split(jax.random.PRNGKey(0), 4)
    x = jax.random.normal(k[0], (2, 3, 5, 16)).astype(dtype)
    ab = {"a": jax.random.normal(k[1], (16, 4)), "b": jax.random.normal(k[2], (4, 8))}
    ct = jax.random.normal(k[3], (2, 3, 5, 8))

    def plain(x, ab):
        h = jnp.matmul(x.astype(jnp.float32), ab["a"], precision="highest")
        return (2.0 * jnp.matmul(h, ab["b"], precision="highest")).astype(x.dtype)

    def loss(f):
        return lambda x, ab: jnp.sum(f(x, ab).astype(jnp.float32) * ct)

    ours = jax.jit(jax.grad(loss(lambda x, ab: lora_delta(x, ab, 2.0)), (0, 1)))(x, ab)
    want = jax.jit(jax.grad(loss(plain), (0, 1)))(x, ab)
    assert ours[0].dtype == dtype and float(jnp.abs(ours[1]["b"]).max()) > 0
    for a, b in zip(jax.tree_util.tree_leaves(ours), jax.tree_util.tree_leaves(want)):
        np.testing.assert_allclose(np.asarray(a, np.float32), np.asarray(b, np.float32), rtol=2e-5, atol=2e-5)


def test_chunked_head_equals_full_log_softmax(qwen3):
    model, params, _, ref = qwen3
    ids, mask = jnp.asarray(ref["input_ids"]), jnp.asarray(ref["attention_mask"])
    hidden = jax.jit(model.hidden)(params, ids, mask)
    targets = jnp.roll(ids, -1, axis=1)

    def full(hidden, params, temperature):
        logp = jax.nn.log_softmax(model.logits(params, hidden) / temperature)
        tl = jnp.take_along_axis(logp, targets[..., None], axis=-1)[..., 0]
        return tl, -(jnp.exp(logp) * logp).sum(-1)

    def chunked(hidden, params, temperature):
        return token_logprobs(model, params, hidden, targets, temperature, chunk_size=16)   # 72 = 4.5 chunks

    def objective(fn):
        return lambda h, p: sum(jnp.sum(x * w) for x, w in zip(fn(h, p, 0.7), (1.0, 0.3)))

    def values_and_grads(fn):
        return jax.jit(lambda h, p: (fn(h, p, 0.7), jax.grad(objective(fn), argnums=(0, 1))(h, p)))

    (lp_f, ent_f), g_full = values_and_grads(full)(hidden, params)
    (lp_c, ent_c), g_chunk = values_and_grads(chunked)(hidden, params)
    assert lp_c.shape == ent_c.shape == (3, 72) and lp_c.dtype == jnp.float32
    np.testing.assert_allclose(lp_c, lp_f, atol=1e-5)
    np.testing.assert_allclose(ent_c, ent_f, atol=1e-5)
    np.testing.assert_allclose(g_chunk[0], g_full[0], rtol=1e-5, atol=1e-5)
    np.testing.assert_allclose(g_chunk[1]["lm_head"]["kernel"], g_full[1]["lm_head"]["kernel"], rtol=1e-5, atol=1e-5)


def test_sample_token_processors():
    """No key or temperature 0: argmax. Top-k, then top-p on the renormalised rest (transformers'
    order): row 1 keeps {0, 3} only if both apply, in that order (top-p alone keeps {0, 2, 3})."""
    logits = jnp.log(jnp.asarray([[0.05, 0.5, 0.3, 0.15], [0.4, 0.1, 0.2, 0.3]]))
    keys = jax.random.split(jax.random.PRNGKey(0), 300)
    np.testing.assert_array_equal(sample_token(logits, None), [1, 0])
    np.testing.assert_array_equal(sample_token(logits, keys[0], temperature=0.0), [1, 0])
    draws = np.asarray(jax.jit(jax.vmap(lambda k: sample_token(logits, k, 1.0, 3, 0.75)))(keys))
    assert set(np.unique(draws[:, 0])) == {1, 2} and set(np.unique(draws[:, 1])) == {0, 3}


def test_the_projections_written_out_backward_equals_autodiffs():
    """ops.matmul's backward (two dots over the flattened tokens) gives autodiff's gradients."""
    from jaxrl.models.lm.ops import matmul as _matmul

    k = jax.random.split(jax.random.PRNGKey(1), 3)
    x, w, ct = jax.random.normal(k[0], (2, 5, 16)), jax.random.normal(k[1], (16, 8)), jax.random.normal(k[2], (2, 5, 8))
    ours = jax.jit(jax.grad(lambda x, w: jnp.sum(_matmul(x, w) * ct), (0, 1)))(x, w)
    want = jax.jit(jax.grad(lambda x, w: jnp.sum(jnp.matmul(x, w, precision="highest") * ct), (0, 1)))(x, w)
    for a, b in zip(ours, want):
        np.testing.assert_allclose(np.asarray(a), np.asarray(b), rtol=2e-5, atol=2e-5)
