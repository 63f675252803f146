"""The registry: make/register, id validation, close-match suggestions, param overrides and
the ``jaxrl.envs`` entry-point group (through a fake installed distribution)."""

from __future__ import annotations

import sys
import warnings
from importlib import metadata
from pathlib import Path

import jax
import pytest

import jaxrl
from jaxrl.core import registry
from jaxrl.core.env import Environment
from jaxrl_envs.cartpole import CartPole, CartPoleParams

PLUGIN_SRC = Path(__file__).parent / "plugin_pkg"


@pytest.fixture
def scratch_ids():
    """Ids registered by a test; deregistered afterwards so tests stay independent."""
    ids: list[str] = []
    yield ids
    for env_id in ids:
        registry.deregister(env_id)


def test_make_returns_env_and_default_params():
    env, params = jaxrl.make("CartPole-v1")
    assert isinstance(env, CartPole)
    assert params == CartPoleParams()
    assert "CartPole-v1" in jaxrl.registered_ids()
    assert jaxrl.registered_ids() == sorted(jaxrl.registered_ids())


def test_param_overrides():
    _, params = jaxrl.make("CartPole-v1", length=0.7, max_steps_in_episode=20)
    assert params.length == 0.7 and params.max_steps_in_episode == 20
    assert params.masscart == CartPoleParams().masscart


def test_unknown_param_is_a_clear_error():
    with pytest.raises(TypeError, match=r"unknown env parameter\(s\) \['lenght'\] for CartPoleParams; known: \[.*'length'"):
        jaxrl.make("CartPole-v1", lenght=0.7)


def test_spec_param_defaults_and_make_overrides_win(scratch_ids):
    jaxrl.register("ShortPole-v0", CartPole, param_defaults={"max_steps_in_episode": 50, "length": 0.25})
    scratch_ids.append("ShortPole-v0")
    _, params = jaxrl.make("ShortPole-v0")
    assert (params.max_steps_in_episode, params.length) == (50, 0.25)
    _, params = jaxrl.make("ShortPole-v0", max_steps_in_episode=7)
    assert (params.max_steps_in_episode, params.length) == (7, 0.25)


def test_bad_param_defaults_fail_at_make(scratch_ids):
    jaxrl.register("TypoPole-v0", CartPole, param_defaults={"gravty": 1.0})
    scratch_ids.append("TypoPole-v0")
    with pytest.raises(TypeError, match="gravty"):
        jaxrl.make("TypoPole-v0")


def test_duplicate_id_rejected(scratch_ids):
    jaxrl.register("DupPole-v0", CartPole)
    scratch_ids.append("DupPole-v0")
    with pytest.raises(ValueError, match="'DupPole-v0' is already registered"):
        jaxrl.register("DupPole-v0", CartPole)
    with pytest.raises(ValueError, match="already registered"):
        jaxrl.register("CartPole-v1", CartPole)


@pytest.mark.parametrize("bad", ["Bad Name-v0", "a/b/c-v0", "Pole/", "", "Pole-v0!", "ünïcode-v0"])
def test_malformed_ids_rejected(bad):
    with pytest.raises(ValueError, match="malformed env id"):
        jaxrl.register(bad, CartPole)


def test_non_string_id_rejected():
    with pytest.raises(ValueError, match="malformed env id"):
        jaxrl.register(3, CartPole)


def test_unversioned_id_needs_a_version_unless_namespaced(scratch_ids):
    with pytest.raises(ValueError, match=r"needs a version suffix, e.g. 'Pole-v0'"):
        jaxrl.register("Pole", CartPole)
    jaxrl.register("mypkg/Pole", CartPole)  # a namespaced id may omit the version
    scratch_ids.append("mypkg/Pole")
    assert isinstance(jaxrl.make("mypkg/Pole")[0], CartPole)


@pytest.mark.parametrize("typo", ["CartPole-v0", "CartPole", "Cartpole-v1", "CartPol-v1"])
def test_unknown_id_suggests_close_matches(typo):
    with pytest.raises(KeyError, match=r"unknown env id .*did you mean .*'CartPole-v1'"):
        jaxrl.make(typo)


def test_unknown_id_without_close_match_points_to_list():
    with pytest.raises(KeyError, match="see `jaxrl list`"):
        jaxrl.make("Zqxwv-v9")


def test_entry_point_forms(scratch_ids):
    jaxrl.register("StrPole-v0", "jaxrl_envs.cartpole:CartPole", description="by string")
    scratch_ids.append("StrPole-v0")
    assert isinstance(jaxrl.make("StrPole-v0")[0], CartPole)
    assert jaxrl.spec("StrPole-v0").description == "by string"
    with pytest.raises(TypeError, match="must be a callable or 'module:attr'"):
        jaxrl.register("NoColon-v0", "jaxrl_envs.cartpole.CartPole")
    jaxrl.register("NotAnEnv-v0", dict)
    scratch_ids.append("NotAnEnv-v0")
    with pytest.raises(TypeError, match="returned dict, not an Environment"):
        jaxrl.make("NotAnEnv-v0")


# ------------------------------------------------------------- entry-point plugins


def _fake_distribution(root: Path, name: str, entry_points: str) -> None:
    """Write ``<name>-0.1.0.dist-info`` (what pip installs) into ``root``."""
    info = root / f"{name}-0.1.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {name}\nVersion: 0.1.0\n")
    (info / "entry_points.txt").write_text(entry_points)


