"""The sweep estimate keeps what it derives from ended trials, and estimates exactly as if it had not."""

from __future__ import annotations

import dataclasses
import json
import random

from hpo.progress.live import Snapshot, SweepProgress
from hpo.progress.sweep import SweepPlan

PLAN = SweepPlan(planned_trials=120, max_concurrent=4, max_epochs=6, mode="max", cpus_per_trial=0.5,
                 cost_per_cpu_hour=1.0)


def _events(seed: int = 3) -> list[tuple]:
    rng = random.Random(seed)
    events, t = [], 0.0
    for i in range(60):
        tid = f"t{i:03d}"
        events.append(("start", tid, {"lr": rng.random()}, t))
        for epoch in range(1, rng.choice([1, 2, 3, 6]) + 1):
            t += rng.choice([0.5, 0.7, 2.0])
            events.append(("result", tid, epoch, rng.random(), rng.choice([0.5, 0.7, 2.0]), t))
        if i < 56:
            events.append(("end", tid, rng.choice(["completed", "stopped_early", "failed"]), t))
    return events


def _feed(progress: SweepProgress, event: tuple) -> None:
    kind, *args = event
    if kind == "start":
        progress.start(args[0], args[1], now=args[2])
    elif kind == "result":
        progress.result(*args[:4], now=args[4])
    else:
        progress.end(*args[:2], now=args[2])


def _estimate(progress: SweepProgress, now: float) -> dict:
    out = progress.snapshot(now=now, estimate=True).to_dict()
    out.pop("time")
    return out


def test_an_estimate_after_many_others_equals_one_made_from_scratch():
    events = _events()
    kept = SweepProgress("s", "val_accuracy", PLAN, started=0.0)
    for number, event in enumerate(events):
        _feed(kept, event)
        if number % 7 == 0:
            _estimate(kept, event[-1])  # the ended trials' histories are kept from here on
    now = events[-1][-1] + 1.0
    fresh = SweepProgress("s", "val_accuracy", PLAN, started=0.0)
    for event in events:
        _feed(fresh, event)
    assert kept._histories and _estimate(kept, now) == _estimate(fresh, now)


def test_a_trial_that_reports_after_its_end_is_estimated_from_what_it_reported_last():
    events = _events()
    kept = SweepProgress("s", "val_accuracy", PLAN, started=0.0)
    for event in events:
        _feed(kept, event)
    now = events[-1][-1] + 1.0
    _estimate(kept, now)
    late = ("result", "t000", 9, 0.99, 30.0, now)  # a resumed trial reports again, slower
    _feed(kept, late)
    fresh = SweepProgress("s", "val_accuracy", PLAN, started=0.0)
    for event in [*events, late]:
        _feed(fresh, event)
    assert _estimate(kept, now + 1.0) == _estimate(fresh, now + 1.0)


def _sweep_of(ended: int, running: int = 3) -> SweepProgress:
    progress = SweepProgress("s", "val_accuracy", PLAN, started=0.0)
    for i in range(ended + running):
        tid = f"t{i:04d}"
        progress.start(tid, {"lr": i / 1000, "units": 8}, now=float(i))
        progress.result(tid, 1, 0.5 + i / 10_000, 0.7, now=i + 1.0)
        if i < ended:
            progress.end(tid, "stopped_early", now=i + 2.0)
    return progress


def _lines_converted(progress: SweepProgress, monkeypatch) -> int:
    """Trial lines converted to JSON for one more ``progress.json``, after one trial more started and ended."""
    import hpo.progress.live as live

    progress.snapshot(estimate=False).to_json()  # what the previous write converted, kept
    number = len(progress.trials)
    progress.start(f"t{number:04d}", {"lr": 0.5, "units": 8}, now=float(number))
    progress.end(f"t{number:04d}", "failed", now=number + 1.0)
    converted = []
    monkeypatch.setattr(live, "asdict", lambda obj: converted.append(obj) or dataclasses.asdict(obj))
    progress.snapshot(estimate=False).to_json()
    monkeypatch.undo()
    return len(converted)


def test_progress_json_is_the_snapshots_json_and_converts_only_the_lines_that_changed(monkeypatch):
    progress = _sweep_of(ended=40)
    snapshot = progress.snapshot(now=50.0, estimate=True)
    assert snapshot.to_json() == json.dumps(snapshot.to_dict(), default=str)
    assert Snapshot.from_dict(json.loads(snapshot.to_json())) == snapshot
    few, many = _lines_converted(_sweep_of(ended=10), monkeypatch), _lines_converted(_sweep_of(ended=400), monkeypatch)
    assert few == many == 3 + 1  # the running trials' lines and the one that just ended, however many ended before
