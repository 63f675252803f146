"""Metric sinks (train.loggers) and stop-at-target (train.stop_at), on the fake algorithm of
tests/test_trainer.py: every sink receives exactly the records of metrics.jsonl."""

from __future__ import annotations

import json
import os
import struct as pystruct

import pytest

from jaxrl.run import config as C
from jaxrl.run import loggers, trainer
from test_trainer import FakeConfig, fake_algo, fake_config, read_jsonl  # noqa: F401

TB = pytest.importorskip("tensorboardX")


def read_tensorboard(folder) -> dict[tuple[str, int], float]:
    """``{(tag, step): value}`` of every scalar in the event files under ``folder`` (the
    TFRecord framing read by hand: length, crc, payload, crc)."""
    from tensorboardX.proto import event_pb2

    out = {}
    for root, _, files in os.walk(folder):
        for name in files:
            data = open(os.path.join(root, name), "rb").read()
            i = 0
            while i < len(data):
                (length,) = pystruct.unpack("<Q", data[i : i + 8])
                event = event_pb2.Event.FromString(data[i + 12 : i + 12 + length])
                i += 12 + length + 4
                for v in event.summary.value:
                    out[(v.tag, event.step)] = v.simple_value
    return out


def expected_scalars(records) -> dict[tuple[str, int], float]:
    return {(k, r["env_steps"]): v for r in records for k, v in loggers.scalars(r).items()}


def test_tensorboard_receives_exactly_what_metrics_jsonl_does(fake_algo, tmp_path):
    cfg = fake_config(FakeConfig(num_updates=7), updates_per_chunk=3, loggers=["jsonl", "tensorboard"], seeds=2, log_seeds="per_seed")
    trainer.run(cfg, run_dir=str(tmp_path / "run"), evaluate=False)
    records = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert len(records) == 7
    want, got = expected_scalars(records), read_tensorboard(tmp_path / "run" / "tensorboard")
    assert "loss/seed1" in {k for k, _ in want}
    assert set(got) == set(want)
    for key, value in want.items():
        assert got[key] == pytest.approx(value, rel=1e-6), key


def test_wandb_offline_receives_exactly_what_metrics_jsonl_does(fake_algo, tmp_path, monkeypatch):
    wandb = pytest.importorskip("wandb")
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    logged = []
    real_init = wandb.init

    def spying_init(*args, **kwargs):
        run = real_init(*args, **kwargs)
        real_log = run.log
        run.log = lambda data, step=None, **kw: (logged.append((step, dict(data))), real_log(data, step=step, **kw))[1]
        return run

    monkeypatch.setattr(wandb, "init", spying_init)
    cfg = fake_config(FakeConfig(num_updates=5), updates_per_chunk=2, loggers=["wandb"])
    trainer.run(cfg, run_dir=str(tmp_path / "run"), evaluate=False)
    records = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert [s for s, _ in logged] == [r["update"] for r in records]
    for (_, data), r in zip(logged, records):
        assert data == {**loggers.scalars(r), "env_steps": r["env_steps"]}
    offline = [d for d in os.listdir(tmp_path / "run" / "wandb" / "wandb") if d.startswith("offline-run")]
    assert len(offline) == 1


@pytest.mark.parametrize(
    "loggers_value, message",
    [(["jsonl", "csv"], "unknown logger 'csv'"), (["jsonl", "jsonl"], "listed twice"), ("tensorboard", "expected")],
)
def test_bad_loggers_are_one_line_config_errors(fake_algo, loggers_value, message):
    with pytest.raises(C.ConfigError, match=message):
        fake_config(loggers=loggers_value)


def test_missing_logger_package_names_it(fake_algo, monkeypatch):
    monkeypatch.setattr(loggers.importlib.util, "find_spec", lambda name, *a: None)
    with pytest.raises(C.ConfigError, match=r"train.loggers\[1\]: wandb needs the wandb package: pip install wandb"):
        fake_config(loggers=["jsonl", "wandb"])


def test_stop_at_ends_at_the_first_chunk_that_reaches_the_target(fake_algo, tmp_path):
    """The fake algorithm logs ``count`` = updates done before the update: with chunks of 3,
    ``count >= 4`` first holds in the chunk of updates 4-6 (count 5 on its last record)."""
    cfg = fake_config(FakeConfig(num_updates=30), updates_per_chunk=3, stop_at={"metric": "count", "threshold": 4})
    result = trainer.run(cfg, run_dir=str(tmp_path / "run"))
    assert result.updates == 6
    records = read_jsonl(tmp_path / "run" / "metrics.jsonl")
    assert [r["update"] for r in records] == list(range(1, 7))
    stop = json.loads((tmp_path / "run" / "stopped.json").read_text())
    assert stop["update"] == 6 and stop["metric"] == "count" and stop["value"] == 5.0 and stop["threshold"] == 4.0
    assert (tmp_path / "run" / "checkpoints" / "6").is_dir() and (tmp_path / "run" / "eval.json").exists()


@pytest.mark.parametrize("num_updates", [6, 3])  # 3: one chunk, where no record is ever compared
def test_stop_at_an_unknown_metric_names_the_known_ones_before_the_first_chunk(fake_algo, tmp_path, num_updates):
    cfg = fake_config(FakeConfig(num_updates=num_updates), updates_per_chunk=3, stop_at={"metric": "acuracy", "threshold": 1})
    with pytest.raises(C.ConfigError, match=r"no metric 'acuracy'.*loss"):
        trainer.run(cfg, run_dir=str(tmp_path / "run"), evaluate=False)
    assert not (tmp_path / "run").exists()  # refused before the run directory was written


def test_stop_at_a_nan_threshold_is_refused(fake_algo):
    with pytest.raises(C.ConfigError, match=r"train.stop_at.threshold: must be a finite number, got nan"):
        fake_config(stop_at={"metric": "count", "threshold": float("nan")})
