"""``jaxrl compare`` (:mod:`jaxrl.run.aggregate`) against rliable's formulas and the exact
bootstrap distribution.

Point estimates are checked against rliable's values (hard-coded, see ``RLIABLE``) and
against scipy (``trim_mean``, ``mannwhitneyu``); the stratified bootstrap against rliable's
intervals within Monte-Carlo error and, exactly, against every one of the 27 x 27 equally
likely resamples of a 3-run x 2-task matrix. The command runs on run directories written by
the trainer's own writers (``dump_config``, ``summarise``, ``chunk_records``), so a change of
the on-disk format fails here.
"""

from __future__ import annotations

import itertools
import json
import os
import statistics
import subprocess
import sys

import numpy as np
import pytest
from scipy import stats as sps

from jaxrl import cli
from jaxrl.run import aggregate as ag

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

A = np.array([[0.91, 0.40, 1.20], [0.75, 0.55, 0.98], [0.60, 0.40, 1.05], [0.88, 0.10, 0.70], [0.95, 0.62, 0.99]])
B = np.array([[0.70, 0.40, 0.85], [0.62, 0.30, 1.10], [0.91, 0.45, 0.60], [0.55, 0.20, 0.90]])
# Produced with rliable 1.2.0 (arch 7.2.0, numpy 2.4.6) from A and B above:
#   metrics.aggregate_iqm / aggregate_mean / aggregate_median / aggregate_optimality_gap (gamma 1),
#   metrics.probability_of_improvement(A, B) and (B, A); then np.random.seed(0) and
#   library.get_interval_estimates({"A": A, "B": B}, <the four, stacked>, reps=50000) and, after
#   np.random.seed(0) again, get_interval_estimates({"AB": (A, B)}, probability_of_improvement,
#   reps=20000), endpoints rounded to 4 decimals.
RLIABLE = {
    "A": {"IQM": (0.7711111111111111, 0.6733, 0.8467), "mean": (0.7386666666666667, 0.656, 0.8147),
          "median": (0.818, 0.692, 0.916), "optimality gap": (0.27800000000000014, 0.21, 0.354)},
    "B": {"IQM": (0.6283333333333333, 0.55, 0.7433), "mean": (0.6316666666666667, 0.5525, 0.7108),
          "median": (0.6950000000000001, 0.585, 0.82), "optimality gap": (0.3766666666666666, 0.305, 0.45)},
}
RLIABLE_POI = {"AB": (0.6916666666666668, 0.4667, 0.8835), "BA": 0.30833333333333335}
# Monte-Carlo error of a percentile endpoint here (discrete statistics of 4-5 runs): two
# independent 20,000-resample bootstraps differ by up to ~0.01 (median: one jump of 0.008).
MC_TOL = 0.02


# ---------------------------------------------------------------------------- point estimates


def test_point_estimates_equal_rliable_and_scipy():
    for name, scores in (("A", A), ("B", B)):
        found = {key: float(fn(scores)) for key, fn in ag.statistics(1.0).items()}
        for key, (point, _, _) in RLIABLE[name].items():
            assert found[key] == pytest.approx(point, abs=1e-12), (name, key)
        assert found["IQM"] == pytest.approx(sps.trim_mean(scores, 0.25, axis=None), abs=1e-12)
        assert found["median"] == pytest.approx(statistics.median(scores.mean(axis=0)), abs=1e-12)
    assert float(ag.probability_of_improvement(A, B)) == pytest.approx(RLIABLE_POI["AB"][0], abs=1e-12)
    assert float(ag.probability_of_improvement(B, A)) == pytest.approx(RLIABLE_POI["BA"], abs=1e-12)
    per_task = [sps.mannwhitneyu(A[:, t], B[:, t], alternative="greater").statistic / (5 * 4) for t in range(3)]
    np.testing.assert_allclose(ag.improvement_per_task(A, B), per_task, atol=1e-12)


def test_iqm_trims_a_quarter_of_the_pooled_scores_like_scipy():
    rng = np.random.default_rng(3)
    for runs, tasks in [(1, 1), (2, 1), (3, 3), (5, 2), (7, 3), (10, 5)]:
        x = np.round(rng.normal(size=(runs, tasks)), 1)  # ties included
        assert float(ag.iqm(x)) == pytest.approx(sps.trim_mean(x, 0.25, axis=None), abs=1e-12)
    assert float(ag.optimality_gap(np.array([[0.5, 1.5], [1.0, -0.5]]), gamma=1.0)) == pytest.approx((0.5 + 1.5) / 4)


