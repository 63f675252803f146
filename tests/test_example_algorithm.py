"""The example algorithm ``examples/reinforce`` (REINFORCE with a learned baseline), found
only through the ``jaxrl.algos`` entry point of its own ``pyproject.toml``, driven through the
real CLI: it learns CartPole-v1 with two vmapped seeds, and ``eval`` and ``render`` read its
run. Its bit-exact resume and its env split over two devices are checked, as for every
built-in algorithm, by tests/test_algo_conformance.py.

The package is not installed: each subprocess gets ``PYTHONPATH=<examples/reinforce>:<dir>``
where ``<dir>`` holds a fake ``jaxrl_reinforce-0.1.0.dist-info`` whose ``entry_points.txt``
is the ``jaxrl.algos`` table of ``examples/reinforce/pyproject.toml``.
"""

from __future__ import annotations

import importlib
import json
import os
import subprocess
import sys
import tomllib

import jax
import jax.numpy as jnp
import numpy as np
import pytest
from fast_compile import subprocess_env
from PIL import Image

import jaxrl
from jaxrl.algos import registry as algo_registry
from jaxrl.algos.common.train import program_on

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
EXAMPLE = os.path.join(REPO, "examples", "reinforce")
SOLVED = 150.0  # CartPole-v1 eval return counted as learned (random play scores about 22)

CONFIG = """\
algo: reinforce
env:
  id: CartPole-v1
reinforce:
  num_envs: 16
  num_steps: 64
  total_env_steps: 65536  # 64 updates
  optim: {lr: 3.0e-3}
  hidden: [64]
  eval_episodes: 16
train:
  seed: 0
  updates_per_chunk: 8
  checkpoint_every: 4  # chunks: a periodic checkpoint at update 32, the final one at 64
"""


def _entry_points() -> str:
    """``entry_points.txt`` text of the example's ``[project.entry-points]`` tables."""
    with open(os.path.join(EXAMPLE, "pyproject.toml"), "rb") as f:
        groups = tomllib.load(f)["project"]["entry-points"]
    assert groups == {"jaxrl.algos": {"reinforce": "jaxrl_reinforce:ENTRY"}}
    return "".join(f"[{g}]\n" + "".join(f"{k} = {v}\n" for k, v in eps.items()) for g, eps in groups.items())


@pytest.fixture(scope="module")
def workdir(tmp_path_factory):
    """A scratch directory with the fake distribution (``dist/``) and the run config."""
    root = tmp_path_factory.mktemp("reinforce")
    info = root / "dist" / "jaxrl_reinforce-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: jaxrl_reinforce\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(_entry_points())
    (root / "reinforce_cartpole.yaml").write_text(CONFIG)
    return root


def jaxrl_cli(workdir, *args) -> subprocess.CompletedProcess:
    """``python3 -m jaxrl.cli ARGS`` on CPU with the example package and its entry point visible."""
    env = subprocess_env(PYTHONPATH=os.pathsep.join([EXAMPLE, str(workdir / "dist")]))  # XLA at -O0 (tests/fast_compile.py)
    cmd = [sys.executable, "-m", "jaxrl.cli", *map(str, args)]
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, cwd=str(workdir), env=env)


def train(workdir, out: str, *sets: str) -> subprocess.CompletedProcess:
    args = ["train", "reinforce_cartpole.yaml", "--out", out, "--set", "train.progress=false"]
    for s in sets:
        args += ["--set", s]
    return jaxrl_cli(workdir, *args)


def read_jsonl(path) -> list[dict]:
    return [json.loads(line) for line in open(path) if line.strip()]


@pytest.fixture(scope="module")
def trained(workdir):
    """One run shared by the module: two vmapped seeds, per-seed metrics."""
    proc = train(workdir, "run", "train.seeds=2", "train.log_seeds=per_seed")
    assert proc.returncode == 0, proc.stderr[-3000:]
    return workdir / "run", proc


@pytest.fixture
def registered():
    """The example's entry registered in this process (the in-process tests build its program),
    unless an installed copy already registered it; removed again afterwards."""
    sys.path.insert(0, EXAMPLE)
    installed = "reinforce" in algo_registry.algorithms()
    try:
        module = importlib.import_module("jaxrl_reinforce")
        if not installed:
            algo_registry.register_algorithm(module.ENTRY)
        yield module
    finally:
        if not installed:
            algo_registry.deregister_algorithm("reinforce")
        sys.path.remove(EXAMPLE)


