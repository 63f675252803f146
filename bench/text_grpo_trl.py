"""The `pick` task's SFT start through jaxrl's GRPO and TRL's GRPOTrainer, side by side (issue 42, item 3).

    python bench/text_grpo_trl.py seeds 1 2 3       # per train.seed: both GRPO stages from the same SFT run
    python bench/text_grpo_trl.py record            # bench/results/text_grpo_trl.{json,md}
    python bench/text_grpo_trl.py check             # TRL's reward function against jaxrl's scorer (also in `seeds`)
    python bench/text_grpo_trl.py timing 1          # both GRPO stages again, one core and one thread each

Per seed: the SFT run of ``bench/text_grpo_lift.py`` (``runs/text_grpo_lift/seed<S>*_sft``
with ``train.seed=<S>`` only, reused when it exists, else made with
``configs/sft_pick_larger.yaml``); ``jaxrl export-hf`` of it; jaxrl's GRPO from it
(``configs/grpo_pick_larger.yaml --init-from``, a ``jaxrl train`` process); TRL's
GRPOTrainer from the export with matched settings (``bench/peers/trl_pick_grpo.py``, run
by the Python of the TRL virtual environment, ``$TRL_PYTHON``, default
``/work/trlvenv/bin/python``). Every process runs under ``nice -n 19``.

The three models (the SFT export, the export of jaxrl's GRPO run, TRL's saved model) are
scored alike: each Hugging Face directory loaded as ``grpo.model: {policy: hf, path: DIR}``
of the GRPO config and evaluated by jaxrl's own evaluation (``jaxrl.run.evaluate``: greedy,
every one of the 256 held-out rows once, 95% CI), in a child process. ``check`` scores
TRL's logged training completions and a set of edge cases with jaxrl's on-device rubric and
with the peer's TRL reward function (on the text TRL decodes) and counts the differences.
"""

from __future__ import annotations

import argparse
import glob
import json
import os
import re
import sys
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path[:0] = [HERE, ROOT, os.path.join(HERE, "peers")]
import common  # noqa: E402  (bench/common.py)
import text_grpo_lift  # noqa: E402  (the pick task's configs and SFT runs)
import text_tuning  # noqa: E402  (one recorded `jaxrl train` process)
import trl_pick_grpo  # noqa: E402  (bench/peers: the TRL reward function; torch is imported only in its main)

BASE = os.path.join("runs", "text_grpo_trl")  # relative to ROOT
RESULTS = os.path.join(HERE, "results", "text_grpo_trl")
PEER = os.path.join("bench", "peers", "trl_pick_grpo.py")
TRL_PYTHON = os.environ.get("TRL_PYTHON", "/work/trlvenv/bin/python")
CONFIGS = text_grpo_lift.CONFIGS
SPEC = {"answer": "numeric", "extract": "answer_tag", "format_weight": 0.1}  # the configs' env.text.reward
EDGE_CASES = [  # completions (text) the check scores besides TRL's own; each against every answer below
    "<answer>392</answer>", "<answer>347</answer>", "<answer> 392 </answer>", "<answer>0392</answer>",
    "<answer>392.0</answer>", "<answer>3,92</answer>", "<answer>-392</answer>", "<answer>392</answer> ",
    "<answer>392</answer>x", "<answer>392", "392", "<answer></answer>", "<answer>347 392</answer>",
    "<answer>392</answer><answer>347</answer>", "<answer>1,392</answer>", "<answer>392.</answer>",
    "the answer is <answer>392</answer>", "<answer>39</answer>2", "<answer>x392y</answer>", "",
]
EDGE_ANSWERS = ["392", "347", "1392", "0"]


def _child(cmd: list[str], log: str, env: dict | None = None) -> dict:
    """Run ``cmd`` under ``nice -n 19`` from ROOT (``env``: variables added), its output in ``log``:
    exit status, wall and CPU s, load."""
    return common.timed_process(cmd, os.path.join(ROOT, log), cwd=ROOT, env=env)


