"""Make the project's small byte-level BPE tokenizer (``tokenizer.json`` + ``tokenizer_config.json``).

Run ``python envs/assets/text_tokenizer/make.py`` from the repository root; it rewrites the two
files beside this script, byte for byte the same on every run (a fixed corpus, a fixed
trainer). The tokenizer is Qwen2's design at a small scale:

* pre-tokenizer: Qwen2's split regex (every digit its own token, words with their leading
  space, punctuation runs) then GPT-2's byte-level alphabet, so any UTF-8 text encodes;
* model: BPE with ``VOCAB_SIZE`` ids, trained on a procedural corpus: the two text tasks'
  prompts and reference completions (``text/WordProblems-v0``, ``text/AlphabetSortText-v0``),
  the chat template's words and plain English-ish filler sentences;
* special tokens ``<|endoftext|>`` (id 0, pad), ``<|im_start|>`` (1), ``<|im_end|>`` (2, eos);
* a Qwen-style chat template (``<|im_start|>role\\ncontent<|im_end|>\\n`` per message,
  ``<|im_start|>assistant\\n`` to open the answer), no default system message.
"""

from __future__ import annotations

import json
import os
import random
import sys

VOCAB_SIZE = 768
SPECIALS = ("<|endoftext|>", "<|im_start|>", "<|im_end|>")
# Qwen2's pre-tokenizer pattern (tokenizer.json of Qwen2/Qwen2.5): \p{N} alone splits digits.
QWEN2_PATTERN = (
    r"(?i:'s|'t|'re|'ve|'m|'ll|'d)|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*|\s*[\r\n]+|\s+(?!\S)|\s+"
)
CHAT_TEMPLATE = (
    "{% for message in messages %}"
    "{{ '<|im_start|>' + message['role'] + '\\n' + message['content'] + '<|im_end|>' + '\\n' }}"
    "{% endfor %}"
    "{% if add_generation_prompt %}{{ '<|im_start|>assistant\\n' }}{% endif %}"
)
FILLER_WORDS = (
    "the a an and or but if then so because when while after before with without about over under into from "
    "to of in on at by for is are was were be been has have had do does did can will would should could may "
    "I you he she it we they my your his her its our their this that these those there here what which who "
    "how many much more less some all each every no not one two three first last next new old good small big "
    "long short day time year way thing man woman child world life hand part place week work point number "
    "people water room house school home friend story question answer reply name list sort order word letter "
    "say said make made take took give gave find found think know see look come go went get got use want tell"
).split()


def corpus(seed: int = 0) -> list[str]:
    """The training text, a fixed function of ``seed``."""
    sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
    from jaxrl_envs.text import alphabet_sort_text, word_problems

    rng = random.Random(seed)
    lines = []
    for row in word_problems.generate_rows(seed, 6000) + alphabet_sort_text.generate_rows(seed, 6000):
        lines += [row["prompt"], row["completion"], row["answer"]]
    for _ in range(6000):
        words = [rng.choice(FILLER_WORDS) for _ in range(rng.randint(4, 14))]
        lines.append(" ".join(words).capitalize() + rng.choice((".", "?", "!", ",")))
    lines += ["user", "assistant", "system", "You are a helpful assistant."] * 200
    return lines


def make(out_dir: str) -> None:
    """Train the tokenizer and write ``tokenizer.json`` and ``tokenizer_config.json`` to ``out_dir``."""
    from tokenizers import Regex, Tokenizer, decoders, models, pre_tokenizers, trainers

    tok = Tokenizer(models.BPE())
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.Split(Regex(QWEN2_PATTERN), behavior="isolated", invert=False),
        pre_tokenizers.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False),
    ])
    tok.decoder = decoders.ByteLevel(add_prefix_space=False, trim_offsets=False, use_regex=False)
    trainer = trainers.BpeTrainer(
        vocab_size=VOCAB_SIZE, min_frequency=2, special_tokens=list(SPECIALS),
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(), show_progress=False,
    )
    tok.train_from_iterator(corpus(), trainer=trainer)
    with open(os.path.join(out_dir, "tokenizer.json"), "w", encoding="utf-8") as f:
        f.write(json.dumps(json.loads(tok.to_str()), ensure_ascii=False, indent=1, sort_keys=True) + "\n")
    config = {
        "tokenizer_class": "PreTrainedTokenizerFast",
        "bos_token": None,
        "eos_token": "<|im_end|>",
        "pad_token": "<|endoftext|>",
        "unk_token": None,
        "model_max_length": 512,
        "clean_up_tokenization_spaces": False,
        "chat_template": CHAT_TEMPLATE,
        "added_tokens_decoder": {
            str(i): {"content": t, "lstrip": False, "normalized": False, "rstrip": False, "single_word": False, "special": True}
            for i, t in enumerate(SPECIALS)
        },
    }
    with open(os.path.join(out_dir, "tokenizer_config.json"), "w", encoding="utf-8") as f:
        f.write(json.dumps(config, ensure_ascii=False, indent=1, sort_keys=True) + "\n")


if __name__ == "__main__":
    make(os.path.dirname(os.path.abspath(__file__)))
