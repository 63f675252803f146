"""API stability: every moved import path of 0.1.0 (the table in jaxrl._compat) still
imports, gives the new objects and warns with the new path; renamed config keys are read as
the new ones with a warning; an env plugin written against the 0.1.0 docs runs unchanged."""

from __future__ import annotations

import importlib
import subprocess
import sys
import textwrap
import warnings

import pytest

import jaxrl
from jaxrl import _compat

# Imports the previous release's README, docs/ and notebooks showed (git log -p on them).
DOCUMENTED = [
    ("jaxrl", ["render", "spaces", "registry"]),
    ("jaxrl.env", ["Environment", "first_timestep", "transition", "Range", "check_action_shape", "clip_discrete_action"]),
    ("jaxrl.wrappers", ["AutoReset", "EpisodeStatistics", "VmapEnv"]),
    ("jaxrl.check", ["check_env"]),
    ("jaxrl.render", ["show_gif"]),
    ("jaxrl.trainer", ["build", "make_train", "seed_keys"]),
    ("jaxrl.evaluate", ["render_frames"]),
    ("jaxrl.config", ["load_config"]),
    ("jaxrl.verifiers", ["PAD", "EOS", "Task", "Verifier"]),
    ("jaxrl.algos", ["grpo"]),
]


def _fresh(old: str) -> None:
    """Forget a shim (ours) so that importing it again warns again."""
    sys.modules.pop(old, None)
    parent, _, child = old.rpartition(".")
    if parent in sys.modules:
        vars(sys.modules[parent]).pop(child, None)


@pytest.mark.parametrize("old", sorted(_compat.MOVED_MODULES))
def test_moved_module_warns_and_forwards(old):
    _fresh(old)
    targets = [importlib.import_module(t) for t in _compat.MOVED_MODULES[old]]
    if old in _compat.SILENT:
        with warnings.catch_warnings():
            warnings.simplefilter("error")
            module = importlib.import_module(old)
    else:
        with pytest.warns(DeprecationWarning, match=_compat.MOVED_MODULES[old][0].replace(".", r"\.")):
            module = importlib.import_module(old)
    names = [n for n in vars(targets[0]) if not n.startswith("_")]
    assert names
    for name in names:
        assert getattr(module, name) is getattr(targets[0], name), (old, name)
    assert set(names) <= set(dir(module))
    with pytest.raises(AttributeError, match="moved to"):
        module.no_such_name


def test_moved_names_of_split_modules():
    from jaxrl.algos.common import batching
    from jaxrl.core import check_rollout

    with pytest.warns(DeprecationWarning):
        _fresh("jaxrl.sharding")
        from jaxrl.sharding import make_mesh, replicate
    assert replicate is batching.replicate and make_mesh.__module__ == "jaxrl.parallel.sharding"
    with pytest.warns(DeprecationWarning):
        _fresh("jaxrl.check")
        from jaxrl.check import Rollout, check_env
    assert Rollout is check_rollout.Rollout and check_env is jaxrl.check_env


@pytest.mark.parametrize("module, names", DOCUMENTED, ids=[m for m, _ in DOCUMENTED])
def test_documented_imports(module, names):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", DeprecationWarning)
        for old in _compat.MOVED_MODULES:
            if old.startswith(module):
                _fresh(old)
        mod = __import__(module, fromlist=names)  # as `from module import a, b` does
        for name in names:
            assert getattr(mod, name) is not None, (module, name)


def test_package_attribute_warns_and_names_the_new_path():
    from jaxrl.core import render, spaces

    _fresh("jaxrl.render")
    with pytest.warns(DeprecationWarning, match=r"jaxrl\.render moved to jaxrl\.core\.render") as record:
        from jaxrl import render as old_render
    assert record[0].filename == __file__  # the warning points at the user's import line
    assert old_render.show_gif is render.show_gif
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert jaxrl.spaces is spaces  # still public: no warning