def _must(rec: dict, what: str, log: str) -> dict:
    if rec["returncode"] != 0:
        raise SystemExit(f"text_grpo_trl: {what} failed (exit {rec['returncode']}); see {log}")
    return rec


def _load(path: str) -> dict | None:
    if not os.path.exists(os.path.join(ROOT, path)):
        return None
    with open(os.path.join(ROOT, path)) as f:
        return json.load(f)


def sft_run(seed: int) -> dict:
    """The recorded SFT run of ``seed`` in ``runs/text_grpo_lift`` (``train.seed=<seed>`` only,
    finished and evaluated), made with the shipped config when there is none."""
    found = []
    for path in sorted(glob.glob(os.path.join(ROOT, text_grpo_lift.BASE, f"seed{seed}*_sft.json"))):
        rec = _load(os.path.relpath(path, ROOT))
        if re.fullmatch(rf"seed{seed}\D\w*|seed{seed}", rec["name"][:-4]) and rec["sets"] == [f"train.seed={seed}"] \
                and rec["returncode"] == 0 and rec["eval"]:
            found.append(rec)
    if found:
        return min(found, key=lambda r: len(r["name"]))
    return text_grpo_lift.run(f"seed{seed}_sft", "sft", [f"train.seed={seed}"], None)


def export(run: str, out: str) -> None:
    """``jaxrl export-hf RUN --out OUT`` (skipped when OUT holds a model already)."""
    if os.path.exists(os.path.join(ROOT, out, "model.safetensors")):
        return
    _must(_child([sys.executable, "-m", "jaxrl.cli", "export-hf", run, "--out", out, "--force"], out + ".log"),
          f"export-hf {run}", out + ".log")


def seed_run(seed: int) -> dict:
    """Both GRPO stages of ``seed`` from one SFT run, scored alike; ``BASE/seed<S>.json``."""
    os.makedirs(os.path.join(ROOT, BASE), exist_ok=True)
    sft = sft_run(seed)
    sft_dir = os.path.join(text_grpo_lift.BASE, sft["name"])
    sft_hf = os.path.join(BASE, f"seed{seed}_sft_hf")
    export(sft_dir, sft_hf)

    name = f"seed{seed}_jaxrl_grpo"
    jx = _load(os.path.join(BASE, name + ".json"))
    if not jx or jx["returncode"] != 0:
        jx = {"name": name, **text_tuning.train_process(CONFIGS["grpo"], os.path.join(BASE, name), [f"train.seed={seed}"],
                                                        sft["name"], text_grpo_lift.BASE)}
        with open(os.path.join(ROOT, BASE, name + ".json"), "w") as f:
            json.dump(jx, f, indent=1)
        _must(jx, f"jaxrl GRPO of seed {seed}", os.path.join(BASE, name + ".log"))
    jx_hf = os.path.join(BASE, f"{name}_hf")
    export(os.path.join(BASE, name), jx_hf)

    ids = os.path.join(BASE, "prompt_ids.json")
    if not os.path.exists(os.path.join(ROOT, ids)):
        _must(_child([sys.executable, __file__, "prompt-ids", ids], ids + ".log"), "prompt-ids", ids + ".log")
    trl_dir = os.path.join(BASE, f"seed{seed}_trl")
    trl = _load(trl_dir + "_process.json")
    if not trl or trl["returncode"] != 0:
        print(f"TRL GRPOTrainer of seed {seed} from {sft_hf}", flush=True)
        trl = _child([TRL_PYTHON, PEER, "--model", sft_hf, "--out", trl_dir, "--seed", str(seed), "--prompt-ids", ids],
                     trl_dir + ".log")
        with open(os.path.join(ROOT, trl_dir + "_process.json"), "w") as f:
            json.dump(trl, f, indent=1)
        _must(trl, f"TRL GRPO of seed {seed}", trl_dir + ".log")

    scores_path = os.path.join(BASE, f"seed{seed}_scores.json")
    models = {"sft": sft_hf, "jaxrl_grpo": jx_hf, "trl_grpo": os.path.join(trl_dir, "model")}
    scoring = _child([sys.executable, __file__, "score", str(seed), scores_path]
                     + [f"{k}={v}" for k, v in models.items()], scores_path + ".log")
    _must(scoring, f"scoring seed {seed}", scores_path + ".log")
    checked = _child([sys.executable, __file__, "check", "--out", os.path.join(BASE, f"seed{seed}_check.json"),
                      os.path.join(trl_dir, "completions.jsonl")], os.path.join(BASE, f"seed{seed}_check.log"))
    _must(checked, f"reward check of seed {seed}", os.path.join(BASE, f"seed{seed}_check.log"))

    rec = {"seed": seed, "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "git": common.git_rev(),
           "sft": {k: sft[k] for k in ("name", "command", "eval", "cpu_s", "wall_s", "load_before", "load_after")},
           "jaxrl_grpo": jx, "trl_grpo": {**trl, "peer": _load(os.path.join(trl_dir, "peer.json")),
                                          "curve": _jsonl(os.path.join(trl_dir, "curve.jsonl"))},
           "held_out": _load(scores_path), "scoring": scoring,
           "reward_check": _load(os.path.join(BASE, f"seed{seed}_check.json"))}
    with open(os.path.join(ROOT, BASE, f"seed{seed}.json"), "w") as f:
        f.write(common.dumps(rec))
    h = rec["held_out"]
    print(f"seed {seed}: held-out correct SFT {h['sft']['mean']:.3f}, jaxrl GRPO {h['jaxrl_grpo']['mean']:.3f}, "
          f"TRL GRPO {h['trl_grpo']['mean']:.3f}; reward check {rec['reward_check']['differ']} of "
          f"{rec['reward_check']['compared']} differ", flush=True)
    return rec


