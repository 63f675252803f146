"""Config loading: the bad-config table (one-line message, exit code 2, nothing compiled),
YAML round trips, overrides, derived counts, and that the user's config is never mutated."""

from __future__ import annotations

import copy
import dataclasses
import os

import jax
import pytest
import yaml

from jaxrl import cli
from jaxrl.run import config as C
from jaxrl.algos.ppo import PPOConfig

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
CARTPOLE = os.path.join(REPO, "configs", "ppo_cartpole.yaml")

BASE = {"algo": "ppo", "env": {"id": "CartPole-v1"}, "ppo": {"num_envs": 8, "num_steps": 64, "total_env_steps": 5120}}


def _with(**changes) -> dict:
    raw = copy.deepcopy(BASE)
    for path, value in changes.items():
        node = raw
        parts = path.split("__")
        for part in parts[:-1]:
            node = node.setdefault(part, {})
        if value is _DELETE:
            node.pop(parts[-1])
        else:
            node[parts[-1]] = value
    return raw


_DELETE = object()

# (raw config or YAML text, --set overrides, expected message after "jaxrl: config error: ")
BAD = [
    (_with(trian={"seed": 1}), [], "unknown key 'trian'; did you mean 'train'?"),
    (_with(ppo__optim__lrr=0.1), [], "unknown key 'ppo.optim.lrr'; did you mean 'ppo.optim.lr'?"),
    (_with(train__sede=3), [], "unknown key 'train.sede'; did you mean 'train.seed'?"),
    (_with(ppo__num_envs="eight"), [], "ppo.num_envs: expected int, got 'eight'"),
    (_with(ppo__num_envs=8.5), [], "ppo.num_envs: expected int, got 8.5"),
    (_with(train__progress=3), [], "train.progress: expected bool, got 3"),
    (_with(train__log_seeds="median"), [], "train.log_seeds: expected one of 'mean', 'per_seed', got 'median'"),
    (_with(ppo__hidden=[64, "x"]), [], "ppo.hidden[1]: expected int, got 'x'"),
    (_with(ppo__hidden=64), [], "ppo.hidden: expected a list, got 64"),
    (_with(ppo__vf_clip_eps="none"), [], "ppo.vf_clip_eps: expected float, got 'none'"),
    (_with(devices="some"), [], "devices: expected one of 'all' or int, got 'some'"),
    (_with(devices=0), [], "devices: must be 'all' or >= 1, got 0"),
    (_with(shard="devices"), [], "shard: expected one of 'auto', 'envs', 'seeds', got 'devices'"),
    (_with(train__seeds=0), [], "train.seeds: must be >= 1, got 0"),
    (_with(train__updates_per_chunk=-1), [], "train.updates_per_chunk: must be >= 1, got -1"),
    (_with(ppo__num_minibatches=3), [], "ppo.num_minibatches: 3 does not divide the batch num_envs * num_steps = 512"),
    (_with(ppo__total_env_steps=5000), [], "ppo.total_env_steps: 5000 is not a multiple of num_envs * num_steps = 512"),
    (_with(ppo__optim__lr=-1.0), [], "ppo.optim.lr: expected > 0, got -1.0"),
    (_with(ppo__dist="gaussian"), [], "ppo.dist: 'gaussian' does not fit the action space"),
    (_with(env__id="CartPol-v1"), [], "env.id: unknown env id 'CartPol-v1'; did you mean 'CartPole-v1'"),
    (_with(env__params={"lenght": 0.7}), [], "env.params: unknown env parameter(s) ['lenght'] for CartPoleParams"),
    (_with(env__params={"length": "long"}), [], "env.params.length: expected a number, got 'long'"),
    (_with(env={"params": {}}), [], "missing key 'env.id'"),
    (_with(env=_DELETE), [], "missing key 'env'"),
    (_with(algo="ppx"), [], "algo: unknown algorithm 'ppx'; did you mean 'ppo'?"),
    (_with(algo=_DELETE), [], "missing key 'algo'"),
    (_with(ppo=[1, 2]), [], "ppo: expected a mapping, got [1, 2]"),
    ("algo: ppo\nenv: [unclosed\n", [], "is not valid YAML at line"),
    ("- just\n- a list\n", [], "expected a mapping at the top level"),
    (BASE, ["ppo.optim.lr"], "--set 'ppo.optim.lr': expected key=value, e.g. ppo.optim.lr=1e-3"),
    (BASE, ["ppo.optim.lr=abc"], "ppo.optim.lr: expected float, got 'abc'"),
    (BASE, ["ppo.num_envs.x=1"], "--set 'ppo.num_envs.x=1': 'ppo.num_envs' is not a section"),
    (BASE, ["ppo.optim.lr.x=1"], "ppo.optim.lr: expected float, got {'x': 1}"),
    (BASE, ["ppo.gamma=1.5"], "ppo.gamma: expected 0 < gamma <= 1, got 1.5"),
    (BASE, ["train.seedz=2"], "unknown key 'train.seedz'; did you mean 'train.seed'?"),
]


def _write(tmp_path, raw) -> str:
    path = tmp_path / "bad.yaml"
    path.write_text(raw if isinstance(raw, str) else yaml.safe_dump(raw))
    return str(path)


@pytest.fixture
def compile_counter():
    """Counts XLA backend compilations while a test runs."""
    events = []

    def listener(event, duration, **kwargs):
        if "backend_compile" in event:
            events.append(event)

    jax.monitoring.register_event_duration_secs_listener(listener)
    yield events
    jax.monitoring.unregister_event_duration_listener(listener)