# ---------------------------------------------------------------------------- the bootstrap


def test_intervals_match_rliable_within_monte_carlo_error():
    for name, scores in (("A", A), ("B", B)):
        found = ag.aggregate(scores, reps=20000, seed=0, name=name)
        for key, (point, low, high) in RLIABLE[name].items():
            assert found[key].point == pytest.approx(point, abs=1e-12)
            assert found[key].low == pytest.approx(low, abs=MC_TOL), (name, key)
            assert found[key].high == pytest.approx(high, abs=MC_TOL), (name, key)
    point, low, high = RLIABLE_POI["AB"]
    found = ag.improvement(A, B, reps=20000, seed=0)
    assert (found.point, found.low, found.high) == pytest.approx((point, low, high), abs=MC_TOL)


def _every_resample(columns):
    """All equally likely stratified resamples of runs-per-task ``columns``: [N, runs, tasks]."""
    per_task = [list(itertools.product(col, repeat=len(col))) for col in columns]
    return np.array([np.array(combo).T for combo in itertools.product(*per_task)])


def _exact_quantile(values, q):
    """The ``q`` quantile of the uniform distribution on ``values``, with the distance of
    its CDF step from ``q`` on either side (a percentile of many resamples converges to it)."""
    v = np.quantile(values, q, method="inverted_cdf")
    return v, min(q - np.mean(values < v), np.mean(values <= v) - q)


@pytest.mark.parametrize("stat, columns", [
    ("IQM", [(0.1, 0.2, 0.4), (0.2, 0.7, 0.9)]),  # chosen so both CDF steps clear 2.5% by > 0.009
    ("mean", [(0.4, 0.5, 1.3), (0.3, 1.1, 1.2)]),
])
def test_interval_is_the_exact_bootstrap_quantile(stat, columns):
    scores = np.array(columns).T  # [3 runs, 2 tasks]
    every = _every_resample(columns)  # 27 x 27 resamples, each as likely
    plain = {"IQM": lambda m: sps.trim_mean(m, 0.25, axis=None), "mean": lambda m: float(np.mean(m))}[stat]
    exact = np.round([plain(m) for m in every], 12)  # equal sums in another order are one value
    found = ag.aggregate(scores, reps=20000, seed=1)[stat]
    for q, end in ((0.025, found.low), (0.975, found.high)):
        value, margin = _exact_quantile(exact, q)
        assert margin > 0.009  # far from a tie at 20,000 resamples (sd of the CDF estimate ~0.0011)
        assert end == pytest.approx(value, abs=1e-12), (stat, q)


def test_resamples_are_stratified_and_distributed_like_the_exact_bootstrap():
    columns = [(0.1, 0.5, 0.7), (2.0, 3.0, 4.5)]  # disjoint: a value drawn across tasks would show
    scores = np.array(columns).T
    blocks = np.concatenate(list(ag.stratified_resamples(scores, 30000, np.random.default_rng(0))))
    assert blocks.shape == (30000, 3, 2)
    for t, col in enumerate(columns):
        assert set(np.unique(blocks[:, :, t])) <= set(col)
    exact = _every_resample(columns).mean(axis=(1, 2))
    drawn = blocks.mean(axis=(1, 2))
    grid = np.unique(exact)
    cdf_gap = np.abs(np.searchsorted(np.sort(drawn), grid, "right") / drawn.size
                     - np.searchsorted(np.sort(exact), grid, "right") / exact.size).max()
    assert cdf_gap < 0.012  # Kolmogorov distance; 99.9% bound for 30,000 draws is ~0.011


def test_improvement_interval_is_the_exact_bootstrap_quantile():
    x, y = (0.1, 0.2, 0.3, 0.8), (0.2, 0.2, 0.8)  # ties within y and across; quantiles inside the range
    combos_x, combos_y = list(itertools.product(x, repeat=4)), list(itertools.product(y, repeat=3))
    exact = np.round([sum((a > b) + 0.5 * (a == b) for a in cx for b in cy) / 12 for cx in combos_x for cy in combos_y], 12)
    found = ag.improvement(np.array(x)[:, None], np.array(y)[:, None], reps=50000, seed=2)
    for q, end in ((0.025, found.low), (0.975, found.high)):
        value, margin = _exact_quantile(exact, q)
        assert margin > 0.006 and exact.min() < value < exact.max()  # sd of the CDF estimate ~0.0007
        assert end == pytest.approx(value, abs=1e-12), q