ONE_CORE = ["taskset", "-c", "1"]  # bench/common.py's "one core": a program's own work, no second thread waiting


def timing(seed: int) -> dict:
    """Both GRPO stages of ``seed`` again, each pinned to one core with one thread (jaxrl's
    ``jaxrl train``; TRL with ``OMP_NUM_THREADS=1``), back to back, and scored like
    :func:`seed_run`'s: CPU seconds on equal footing; ``BASE/timing_seed<S>.json``."""
    sft = sft_run(seed)
    sft_hf = os.path.join(BASE, f"seed{seed}_sft_hf")
    export(os.path.join(text_grpo_lift.BASE, sft["name"]), sft_hf)
    out = os.path.join(BASE, "timing")
    os.makedirs(os.path.join(ROOT, out), exist_ok=True)
    jx_dir, trl_dir = os.path.join(out, f"seed{seed}_jaxrl_grpo"), os.path.join(out, f"seed{seed}_trl")
    train = [sys.executable, "-m", "jaxrl.cli", "train", CONFIGS["grpo"], "--out", jx_dir, "--set", f"train.seed={seed}",
             "--init-from", os.path.join(text_grpo_lift.BASE, sft["name"])]
    jx = _must(_child(ONE_CORE + train, jx_dir + ".log", {"XLA_FLAGS": "--xla_cpu_multi_thread_eigen=false"}),
               "jaxrl GRPO (one core)", jx_dir + ".log")
    trl = _must(_child(ONE_CORE + [TRL_PYTHON, PEER, "--model", sft_hf, "--out", trl_dir, "--seed", str(seed)],
                       trl_dir + ".log", {"OMP_NUM_THREADS": "1"}), "TRL GRPO (one core)", trl_dir + ".log")
    export(jx_dir, jx_dir + "_hf")
    scores = os.path.join(out, f"seed{seed}_scores.json")
    _must(_child([sys.executable, __file__, "score", str(seed), scores, f"jaxrl_grpo={jx_dir}_hf",
                  f"trl_grpo={os.path.join(trl_dir, 'model')}"], scores + ".log"), "scoring (timing)", scores + ".log")
    rec = {"seed": seed, "utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "git": common.git_rev(),
           "setting": "taskset -c 1; jaxrl: XLA_FLAGS=--xla_cpu_multi_thread_eigen=false; TRL: OMP_NUM_THREADS=1",
           "jaxrl_grpo": jx, "trl_grpo": {**trl, "peer": _load(os.path.join(trl_dir, "peer.json"))},
           "held_out": _load(scores)}
    with open(os.path.join(ROOT, BASE, f"timing_seed{seed}.json"), "w") as f:
        f.write(common.dumps(rec))
    print(f"timing seed {seed}: jaxrl {jx['cpu_s']} CPU s / {jx['wall_s']} wall s, TRL {trl['cpu_s']} / {trl['wall_s']}; "
          f"held-out jaxrl {rec['held_out']['jaxrl_grpo']['mean']:.3f}, TRL {rec['held_out']['trl_grpo']['mean']:.3f}", flush=True)
    return rec