@pytest.fixture
def fresh_plugin_loading(monkeypatch):
    """Make the registry load the entry-point group again on its next lookup."""
    monkeypatch.setattr(registry, "_plugins_loaded", False)
    yield monkeypatch
    monkeypatch.delitem(sys.modules, "jaxrl_demo_plugin", raising=False)


def test_entry_point_plugin(tmp_path, fresh_plugin_loading, scratch_ids):
    monkeypatch = fresh_plugin_loading
    _fake_distribution(tmp_path, "jaxrl_demo_plugin", "[jaxrl.envs]\ndemo = jaxrl_demo_plugin:register_envs\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.syspath_prepend(str(PLUGIN_SRC))
    assert "demo/CoinGuess-v0" not in registry._REGISTRY
    names = {ep.name: ep.value for ep in metadata.entry_points(group=registry.ENTRY_POINT_GROUP)}
    assert names["demo"] == "jaxrl_demo_plugin:register_envs"
    scratch_ids.append("demo/CoinGuess-v0")

    ids = jaxrl.registered_ids()  # first lookup: loads the group

    assert "demo/CoinGuess-v0" in ids and "CartPole-v1" in ids
    assert jaxrl.spec("demo/CoinGuess-v0").description == "demo plugin: guess the coin"
    env, params = jaxrl.make("demo/CoinGuess-v0")
    assert isinstance(env, Environment) and type(env).__module__ == "jaxrl_demo_plugin"
    state, ts = env.reset(jax.random.PRNGKey(0), params)
    _, ts = env.step(jax.random.PRNGKey(1), state, state.coin, params)
    assert float(ts.reward) == 1.0 and bool(ts.terminated)


def test_broken_plugin_warns_and_the_registry_still_works(tmp_path, fresh_plugin_loading):
    monkeypatch = fresh_plugin_loading
    _fake_distribution(tmp_path, "jaxrl_broken_plugin", "[jaxrl.envs]\nbroken = jaxrl_no_such_module:register\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.warns(UserWarning, match=r"env plugin 'broken' \(jaxrl_no_such_module:register\) failed to load"):
        ids = jaxrl.registered_ids()
    assert "CartPole-v1" in ids


def test_plugins_load_once(tmp_path, fresh_plugin_loading):
    monkeypatch = fresh_plugin_loading
    _fake_distribution(tmp_path, "jaxrl_broken_plugin", "[jaxrl.envs]\nbroken = jaxrl_no_such_module:register\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    with pytest.warns(UserWarning):
        jaxrl.registered_ids()
    with warnings.catch_warnings():
        warnings.simplefilter("error")  # a second lookup must not load (and warn) again
        jaxrl.registered_ids()


def test_missing_optional_package_gives_the_install_hint(monkeypatch):
    """gymnax/, brax/ and mjx/ ids name the extra that installs them when it is missing."""
    from jaxrl.core import registry

    monkeypatch.setattr(registry.importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(KeyError, match=r"needs the optional package 'gymnax': install jaxrl\[gymnax\]"):
        registry.spec("gymnax/NotRegistered-v0")
    with pytest.raises(KeyError, match=r"install jaxrl\[physics\]"):
        registry.spec("brax/not_there")
    with pytest.raises(KeyError, match=r"'mujoco': install jaxrl\[physics\]"):
        registry.spec("mjx/Nope-v0")
    with pytest.raises(KeyError, match=r"'mujoco_playground': install jaxrl\[playground\]"):
        registry.spec("playground/NotThere")
    monkeypatch.undo()
    with pytest.raises(KeyError, match="unknown env id"):  # installed packages: the usual message
        registry.spec("brax/not_there")


def test_refused_id_says_why_and_is_not_listed(monkeypatch):
    """An id an adapter knows but will not build (registry.refuse) answers with its reason,
    not "unknown env id", and never shows in the registered ids."""
    monkeypatch.setattr(registry, "_REFUSED", {})
    registry.refuse("scratch/Downloads-v0", "it downloads its assets at run time")
    with pytest.raises(KeyError, match="'scratch/Downloads-v0' is not available: it downloads its assets at run time"):
        jaxrl.make("scratch/Downloads-v0")
    assert "scratch/Downloads-v0" not in jaxrl.registered_ids()
    with pytest.raises(ValueError, match="malformed env id"):
        registry.refuse("no version", "x")


def test_an_error_inside_a_plugin_module_names_that_module(tmp_path, fresh_plugin_loading):
    monkeypatch = fresh_plugin_loading
    pkg = tmp_path / "jaxrl_faulty_plugin"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("from jaxrl_faulty_plugin.envs import register\n")
    (pkg / "envs.py").write_text("SIZES = {}\nDEFAULT = SIZES['grid']\n\ndef register():\n    pass\n")
    _fake_distribution(tmp_path, "jaxrl_faulty_plugin", "[jaxrl.envs]\nfaulty = jaxrl_faulty_plugin:register\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    monkeypatch.delitem(sys.modules, "jaxrl_faulty_plugin", raising=False)
    with pytest.warns(UserWarning, match=r"failed to load: KeyError: 'grid' \(raised in module jaxrl_faulty_plugin\.envs, line 2\)"):
        jaxrl.registered_ids()