def test_seeded_and_independent_of_the_other_methods():
    first = ag.aggregate(A, reps=500, seed=4, name="A")
    assert first == ag.aggregate(A, reps=500, seed=4, name="A")
    assert first != ag.aggregate(A, reps=500, seed=5, name="A")


# ---------------------------------------------------------------------------- the command

# Per-seed mean returns of 3 seeds (2 eval episodes each, +-d around the mean) of two configs
# on two tasks; normalised: CartPole-v1 x / 500, Acrobot-v1 (x + 500) / 500.
RETURNS = {
    ("fast", "CartPole-v1"): [500.0, 450.0, 400.0], ("fast", "Acrobot-v1"): [-100.0, -150.0, -50.0],
    ("slow", "CartPole-v1"): [250.0, 300.0, 200.0], ("slow", "Acrobot-v1"): [-200.0, -250.0, -300.0],
}
LR = {"fast": "6e-3", "slow": "1e-3"}


def write_run(path, env_id, per_seed, lr="6e-3", log_seeds="per_seed", extra=()):
    """A run directory as the trainer writes it: config.yaml (dump_config), eval.json
    (evaluate.summarise + write_summary of PPO's report) and metrics.jsonl (chunk_records)."""
    from jaxrl.algos.contract import EvalReport
    from jaxrl.run import config as config_lib
    from jaxrl.run import evaluate as eval_lib
    from jaxrl.run import logging as log_lib
    from jaxrl.run import rundir
    from jaxrl.run.files import CONFIG_FILE, EVAL_FILE, METRICS_FILE

    seeds = len(per_seed)
    cfg = config_lib.load_config(os.path.join(REPO, "configs", "ppo_cartpole.yaml"),
                                 [f"env.id={env_id}", f"ppo.optim.lr={lr}", f"train.seeds={seeds}", f"train.log_seeds={log_seeds}", *extra])
    os.makedirs(path)
    rundir.write_text(os.path.join(path, CONFIG_FILE), config_lib.dump_config(cfg))
    episodes = np.array(per_seed)[:, None] + np.array([-5.0, 5.0])  # [S, 2]
    report = EvalReport({"episode_returns": "deterministic", "episode_returns_stochastic": "stochastic"})
    summary = eval_lib.summarise({"episode_returns": episodes, "episode_returns_stochastic": episodes - 1}, report)
    eval_lib.write_summary(summary, os.path.join(path, EVAL_FILE))
    curve = np.array(per_seed)[:, None] * np.array([0.5, 0.9, 1.0])  # [S, 3 updates]
    records = log_lib.chunk_records({"episode_return": curve, "episode_count": np.ones_like(curve)}, 0, 3, 512, 1.0,
                                    log_seeds)
    log = log_lib.MetricsLog(os.path.join(path, METRICS_FILE))
    log.write(records)
    log.close()
    return str(path)


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    root = tmp_path_factory.mktemp("compare")
    return {key: write_run(root / f"{key[0]}_{key[1]}", key[1], ret, LR[key[0]]) for key, ret in RETURNS.items()}


def _normalised(method):
    cart = np.array(RETURNS[(method, "CartPole-v1")]) / 500
    acro = (np.array(RETURNS[(method, "Acrobot-v1")]) + 500) / 500
    return np.stack([acro, cart], axis=1)  # tasks sorted: Acrobot-v1, CartPole-v1