def _jsonl(path: str) -> list[dict]:
    with open(os.path.join(ROOT, path)) as f:
        return [json.loads(line) for line in f]


# -- children (jaxrl imported here only) ----------------------------------------------------


def _task():
    from jaxrl_envs.text.text_file import TextFile

    import yaml

    with open(os.path.join(ROOT, CONFIGS["grpo"])) as f:
        cfg = yaml.safe_load(f)["env"]["text"]
    return TextFile(train=cfg["train"], held_out=cfg["held_out"], reward=cfg["reward"])


def prompt_ids(out: str) -> None:
    """jaxrl's prompt ids of every training row (pad dropped), for the peer to check its own against."""
    import numpy as np

    task = _task()
    prompts = task.arrays("train")["prompts"]
    rows = [[int(t) for t in p if t != task.pad] for p in np.asarray(prompts)]
    with open(os.path.join(ROOT, out), "w") as f:
        json.dump(rows, f)
    print(f"wrote {out}: {len(rows)} prompts")


def score(seed: int, out: str, models: list[str]) -> None:
    """jaxrl's held-out evaluation of each NAME=HF_DIR, loaded as the GRPO config's model."""
    import jax

    from jaxrl.run import config as config_lib
    from jaxrl.run.build import build, seed_keys
    from jaxrl.run.evaluate import evaluate_run

    result = {}
    for item in models:
        name, path = item.split("=", 1)
        t0 = time.perf_counter()
        cfg = config_lib.load_config(os.path.join(ROOT, CONFIGS["grpo"]),
                                     [f"grpo.model.path={os.path.join(ROOT, path)}", f"train.seed={seed}"])
        built = build(cfg)
        states = jax.vmap(built.program.init)(seed_keys(cfg.train.seed, cfg.train.seeds))
        pol = evaluate_run(built, states, seed=0)["policies"]
        result[name] = {"path": path, "seconds": round(time.perf_counter() - t0, 1),
                        **{k: round(v, 4) for k, v in pol["correct"].items() if k != "label" and isinstance(v, float)},
                        "episodes": pol["correct"]["episodes"], "reward": round(pol["greedy"]["mean"], 4)}
        print(f"{name}: held-out correct {result[name]['mean']:.4f} ({path})", flush=True)
    with open(os.path.join(ROOT, out), "w") as f:
        json.dump(result, f, indent=1)


