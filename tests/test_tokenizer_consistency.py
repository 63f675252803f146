"""jaxrl.models.lm.tokenizer_check: a checkpoint whose tokenizer.json groups digits while the
class transformers' AutoTokenizer picks splits them is warned about at load, with the string
and both encodings; ``save_hf`` (``jaxrl export-hf``) writes a directory AutoTokenizer reads to
the same ids, or names the loader that does where transformers forces its class (qwen2). With
transformers installed the emulation is checked against the real AutoTokenizer."""

import json
import os
import shutil

import pytest

from jaxrl.models.lm import load_lm, load_tokenizer, save_hf
from jaxrl.models.lm import tokenizer_check as tc

FIXTURES = os.path.join(os.path.dirname(__file__), "fixtures", "lm")
TEXT_MODEL = os.path.join(os.path.dirname(__file__), os.pardir, "envs", "assets", "text_model")
DIGITS = "Which is larger, 1234 or 987?"
GROUPED = tc.QWEN2_REGEX.replace(r"|\p{N}|", r"|\p{N}{1,3}|")  # Llama 3's digit groups


def _digits_tokenizer() -> str:
    """A byte-level BPE whose pre-tokenizer keeps up to three digits together, trained so
    that multi-digit tokens exist."""
    import tokenizers
    from tokenizers import decoders, models, pre_tokenizers, trainers

    tok = tokenizers.Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(tokenizers.Regex(GROUPED), behavior="isolated"),
        pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
    tok.decoder = decoders.ByteLevel()
    lines = [f"Which is larger, {a} or {b}? {a * b}" for a in range(100, 1000, 7) for b in (12, 987, 1234)]
    tok.train_from_iterator(lines, trainers.BpeTrainer(vocab_size=400, special_tokens=["<|endoftext|>", "<|im_end|>"],
                                                       initial_alphabet=pre_tokenizers.ByteLevel.alphabet()))
    return tok.to_str()


@pytest.fixture(scope="module")
def digits_dir(tmp_path_factory):
    """``llama``'s config.json beside the digit-grouping tokenizer, declared ``Qwen2Tokenizer``."""
    root = tmp_path_factory.mktemp("digits")
    (root / "tokenizer.json").write_text(_digits_tokenizer(), encoding="utf-8")
    (root / "tokenizer_config.json").write_text(json.dumps(
        {"tokenizer_class": "Qwen2Tokenizer", "eos_token": "<|im_end|>", "pad_token": "<|endoftext|>", "unk_token": None,
         "bos_token": None}))
    shutil.copy(os.path.join(FIXTURES, "llama3", "config.json"), root / "config.json")
    return str(root)


def _as_qwen2(src: str, dst) -> str:
    shutil.copytree(src, dst)
    shutil.copy(os.path.join(FIXTURES, "qwen2", "config.json"), os.path.join(dst, "config.json"))
    return str(dst)


def test_the_class_transformers_picks():
    assert tc.transformers_class(os.path.join(FIXTURES, "qwen2")) == "Qwen2Tokenizer"   # qwen2: forced
    assert tc.transformers_class(os.path.join(FIXTURES, "qwen3")) == "TokenizersBackend"
    assert tc.transformers_class(os.path.join(FIXTURES, "llama3")) == "TokenizersBackend"
    assert tc.transformers_class(os.path.join(FIXTURES, "mistral")) == "TokenizersBackend"


def test_digit_groups_are_found_and_warned_once(digits_dir, capsys):
    found = tc.mismatch(digits_dir)
    assert found is not None and found.transformers_class == "Qwen2Tokenizer"
    assert any(ch.isdigit() for ch in found.text) and len(found.ours) < len(found.theirs)
    tok = load_tokenizer(digits_dir)
    load_tokenizer(digits_dir)
    err = capsys.readouterr().err.splitlines()
    assert len(err) == 1 and err[0].startswith("jaxrl: warning: ") and repr(found.text) in err[0]
    assert str(found.ours[:12])[1:-1] in err[0] and "Qwen2Tokenizer" in err[0]
    assert tok.encode(found.text) == found.ours