def test_compare_two_configs_on_two_tasks(runs, tmp_path, capsys):
    out_json, out_png = tmp_path / "c.json", tmp_path / "c.png"
    code = cli.main(["compare", *runs.values(), "--reps", "1000", "--json", str(out_json), "--plot", str(out_png)])
    text = capsys.readouterr().out
    assert code == 0, text
    fast, slow = "ppo.optim.lr=0.006", "ppo.optim.lr=0.001"  # the auto-grouping names methods by the keys that differ
    assert "normalised per task, (x - low) / (high - low): Acrobot-v1 [-500, 0], CartPole-v1 [0, 500]" in text
    assert f"P({fast} > {slow}) = 1.000 [1.000, 1.000]" in text  # every seed of fast beats every seed of slow
    data = json.loads(out_json.read_text())
    assert data["tasks"] == ["Acrobot-v1", "CartPole-v1"]
    for name, method in ((fast, "fast"), (slow, "slow")):
        got = data["methods"][name]
        x = _normalised(method)
        assert got["stats"]["IQM"]["point"] == pytest.approx(sps.trim_mean(x, 0.25, axis=None))
        assert got["stats"]["mean"]["point"] == pytest.approx(x.mean())
        assert got["stats"]["optimality gap"]["point"] == pytest.approx(np.mean(1 - np.minimum(x, 1)))
        lo, hi = got["stats"]["mean"]["low"], got["stats"]["mean"]["high"]
        assert x.min(axis=0).mean() <= lo < got["stats"]["mean"]["point"] < hi <= x.max(axis=0).mean()
        assert got["sources"] == ["eval.json: per-seed mean deterministic return"]
    assert data["improvement"][0]["per_task"] == {"Acrobot-v1": 1.0, "CartPole-v1": 1.0}
    assert out_png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_named_methods_and_metrics_jsonl(runs, capsys):
    fast = ",".join(runs[("fast", t)] for t in ("CartPole-v1", "Acrobot-v1"))
    slow = ",".join(runs[("slow", t)] for t in ("CartPole-v1", "Acrobot-v1"))
    argv = ["compare", "--method", f"B={slow}", "--method", f"A={fast}", "--reps", "200", "--metric", "episode_return"]
    assert cli.main(argv) == 0
    text = capsys.readouterr().out
    assert "metrics.jsonl: episode_return, mean of the last 1 records" in text
    assert "P(B > A) = 0.000 [0.000, 0.000]" in text
    assert cli.main([*argv, "--last", "2"]) == 0  # mean of 0.9x and 1.0x per seed: still ordered
    assert "mean raw score per task: Acrobot-v1: B -237.5, A -95" in capsys.readouterr().out


def _fails(argv, capsys, *phrases):
    code = cli.main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2 and len(err.splitlines()) == 1, err
    for phrase in phrases:
        assert phrase in err, err


def test_bad_input_is_one_line(runs, tmp_path, capsys):
    cart = [runs[("fast", "CartPole-v1")], runs[("slow", "CartPole-v1")]]
    _fails(["compare", str(tmp_path / "nope")], capsys, "does not exist")
    _fails(["compare", str(tmp_path)], capsys, "is not a run directory")
    _fails(["compare", runs[("fast", "CartPole-v1")], runs[("slow", "Acrobot-v1")]], capsys, "methods cover different tasks")
    _fails(["compare", *cart, "--normalize", "Pong=0:1"], capsys, "no run is on task 'Pong'")
    _fails(["compare", *cart, "--normalize", "CartPole-v1=5:5"], capsys, "finite LOW != HIGH")
    _fails(["compare", *cart, cart[0]], capsys, "named twice")
    _fails(["compare", *cart, "--plot", str(tmp_path)], capsys, "name a file in an existing folder")
    _fails(["compare", *cart, "--json", str(tmp_path / "no" / "c.json")], capsys, "name a file in an existing folder")
    _fails(["compare", *cart, "--reps", "10"], capsys, "at least 100")
    _fails(["compare", *cart, "--metric", "nope"], capsys, "no records of --metric 'nope'")
    mean_logged = write_run(tmp_path / "mean_logged", "CartPole-v1", [1.0, 2.0], log_seeds="mean")
    _fails(["compare", mean_logged, "--metric", "episode_return"], capsys, "train.log_seeds=per_seed")
    short_poles = [write_run(tmp_path / f"short_{i}", "CartPole-v1", [1.0, 2.0, 3.0], lr=lr,
                             extra=["env.params={max_steps_in_episode: 200}"]) for i, lr in enumerate(("6e-3", "1e-3"))]
    acrobot = [runs[("fast", "Acrobot-v1")], runs[("slow", "Acrobot-v1")]]
    _fails(["compare", *short_poles, *acrobot], capsys, "no score range for CartPole-v1 (its env params changed)")
    no_eval = write_run(tmp_path / "no_eval", "CartPole-v1", [1.0, 2.0])
    os.remove(os.path.join(no_eval, "eval.json"))
    _fails(["compare", no_eval], capsys, "has no eval.json: run `jaxrl eval")
    pendulum = write_run(tmp_path / "pendulum", "Pendulum-v1", [-300.0, -200.0])
    _fails(["compare", "--method", f"X={cart[0]},{pendulum}", "--method", f"Y={cart[1]},{pendulum}"], capsys, "named twice")
    pend2 = write_run(tmp_path / "pendulum2", "Pendulum-v1", [-250.0, -150.0])
    _fails(["compare", "--method", f"X={cart[0]},{pendulum}", "--method", f"Y={cart[1]},{pend2}"], capsys,
           "different seed counts per task")