def check(paths: list[str], out: str | None) -> dict:
    """TRL's reward function (on the text TRL decodes: special tokens skipped) against jaxrl's
    on-device rubric (on the token ids) for TRL's logged completions and the edge cases."""
    import jax
    import jax.numpy as jnp
    import numpy as np
    import tokenizers

    from jaxrl.verifiers import Task

    task = _task()
    tok = tokenizers.Tokenizer.from_file(os.path.join(task.tokenizer_path, "tokenizer.json"))
    eos, n = int(task.end_of_turn), task.completion_length
    cases = []  # (ids, answer, TRL's reward or None: computed here)
    for path in paths:
        cases += [(c["ids"], c["answer"], c["reward"]) for c in _jsonl(path)]
    logged = len(cases)
    for text in EDGE_CASES:
        for ans in EDGE_ANSWERS:
            cases.append((tok.encode(text, add_special_tokens=False).ids + [eos], ans, None))
    ids = np.full((len(cases), n), task.pad, np.int32)
    answers = np.zeros((len(cases), task.answer_width), np.int32)
    lens = np.zeros((len(cases),), np.int32)
    trl, texts = [], []
    for i, (c, ans, given) in enumerate(cases):
        c = c[:n]
        ids[i, : len(c)] = c
        a = ans.encode()
        answers[i, : len(a)], lens[i] = np.frombuffer(a, np.uint8), len(a)
        text = tok.decode(c, skip_special_tokens=True)
        texts.append(text)
        mine = trl_pick_grpo.pick_reward([text], [ans])[0]
        if given is not None and abs(mine - given) > 1e-6:
            raise SystemExit(f"check: the logged TRL reward {given} of {text!r} is not pick_reward's {mine}")
        trl.append(mine)
    prompt = jnp.zeros((task.prompt_length,), jnp.int32)
    score = jax.jit(jax.vmap(lambda c, a, ln: task.verifier(Task(prompt, a, ln), c)[0]))
    jaxrl = np.asarray(score(jnp.asarray(ids), jnp.asarray(answers), jnp.asarray(lens)), np.float64)
    differ = [{"text": texts[i], "answer": cases[i][1], "trl": trl[i], "jaxrl": float(jaxrl[i])}
              for i in range(len(cases)) if abs(trl[i] - jaxrl[i]) > 1e-5]
    result = {"compared": len(cases), "logged_completions": logged, "edge_cases": len(cases) - logged,
              "differ": len(differ), "differences": differ[:20],
              "rewards_seen": sorted({round(r, 4) for r in trl})}
    print(f"check: {len(cases)} completions ({logged} from TRL's runs), {len(differ)} differ", flush=True)
    if out:
        with open(os.path.join(ROOT, out), "w") as f:
            json.dump(result, f, indent=1)
    return result


# -- the record -----------------------------------------------------------------------------


def _fig(v: dict | None) -> str:
    return f"{v['mean']:.3f} [{v['ci95_low']:.3f}, {v['ci95_high']:.3f}]" if v else "-"


def _every(curve: list[dict], key: str, step: int = 10) -> str:
    pts = [c for c in curve if key in c and (c["update"] % step == 0 or c["update"] == 1)]
    return ", ".join(f"{c['update']}: {c[key]:.2f}" for c in pts)


