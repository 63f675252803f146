"""The ``optim:`` section: one shape for every algorithm, each algorithm's 0.4.0 defaults kept,
0.4.0's flat keys (``ppo.lr``, ``ppo.anneal_lr``, ...) read as the new ones with one warning,
bad values named by their full key, and the schedule against its formula in plain Python."""

from __future__ import annotations

import copy
import dataclasses
import warnings

import pytest

from jaxrl import _compat
from jaxrl.algos.common import optim
from jaxrl.algos.contract import Plan
from jaxrl.run import config as C

ALGOS = ("ppo", "dqn", "pqn", "sac", "grpo", "sft", "mappo", "ippo")
FIELDS = ["lr", "max_grad_norm", "adam_eps", "adam_b1", "adam_b2", "warmup_updates", "lr_end_frac"]
ENVS = {"ppo": "CartPole-v1", "dqn": "CartPole-v1", "pqn": "CartPole-v1", "sac": "Pendulum-v1",
        "grpo": "text/Reverse-v0", "sft": "text/AlphabetSortText-v0", "mappo": "jaxmarl/MPE_simple_spread_v3",
        "ippo": "jaxmarl/MPE_simple_spread_v3"}
SECTIONS = {"sft": {"model": {"path": "envs/assets/text_model"}}}

# The optimiser settings of 0.4.0 (its config classes and optax's Adam), written out by hand:
# anneal_lr true was a decay to 0 (lr_end_frac 0.0), false a constant rate (1.0).
DEFAULTS_040 = {
    "ppo": dict(lr=2.5e-4, max_grad_norm=0.5, adam_eps=1e-5, adam_b2=0.999, lr_end_frac=0.0),
    "mappo": dict(lr=2.5e-4, max_grad_norm=0.5, adam_eps=1e-5, adam_b2=0.999, lr_end_frac=0.0),
    "ippo": dict(lr=2.5e-4, max_grad_norm=0.5, adam_eps=1e-5, adam_b2=0.999, lr_end_frac=0.0),
    "dqn": dict(lr=1e-3, max_grad_norm=10.0, adam_eps=1e-8, adam_b2=0.999, lr_end_frac=1.0),
    "pqn": dict(lr=3e-4, max_grad_norm=10.0, adam_eps=1e-8, adam_b2=0.999, lr_end_frac=0.0),
    "sac": dict(lr=1e-3, max_grad_norm=10.0, adam_eps=1e-8, adam_b2=0.999, lr_end_frac=1.0),
    "grpo": dict(lr=1e-3, max_grad_norm=1.0, adam_eps=1e-8, adam_b2=0.99, lr_end_frac=1.0),
    "sft": dict(lr=1e-4, max_grad_norm=1.0, adam_eps=1e-8, adam_b2=0.99, lr_end_frac=1.0),
}


def _raw(algo: str, section: dict | None = None) -> dict:
    return {"algo": algo, "env": {"id": ENVS[algo]}, algo: {**copy.deepcopy(SECTIONS.get(algo, {})), **(section or {})}}