@pytest.mark.parametrize("raw, sets, expected", BAD, ids=[str(i) for i in range(len(BAD))])
def test_bad_config_is_one_line_exit_2_before_compiling(tmp_path, capsys, compile_counter, raw, sets, expected):
    out_dir = tmp_path / "run"
    argv = ["train", _write(tmp_path, raw), "--out", str(out_dir)]
    for s in sets:
        argv += ["--set", s]
    code = cli.main(argv)
    err = capsys.readouterr().err
    assert code == 2
    lines = err.strip().splitlines()
    assert len(lines) == 1, err
    assert lines[0].startswith("jaxrl: config error: "), err
    assert expected in lines[0], err
    assert "Traceback" not in err
    assert not out_dir.exists()  # nothing written, nothing run
    assert compile_counter == []  # nothing compiled


def test_compile_counter_sees_compiles(compile_counter):
    jax.jit(lambda x: x * 3 + 1)(2.0)  # the control: a compile is counted
    assert compile_counter


def test_missing_file_and_missing_config(tmp_path, capsys):
    assert cli.main(["train", str(tmp_path / "nope.yaml")]) == 2
    assert "config error: config file" in capsys.readouterr().err
    assert cli.main(["train"]) == 2
    assert "train needs a CONFIG file or --resume RUN_DIR" in capsys.readouterr().err


def test_recipe_roundtrip_equal(tmp_path):
    cfg = C.load_config(CARTPOLE)
    assert isinstance(cfg.algo_config, PPOConfig)
    assert cfg.algo_config.hidden == (64,) and isinstance(cfg.algo_config.hidden, tuple)
    path = tmp_path / "resolved.yaml"
    C.save_config(cfg, path)
    again = C.load_config(path)
    assert again == cfg
    # Every field is written out explicitly (the resolved config, defaults included).
    raw = yaml.safe_load(path.read_text())
    assert set(raw["ppo"]) == {f.name for f in dataclasses.fields(PPOConfig)}
    assert raw["ppo"]["vf_clip_eps"] is None


@pytest.mark.parametrize("name", ["ppo_cartpole", "ppo_acrobot", "ppo_mountaincar_continuous", "ppo_pendulum"])
def test_recipes_load(name):
    cfg = C.load_config(os.path.join(REPO, "configs", f"{name}.yaml"))
    assert cfg.algo == "ppo" and isinstance(cfg.algo_config, PPOConfig)


def test_overrides_typed_and_user_config_not_mutated():
    raw = copy.deepcopy(BASE)
    before = copy.deepcopy(raw)
    sets = ["ppo.optim.lr=1e-3", "ppo.hidden=[32, 16]", "train.seeds=4", "env.params.length=0.7", "devices=all"]
    cfg = C.config_from_dict(C.apply_overrides(raw, sets))
    assert raw == before  # the raw mapping is untouched
    assert cfg.algo_config.optim.lr == 1e-3 and isinstance(cfg.algo_config.optim.lr, float)  # "1e-3" is a YAML string
    assert cfg.algo_config.hidden == (32, 16)
    assert cfg.train.seeds == 4 and cfg.devices == "all"
    assert cfg.env.params == {"length": 0.7}
    again = C.with_overrides(cfg, ["ppo.optim.lr=5e-4"])
    assert cfg.algo_config.optim.lr == 1e-3 and again.algo_config.optim.lr == 5e-4  # a new object
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg.train.seed = 3  # type: ignore[misc]


def test_derived_counts_exact():
    cfg = C.config_from_dict(_with(ppo__update_epochs=3, train__updates_per_chunk=4, train__seeds=2))
    from jaxrl.algos import ppo

    d = C.derive(cfg, ppo.config.plan(cfg.algo_config))
    assert (d.num_updates, d.env_steps_per_update, d.grad_steps_per_update) == (10, 512, 12)
    assert (d.total_env_steps, d.total_grad_steps) == (5120, 120)
    assert (d.updates_per_chunk, d.num_chunks) == (4, 3)  # 4 + 4 + 2
    text = d.describe()
    assert "10 updates x 512 env steps = 5,120 env steps x 2 seeds" in text
    assert "120 gradient steps (12 per update)" in text


def test_converter_types():
    from typing import Literal, Optional

    assert C.convert(None, Optional[int], "k") is None
    assert C.convert(3, Optional[int], "k") == 3
    assert C.convert(1.0e6, int, "k") == 1_000_000
    assert C.convert([1, "a"], tuple[int, str], "k") == (1, "a")
    with pytest.raises(C.ConfigError, match=r"k: expected a list of 2 items, got 3"):
        C.convert([1, 2, 3], tuple[int, str], "k")
    with pytest.raises(C.ConfigError, match=r"k: expected one of 'a', 'b', got True"):
        C.convert(True, Literal["a", "b"], "k")
    with pytest.raises(C.ConfigError, match=r"k: expected int, got True"):
        C.convert(True, int, "k")  # a bool is not an int here


@pytest.mark.parametrize(("short", "base", "sets"), [
    ("ppo_minatar_breakout_500k", "ppo_minatar_breakout", ["ppo.optim.lr=4e-3"]),
    ("ppo_minatar_breakout_cnn_500k", "ppo_minatar_breakout_cnn", ["ppo.optim.lr=4e-3", "ppo.shared_torso=true"]),
])
def test_short_minatar_recipes_are_what_was_measured(short, base, sets):
    """The 491,520-step MinAtar recipes are their 10M-step recipes with the overrides of the
    held-out comparison (bench/results/minatar_cnn_heldout_shared_lr4e-3.md), key for key."""
    load = lambda name, extra=(): C.load_config(os.path.join(REPO, "configs", f"{name}.yaml"), list(extra))  # noqa: E731
    assert load(short) == load(base, ["ppo.total_env_steps=491520", *sets])
