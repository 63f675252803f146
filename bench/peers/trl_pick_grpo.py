"""TRL's GRPOTrainer on the ``pick`` task from a jaxrl SFT run's ``export-hf`` (issue 42, item 3).

Runs in its own virtual environment (torch is never a jaxrl dependency)::

    python3 -m venv /work/trlvenv
    /work/trlvenv/bin/pip install torch==2.13.0 trl==1.16.0 transformers   # a CPU build of torch
    /work/trlvenv/bin/python bench/peers/trl_pick_grpo.py --model SFT_EXPORT --out DIR --seed 1

``bench/text_grpo_trl.py`` calls it once per seed, scores the saved model with jaxrl's own
held-out evaluation and writes the side-by-side record.

Settings matched with ``configs/grpo_pick_larger.yaml`` (what differs is said beside it):

* 16 prompts x 8 generations per update (``per_device_train_batch_size`` 128, one
  gradient step per generation batch: ``num_iterations`` 1, ``steps_per_generation`` 1), 60
  updates; the same 4000 training prompts (``bench/assets/pick_larger/train.jsonl``) in the
  same chat template (checked: every prompt's ids equal jaxrl's, given in ``--prompt-ids``).
  TRL walks a shuffled copy of the rows; jaxrl draws each prompt uniformly with replacement.
* DAPO loss (``loss_type="dapo"``: token mean over the batch), clip 0.2 / 0.28, beta 0,
  rewards scaled by the group's std (jaxrl's ``scale_rewards: auto`` for dapo).
* Adam with weight decay 0 (``adamw_torch``), b1 0.9, b2 0.99, eps 1e-8, gradient norm
  clipped at 1, constant lr 3e-4 without warm-up: jaxrl's optimiser, torch's arithmetic.
* Sampling: temperature 1 (no top-k / top-p), at most 16 completion tokens (jaxrl's
  ``text/File-v0`` completion cap), stop at the tokenizer's eos ``<|im_end|>``; float32.
* The reward: :func:`pick_reward`, jaxrl's rubric ``{answer: numeric, extract: answer_tag,
  format_weight: 0.1}`` written as a TRL reward function over the decoded text
  (``bench/text_grpo_trl.py check`` compares it with jaxrl's scorer on this run's completions).

Writes ``DIR/model`` (the final model and tokenizer, Hugging Face format), ``DIR/curve.jsonl``
(TRL's logged metrics per update), ``DIR/completions.jsonl`` (the completions of a few
updates with the reward given, for the check) and ``DIR/peer.json`` (versions, threads,
CPU and wall seconds of the training alone and of the whole process).
"""

from __future__ import annotations

import argparse
import json
import os
import re
import resource
import time

# -- the reward: jaxrl's rubric rules for {answer: numeric, extract: answer_tag, format_weight: 0.1}

FORMAT_WEIGHT = 0.1
WHITESPACE = " \t\n\r\x0b\x0c"
_TAG = re.compile(r"<answer>(.*?)</answer>", re.DOTALL)
_RUN = re.compile(r"[0-9.,]+")
_NUMBER = re.compile(r"(?:\d{1,3}(?:,\d{3})+|\d*)(?:\.\d+)?")


def _last_number(text: str) -> str | None:
    """The last number of ``text`` in canonical form (sign, integer digits without commas or
    leading zeros, fraction without trailing zeros), or None."""
    found = None
    for m in _RUN.finditer(text):
        run = m.group()
        body = run.lstrip(",").rstrip(".,")
        start = m.start() + len(run) - len(run.lstrip(","))
        if not any(c.isdigit() for c in body) or not _NUMBER.fullmatch(body):
            continue
        whole, _, frac = body.replace(",", "").partition(".")
        whole, frac = whole.lstrip("0"), frac.rstrip("0")
        canon = (whole or "0") + ("." + frac if frac else "")
        negative = start > 0 and text[start - 1] == "-" and (whole + frac).strip("0") != ""
        found = ("-" if negative else "") + canon
    return found