def _with_added_token(dst) -> str:
    """The qwen3 fixture (read as-is by transformers) whose tokenizer_config.json declares a token
    and an end-of-sequence token that its tokenizer.json lacks."""
    shutil.copytree(os.path.join(FIXTURES, "qwen3"), dst)
    path = os.path.join(dst, "tokenizer_config.json")
    cfg = json.loads(open(path, encoding="utf-8").read())
    cfg["added_tokens_decoder"]["405"] = {"content": "<tool>", "special": False, "normalized": False}
    cfg["eos_token"] = "<|eot|>"
    open(path, "w", encoding="utf-8").write(json.dumps(cfg))
    return str(dst)


def test_added_tokens_the_config_declares_are_found(tmp_path):
    found = tc.mismatch(_with_added_token(tmp_path / "added"))
    assert found is not None and found.transformers_class == "TokenizersBackend" and "<tool>" in found.text
    assert len(found.theirs) < len(found.ours) and "adds tokenizer_config.json's added" in found.line("X")


def test_consistent_checkpoints_are_quiet():
    for name in ("qwen2", "qwen3", "llama3", "mistral"):
        assert tc.mismatch(os.path.join(FIXTURES, name), nfc=False) is None, name
    # the shipped CPU model lacks Qwen2Tokenizer's NFC normalizer: a difference only on decomposed text
    assert tc.mismatch(TEXT_MODEL) is None
    assert tc.mismatch(TEXT_MODEL, nfc=False) is not None


@pytest.fixture(scope="module")
def llama():
    return load_lm(os.path.join(FIXTURES, "llama3"))


def test_export_declares_the_class_that_reads_tokenizer_json(digits_dir, llama, tmp_path, capsys):
    model, params = llama
    out = save_hf(tmp_path / "out", model, params, source=digits_dir)
    assert json.loads((tmp_path / "out" / "tokenizer_config.json").read_text())["tokenizer_class"] == tc.AS_IS_CLASS
    assert tc.mismatch(out, nfc=False) is None
    assert "warning" not in capsys.readouterr().err


def test_export_of_a_qwen2_checkpoint_names_the_loader(digits_dir, llama, tmp_path, capsys):
    model, params = llama
    src = _as_qwen2(digits_dir, tmp_path / "src")
    save_hf(tmp_path / "out", model, params, source=src)
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "PreTrainedTokenizerFast(tokenizer_file=" in err[0] and "'qwen2'" in err[0]


def test_the_real_autotokenizer_agrees(digits_dir, llama, tmp_path):
    """The emulation against transformers itself, and the export's round trip."""
    transformers = pytest.importorskip("transformers")
    import tokenizers

    def ids(tok, text):
        return tok.encode(text, add_special_tokens=False)

    src = _as_qwen2(digits_dir, tmp_path / "q2")
    added = _with_added_token(tmp_path / "added")
    for path in (digits_dir, src, TEXT_MODEL, os.path.join(FIXTURES, "qwen2"), added):
        state = json.loads(open(os.path.join(path, "tokenizer.json"), encoding="utf-8").read())
        real = transformers.AutoTokenizer.from_pretrained(path)
        assert type(real).__name__ == tc.transformers_class(path)
        emulated = tc.emulate(path, type(real).__name__, state)
        for text in [*tc.PROBES, "call <tool> now", "end <|eot|> x"]:
            assert emulated.encode(text, add_special_tokens=False).ids == ids(real, text), (path, text)
    model, params = llama
    out = save_hf(tmp_path / "out", model, params, source=digits_dir)
    ours = tokenizers.Tokenizer.from_file(os.path.join(out, "tokenizer.json"))
    real = transformers.AutoTokenizer.from_pretrained(out)
    assert ids(real, DIGITS) == ours.encode(DIGITS, add_special_tokens=False).ids
    assert len(ids(transformers.AutoTokenizer.from_pretrained(digits_dir), DIGITS)) > len(ids(real, DIGITS))
    fast = transformers.PreTrainedTokenizerFast(tokenizer_file=os.path.join(src, "tokenizer.json"))
    assert ids(fast, DIGITS) == ours.encode(DIGITS, add_special_tokens=False).ids
