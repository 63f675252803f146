"""Stalled runs reported, not silent: the program's :class:`~jaxrl.algos.contract.Alert` s
watched over the update records on the host.

After each chunk the trainer hands its records to a :class:`Watch`. An alert fires once,
when its metric's mean over the last ``patience`` updates crosses its threshold (a window
mean, since per-update fractions of 32 groups are noisy); what fired is appended to the
run's ``alerts.jsonl`` and the trainer prints ONE console line for the run (the first chunk
in which anything fired; later alerts go to the file only), so a long collapsed run does
not repeat itself every chunk. A *gain* alert (``Alert.gain_from``: SFT's "token accuracy
has not moved") compares the last window's mean with the window that ended halfway through
the updates watched so far, from update ``gain_from`` on. Counting restarts on resume.
"""

from __future__ import annotations

import json
import os

import numpy as np

from jaxrl.algos.contract import Alert
from jaxrl.run import rundir
from jaxrl.run.files import ALERTS_FILE


def seed_mean(value) -> float | None:
    """The mean of a record entry over seeds (a number or a per-seed list with ``None``)."""
    values = [v for v in (value if isinstance(value, list) else [value]) if v is not None]
    return float(np.mean(values)) if values else None


def _value(alert: Alert, record: dict) -> float | None:
    """``alert``'s metric in ``record`` (seed mean), or None when missing or excused."""
    value = seed_mean(record.get(alert.metric))
    if value is not None and alert.unless is not None:
        level = seed_mean(record.get(alert.unless[0]))
        if level is not None and level >= alert.unless[1]:
            return None
    return value


def describe(alert: Alert, event: dict) -> str:
    """One line: what was seen, what it means, what to try."""
    side = "above" if alert.above else "below"
    if alert.gain_from:
        a, b = event["reference_updates"]
        return (
            f"{alert.metric} moved {event['value']:+.3g} ({side} {alert.threshold:+g}) from updates {a}-{b} "
            f"({event['reference']:.3g}) to {event['update'] - alert.patience + 1}-{event['update']} "
            f"({event['reference'] + event['value']:.3g}): {alert.says}"
        )
    return (
        f"{alert.metric} averaged {event['value']:.3g} ({side} {alert.threshold:g}) over updates "
        f"{event['update'] - alert.patience + 1}-{event['update']}: {alert.says}"
    )


def _reference(seen: list[tuple[int, float | None]], alert: Alert) -> dict | None:
    """A gain alert's reference: the mean over the ``patience`` updates that ended halfway
    through ``seen`` (excused updates left out), with their first and last update; None
    while there is no such update."""
    half = seen[max(0, len(seen) // 2 - alert.patience): len(seen) // 2]
    values = [v for _, v in half if v is not None]
    if not values:
        return None
    return {"reference": float(np.mean(values)), "reference_updates": [half[0][0], half[-1][0]]}


class Watch:
    """Keeps, per alert, its metric over the last ``patience`` updates; see the module docstring."""

    def __init__(self, alerts, run_dir: str | None, primary: bool = True):
        self.alerts = tuple(alerts)
        self.window: list[list[float]] = [[] for _ in self.alerts]
        self.seen: list[list[tuple[int, float | None]]] = [[] for _ in self.alerts]  # gain alerts: (update, value)
        self.fired: list[dict] = []
        self.printed = False
        self.path = os.path.join(run_dir, ALERTS_FILE) if run_dir and primary else None

    def observe(self, records: list[dict]) -> list[dict]:
        """The alerts that fire in ``records`` (each at most once per run), recorded."""
        events = []
        done = {e["metric"] for e in self.fired}
        for rec in records:
            for i, alert in enumerate(self.alerts):
                value = _value(alert, rec)
                window = self.window[i] = [] if value is None else (self.window[i] + [value])[-alert.patience:]
                if alert.gain_from:
                    self.seen[i].append((rec["update"], value))
                if len(window) < alert.patience or alert.metric in done:
                    continue
                extra = {}
                if alert.gain_from:
                    extra = _reference(self.seen[i], alert) if rec["update"] >= alert.gain_from else None
                    if extra is None:
                        continue
                    mean = float(np.mean(window)) - extra["reference"]
                else:
                    mean = float(np.mean(window))
                if (mean > alert.threshold) if alert.above else (mean < alert.threshold):
                    done.add(alert.metric)
                    event = {"update": rec["update"], "metric": alert.metric, "value": mean,
                             "threshold": alert.threshold, "above": alert.above, "patience": alert.patience, **extra}
                    event.update(message=describe(alert, event), hint=alert.hint)
                    events.append(event)
        self.fired.extend(events)
        if events and self.path is not None:
            for event in events:
                rundir.append_jsonl(self.path, event)
        return events

    def console_line(self, events: list[dict]) -> str | None:
        """The run's one warning line for ``events`` (None once it was given, or if none)."""
        if not events or self.printed:
            return None
        self.printed = True
        hints = []
        for e in events:
            if e["hint"] not in hints:
                hints.append(e["hint"])
        said = "; ".join(e["message"] for e in events)
        return f"jaxrl: warning: training looks stalled: {said}. Try: {' '.join(hints)} (recorded in {ALERTS_FILE})"


def read_alerts(run_dir: str) -> list[dict]:
    """The alerts a run recorded (empty if none)."""
    path = os.path.join(run_dir, ALERTS_FILE)
    if not os.path.exists(path):
        return []
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]