def _format_ok(text: str) -> bool:
    """``<answer>`` and ``</answer>`` once each, in that order, nothing but whitespace after."""
    if text.count("<answer>") != 1 or text.count("</answer>") != 1:
        return False
    o, c = text.find("<answer>"), text.find("</answer>")
    return c >= o + len("<answer>") and not text[c + len("</answer>"):].strip(WHITESPACE)


def _text(completion) -> str:
    """A TRL completion: a string, or a conversation's messages (the assistant's content)."""
    if isinstance(completion, str):
        return completion
    return "".join(m["content"] for m in completion)


def pick_reward(completions, answer, **kwargs) -> list[float]:
    """TRL reward function: 1 when the last number inside the first ``<answer>...</answer>``
    equals the answer's, plus 0.1 when the format holds (jaxrl's rubric, same rules)."""
    out = []
    for completion, want in zip(completions, answer, strict=True):
        text = _text(completion)
        m = _TAG.search(text)
        got = _last_number(m.group(1)) if m else None
        correct = got is not None and got == _last_number(str(want))
        out.append(float(correct) + FORMAT_WEIGHT * float(_format_ok(text)))
    return out


# -- the run --------------------------------------------------------------------------------


def _cpu_s() -> float:
    r = resource.getrusage(resource.RUSAGE_SELF)
    return r.ru_utime + r.ru_stime


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--model", required=True, help="the jaxrl SFT run's export-hf directory")
    ap.add_argument("--out", required=True, help="output directory (model/, curve.jsonl, completions.jsonl, peer.json)")
    ap.add_argument("--seed", type=int, required=True, help="TRL's seed (the run's train.seed)")
    ap.add_argument("--train", default="bench/assets/pick_larger/train.jsonl")
    ap.add_argument("--prompt-ids", help="JSON: jaxrl's prompt ids per training row, to check the template and tokenizer")
    ap.add_argument("--updates", type=int, default=60)
    ap.add_argument("--lr", type=float, default=3e-4)
    ap.add_argument("--log-completions", type=int, default=4, help="updates whose completions go to completions.jsonl")
    args = ap.parse_args()
    cpu0, wall0 = _cpu_s(), time.perf_counter()

    import datasets
    import torch
    import transformers
    import trl
    from transformers import AutoModelForCausalLM, PreTrainedTokenizerFast, TrainerCallback
    from trl import GRPOConfig, GRPOTrainer

    os.makedirs(args.out, exist_ok=True)
    with open(args.train, encoding="utf-8") as f:
        rows = [json.loads(line) for line in f]
    tokenizer = PreTrainedTokenizerFast.from_pretrained(args.model)
    if args.prompt_ids:
        with open(args.prompt_ids) as f:
            want = json.load(f)
        if len(want) != len(rows):
            raise SystemExit(f"trl_pick_grpo: --prompt-ids has {len(want)} rows, {args.train} {len(rows)}")
        for i, (row, ids) in enumerate(zip(rows, want)):
            got = tokenizer.apply_chat_template([{"role": "user", "content": row["prompt"]}], add_generation_prompt=True,
                                                tokenize=True, return_dict=False)
            if list(got) != ids:
                raise SystemExit(f"trl_pick_grpo: row {i + 1}: TRL's prompt ids {list(got)} differ from jaxrl's {ids}")
        print(f"trl_pick_grpo: the {len(rows)} prompts' ids equal jaxrl's", flush=True)
    data = datasets.Dataset.from_list([{"prompt": [{"role": "user", "content": r["prompt"]}], "answer": r["answer"]}
                                       for r in rows])
    model = AutoModelForCausalLM.from_pretrained(args.model, dtype=torch.float32)

    logged, completions = [], []
    log_path, completions_path = os.path.join(args.out, "curve.jsonl"), os.path.join(args.out, "completions.jsonl")

    def reward(completions_, answer, completion_ids=None, trainer_state=None, **kwargs):
        values = pick_reward(completions_, answer)
        step = trainer_state.global_step if trainer_state is not None else 0
        if step < args.log_completions or step >= args.updates - args.log_completions:
            for text, ids, ans, v in zip(completions_, completion_ids or [None] * len(values), answer, values):
                completions.append({"update": step, "text": _text(text), "ids": list(ids) if ids is not None else None,
                                    "answer": ans, "reward": v})
        return values

    def pick(prompts, completions, answer, completion_ids=None, trainer_state=None, **kwargs):  # the name TRL logs
        return reward(completions, answer, completion_ids, trainer_state)

    class Curve(TrainerCallback):
        def on_log(self, _args, state, control, logs=None, **kwargs):
            if logs:
                logged.append({"update": state.global_step, **{k: v for k, v in logs.items() if isinstance(v, (int, float))}})

    config = GRPOConfig(
        output_dir=os.path.join(args.out, "trainer"), seed=args.seed, use_cpu=True, bf16=False, fp16=False,
        max_steps=args.updates, per_device_train_batch_size=16 * 8, gradient_accumulation_steps=1, num_generations=8,
        num_iterations=1, steps_per_generation=1, max_completion_length=16, temperature=1.0, top_p=1.0, top_k=0,
        loss_type="dapo", epsilon=0.2, epsilon_high=0.28, beta=0.0, scale_rewards="group",
        learning_rate=args.lr, lr_scheduler_type="constant", warmup_steps=0, optim="adamw_torch", weight_decay=0.0,
        adam_beta1=0.9, adam_beta2=0.99, adam_epsilon=1e-8, max_grad_norm=1.0,
        logging_steps=1, save_strategy="no", report_to=[], disable_dropout=True, dataloader_num_workers=0,
    )
    trainer = GRPOTrainer(model=model, reward_funcs=[pick], args=config, train_dataset=data, processing_class=tokenizer,
                          callbacks=[Curve()])
    cpu1, wall1 = _cpu_s(), time.perf_counter()
    trainer.train()
    cpu2, wall2 = _cpu_s(), time.perf_counter()
    trainer.save_model(os.path.join(args.out, "model"))
    tokenizer.save_pretrained(os.path.join(args.out, "model"))
    with open(log_path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in logged)
    with open(completions_path, "w") as f:
        f.writelines(json.dumps(r) + "\n" for r in completions)
    peer = {
        "versions": {"torch": torch.__version__, "trl": trl.__version__, "transformers": transformers.__version__,
                     "datasets": datasets.__version__},
        "torch_threads": torch.get_num_threads(), "seed": args.seed, "updates": trainer.state.global_step,
        "train_cpu_s": round(cpu2 - cpu1, 1), "train_wall_s": round(wall2 - wall1, 1),
        "process_cpu_s": round(_cpu_s() - cpu0, 1), "process_wall_s": round(time.perf_counter() - wall0, 1),
        "settings": {k: getattr(config, k) if not hasattr(getattr(config, k), "value") else getattr(config, k).value
                     for k in ("per_device_train_batch_size", "num_generations", "num_iterations", "max_completion_length",
                               "temperature", "top_p", "top_k", "loss_type", "epsilon", "epsilon_high", "beta",
                               "scale_rewards", "learning_rate", "lr_scheduler_type", "optim", "weight_decay",
                               "adam_beta1", "adam_beta2", "adam_epsilon", "max_grad_norm", "max_steps")},
    }
    with open(os.path.join(args.out, "peer.json"), "w") as f:
        json.dump(peer, f, indent=1)
    print(f"trl_pick_grpo: {peer['updates']} updates, {peer['train_cpu_s']} CPU s / {peer['train_wall_s']} wall s of "
          f"training; saved {os.path.join(args.out, 'model')}", flush=True)


if __name__ == "__main__":
    main()
