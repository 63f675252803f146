"""SFT's stall warning (``sft.warn``): a gain alert watched over synthetic update records (no training)."""

from __future__ import annotations

import dataclasses
import re

import numpy as np
import pytest

from jaxrl.algos import sft
from jaxrl.algos.contract import Alert
from jaxrl.algos.sft.config import SFTConfig, SFTWarn
from jaxrl.run import alerts, config as config_lib

NUM_UPDATES = 200


def _watch(tmp_path=None, **warn):
    cfg = SFTConfig(num_updates=NUM_UPDATES, warn=SFTWarn(**warn))
    return alerts.Watch(sft.alerts(cfg), None if tmp_path is None else str(tmp_path))


def _records(curve):
    rng = np.random.default_rng(0)
    return [{"update": u + 1, "token_accuracy": float(v + rng.normal(0, 0.005))} for u, v in enumerate(curve)]


def _format_then(after):
    """The from-scratch shape: the completion's fixed format learned in 10 updates (0 -> 0.7), then ``after(u)``."""
    return [0.07 * u if u < 10 else after(u) for u in range(NUM_UPDATES)]


def test_fires_once_on_a_flat_curve_at_its_first_check(tmp_path):
    watch = _watch(tmp_path)
    events = watch.observe(_records(_format_then(lambda u: 0.72)))
    (event,) = events  # once, though every later update is as flat
    assert event["update"] == 50 and event["metric"] == "token_accuracy"  # after: 0.25 of 200 updates
    assert event["reference_updates"] == [16, 25] and abs(event["value"]) < 0.02  # halfway, past the format rise
    line = watch.console_line(events)
    assert "token_accuracy moved" in line and "updates 16-25" in line and "41-50" in line and "sft.optim.lr" in line
    assert "docs/tuning_text_tasks.md" in line and watch.console_line(events) is None
    assert alerts.read_alerts(str(tmp_path))[0]["update"] == 50


def test_silent_on_a_rising_curve_when_already_high_and_when_off():
    rising = _format_then(lambda u: 0.7 + 0.0015 * u)  # +0.04 from one window to the window twice as far in
    assert _watch().observe(_records(rising)) == []
    high = _format_then(lambda u: 0.95)  # learned: flat at the top is not a stall
    assert _watch().observe(_records(high)) == []
    assert _watch(after=0.0).alerts == () and _watch(after=0.0).observe(_records(_format_then(lambda u: 0.72))) == []


def test_stalls_later_in_the_run_and_record_chunks_do_not_matter():
    curve = _format_then(lambda u: 0.6 + 0.002 * min(u, 80))  # learns until update 80, then flat
    recs = _records(curve)
    whole = _watch().observe(recs)
    chunked = _watch()
    by_chunk = [e for i in range(0, NUM_UPDATES, 25) for e in chunked.observe(recs[i:i + 25])]
    assert [e["update"] for e in whole] == [e["update"] for e in by_chunk] and len(whole) == 1
    assert 140 <= whole[0]["update"] <= 170  # once the halfway window is past the rise too


def test_level_alerts_are_unchanged_by_the_gain_field():
    assert Alert("z", True, 0.5, 3, "s", "h").gain_from == 0
    watch = alerts.Watch([Alert("z", True, 0.5, 3, "s", "h")], None)
    (event,) = watch.observe([{"update": u, "z": 0.9} for u in range(1, 6)])
    assert event["update"] == 3 and "reference" not in event


@pytest.mark.parametrize("key, value, message", [
    ("after", 1.5, "sft.warn.after: must be a fraction of num_updates in [0, 1]"),
    ("min_gain", -0.1, "sft.warn.min_gain: must be a token-accuracy gain in [0, 1]"),
    ("window", 0, "sft.warn.window: must be >= 1 update"),
    ("solved_token_accuracy", 0.0, "sft.warn.solved_token_accuracy: must be in (0, 1]"),
])
def test_warn_section_is_validated_in_one_line(key, value, message):
    raw = config_lib.read_yaml("configs/sft_word_problems.yaml")
    raw["sft"]["warn"] = {key: value}
    with pytest.raises(config_lib.ConfigError) as info:
        config_lib.config_from_dict(raw)
    assert message in str(info.value) and "\n" not in str(info.value)
    with pytest.raises(ValueError, match=re.escape(message.removeprefix("sft."))):
        SFTConfig(model=dataclasses.replace(SFTConfig().model, path="m"), warn=SFTWarn(**{key: value})).validate()
