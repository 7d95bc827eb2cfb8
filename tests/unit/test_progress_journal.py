"""The progress journal: what a sweep records, and the forecast rebuilt from it at any moment."""

from __future__ import annotations

import math

from hpo.progress import SweepPlan
from hpo.progress.journal import Journal, read_events, replay, segments, sweep_event
from hpo.progress.live import SweepProgress

PLAN = SweepPlan(planned_trials=4, max_concurrent=2, max_epochs=6, patience=2, scheduler="fifo")


def _record(path, started=1000.0):
    """A sweep of three trials whose events go to a journal at ``path``; returns the record."""
    progress = SweepProgress("s", "val_accuracy", PLAN, samples_per_epoch=100, started=started, samples=200)
    journal = Journal(path)
    journal(sweep_event(progress))
    progress.recorder = journal
    progress.start("a", {"lr": 0.1}, now=started + 1)
    progress.start("b", {"lr": 0.01}, now=started + 1.5)
    for epoch, (va, vb) in enumerate([(0.5, 0.4), (0.6, float("nan")), (0.65, 0.5), (0.66, 0.52)], start=1):
        t = started + 1 + 2 * epoch
        progress.result("a", epoch, va, 1.9, now=t)
        progress.result("b", epoch, vb, 2.0, now=t + 0.2)
    progress.end("b", "stopped_early", now=started + 10)
    progress.start("c", {"lr": 0.05}, now=started + 10.5)
    progress.result("c", 1, 0.45, 2.5, now=started + 13)
    return progress


def test_the_journal_holds_every_event_in_order_with_its_time(tmp_path):
    path = tmp_path / "state" / "progress_events.jsonl"
    _record(path)
    events = read_events(path)
    assert [e["event"] for e in events][:4] == ["sweep", "start", "start", "result"]
    assert events[0]["plan"]["planned_trials"] == 4 and events[0]["t"] == 1000.0
    assert [(e["trial"], e["t"]) for e in events if e["event"] == "end"] == [("b", 1010.0)]
    assert sum(e["event"] == "result" for e in events) == 9
    nan = next(e for e in events if e["event"] == "result" and e["trial"] == "b" and e["epoch"] == 2)
    assert nan["value"] is None  # NaN as null: the file stays valid JSON


def test_a_replay_gives_the_snapshot_the_sweep_showed_at_that_moment(tmp_path):
    path = tmp_path / "events.jsonl"
    live = _record(path)
    (segment,) = segments(read_events(path))
    rebuilt = replay(segment, samples=200)
    now = 1014.0
    shown, again = live.snapshot(now=now).to_dict(), rebuilt.snapshot(now=now).to_dict()
    assert again == shown
    assert shown["remaining_s_median"] is not None and shown["stopped_early"] == 1
    assert math.isnan(rebuilt.trials["b"].values[1])


def test_a_replay_until_a_moment_leaves_later_events_out(tmp_path):
    path = tmp_path / "events.jsonl"
    _record(path)
    (segment,) = segments(read_events(path))
    early = replay(segment, until=1004.0)
    assert set(early.trials) == {"a", "b"}
    assert early.trials["a"].values == [0.5] and early.trials["b"].status == "running"


def test_each_run_of_the_driver_is_a_segment_and_a_torn_line_is_skipped(tmp_path):
    path = tmp_path / "events.jsonl"
    _record(path)
    with path.open("a") as handle:
        handle.write('{"event": "result", "t": 10')  # a crash mid-line
        handle.write("\n")
    _record(path, started=2000.0)
    parts = list(segments(read_events(path)))
    assert [p[0]["t"] for p in parts] == [1000.0, 2000.0]
    assert len(parts[0]) == len(parts[1])


def test_an_unwritable_journal_warns_once_and_the_sweep_goes_on(tmp_path, caplog):
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    journal = Journal(blocker / "events.jsonl")
    journal({"event": "start", "t": 1.0})
    journal({"event": "end", "t": 2.0})
    assert sum("not written" in r.getMessage() for r in caplog.records) == 1
    assert blocker.read_text() == "not a directory"