def test_learns_cartpole_with_two_seeds(trained):
    run_dir, proc = trained
    assert "64 updates x 1024 env steps = 65,536 env steps x 2 seeds" in proc.stdout
    assert sorted(os.listdir(run_dir / "checkpoints"), key=int) == ["32", "64"]
    summary = json.loads((run_dir / "eval.json").read_text())
    assert summary["seeds"] == 2 and summary["policies"]["deterministic"]["episodes"] == 32
    assert min(summary["per_seed"]["return_mean"]) >= SOLVED, summary["per_seed"]
    records = read_jsonl(run_dir / "metrics.jsonl")
    assert [r["update"] for r in records] == list(range(1, 65))
    assert len(records[0]["loss"]) == 2 and records[0]["loss"][0] != records[0]["loss"][1]  # two distinct seeds


def test_eval_and_render_the_run(trained):
    run_dir, _ = trained
    proc = jaxrl_cli(run_dir.parent, "eval", run_dir, "--episodes", "4")
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert "eval deterministic" in proc.stdout and "over 8 episodes" in proc.stdout  # 2 seeds x 4
    summary = json.loads((run_dir / "eval.json").read_text())
    assert summary["checkpoint_update"] == 64 and summary["policies"]["deterministic"]["mean"] >= SOLVED

    gif = run_dir / "policy.gif"
    proc = jaxrl_cli(run_dir.parent, "render", run_dir, "--out", gif, "--steps", "40")
    assert proc.returncode == 0, proc.stderr[-3000:]
    with Image.open(gif) as im:
        assert im.n_frames == 41  # a trained pole stays up for all 40 steps (plus the reset frame)
        assert np.asarray(im.convert("RGB")).std() > 0


# ------------------------------------------------------------------ in-process, no training


def test_discounted_returns_by_hand(registered):
    """Two envs, three steps, gamma 0.5. Env 0 terminates at t=1 (no bootstrap) and its next
    episode is cut by the rollout's end (bootstrap V=8); env 1 is truncated at t=0
    (bootstrap from its final observation's V=4), then runs on to the end (V=2)."""
    reward = jnp.array([[1.0, 1.0], [1.0, 1.0], [1.0, 1.0]])
    next_value = jnp.array([[0.0, 4.0], [0.0, 0.0], [8.0, 2.0]])
    terminated = jnp.array([[False, False], [True, False], [False, False]])
    truncated = jnp.array([[False, True], [False, False], [False, False]])
    g = registered.discounted_returns(reward, next_value, terminated, truncated, 0.5)
    # env 0: G2 = 1 + .5 * 8 = 5; G1 = 1 (terminated); G0 = 1 + .5 * G1 = 1.5
    # env 1: G2 = 1 + .5 * 2 = 2; G1 = 1 + .5 * G2 = 2; G0 = 1 + .5 * 4 = 3 (truncated)
    np.testing.assert_allclose(np.asarray(g), [[1.5, 3.0], [1.0, 2.0], [5.0, 2.0]])


@pytest.mark.parametrize(
    "field, value, message",
    [
        ("total_env_steps", 1000, "total_env_steps: not a multiple of num_envs \\* num_steps = 1024"),
        ("num_envs", 0, "num_envs: expected a positive integer"),
        ("gamma", 1.5, "gamma: expected 0 < gamma <= 1"),
        ("optim", {"lr": 0.0}, "optim.lr: expected > 0"),
        ("ent_coef", -0.1, "ent_coef: expected >= 0"),
        ("hidden", (), "hidden: expected positive widths"),
    ],
)
def test_validate_names_the_key(registered, field, value, message):
    with pytest.raises(ValueError, match=message):
        if field == "optim":  # the section, with this algorithm's defaults for the other keys
            value = registered.ReinforceOptim(**value)
        registered.ReinforceConfig(**{field: value}).validate()


def test_build_rejects_continuous_actions(registered):
    env, params = jaxrl.make("Pendulum-v1")
    with pytest.raises(ValueError, match="env: reinforce needs a Discrete action space"):
        program_on(registered, env, params, registered.ReinforceConfig())


def test_traced_hyperparameters_reach_the_state(registered):
    """``init_with`` over a ``[2]`` batch of learning rates: one program, the rates in the
    optimiser state and the loss coefficients in ``state.hyper``."""
    env, params = jaxrl.make("CartPole-v1")
    cfg = registered.ReinforceConfig(num_envs=2, num_steps=4, total_env_steps=8)
    program = program_on(registered, env, params, cfg)
    hyper = program.hyperparams(lr=jnp.array([1e-3, 3e-3]), ent_coef=0.0)
    state = jax.jit(jax.vmap(program.init_with))(jax.random.split(jax.random.PRNGKey(0), 2), hyper)
    np.testing.assert_allclose(state.opt_state.hyperparams["learning_rate"], [1e-3, 3e-3])
    np.testing.assert_array_equal(state.hyper.ent_coef, [0.0, 0.0])
    with pytest.raises(ValueError, match="hyperparams: unknown \\['clip_eps'\\]"):
        program.hyperparams(clip_eps=0.1)
