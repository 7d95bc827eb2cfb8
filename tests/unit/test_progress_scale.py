"""The sweep estimate keeps what it derives from ended trials, and estimates exactly as if it had not."""

from __future__ import annotations

import random

from hpo.progress.live import SweepProgress
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