def test_one_task_without_a_range_compares_raw_scores(tmp_path, capsys):
    a = write_run(tmp_path / "a", "Pendulum-v1", [-300.0, -200.0, -100.0])
    b = write_run(tmp_path / "b", "Pendulum-v1", [-400.0, -350.0, -150.0], lr="1e-3")
    assert cli.main(["compare", a, b, "--reps", "200"]) == 0
    text = capsys.readouterr().out
    assert "raw scores (not normalised)" in text and "optimality gap" not in text
    assert "IQM" in text and "P(ppo.optim.lr=0.006 > ppo.optim.lr=0.001) = 0.778" in text  # 7 of 9 pairs win, none tie


def test_compare_does_not_import_jax(runs):
    script = ("import sys; from jaxrl import cli; code = cli.main(sys.argv[1:]); "
              "assert code == 0, code; assert 'jax' not in sys.modules, 'jax imported'")
    proc = subprocess.run([sys.executable, "-c", script, "compare", *runs.values(), "--reps", "100"],
                          capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]


def test_odd_eval_json_and_config_are_one_line(runs, tmp_path, capsys):
    good = runs[("fast", "CartPole-v1")]
    base = json.loads(open(os.path.join(good, "eval.json")).read())
    odd = {
        "deep": "[" * 100_000 + "]" * 100_000,
        "bool seeds": json.dumps({**base, "per_seed": {"return_mean": [True, False, True]}}),
        "string seeds": json.dumps({**base, "per_seed": {"return_mean": ["1", "2", "3"]}}),
        "deep seeds": json.dumps({**base, "per_seed": {"return_mean": [[[[1.0]]]] * 3}}),
    }
    phrases = {"deep": "is not valid JSON (nested too deeply)", "bool seeds": "not a number",
               "string seeds": "not a number", "deep seeds": "not a number"}
    for i, (name, text) in enumerate(odd.items()):
        run = write_run(tmp_path / f"odd{i}", "CartPole-v1", [1.0, 2.0, 3.0], lr="1e-3")
        with open(os.path.join(run, "eval.json"), "w") as f:
            f.write(text)
        _fails(["compare", good, run], capsys, phrases[name])
    run = write_run(tmp_path / "seeds", "CartPole-v1", [1.0, 2.0, 3.0], lr="1e-3")
    config = os.path.join(run, "config.yaml")
    with open(config) as f:
        text = f.read()
    with open(config, "w") as f:
        f.write(text.replace("seeds: 3", "seeds: abc"))
    _fails(["compare", good, run], capsys, "train.seeds is not a positive integer ('abc')")


def test_reps_beyond_the_bound_are_refused_up_front(runs, capsys):
    _fails(["compare", *runs.values(), "--reps", "1000000000000"], capsys,
           f"at most {ag.MAX_REPS:,} bootstrap resamples, got 1,000,000,000,000")


def test_copies_of_one_run_are_refused_and_same_seed_runs_named(tmp_path, capsys):
    import shutil

    from jaxrl.run import rundir

    a = write_run(tmp_path / "a", "Pendulum-v1", [-300.0, -200.0])
    with rundir.RunLock(a):  # the first writer gives the run its identity
        pass
    ident = rundir.run_id(a)
    assert ident is not None
    copy = str(tmp_path / "copy")
    shutil.copytree(a, copy)
    _fails(["compare", a, copy], capsys, f"are copies of one run (run id {ident})")
    _fails(["compare", "--method", f"X={a}", "--method", f"Y={copy}"], capsys, "are copies of one run")
    b = write_run(tmp_path / "b", "Pendulum-v1", [-250.0, -150.0])   # same config, same train.seed, no shared id
    c = write_run(tmp_path / "c", "Pendulum-v1", [-200.0, -100.0], lr="1e-3")
    assert cli.main(["compare", "--method", f"X={a},{b}", "--method", f"Y={c}", "--reps", "100"]) == 0
    err = capsys.readouterr().err
    assert f"{a!r} and {b!r} trained the same config with the same train.seed" in err
    assert cli.main(["compare", "--method", f"X={a}", "--method", f"Y={c}", "--reps", "100"]) == 0
    assert "same train.seed" not in capsys.readouterr().err
