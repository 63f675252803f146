"""The algorithm contract's :class:`~jaxrl.algos.contract.Program`: seven required fields,
``init`` derived from ``init_with``, the optional capabilities in :class:`Monitor` and
:class:`LMHooks`; and an algorithm plugin written the 0.4.0 way (``init=``, ``samples=``,
``curve=``, ``alerts=``, ``model_params=`` on the Program, positional order, ``_replace``,
reads of the old attributes) still trains, with a DeprecationWarning naming the new spelling.

The plugin is ``fake`` of tests/test_trainer.py (Adam on a linear target, compiles in a
second); the old-way run must equal the new-way run bit for bit.
"""

from __future__ import annotations

import dataclasses
import functools
import warnings

import jax
import jax.numpy as jnp
import numpy as np
import pytest

import test_trainer as fake
from jaxrl.algos import registry as algo_registry
from jaxrl.algos.contract import (
    Alert, Curve, DerivedInit, EvalReport, LMHooks, ModelParams, Monitor, Plan, Program, replicated_axes,
)
from jaxrl.run import trainer

CFG = fake.FakeConfig(num_updates=3)
CURVE = Curve("loss", "training loss")
ALERT = Alert("loss", True, 1e9, 2, "the loss exploded", "lower fake.lr")


def _samples(state, key, num):
    return [f"w = {np.asarray(state.w).round(3).tolist()}"] * num


def _old_way(envs, cfg):
    """A plugin's ``build`` as 0.4.0's docs wrote it: every field by keyword, ``init`` too."""
    return Program(
        init=functools.partial(fake._fake_init, cfg),
        update=functools.partial(fake._fake_update, cfg),
        evaluate=functools.partial(fake._fake_evaluate, cfg),
        plan=Plan(num_updates=cfg.num_updates, env_steps_per_update=16, grad_steps_per_update=1),
        batch_axes=replicated_axes,
        batch=None,
        policy=None,
        report=EvalReport({"episode_returns": "deterministic"}),
        hyperparams=dict,
        init_with=functools.partial(fake._fake_init_with, cfg),
        samples=_samples,
        curve=CURVE,
        alerts=(ALERT,),
    )


def _new_way(envs, cfg):
    return Program(
        update=functools.partial(fake._fake_update, cfg),
        evaluate=functools.partial(fake._fake_evaluate, cfg),
        plan=Plan(num_updates=cfg.num_updates, env_steps_per_update=16, grad_steps_per_update=1),
        batch_axes=replicated_axes,
        report=EvalReport({"episode_returns": "deterministic"}),
        hyperparams=dict,
        init_with=functools.partial(fake._fake_init_with, cfg),
        monitor=Monitor(CURVE, (ALERT,)),
        lm=LMHooks(samples=_samples),
    )


def _train(build, run_dir):
    algo_registry.register_algorithm(dataclasses.replace(fake.FAKE, build=build), overwrite=True)
    try:
        return trainer.run(fake.fake_config(CFG, updates_per_chunk=2), run_dir=str(run_dir))
    finally:
        algo_registry.deregister_algorithm("fake")


def test_a_0_4_0_plugin_trains_with_warnings_and_equals_the_new_spelling(tmp_path):
    with pytest.warns(DeprecationWarning) as caught:
        old = _train(_old_way, tmp_path / "old")
    said = " | ".join(str(w.message) for w in caught)
    for needle in ("Program(samples=...)", "lm=LMHooks(samples=...)", "Program(curve=...)", "monitor=Monitor(curve=...)",
                   "Program(alerts=...)", "Program(init=...)", "init_with(key, hyperparams())", "0.6.0"):
        assert needle in said, needle
    new = _train(_new_way, tmp_path / "new")
    assert old.updates == new.updates == 3
    assert fake.leaves_equal(old.state, new.state)
    old_records, new_records = (fake.without_wall_time(fake.read_jsonl(tmp_path / d / "metrics.jsonl")) for d in ("old", "new"))
    assert old_records == new_records and len(old_records) == 3


def test_the_new_spelling_warns_nothing_and_derives_init():
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        program = _new_way(None, CFG)
        assert program.lm.samples is _samples and program.monitor == Monitor(CURVE, (ALERT,))
        assert program.policy is None and program.batch is None and program.load_params is None
        assert program.lm.rollouts is None and program.lm.model_params is None
    assert isinstance(program.init, DerivedInit)
    key = jax.random.PRNGKey(7)
    by_hand = fake._fake_init(CFG, key)  # init_with ignores hyper; init(key) is init_with(key, {})
    assert fake.leaves_equal(jax.jit(program.init)(key), by_hand)
    assert program.init == DerivedInit(program.init_with, dict)  # the same two functions: equal, one jit cache


def test_old_reads_forward_with_a_warning_naming_the_new_attribute():
    program = _new_way(None, CFG)
    for old, record in (("samples", "lm"), ("rollouts", "lm"), ("model_params", "lm"), ("curve", "monitor"),
                        ("alerts", "monitor")):
        with pytest.warns(DeprecationWarning, match=rf"Program\.{old} .*read Program\.{record}\.{old}"):
            assert getattr(program, old) == getattr(getattr(program, record), old)
    with pytest.raises(AttributeError, match="no attribute 'sample'"):
        program.sample


def test_positional_0_4_0_order_and_replace_still_work():
    old = _old_way(None, CFG)
    fields = (old.init, old.update, old.evaluate, old.plan, old.batch_axes, None, None, old.report, dict, old.init_with,
              _samples)
    with pytest.warns(DeprecationWarning, match="positional order"):
        positional = Program(*fields)
    assert positional.plan is old.plan and positional.init is old.init and positional.lm.samples is _samples
    declared = ModelParams(leaves=replicated_axes)
    with pytest.warns(DeprecationWarning, match=r"dataclasses\.replace"):
        replaced = positional._replace(model_params=declared)
    assert replaced.lm == LMHooks(samples=_samples, model_params=declared)  # the record edited, not replaced


def test_replace_derives_init_from_the_new_init_with():
    program = _new_way(None, CFG)
    other = dataclasses.replace(program, init_with=lambda key, hyper: jnp.full((2,), hyper["x"]), hyperparams=lambda: {"x": 3.0})
    np.testing.assert_array_equal(other.init(jax.random.PRNGKey(0)), [3.0, 3.0])


def test_a_missing_required_field_is_named():
    with pytest.raises(TypeError, match=r"missing \['init_with'\]"):
        Program(update=len, evaluate=len, plan=Plan(1, 1, 1), batch_axes=replicated_axes, report=EvalReport({}),
                hyperparams=dict)
    with pytest.raises(TypeError, match=r"unknown field\(s\) \['polcy'\]"):
        Program(update=len, evaluate=len, plan=Plan(1, 1, 1), batch_axes=replicated_axes, report=EvalReport({}),
                hyperparams=dict, init_with=len, polcy=None)
