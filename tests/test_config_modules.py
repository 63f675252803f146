"""``jaxrl.run.config`` split by concept (sections, conversion, checks, derived counts) still
answers every name it held in 0.5.3, with the very objects of their new modules, and a
config still loads, dumps and reloads to an equal object."""

from __future__ import annotations

import importlib

import pytest

from jaxrl.run import config as config_lib

#: Every module-level name of jaxrl.run.config in 0.5.3 (functions, classes, constants, and
#: what it imported from jaxrl), private ones included: other modules and tests used some.
NAMES_OF_0_5 = [
    "ConfigError", "CurriculumConfig", "Derived", "EnvConfig", "MeshConfig", "OPTIMISER_KEYS", "Plan", "RunConfig", "StopAt",
    "TextConfig", "TokenizerConfig", "TrainConfig", "_INT_LIMIT", "_NUMBER_RE", "_RUN_KEYS", "_check_devices", "_check_env",
    "_check_finite", "_check_stop_every", "_check_train", "_compat", "_convert_scalar", "_join", "_suggest", "_type_name",
    "_validate_algo", "_wrong", "algo_entry", "apply_overrides", "check_text", "config_from_dict", "config_to_dict", "convert",
    "derive", "dump_config", "from_dict", "in_current_spelling", "load_config", "prefixed", "read_yaml", "replace_algo_config",
    "save_config", "short", "to_dict", "with_overrides", "yamlio",
]

#: Where the split put them: new module -> names (under the same name there).
HOMES = {
    "jaxrl.run.sections": ["CurriculumConfig", "EnvConfig", "MeshConfig", "RunConfig", "StopAt", "TokenizerConfig", "TrainConfig"],
    "jaxrl.run.convert": ["ConfigError", "convert", "from_dict", "to_dict"],
    "jaxrl.run.checks": ["OPTIMISER_KEYS", "algo_entry", "prefixed"],
    "jaxrl.run.derived": ["Derived", "derive"],
}


@pytest.mark.parametrize("name", NAMES_OF_0_5)
def test_every_name_of_0_5_is_still_there(name):
    assert hasattr(config_lib, name)


def test_the_names_are_the_new_modules_objects():
    for module, names in HOMES.items():
        new = importlib.import_module(module)
        for name in names:
            assert getattr(config_lib, name) is getattr(new, name), (module, name)
    from jaxrl.run import checks

    assert config_lib._check_env is checks.check_env_section and config_lib._validate_algo is checks.validate_algo


def test_a_config_round_trips(tmp_path):
    cfg = config_lib.load_config("configs/ppo_cartpole.yaml", ["ppo.optim.lr=1e-3", "train.seeds=2"])
    path = tmp_path / "config.yaml"
    config_lib.save_config(cfg, path)
    assert config_lib.load_config(path) == cfg
    with pytest.raises(config_lib.ConfigError, match=r"^train\.seeds: must be >= 1, got 0$"):
        config_lib.with_overrides(cfg, ["train.seeds=0"])
