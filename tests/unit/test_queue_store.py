"""The queue's entries and settings in a storage, and the order and idleness rules every reader uses."""

from __future__ import annotations

import pytest

from hpo.errors import ConfigError
from hpo.queue import EntryState, QueueEntry, QueueSettings, QueueStore, busy, idle_since, in_order


def _entry(name: str, at: float, **kw) -> QueueEntry:
    return QueueEntry(name=name, submitted_at=at, **kw)


def test_entries_round_trip_through_the_storage(tmp_path):
    store = QueueStore(tmp_path)
    assert store.entries() == [] and store.get("a") is None
    store.put(_entry("a", 10.0, priority=2, args=["--set", "trial.epochs=3"]))
    store.put(_entry("a", 10.0, priority=2, state=EntryState.RUNNING, job_id="j1"))
    [back] = store.entries()
    assert (back.name, back.state, back.priority, back.job_id) == ("a", EntryState.RUNNING, 2, "j1")
    assert (tmp_path / "_queue" / "entries" / "a.json").is_file()
    assert not list((tmp_path / "_queue" / "entries").glob(".*"))


def test_admission_order_is_priority_then_submission():
    entries = [_entry("late-high", 30.0, priority=5), _entry("early", 10.0), _entry("later", 20.0),
               _entry("running", 1.0, state=EntryState.RUNNING, priority=9)]
    assert [e.name for e in in_order(entries)] == ["late-high", "early", "later"]


def test_idle_since_is_the_latest_end_and_none_while_busy():
    ended = [_entry("a", 1.0, state=EntryState.SUCCEEDED, ended_at=50.0),
             _entry("b", 2.0, state=EntryState.CANCELLED, ended_at=70.0)]
    assert not busy(ended) and idle_since(ended) == 70.0
    assert busy([*ended, _entry("c", 3.0)]) and idle_since([*ended, _entry("c", 3.0)]) is None
    assert idle_since([]) is None


def test_settings_default_and_persist(tmp_path):
    store = QueueStore(tmp_path)
    assert store.settings() == QueueSettings(max_running=2, autostop_s=None)
    store.put_settings(QueueSettings(max_running=1, autostop_s=900.0, cluster_file="cluster/aws-gpu.yaml"))
    assert store.settings().autostop_s == 900.0 and store.settings().max_running == 1


def test_a_newer_entry_version_is_refused_naming_the_file(tmp_path):
    store = QueueStore(tmp_path)
    store.put(_entry("a", 1.0, version=99))
    with pytest.raises(ConfigError, match=r"_queue/entries/a\.json: version: 99 is newer than this hpo reads"):
        store.get("a")


def test_row_is_what_hpo_queue_json_prints():
    row = _entry("a", 1.0, trials_ended=3, trials_total=8).row(None)
    assert list(row)[:3] == ["name", "state", "position"] and row["trials_total"] == 8