def _load(raw: dict, sets=()):
    """The resolved config dict and the FutureWarnings raised while reading it."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        cfg = C.config_from_dict(C.apply_overrides(raw, sets))
    return C.config_to_dict(cfg), [str(w.message) for w in caught if issubclass(w.category, FutureWarning)]


@pytest.mark.parametrize("algo", ALGOS)
def test_every_algorithm_has_the_same_optim_section_with_its_040_defaults(algo):
    cls = C.algo_entry(algo).config_cls
    names = [f.name for f in dataclasses.fields(cls)]
    assert not set(names) & {*FIELDS, "anneal_lr"}, "optimiser keys outside the optim section"
    section = cls().optim
    assert isinstance(section, optim.OptimConfig)
    assert [f.name for f in dataclasses.fields(section)] == FIELDS
    assert type(section).validate is optim.OptimConfig.validate  # one check for all
    expected = {**dict(adam_b1=0.9, warmup_updates=0), **DEFAULTS_040[algo]}
    assert dataclasses.asdict(section) == pytest.approx(expected)
    # A partial section keeps the algorithm's other defaults (not OptimConfig's).
    resolved, _ = _load(_raw(algo, {"optim": {"lr": 0.0123}}))
    assert resolved[algo]["optim"] == pytest.approx({**expected, "lr": 0.0123})


# (old key, its value, the new key's value): every renamed optimiser key of 0.4.0.
OLD_VALUES = {"lr": (1.5e-3, 1.5e-3), "max_grad_norm": (0.3, 0.3), "adam_eps": (1e-6, 1e-6), "lr_end_frac": (0.2, 0.2)}
CASES = [(old, *OLD_VALUES[old.split(".")[1]]) for old in _compat.OPTIM_KEYS if not old.endswith("anneal_lr")]
CASES += [(old, flag, 0.0 if flag else 1.0) for old in _compat.OPTIM_KEYS if old.endswith("anneal_lr") for flag in (True, False)]


@pytest.mark.parametrize("old,value,new_value", CASES, ids=[f"{c[0]}={c[1]}" for c in CASES])
def test_old_flat_key_reads_as_the_new_key_with_one_warning(old, value, new_value):
    algo, leaf = old.split(".")
    new_leaf = "lr_end_frac" if leaf == "anneal_lr" else leaf
    assert _compat.OPTIM_KEYS[old] == f"{algo}.optim.{new_leaf}"
    reference, none = _load(_raw(algo, {"optim": {new_leaf: new_value}}))
    assert none == []
    from_yaml, yaml_warnings = _load(_raw(algo, {leaf: value}))
    text = str(value).lower()
    from_set, set_warnings = _load(_raw(algo), [f"{old}={text}"])
    assert from_yaml == reference and from_set == reference
    for caught in (yaml_warnings, set_warnings):
        assert len(caught) == 1 and f"{old} is now {algo}.optim.{new_leaf}" in caught[0], caught


def test_old_key_next_to_its_new_spelling_is_refused():
    with pytest.raises(C.ConfigError, match="both ppo.lr and its new spelling ppo.optim.lr"):
        _load(_raw("ppo", {"lr": 1e-3, "optim": {"lr": 2e-3}}))
    with pytest.raises(C.ConfigError, match="ppo.anneal_lr: expected true or false, got 'sometimes'"):
        _load(_raw("ppo"), ["ppo.anneal_lr=sometimes"])


def test_dqn_anneal_lr_with_its_floor():
    """0.4.0's DQN decayed to ``lr_end_frac`` only with ``anneal_lr: true``."""
    for section, end in [({"anneal_lr": True, "lr_end_frac": 0.25}, 0.25), ({"anneal_lr": False, "lr_end_frac": 0.25}, 1.0),
                         ({"anneal_lr": True}, 0.0), ({"lr_end_frac": 0.25, "anneal_lr": True}, 0.25),
                         ({"anneal_lr": True, "lr_end_frac": 1.0}, 1.0)]:
        assert _load(_raw("dqn", section))[0]["dqn"]["optim"]["lr_end_frac"] == end, section
    # --set in either order (bench/results/offpolicy_sweep.json used anneal_lr first)
    for sets in (["dqn.anneal_lr=true", "dqn.lr_end_frac=0.2"], ["dqn.lr_end_frac=0.2", "dqn.anneal_lr=true"]):
        assert _load(_raw("dqn"), sets)[0]["dqn"]["optim"]["lr_end_frac"] == 0.2, sets


# The ppo section of a run directory's config.yaml (and of its checkpoints' records) as 0.4.0
# wrote it: every key, flat optimiser keys among them.
PPO_040 = {
    "num_envs": 8, "num_steps": 64, "total_env_steps": 40960, "update_epochs": 4, "num_minibatches": 4,
    "lr": 0.006, "anneal_lr": True, "max_grad_norm": 0.5, "adam_eps": 1e-05, "gamma": 0.99, "gae_lambda": 0.95,
    "clip_eps": 0.2, "vf_clip_eps": None, "ent_coef": 0.01, "vf_coef": 0.5, "normalize_advantages": True,
    "normalize_obs": False, "normalize_reward": False, "hidden": [64], "activation": "tanh", "shared_torso": False,
    "dist": "auto", "action_mask": True, "log_std": "state_independent", "init_log_std": 0.0,
    "network": {"torso": "mlp", "cell_size": 128, "prev_action": False, "conv": None, "channels": None},
    "eval_episodes": 16, "eval_max_steps": None,
}
DQN_040 = {"num_envs": 8, "steps_per_update": 4, "total_env_steps": 80000, "lr": 0.002, "anneal_lr": False,
           "lr_end_frac": 0.0, "max_grad_norm": 10.0, "gamma": 0.995}


