"""The checkpoint path once: ``<algo>.model.path`` supplies the tokenizer of a token task
unless ``env.tokenizer.path`` is set (:func:`jaxrl.run.config.tokenizer_from_model`), so
``configs/grpo_qwen2.5_0.5b_gsm8k.yaml`` names its checkpoint once; a config naming both keeps
its own tokenizer path."""

from __future__ import annotations

import json
import os

import pytest

from jaxrl.run import config as config_lib
from jaxrl.run.config import ConfigError

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
QWEN2 = os.path.join(ROOT, "tests", "fixtures", "lm", "qwen2")
GSM8K = os.path.join(ROOT, "configs", "grpo_qwen2.5_0.5b_gsm8k.yaml")


def _rows(tmp_path) -> list[str]:
    for name, start in (("train", 0), ("test", 10)):
        with open(tmp_path / f"{name}.jsonl", "w", encoding="utf-8") as f:
            f.writelines(json.dumps({"question": f"What is {a} + 1?", "answer": f"#### {a + 1}"}) + "\n" for a in range(start, start + 4))
    return [f"env.text.train={tmp_path / 'train.jsonl'}", f"env.text.held_out={tmp_path / 'test.jsonl'}", "env.text.prompt_len=96",
            "env.text.completion_len=8", "env.text.completion_bytes=64"]


def test_the_gsm8k_recipe_names_its_checkpoint_once():
    raw = config_lib.read_yaml(GSM8K)
    assert "path" not in raw["env"]["tokenizer"] and raw["grpo"]["model"]["path"]
    cfg = config_lib.load_config(GSM8K)
    assert cfg.env.tokenizer.path == cfg.algo_config.model.path == "models/Qwen2.5-0.5B-Instruct"
    assert cfg.env.tokenizer.system_prompt.startswith("Solve the problem")  # the section's other keys stay
    assert config_lib.config_to_dict(cfg)["env"]["tokenizer"]["path"] == cfg.algo_config.model.path  # config.yaml names it


def test_the_model_path_supplies_the_tokenizer_the_task_is_built_with(tmp_path):
    from jaxrl.run import build

    cfg = config_lib.load_config(GSM8K, [f"grpo.model.path={QWEN2}", *_rows(tmp_path)])
    assert cfg.env.tokenizer.path == QWEN2
    env = build.env_setup(cfg.env).env
    assert env.tokenizer_path == QWEN2


def test_a_tokenizer_path_of_its_own_is_kept(tmp_path):
    other = str(tmp_path / "elsewhere")
    cfg = config_lib.load_config(GSM8K, [f"grpo.model.path={QWEN2}", f"env.tokenizer.path={other}"])
    assert (cfg.env.tokenizer.path, cfg.algo_config.model.path) == (other, QWEN2)


def test_no_path_anywhere_is_one_line():
    raw = config_lib.read_yaml(GSM8K)
    raw["grpo"]["model"] = {"policy": "transformer"}
    with pytest.raises(ConfigError, match=r"^env\.tokenizer\.path: not set, and grpo\.model\.path names no checkpoint"):
        config_lib.config_from_dict(raw)


def test_an_env_section_alone_still_needs_the_path():
    """Without a run config (``jaxrl serve``'s env section) there is no model path to take."""
    env = config_lib.convert({"id": "text/File-v0", "tokenizer": {"system_prompt": "Be brief."}}, config_lib.EnvConfig, "env")
    with pytest.raises(ConfigError, match=r"^env\.tokenizer\.path: not set"):
        config_lib._check_env(env)