def markdown(record: dict, path: str) -> None:
    v = record["meta"]["versions"]
    lines = ["# The `pick` task's SFT start through jaxrl's GRPO and TRL's GRPOTrainer, side by side", "",
             common.measured(record["meta"], "every process under nice -n 19 beside other sessions' work"), "",
             f"Versions: jaxrl {v.get('jaxrl')}, jax {v.get('jax')}; TRL {record['peer_versions'].get('trl')}, "
             f"transformers {record['peer_versions'].get('transformers')}, torch {record['peer_versions'].get('torch')} "
             f"(CPU build, its own virtual environment; {record['torch_threads']} torch threads).", "",
             "Per `train.seed`: one SFT run (`configs/sft_pick_larger.yaml`, bench/text_grpo_lift.py), `jaxrl export-hf` of it; "
             "from that start jaxrl's GRPO (`configs/grpo_pick_larger.yaml --init-from`) and TRL's GRPOTrainer on the "
             "export with matched settings (bench/peers/trl_pick_grpo.py). Held-out: every one of the 256 held-out rows "
             "once, greedy, 95% CI, by jaxrl's evaluation of each model loaded from its Hugging Face directory "
             "(the SFT export, the export of jaxrl's GRPO run, TRL's saved model), so the three are measured alike. "
             "CPU seconds: the whole process (all threads; TRL's as the peer measured itself, and its training loop alone); "
             "wall seconds on a shared 2-core machine (load average in the JSON).", "",
             "## Held-out correct per seed", "",
             "| seed (SFT run) | SFT only | jaxrl SFT+GRPO | jaxrl gain | TRL SFT+GRPO | TRL gain | jaxrl GRPO CPU s / wall s | "
             "TRL GRPO CPU s / wall s (process) | TRL training loop CPU s / wall s |",
             "|---|---|---|---|---|---|---|---|---|"]
    for r in record["seeds"]:
        h, jx, trl = r["held_out"], r["jaxrl_grpo"], r["trl_grpo"]
        p = trl["peer"]
        lines.append(f"| {r['seed']} ({r['sft']['name']}) | {_fig(h['sft'])} | {_fig(h['jaxrl_grpo'])} | {r['gain_jaxrl']:+.3f} | "
                     f"{_fig(h['trl_grpo'])} | {r['gain_trl']:+.3f} | {jx['cpu_s']} / {jx['wall_s']} | {p['process_cpu_s']} / "
                     f"{p['process_wall_s']} | {p['train_cpu_s']} / {p['train_wall_s']} |")
    gj, gt = record["gains"]["jaxrl"], record["gains"]["trl"]
    if gj:
        lines += ["", f"Gain over SFT alone on {len(gj)} seed(s): jaxrl {min(gj):+.3f} to {max(gj):+.3f} (mean "
                      f"{sum(gj) / len(gj):+.3f}), TRL {min(gt):+.3f} to {max(gt):+.3f} (mean {sum(gt) / len(gt):+.3f}). "
                      f"GRPO CPU seconds (whole process), TRL / jaxrl: {record['cpu_ratio']['min']:.1f}x to "
                      f"{record['cpu_ratio']['max']:.1f}x at this load (on one core each: below)."]
    lines += ["", "The same figures from the runs' own records (jaxrl's `eval.json`; they should equal the column above):", ""]
    for r in record["seeds"]:
        lift = r.get("lift_grpo")
        lines.append(f"* seed {r['seed']}: SFT run {_fig2(r['sft']['eval'])}, jaxrl GRPO run {_fig2(r['jaxrl_grpo']['eval'])}"
                     + (f"; the GRPO run from the same SFT run in bench/results/text_grpo_lift.md ({lift['name']}, jaxrl at "
                        f"{lift['git']}): {_fig2(lift['eval'])}" if lift else ""))
    if record.get("timing"):
        lines += ["", "## GRPO's CPU seconds on one core, one thread each", "",
                  "The table above ran at load average 5-10 with TRL's default 2 torch threads; on this shared machine 2 torch "
                  "threads took several times the CPU seconds of one for the same updates, so those figures overstate TRL's "
                  "work. Here each GRPO stage runs again from the same SFT "
                  "run, pinned to one core (`taskset -c 1`, jaxrl with `XLA_FLAGS=--xla_cpu_multi_thread_eigen=false`, TRL "
                  "with `OMP_NUM_THREADS=1`), back to back, scored the same way:", "",
                  "| seed | jaxrl GRPO CPU s / wall s (whole process) | TRL GRPO CPU s / wall s (process) | TRL training loop "
                  "CPU s | TRL / jaxrl CPU | held-out jaxrl / TRL | load before / after |", "|---|---|---|---|---|---|---|"]
        for t in record["timing"]:
            jx, p = t["jaxrl_grpo"], t["trl_grpo"]["peer"]
            lines.append(f"| {t['seed']} | {jx['cpu_s']} / {jx['wall_s']} | {p['process_cpu_s']} / {p['process_wall_s']} | "
                         f"{p['train_cpu_s']} | {p['process_cpu_s'] / jx['cpu_s']:.1f}x | {_fig(t['held_out']['jaxrl_grpo'])} / "
                         f"{_fig(t['held_out']['trl_grpo'])} | {jx['load_before']:.1f} / {t['trl_grpo']['load_after']:.1f} |")
        lines += ["", "jaxrl's process CPU includes compiling its programs unless its persistent compile cache already holds "
                      "them: the first one-core run (new XLA flags) compiled, the later ones loaded. jaxrl's GRPO on one core "
                      "does not repeat its default-thread run bit for bit (the in-training held-out figures part from update "
                      "30), so its final figure may differ from the table above; TRL's with one thread equalled its run "
                      "with two."]
    if record.get("threads_probe"):
        lines += ["", "TRL's peer for 10 updates from seed 1's SFT export, by torch threads (`OMP_NUM_THREADS`; unpinned, run by "
                      "hand one after the other): " + "; ".join(
                          f"{t['torch_threads']} thread(s): {t['train_cpu_s']} CPU s / {t['train_wall_s']} wall s of training"
                          for t in record["threads_probe"]) + "."]
    lines += ["", "## Reward function check", "",
              "TRL's reward function (bench/peers/trl_pick_grpo.py `pick_reward`, on the text TRL decodes) against jaxrl's "
              "on-device rubric (on the token ids), over TRL's logged completions (the first and last 4 updates of each "
              "seed) and edge cases:", ""]
    for r in record["seeds"]:
        c = r["reward_check"]
        lines.append(f"* seed {r['seed']}: {c['compared']} completions ({c['logged_completions']} TRL's, {c['edge_cases']} edge "
                     f"cases), {c['differ']} differ; rewards seen {c['rewards_seen']}")
    lines += ["", "## Settings", "", "| | jaxrl (configs/grpo_pick_larger.yaml) | TRL GRPOTrainer |", "|---|---|---|"]
    lines += [f"| {a} | {b} | {c} |" for a, b, c in SETTINGS]
    lines += ["", "## Curves (sampled reward mean, correct + 0.1 format, every 10 updates)", ""]
    for r in record["seeds"]:
        lines.append(f"* seed {r['seed']} jaxrl: {_every(r['jaxrl_grpo']['curve'], 'return_mean')}")
        lines.append(f"* seed {r['seed']} TRL: {_every(r['trl_grpo']['curve'], 'reward')}")
    with open(path, "w") as f:
        f.write("\n".join(lines) + "\n")


