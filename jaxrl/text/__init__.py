"""Text tasks for real tokenizers: datasets in, completions decoded to bytes on device, verifiers over bytes.

A pretrained model speaks its tokenizer's ids (byte-level BPE: a number may be one token or
three, a token may hold half a UTF-8 character). This package is the text side of RL with
verifiable rewards, all of it inside the compiled program:

* :mod:`jaxrl.text.bytes`: a token-id -> bytes table read from a tokenizer; completions
  become byte strings on device (gather + compaction), equal to ``tokenizer.decode``.
* :mod:`jaxrl.text.verifiers`: total, bounded verifiers over bytes (exact and numeric
  answers, answer tags, ``\\boxed{}``, format, length, ``difflib``'s ratio) that compose with
  :mod:`jaxrl.verifiers`' combinators; :mod:`jaxrl.text.reference` is each in plain Python;
  :mod:`jaxrl.text.rubric` makes ``env.text.reward`` one of them, scored in one pass
  (:mod:`jaxrl.text.onepass`).
* :mod:`jaxrl.text.data`: prompts from JSONL/Parquet files, datasets saved on disk or
  procedural generators, rendered with the chat template and tokenized once on the host
  into fixed-shape arrays.
* :mod:`jaxrl.text.task`: :class:`~jaxrl.text.task.TextTask`, the token env those arrays
  make (one completion, a byte verifier's reward), and its demonstrations for SFT.
* :mod:`jaxrl.text.config` and :mod:`jaxrl.text.tokenized`: ``env.tokenizer`` and ``env.text``,
  and a registered task built once in a checkpoint's tokenizer ids (a text task from its rows,
  a task of its own small vocabulary through a symbol map).
* :mod:`jaxrl.text.python_reward`: the one exception to "inside the program": a TRL-style
  Python reward function called on the decoded completions through one host callback.

Guide: ``docs/text_tasks.md``.
"""
