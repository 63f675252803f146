"""jaxrl.models.lm.export: a saved checkpoint loads back with the same logits (LoRA merged),
PEFT adapters have PEFT's names and shapes, and (when torch + transformers are installed)
transformers reads the export and computes the same logits."""

import json
import os

import jax
import numpy as np
import pytest
from safetensors import safe_open

from jaxrl.models.lm import LoRAConfig, init_lora, load_lm, save_hf, save_peft

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "lm")


@pytest.fixture(scope="module")
def qwen2_with_lora():
    """The tied, qkv-bias qwen2 fixture with non-zero adapters on every projection."""
    model, params = load_lm(os.path.join(FIXTURES, "qwen2"))
    lcfg = LoRAConfig(rank=4, alpha=8.0)
    lora = init_lora(jax.random.PRNGKey(0), model, lcfg)
    rng = np.random.default_rng(0)
    lora = jax.tree.map(lambda x: np.asarray(x) + 0.05 * rng.standard_normal(x.shape, np.float32), lora)
    with np.load(os.path.join(FIXTURES, "reference", "qwen2.npz")) as z:
        batch = z["input_ids"], z["attention_mask"]
    expected = np.asarray(jax.jit(model.apply)(params, *batch, lora))
    return model, params, lcfg, lora, batch, expected


def test_save_hf_loads_back_with_the_same_logits(tmp_path, qwen2_with_lora):
    model, params, lcfg, lora, batch, expected = qwen2_with_lora
    out = tmp_path / "export"
    out.mkdir()
    (out / "stale.txt").write_text("replaced whole")
    save_hf(out, model, params, lora=lora, lora_config=lcfg, source=os.path.join(FIXTURES, "qwen2"))
    assert sorted(os.listdir(tmp_path)) == ["export"]           # no temp dirs left, old dir replaced
    assert {"config.json", "model.safetensors", "generation_config.json", "tokenizer.json",
            "tokenizer_config.json"} <= set(os.listdir(out)) and not (out / "stale.txt").exists()
    config = json.loads((out / "config.json").read_text())
    assert config["rope_theta"] == 1e6 and config["torch_dtype"] == config["dtype"] == "float32"
    with safe_open(out / "model.safetensors", framework="np") as f:
        assert "lm_head.weight" not in f.keys()                 # tied: written once, as HF does
        assert f.get_slice("model.layers.0.self_attn.k_proj.weight").get_shape() == [32, 64]   # [out, in]
    loaded, loaded_params = load_lm(out)
    assert loaded == model
    logits = np.asarray(jax.jit(loaded.apply)(loaded_params, *batch))
    mask = batch[1].astype(bool)
    assert np.abs(logits - expected)[mask].max() <= 1e-4


def test_save_hf_without_source_writes_its_own_config(tmp_path):
    model, params = load_lm(os.path.join(FIXTURES, "llama3"))
    save_hf(tmp_path / "llama", model, params)
    loaded, loaded_params = load_lm(tmp_path / "llama")
    assert loaded == model
    for a, b in zip(jax.tree.leaves(params), jax.tree.leaves(loaded_params)):
        np.testing.assert_array_equal(a, b)


def test_save_peft_names_and_shapes(tmp_path, qwen2_with_lora):
    model, _, lcfg, lora, _, _ = qwen2_with_lora
    save_peft(tmp_path / "adapter", model, lora, lcfg, "tests/fixtures/lm/qwen2")
    cfg = json.loads((tmp_path / "adapter" / "adapter_config.json").read_text())
    assert (cfg["peft_type"], cfg["task_type"], cfg["r"], cfg["lora_alpha"]) == ("LORA", "CAUSAL_LM", 4, 8.0)
    assert sorted(cfg["target_modules"]) == sorted(lcfg.targets)
    with safe_open(tmp_path / "adapter" / "adapter_model.safetensors", framework="np") as f:
        names = set(f.keys())
        a = f.get_tensor("base_model.model.model.layers.1.self_attn.k_proj.lora_A.weight")
        b = f.get_tensor("base_model.model.model.layers.1.mlp.down_proj.lora_B.weight")
    assert len(names) == 2 * 7 * model.config.num_layers
    assert a.shape == (4, 64) and b.shape == (64, 4)
    np.testing.assert_array_equal(a, np.asarray(lora["k_proj"]["a"][1]).T)
    np.testing.assert_array_equal(b, np.asarray(lora["down_proj"]["b"][1]).T)
    with pytest.raises(ValueError, match="do not match"):
        save_peft(tmp_path / "bad", model, lora, LoRAConfig(rank=4, alpha=4.0), "x")


def test_transformers_reads_the_export(tmp_path, qwen2_with_lora):
    """Skipped unless torch and transformers are importable (never in CI's jaxrl env)."""
    torch = pytest.importorskip("torch")
    transformers = pytest.importorskip("transformers")
    model, params, lcfg, lora, (ids, mask), expected = qwen2_with_lora
    save_hf(tmp_path / "export", model, params, lora=lora, lora_config=lcfg, source=os.path.join(FIXTURES, "qwen2"))
    hf = transformers.AutoModelForCausalLM.from_pretrained(tmp_path / "export", dtype=torch.float32,
                                                           attn_implementation="eager").eval()
    ids_t, mask_t = torch.as_tensor(ids), torch.as_tensor(mask)
    positions = (mask_t.cumsum(-1) - 1).masked_fill(mask_t == 0, 0)
    with torch.no_grad():
        logits = hf(input_ids=ids_t, attention_mask=mask_t, position_ids=positions).logits.numpy()
    assert np.abs(logits - expected)[mask.astype(bool)].max() <= 1e-4