def test_a_040_run_config_loads_as_the_new_shape():
    old = {"algo": "ppo", "env": {"id": "CartPole-v1"}, "ppo": PPO_040, "train": {"seed": 0}, "devices": 1, "shard": "auto"}
    resolved, caught = _load(old)
    new = {k: v for k, v in PPO_040.items() if k not in ("lr", "anneal_lr", "max_grad_norm", "adam_eps")}
    new["optim"] = {"lr": 0.006, "max_grad_norm": 0.5, "adam_eps": 1e-5, "lr_end_frac": 0.0}
    assert resolved == _load({**old, "ppo": new})[0] and len(caught) == 4
    assert resolved["ppo"]["optim"]["lr_end_frac"] == 0.0 and resolved["ppo"]["optim"]["adam_eps"] == 1e-5
    # a checkpoint record's config (meta.config) reads back to today's full shape, as resume compares it
    assert C.in_current_spelling(old) == resolved
    dqn, _ = _load({"algo": "dqn", "env": {"id": "CartPole-v1"}, "dqn": DQN_040})
    assert dqn["dqn"]["optim"] == pytest.approx({**DEFAULTS_040["dqn"], "lr": 0.002, "adam_b1": 0.9, "warmup_updates": 0})


def test_resume_accepts_a_040_checkpoint_record(tmp_path):
    import io

    from jaxrl.run import resume

    old = {"algo": "ppo", "env": {"id": "CartPole-v1"}, "ppo": PPO_040, "train": {"seed": 0}, "devices": 1, "shard": "auto"}
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", FutureWarning)
        cfg = C.config_from_dict(old)  # the run's config.yaml, read through the renaming
    resume.check_config_drift(cfg, {"meta": {"config": old}}, str(tmp_path), 3, False, True, io.StringIO())


BAD = [("lr", -1, "expected > 0, got -1.0"), ("max_grad_norm", 0, "expected > 0, got 0.0"),
       ("adam_eps", 0, "expected > 0, got 0.0"), ("adam_b2", 1.0, "expected 0 <= adam_b2 < 1, got 1.0"),
       ("warmup_updates", -2, "expected an integer >= 0, got -2"), ("lr_end_frac", 1.5, "expected 0 <= lr_end_frac <= 1, got 1.5")]


@pytest.mark.parametrize("algo", ALGOS)
def test_bad_values_name_the_full_new_key(algo):
    for key, value, message in BAD:
        with pytest.raises(C.ConfigError) as err:
            _load(_raw(algo, {"optim": {key: value}}))
        assert str(err.value) == f"{algo}.optim.{key}: {message}"
    if f"{algo}.lr" in _compat.OPTIM_KEYS:  # through the old spelling: the new key is named
        with pytest.raises(C.ConfigError, match=rf"^{algo}\.optim\.lr: expected > 0, got -1\.0$"):
            _load(_raw(algo, {"lr": -1}))


def _reference_rate(u: int, total: int, end: float, warmup: int) -> float:
    """The rate factor at update (or step) ``u``, in plain Python."""
    decay = 1.0 - (1.0 - end) * min(u / total, 1.0)
    return decay * (min((u + 1) / warmup, 1.0) if warmup else 1.0)


def test_schedule_per_update_and_per_step():
    o = optim.OptimConfig(lr_end_frac=0.25, warmup_updates=3)
    plan = Plan(num_updates=10, env_steps_per_update=1, grad_steps_per_update=4)
    per_update = optim.schedule(o, plan.num_updates, plan.grad_steps_per_update)
    per_step = optim.schedule(o, plan.num_updates, plan.grad_steps_per_update, per_step=True)
    for count in range(0, 48, 3):
        u = count // 4
        assert float(per_update.factor(count)) == pytest.approx(_reference_rate(u, 10, 0.25, 3), rel=1e-6)
        assert float(per_step.factor(count)) == pytest.approx(_reference_rate(count, 40, 0.25, 12), rel=1e-6)


def test_ppo_and_mappo_share_their_checks():
    from jaxrl.algos import mappo, ppo

    for changes, message in [(dict(num_minibatches=3), "num_minibatches: 3 does not divide the batch"),
                             (dict(update_epochs=True), "update_epochs: expected a positive integer, got True"),
                             (dict(clip_eps=0.0), "clip_eps: expected clip_eps > 0, got 0.0"),
                             (dict(ent_coef=-1.0), "ent_coef: expected ent_coef >= 0, got -1.0")]:
        for cls in (ppo.PPOConfig, mappo.MAPPOConfig):
            with pytest.raises(ValueError, match=message):
                dataclasses.replace(cls(num_envs=8, num_steps=16, total_env_steps=128 * 4), **changes).validate()
