"""Hostile files and values get one line (issue 40, items 5 and 6): LM checkpoint directories
(paths outside the directory, FIFOs and devices, absurd sizes, bad config values, non-float
weights), text rows and bounds, and the config leftovers of round 3. Every case is built in
``tmp_path`` from the tiny fixtures; nothing here compiles a model.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import signal
import types

import numpy as np
import pytest

from jaxrl.models.lm import LMConfig, load_lm, load_tokenizer
from jaxrl.models.lm import config as lm_config

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
FIXTURES = os.path.join(REPO, "tests", "fixtures", "lm")


@pytest.fixture
def no_hang():
    """A FIFO that is opened blocks forever: fail the test instead (no timing is asserted)."""
    def stuck(*_):
        raise AssertionError("blocked on a FIFO")

    old = signal.signal(signal.SIGALRM, stuck)
    signal.alarm(20)
    yield
    signal.alarm(0)
    signal.signal(signal.SIGALRM, old)


def _copy(tmp_path, name="qwen2"):
    dst = tmp_path / name
    shutil.copytree(os.path.join(FIXTURES, name), dst)
    return dst


def _one_line(exc_info) -> str:
    text = str(exc_info.value)
    assert "\n" not in text and exc_info.type is ValueError
    return text


# -- checkpoint directory: where files may come from, and what they may be ---------------------------


@pytest.mark.parametrize("entry", ["../outside/x.safetensors", "/tmp/x.safetensors", "sub/../../x.safetensors",
                                   "linked/x.safetensors"])
def test_index_entry_outside_the_directory_is_refused(tmp_path, entry):
    ckpt = _copy(tmp_path, "llama3")
    outside = tmp_path / "outside"
    outside.mkdir()
    shutil.copy(ckpt / "model-00001-of-00007.safetensors", outside / "x.safetensors")
    os.symlink(outside, ckpt / "linked")   # a folder inside that leads outside
    index = json.loads((ckpt / "model.safetensors.index.json").read_text())
    first = next(iter(index["weight_map"]))
    index["weight_map"][first] = entry
    (ckpt / "model.safetensors.index.json").write_text(json.dumps(index))
    with pytest.raises(ValueError) as exc:
        load_lm(str(ckpt))
    assert "outside the checkpoint directory" in _one_line(exc) and repr(entry) in str(exc.value)


@pytest.mark.parametrize("name", ["config.json", "generation_config.json", "model.safetensors", "tokenizer.json",
                                  "tokenizer_config.json"])
def test_fifo_in_the_checkpoint_is_refused_without_blocking(tmp_path, no_hang, name):
    ckpt = _copy(tmp_path)
    os.remove(ckpt / name)
    os.mkfifo(ckpt / name)
    with pytest.raises(ValueError) as exc:
        load_tokenizer(str(ckpt)) if name.startswith("tokenizer") else load_lm(str(ckpt))
    assert f"{name}: is a FIFO, not a regular file" in _one_line(exc)


@pytest.mark.parametrize("name", ["model.safetensors", "config.json", "tokenizer.json"])
def test_symlink_to_a_device_is_refused(tmp_path, name):
    ckpt = _copy(tmp_path)
    os.remove(ckpt / name)
    os.symlink("/dev/zero", ckpt / name)
    with pytest.raises(ValueError) as exc:
        load_tokenizer(str(ckpt)) if name.startswith("tokenizer") else load_lm(str(ckpt))
    assert "is a character device, not a regular file" in _one_line(exc)


def test_symlinked_regular_weights_still_load(tmp_path):
    """The Hugging Face cache keeps files as symlinks to blobs outside the snapshot folder."""
    ckpt = _copy(tmp_path)
    blob = tmp_path / "blob"
    os.replace(ckpt / "model.safetensors", blob)
    os.symlink(blob, ckpt / "model.safetensors")
    model, params = load_lm(str(ckpt))
    assert params["embed_tokens"].shape == (model.config.vocab_size, model.config.hidden_size)


def test_safetensors_larger_than_the_config_allows_is_refused_before_reading(tmp_path):
    ckpt = _copy(tmp_path)
    from jaxrl.models.lm.load import max_weight_bytes, read_config

    cap = max_weight_bytes(read_config(str(ckpt)))
    with open(ckpt / "model.safetensors", "r+b") as f:
        f.truncate(cap + 1)   # sparse: no disk used
    with pytest.raises(ValueError) as exc:
        load_lm(str(ckpt))
    assert f"{cap + 1:,} bytes, more than the {cap:,} bytes a checkpoint of config.json can need" in _one_line(exc)


@pytest.mark.parametrize("dtype", [np.int8, np.bool_])
def test_non_float_weight_is_refused_by_name(tmp_path, dtype):
    from safetensors.numpy import load_file, save_file

    ckpt = _copy(tmp_path)
    tensors = load_file(str(ckpt / "model.safetensors"))
    tensors["model.norm.weight"] = np.ones_like(tensors["model.norm.weight"], dtype=dtype)
    save_file(tensors, str(ckpt / "model.safetensors"))
    with pytest.raises(ValueError) as exc:
        load_lm(str(ckpt))
    kind = "I8" if dtype is np.int8 else "BOOL"
    assert f"tensor 'model.norm.weight' has dtype {kind}, expected a floating-point weight" in _one_line(exc)


def test_model_larger_than_memory_is_refused_before_reading(tmp_path):
    ckpt = _copy(tmp_path)
    cfg = json.loads((ckpt / "config.json").read_text())
    cfg.update(hidden_size=16384, num_attention_heads=128, num_key_value_heads=8, intermediate_size=53248,
               num_hidden_layers=400, vocab_size=152064)
    (ckpt / "config.json").write_text(json.dumps(cfg))
    with pytest.raises(ValueError) as exc:
        load_lm(str(ckpt))
    assert "GiB in float32, more than this machine's" in _one_line(exc)


# -- config.json values ----------------------------------------------------------------------------------


def _qwen2() -> dict:
    with open(os.path.join(FIXTURES, "qwen2", "config.json")) as f:
        return json.load(f)


def _llama3() -> dict:
    with open(os.path.join(FIXTURES, "llama3", "config.json")) as f:
        return json.load(f)


BAD_VALUES = [
    ("num_hidden_layers", 1e9, "make a model of ~"),
    ("num_attention_heads", 0, "'num_attention_heads' must be a positive integer"),
    ("num_key_value_heads", 3, "is not a multiple of num_key_value_heads = 3"),
    ("head_dim", 0, "'head_dim' must be a positive integer"),
    ("vocab_size", 512.5, "'vocab_size' must be a positive integer"),
    ("hidden_size", "64", "'hidden_size' must be a positive integer"),
    ("intermediate_size", -1, "'intermediate_size' must be a positive integer"),
    ("max_position_embeddings", 0, "'max_position_embeddings' must be a positive integer"),
    ("rms_norm_eps", 0, "'rms_norm_eps' must be a finite number above 0 and below 1"),
    ("rms_norm_eps", -1e-6, "'rms_norm_eps' must be a finite number above 0"),
    ("rms_norm_eps", math.nan, "'rms_norm_eps' must be a finite number"),
    ("rms_norm_eps", math.inf, "'rms_norm_eps' must be a finite number"),
    ("rms_norm_eps", 1e30, "'rms_norm_eps' must be a finite number above 0 and below 1"),
    ("rope_theta", 0, "'rope_theta' must be a finite number above 0"),
    ("rope_theta", -1, "'rope_theta' must be a finite number above 0"),
    ("rope_theta", math.nan, "'rope_theta' must be a finite number above 0"),
    ("rope_theta", math.inf, "'rope_theta' must be a finite number above 0"),
    ("eos_token_id", [1.5], "'eos_token_id' must be an integer >= 0"),
]


@pytest.mark.parametrize("key,value,message", BAD_VALUES)
def test_bad_config_value_is_refused(key, value, message):
    with pytest.raises(ValueError) as exc:
        LMConfig.from_hf({**_qwen2(), key: value}, source="config.json")
    assert message in _one_line(exc) and _one_line(exc).startswith("config.json: ")


def test_absurd_depth_gives_the_estimate():
    with pytest.raises(ValueError) as exc:
        LMConfig.from_hf({**_qwen2(), "num_hidden_layers": 1e9}, source="config.json")
    count = lm_config.parameter_count(512, 64, 10**9, 4, 2, 16, 128, True)
    assert f"~{count:.3g} parameters" in _one_line(exc)


@pytest.mark.parametrize("key,value", [("factor", 0), ("low_freq_factor", -1.0), ("high_freq_factor", math.nan),
                                        ("original_max_position_embeddings", 0), ("high_freq_factor", 1.0)])
def test_bad_rope_factor_is_refused(key, value):
    cfg = _llama3()
    assert cfg["rope_parameters"]["rope_type"] == "llama3"
    cfg["rope_parameters"] = {**cfg["rope_parameters"], key: value}
    with pytest.raises(ValueError) as exc:
        LMConfig.from_hf(cfg, source="config.json")
    assert key in _one_line(exc)


def test_integral_floats_are_read_as_integers():
    c = LMConfig.from_hf({**_qwen2(), "hidden_size": 64.0, "vocab_size": 5.12e2})
    assert (c.hidden_size, c.vocab_size) == (64, 512) and isinstance(c.vocab_size, int)


def test_bad_config_file_through_load_lm(tmp_path):
    ckpt = _copy(tmp_path)
    (ckpt / "config.json").write_text(json.dumps({**_qwen2(), "num_attention_heads": 0}))
    with pytest.raises(ValueError) as exc:
        load_lm(str(ckpt))
    assert "config.json: key 'num_attention_heads' must be a positive integer, got 0" in _one_line(exc)
    (ckpt / "config.json").write_text("[" * 100_000)
    with pytest.raises(ValueError) as exc:
        load_lm(str(ckpt))
    assert "config.json: not valid JSON" in _one_line(exc)


def test_sequence_beyond_max_position_embeddings_is_refused(tmp_path):
    from jaxrl.algos.common.lm import program as lm_program

    cfg = types.SimpleNamespace(model=types.SimpleNamespace(path=os.path.join(FIXTURES, "qwen2")))
    leaves = ("params",)
    lm_program.model_params(cfg, "grpo", leaves, lambda *a: 0, 256)   # exactly the checkpoint's 256: fine
    with pytest.raises(ValueError) as exc:
        lm_program.model_params(cfg, "grpo", leaves, lambda *a: 0, 257)
    assert "a sequence of 257 tokens" in _one_line(exc) and "max_position_embeddings = 256" in str(exc.value)


# -- text rows and env.text bounds ---------------------------------------------------------------------


def _tokenizer():
    return load_tokenizer(os.path.join(FIXTURES, "tokenizer"))


def test_deeply_nested_jsonl_row_is_a_bad_row(tmp_path):
    from jaxrl.text import data

    path = tmp_path / "rows.jsonl"
    path.write_text(json.dumps({"prompt": "2+2?", "answer": "4"}) + "\n" + "[" * 100_000 + "]" * 100_000 + "\n")
    rows = data.read_rows(str(path))
    assert rows[1] == data.BadLine("JSON nested too deeply")
    enc = data.encode_rows(rows, _tokenizer(), prompt_len=32, answer_bytes=8, source="rows.jsonl")
    assert len(enc) == 1 and enc.report.counts == {"JSON nested too deeply": 1}


def test_fifo_rows_file_is_refused_without_blocking(tmp_path, no_hang):
    from jaxrl.text import data

    os.mkfifo(tmp_path / "rows.jsonl")
    with pytest.raises(FileNotFoundError, match="rows.jsonl: not a regular file"):
        data.read_rows(str(tmp_path / "rows.jsonl"))


def test_answer_bytes_far_above_the_data_is_refused_before_allocating():
    from jaxrl.text import data

    rows = [{"prompt": f"{i}+1?", "answer": str(i + 1)} for i in range(3)]
    with pytest.raises(ValueError) as exc:
        data.encode_rows(rows, _tokenizer(), prompt_len=32, answer_bytes=10**8, source="rows.jsonl")
    assert "the longest answer there is 1 bytes" in _one_line(exc)
    enc = data.encode_rows(rows, _tokenizer(), prompt_len=32, answer_bytes=4, source="rows.jsonl")
    np.testing.assert_array_equal(enc.answers, [[49, 0, 0, 0], [50, 0, 0, 0], [51, 0, 0, 0]])


def test_model_vocab_size_reads_config_json_safely(tmp_path, no_hang):
    from jaxrl.text import data

    tok = _tokenizer()
    ckpt = _copy(tmp_path)
    assert data.model_vocab_size(str(ckpt), tok) == 512
    (ckpt / "config.json").write_text(json.dumps({"vocab_size": 512.5}))
    with pytest.raises(ValueError, match="'vocab_size' must be a positive integer, got 512.5"):
        data.model_vocab_size(str(ckpt), tok)
    os.remove(ckpt / "config.json")
    os.mkfifo(ckpt / "config.json")
    with pytest.raises(ValueError, match="is a FIFO"):
        data.model_vocab_size(str(ckpt), tok)


@pytest.mark.parametrize("override,message", [
    ("env.text.num_train=2147483648", "env.text.num_train: num_train=2,147,483,648"),
    ("env.text.held_out_every=2147483648", "env.text.held_out_every: "),
    ("env.text.num_held_out=2147483648", "env.text.num_held_out: "),
    ("env.text.answer_bytes=1000000000", "env.text.answer_bytes: at most 65,536 bytes"),
    ("env.text.completion_bytes=1000000000", "env.text.completion_bytes: at most 65,536 bytes"),
    ("env.text.prompt_len=1000000000", "env.text.prompt_len: at most 131,072 tokens"),
])
def test_text_bounds_are_refused_when_the_config_is_read(override, message):
    from jaxrl.run.config import ConfigError, load_config

    with pytest.raises(ConfigError) as exc:
        load_config(os.path.join(REPO, "configs", "grpo_word_problems.yaml"), [override])
    assert message in str(exc.value) and "\n" not in str(exc.value)


def test_resume_of_a_run_killed_before_its_first_write_says_how_to_start_again(tmp_path):
    """The first compile runs before the run directory is written: a kill there leaves no
    config.yaml (at most an empty --out folder), so there is nothing to resume."""
    from jaxrl.run.config import ConfigError
    from jaxrl.run.resume import resolve_resume

    for run_dir in (tmp_path / "never", tmp_path / "empty"):
        if run_dir.name == "empty":
            run_dir.mkdir()
        with pytest.raises(ConfigError) as exc:
            resolve_resume(None, str(run_dir))
        assert f"start it again with `jaxrl train CONFIG --out {run_dir}`" in str(exc.value)
        assert "\n" not in str(exc.value)


def test_a_run_names_the_model_path_key_when_the_checkpoint_is_refused(tmp_path, no_hang):
    from jaxrl.algos.common import lm as common_lm

    ckpt = _copy(tmp_path)
    os.remove(ckpt / "config.json")
    os.mkfifo(ckpt / "config.json")
    with pytest.raises(ValueError) as exc:
        common_lm.load_model(types.SimpleNamespace(path=str(ckpt), dtype="float32"), 512, "task")
    assert _one_line(exc) == f"model.path: {ckpt}/config.json: is a FIFO, not a regular file"