def _fig2(ev: dict) -> str:
    v = ev.get("correct") if ev else None
    return f"{v['mean']:.3f} [{v['ci95'][0]:.3f}, {v['ci95'][1]:.3f}]" if v else "-"


SETTINGS = [
    ("prompts x samples per update", "16 x 8", "per_device_train_batch_size 128, num_generations 8"),
    ("gradient steps per update", "1 (num_epochs 1, num_minibatches 1)", "1 (num_iterations 1, steps_per_generation 1)"),
    ("updates", "60", "max_steps 60"),
    ("prompt order", "each drawn uniformly with replacement", "a shuffled pass over the rows (sampler of TRL)"),
    ("prompt ids", "the chat template of the model's tokenizer", "the same ids (checked on all 4000 rows)"),
    ("loss", "dapo, eps 0.2 / 0.28, beta 0", "loss_type dapo, epsilon 0.2, epsilon_high 0.28, beta 0"),
    ("advantages", "group mean, / group std (scale_rewards auto)", "scale_rewards group (std + 1e-4)"),
    ("optimiser", "optax Adam b1 0.9 b2 0.99 eps 1e-8, clip 1.0", "torch AdamW, weight decay 0, same betas, eps, clip"),
    ("learning rate", "3e-4 constant, no warm-up", "3e-4, lr_scheduler_type constant, warmup_steps 0"),
    ("sampling", "temperature 1, whole vocabulary", "temperature 1, top_p 1, top_k 0"),
    ("completion", "at most 16 tokens, ends at the eos token (id 2, im_end)", "max_completion_length 16, the same eos"),
    ("reward", "rubric {numeric, answer_tag, format_weight 0.1} on the token bytes", "pick_reward on the decoded text"),
    ("precision", "float32", "float32 (bf16 off)"),
    ("in-run held-out evaluation", "64 rows every 10 updates, all 256 at the end", "none (scored after, by jaxrl)"),
]