def test_public_names_resolve_lazily():
    for name in sorted(set(jaxrl.__all__) - {"load_lm", "generate"}):
        assert getattr(jaxrl, name) is not None
    assert jaxrl.Environment is importlib.import_module("jaxrl.core.env").Environment
    with pytest.raises(AttributeError):
        jaxrl.not_a_name


def test_language_model_names_are_lazy():
    lm = importlib.import_module("jaxrl.models.lm")
    if not (hasattr(lm, "load_lm") and hasattr(lm, "generate")):
        pytest.skip("jaxrl.models.lm has no load_lm / generate yet")
    assert jaxrl.load_lm is lm.load_lm and jaxrl.generate is lm.generate


def test_import_jaxrl_does_not_import_jax():
    code = "import sys, jaxrl, jaxrl.cli; jaxrl.__version__; assert 'jax' not in sys.modules, 'jax imported'"
    subprocess.run([sys.executable, "-c", code], check=True)


def test_renamed_config_keys(recwarn):
    from jaxrl.run.config import ConfigError, apply_overrides, config_from_dict, read_yaml

    raw = read_yaml("configs/grpo_reverse.yaml")
    old = {**raw, "grpo": {k: v for k, v in raw["grpo"].items() if k != "optim"}}
    old["grpo"]["lr"] = raw["grpo"]["optim"]["lr"]
    old["grpo"]["curriculum_start"] = 1
    old["grpo"]["curriculum_stop"] = 2
    old["grpo"]["curriculum_param"] = "num_digits"
    with pytest.warns(FutureWarning, match=r"grpo\.lr is now grpo\.optim\.lr"):
        cfg = config_from_dict(old)
    assert cfg.algo_config.optim.lr == raw["grpo"]["optim"]["lr"]
    assert (cfg.env.curriculum.param, cfg.env.curriculum.start) == ("num_digits", 1)
    with pytest.warns(FutureWarning):
        cfg = config_from_dict(apply_overrides(raw, ["grpo.lr=0.5"]))  # --set old key wins
    assert cfg.algo_config.optim.lr == 0.5
    both = {**raw, "grpo": {**raw["grpo"], "lr": 0.1}}
    with pytest.warns(FutureWarning), pytest.raises(ConfigError, match="both grpo.lr and"):
        config_from_dict(both)


OLD_PLUGIN = '''
"""An env package written against jaxrl 0.1.0's docs (docs/writing_an_env.md of that release)."""
import jax
import jax.numpy as jnp
from flax import struct

from jaxrl import render, spaces
from jaxrl.env import Environment, first_timestep, transition


@struct.dataclass
class Params:
    max_steps_in_episode: int = 3


@struct.dataclass
class State:
    time: jax.Array


class Countdown(Environment):
    invalid_action_rule = "every action is the same"

    def __eq__(self, other):
        return type(other) is Countdown

    def __hash__(self):
        return hash(Countdown)

    @property
    def default_params(self):
        return Params()

    def observation_space(self, params):
        return spaces.Box(0.0, 10.0, (1,), jnp.float32)

    def action_space(self, params):
        return spaces.Discrete(2)

    def reset(self, key, params):
        state = State(jnp.zeros((), jnp.int32))
        return state, first_timestep(jnp.zeros((1,), jnp.float32))

    def step(self, key, state, action, params):
        time = state.time + 1
        obs = time.astype(jnp.float32)[None]
        return State(time), transition(obs, jnp.float32(1.0), False, time >= params.max_steps_in_episode)

    def render(self, state, params):
        return render.blank(8, 8)
'''


def test_old_plugin_runs_check_env(tmp_path, monkeypatch):
    (tmp_path / "old_style_plugin.py").write_text(textwrap.dedent(OLD_PLUGIN))
    monkeypatch.syspath_prepend(str(tmp_path))
    for old in ("jaxrl.env",):
        _fresh(old)
    with pytest.warns(DeprecationWarning):
        module = importlib.import_module("old_style_plugin")
    report = jaxrl.check_env(
        module.Countdown(), num_steps=8, num_envs=2, verbose=False,
        compiler_options={"xla_backend_optimization_level": 1},
    )
    assert report.passed, report