def record() -> None:
    seeds = []
    for path in sorted(glob.glob(os.path.join(ROOT, BASE, "seed*.json"))):
        if re.fullmatch(r"seed\d+\.json", os.path.basename(path)):
            with open(path) as f:
                seeds.append(json.load(f))
    if not seeds:
        raise SystemExit(f"text_grpo_trl: no seed records in {BASE}; run `seeds` first")
    seeds.sort(key=lambda r: r["seed"])
    for r in seeds:
        h = r["held_out"]
        r["gain_jaxrl"] = round(h["jaxrl_grpo"]["mean"] - h["sft"]["mean"], 4)
        r["gain_trl"] = round(h["trl_grpo"]["mean"] - h["sft"]["mean"], 4)
        lift = _load(os.path.join(text_grpo_lift.BASE, r["sft"]["name"][:-4] + "_grpo.json"))
        if lift and lift["init_from"] == r["sft"]["name"]:
            r["lift_grpo"] = {k: lift[k] for k in ("name", "git", "eval", "cpu_s", "wall_s")}
    ratios = [r["trl_grpo"]["peer"]["process_cpu_s"] / r["jaxrl_grpo"]["cpu_s"] for r in seeds]
    threads = [_load(os.path.relpath(path, ROOT)) for path in sorted(glob.glob(os.path.join(ROOT, BASE, "threads", "*.json")))]
    timings = sorted((_load(os.path.relpath(path, ROOT)) for path in glob.glob(os.path.join(ROOT, BASE, "timing_seed*.json"))),
                     key=lambda t: t["seed"])
    peer = seeds[-1]["trl_grpo"]["peer"]
    meta = common.metadata({"load_before": seeds[0]["jaxrl_grpo"]["load_before"], "load_after": seeds[-1]["trl_grpo"]["load_after"],
                            "git": common.git_rev(), "nice": 19},
                           libraries=["jaxrl", "jax", "jaxlib", "optax", "tokenizers", "numpy"])
    common.write_record(RESULTS, {"meta": meta, "peer_versions": peer["versions"], "torch_threads": peer["torch_threads"],
                                  "configs": CONFIGS, "settings": SETTINGS, "seeds": seeds,
                                  "gains": {"jaxrl": [r["gain_jaxrl"] for r in seeds], "trl": [r["gain_trl"] for r in seeds]},
                                  "cpu_ratio": {"min": round(min(ratios), 2), "max": round(max(ratios), 2)},
                                  "timing": timings, "threads_probe": threads}, markdown)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="cmd", required=True)
    s = sub.add_parser("seeds")
    s.add_argument("seed", type=int, nargs="+")
    t = sub.add_parser("timing")
    t.add_argument("seed", type=int, nargs="+")
    sub.add_parser("record")
    c = sub.add_parser("check")
    c.add_argument("completions", nargs="*", help="TRL's completions.jsonl files (default: every seed's)")
    c.add_argument("--out")
    p = sub.add_parser("prompt-ids")
    p.add_argument("out")
    sc = sub.add_parser("score")
    sc.add_argument("seed", type=int)
    sc.add_argument("out")
    sc.add_argument("models", nargs="+", metavar="NAME=HF_DIR")
    args = ap.parse_args()
    if args.cmd == "seeds":
        for seed in args.seed:
            seed_run(seed)
    elif args.cmd == "timing":
        for seed in args.seed:
            timing(seed)
    elif args.cmd == "record":
        record()
    elif args.cmd == "check":
        check(args.completions or sorted(glob.glob(os.path.join(ROOT, BASE, "seed*_trl", "completions.jsonl"))), args.out)
    elif args.cmd == "prompt-ids":
        prompt_ids(args.out)
    else:
        score(args.seed, args.out, args.models)


if __name__ == "__main__":
    main()
