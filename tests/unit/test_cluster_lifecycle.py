"""``hpo cluster up/down`` without a cluster: the duration parser, the autostop policy and its watcher on a
real queue in a temporary storage, the locks, and the refusals (exit codes and their one line)."""

from __future__ import annotations

import json
import re
import threading
from pathlib import Path

import pytest

from hpo.cluster.autostop import ARMED_AT, AutostopDecision, Watcher, decide, read_status
from hpo.cluster.duration import format_duration, parse_duration
from hpo.cluster.lifecycle import refusal
from hpo.cluster.lock import HostLock, StorageLease
from hpo.errors import ConfigError
from hpo.queue.entry import EntryState, QueueEntry, QueueSettings
from hpo.queue.store import QueueStore
from tests.conftest import ROOT, hpo_cli

FAKE = ROOT / "cluster" / "local-fake.yaml"
AWS = ROOT / "cluster" / "aws-gpu.yaml"


def _entry(name: str, at: float, state: EntryState = EntryState.QUEUED, **kw) -> QueueEntry:
    return QueueEntry(name=name, submitted_at=at, state=state, **kw)


@pytest.mark.parametrize(("text", "seconds"), [("15m", 900), ("1h", 3600), ("1h30m", 5400), ("90s", 90),
                                               ("2.5s", 2.5), ("1d", 86400), (" 10M ", 600)])
def test_durations_parse(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["15", "m", "", "15 m", "-5m", "0m", "1w", "15min", "1h-30m"])
def test_bad_durations_are_one_line_errors(text):
    with pytest.raises(ConfigError) as err:
        parse_duration(text)
    assert "\n" not in str(err.value) and str(err.value).startswith("--autostop: ")


@pytest.mark.parametrize("seconds", [900, 3600, 5400, 90, 2.5, 3661])
def test_durations_format_as_they_parse(seconds):
    assert parse_duration(format_duration(seconds)) == seconds


def test_a_bad_autostop_exits_2_with_one_line_before_anything_runs(tmp_path):
    proc = hpo_cli("cluster", "up", FAKE, "--autostop", "15", "--storage", tmp_path, cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == ("error: --autostop: '15' is not a duration; write a number with a unit, "
                                   "e.g. 90s, 15m, 1h or 1h30m")
    assert not (tmp_path / "_queue").exists()


def test_autostop_without_a_storage_exits_2(tmp_path, monkeypatch):
    monkeypatch.delenv("HPO_STORAGE", raising=False)
    proc = hpo_cli("cluster", "up", FAKE, "--autostop", "15m", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.startswith("error: --autostop: the autostop reads the queue")


def test_a_cloud_cluster_refuses_a_directory_of_this_machine_as_its_storage(tmp_path):
    # The shipped file with the user's own values in place of its placeholders (validation refuses those first).
    filled = re.sub(r"\b123456789012\b", "210987654321", Path(AWS).read_text()).replace("your-", "team-")
    (tmp_path / "aws.yaml").write_text(filled)
    proc = hpo_cli("cluster", "up", tmp_path / "aws.yaml", "--autostop", "15m", "--storage", tmp_path,
                   cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout + proc.stderr
    assert proc.stderr.startswith(f"error: --storage: {tmp_path} is a directory of this machine, which the head "
                                  "cannot read; use the cluster's storage")


# --- the policy, at exact times ---------------------------------------------------------------------------

AUTOSTOP = QueueSettings(autostop_s=600.0)


def test_no_autostop_set_is_off():
    assert decide([], QueueSettings(), now=1e9, floor=0.0) == AutostopDecision("off")


def test_queued_or_running_is_busy_whatever_the_time():
    for state in (EntryState.QUEUED, EntryState.RUNNING):
        assert decide([_entry("a", 1.0, state)], AUTOSTOP, now=1e9, floor=0.0).state == "busy"


def test_countdown_runs_from_the_last_end_and_fires_exactly_at_its_end():
    ended = [_entry("a", 1.0, EntryState.SUCCEEDED, ended_at=1000.0),
             _entry("b", 2.0, EntryState.FAILED, ended_at=1200.0)]
    assert decide(ended, AUTOSTOP, now=1799.9, floor=0.0) == AutostopDecision("counting", 1200.0, 1800.0)
    assert decide(ended, AUTOSTOP, now=1800.0, floor=0.0) == AutostopDecision("teardown", 1200.0, 1800.0)


def test_nothing_ever_ended_counts_from_the_watchers_start_or_the_last_up():
    assert decide([], AUTOSTOP, now=600.0, floor=100.0) == AutostopDecision("counting", 100.0, 700.0)
    armed = QueueSettings(autostop_s=600.0, **{ARMED_AT: 500.0})
    assert decide([], armed, now=700.0, floor=100.0) == AutostopDecision("counting", 500.0, 1100.0)
    # An old end does not count before the watcher started (a cluster just up gets the whole time).
    old = [_entry("a", 1.0, EntryState.SUCCEEDED, ended_at=50.0)]
    assert decide(old, AUTOSTOP, now=650.0, floor=100.0).state == "counting"


def test_a_sweep_queued_during_the_countdown_cancels_it_and_its_end_restarts_it():
    done = _entry("a", 1.0, EntryState.SUCCEEDED, ended_at=1000.0)
    assert decide([done], AUTOSTOP, now=1500.0, floor=0.0).state == "counting"
    assert decide([done, _entry("b", 1500.0)], AUTOSTOP, now=1700.0, floor=0.0).state == "busy"
    b_done = _entry("b", 1500.0, EntryState.CANCELLED, ended_at=1650.0)
    assert decide([done, b_done], AUTOSTOP, now=1700.0, floor=0.0) == AutostopDecision("counting", 1650.0, 2250.0)


# --- the watcher on a real queue, with its clock in the test's hands -----------------------------------------


class Clock:
    def __init__(self, start: float = 10_000.0) -> None:
        self.now = start
        self.events: dict[float, object] = {}

    def __call__(self) -> float:
        return self.now

    def sleep(self, seconds: float) -> None:
        self.now += seconds
        for at in sorted(self.events):
            if at <= self.now:
                self.events.pop(at)()


def test_the_watcher_tears_down_once_after_the_idle_time_and_a_queued_sweep_cancels_the_countdown(tmp_path):
    store = QueueStore(tmp_path)
    store.put_settings(QueueSettings(max_running=3, autostop_s=60.0))
    clock = Clock()
    store.put(_entry("a", 9000.0, EntryState.RUNNING, started_at=9500.0))
    torn: list[float] = []
    # a ends at 10_030; b is queued at 10_070 (40 s into the countdown) and ends at 10_100.
    clock.events[10_030.0] = lambda: store.put(_entry("a", 9000.0, EntryState.SUCCEEDED, ended_at=10_030.0))
    clock.events[10_070.0] = lambda: store.put(_entry("b", 10_070.0))
    clock.events[10_100.0] = lambda: store.put(_entry("b", 10_070.0, EntryState.SUCCEEDED, ended_at=10_100.0))
    watcher = Watcher(store, lambda: torn.append(clock.now), poll_s=5.0, clock=clock, sleep=clock.sleep)
    watcher.run()
    assert torn == [10_160.0]  # b's end + 60 s, not a's end + 60 s
    status = read_status(store)
    assert status["state"] == "torn_down" and status["idle_since"] == 10_100.0
    assert status["teardown_started_at"] == 10_160.0
    assert store.settings().max_running == 3


def test_the_watcher_never_tears_down_on_a_queue_it_cannot_read(tmp_path):
    store = QueueStore(tmp_path)
    store.put_settings(QueueSettings(autostop_s=10.0))
    (tmp_path / "_queue" / "entries").mkdir(parents=True)
    (tmp_path / "_queue" / "entries" / "broken.json").write_text("{not json")
    clock = Clock()
    torn: list[float] = []
    watcher = Watcher(store, lambda: torn.append(clock.now), poll_s=5.0, clock=clock, sleep=clock.sleep)

    def stop() -> None:
        raise StopIteration

    clock.events[clock.now + 120] = stop
    with pytest.raises(StopIteration):
        watcher.run()
    assert torn == []


def test_an_up_during_the_countdown_restarts_it(tmp_path):
    store = QueueStore(tmp_path)
    store.put_settings(QueueSettings(autostop_s=60.0))
    clock = Clock()
    torn: list[float] = []
    clock.events[10_050.0] = lambda: store.put_settings(QueueSettings(autostop_s=60.0, **{ARMED_AT: 10_050.0}))
    Watcher(store, lambda: torn.append(clock.now), poll_s=10.0, clock=clock, sleep=clock.sleep).run()
    assert torn == [10_110.0]


# --- the locks --------------------------------------------------------------------------------------------


def test_the_host_lock_admits_one_holder(tmp_path, monkeypatch):
    monkeypatch.setenv("HPO_STATE_DIR", str(tmp_path))
    first, second = HostLock("up-x"), HostLock("up-x")
    assert first.acquire(0)
    assert second.held_by_other() and not second.acquire(0.3, poll_s=0.1)
    first.release()
    assert second.acquire(0) and HostLock("up-x").holder() is not None
    second.release()


def test_the_storage_lease_admits_one_holder_of_many_and_expires(tmp_path):
    leases = [StorageLease(tmp_path, "up-c") for _ in range(8)]
    barrier = threading.Barrier(len(leases))
    won: list[int] = []

    def take(i: int) -> None:
        barrier.wait()
        if leases[i].acquire(0):
            won.append(i)

    threads = [threading.Thread(target=take, args=(i,)) for i in range(len(leases))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(won) == 1
    other = leases[(won[0] + 1) % len(leases)]
    assert not other.acquire(0) and other.holder().endswith(")")
    leases[won[0]].release()
    assert other.acquire(0)
    # A holder that died: its lease is taken over once it expired.
    lease_file = tmp_path / "_cluster" / "up-c.lease"
    data = json.loads(lease_file.read_text())
    lease_file.write_text(json.dumps({**data, "owner": "gone", "expires_at": 1.0}))
    assert StorageLease(tmp_path, "up-c").acquire(0)


# --- hpo cluster down refuses --------------------------------------------------------------------------------


def test_the_refusal_names_what_is_running_and_queued():
    entries = [_entry("b", 2.0), _entry("a", 1.0, EntryState.RUNNING), _entry("c", 3.0),
               _entry("d", 0.5, EntryState.SUCCEEDED, ended_at=1.0)]
    assert refusal("hpo-gpu", entries) == (
        "cluster hpo-gpu: 1 sweep running (a) and 2 queued (b, c); not tearing it down: wait for them "
        "(hpo queue), cancel them (hpo cancel NAME) or pass --force")
    assert refusal("x", [_entry("q", 1.0)]).startswith("cluster x: 1 queued (q); not tearing it down")


def test_down_refuses_while_a_sweep_is_queued_and_touches_nothing(tmp_path, monkeypatch):
    monkeypatch.setenv("HPO_STATE_DIR", str(tmp_path / "state"))
    QueueStore(tmp_path / "runs").put(_entry("sweep-1", 1.0))
    proc = hpo_cli("cluster", "down", FAKE, "--storage", tmp_path / "runs", cwd=tmp_path)
    assert proc.returncode == 1
    assert proc.stderr.splitlines() == [
        "error: cluster hpo-local-fake: 1 queued (sweep-1); not tearing it down: wait for them (hpo queue), "
        "cancel them (hpo cancel NAME) or pass --force"]


def test_down_without_a_storage_needs_force(tmp_path, monkeypatch):
    monkeypatch.delenv("HPO_STORAGE", raising=False)
    proc = hpo_cli("cluster", "down", FAKE, cwd=tmp_path)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1
    assert proc.stderr.startswith("error: --storage: needed to check the queue before tearing the cluster down")


def test_down_of_a_fake_cluster_that_is_not_up_says_so(tmp_path, monkeypatch):
    monkeypatch.setenv("HPO_STATE_DIR", str(tmp_path / "state"))
    proc = hpo_cli("cluster", "down", FAKE, "--storage", tmp_path / "runs", cwd=tmp_path)
    assert proc.returncode == 0 and "cluster hpo-local-fake: not up; nothing to tear down" in proc.stdout


# --- what hpo cluster up writes into the queue's settings ----------------------------------------------------


def test_up_records_the_autostop_keeps_max_running_and_off_removes_it(tmp_path):
    import time

    from hpo.cluster.autostop import armed_at
    from hpo.cluster.lifecycle import _record_autostop

    store = QueueStore(tmp_path)
    store.put_settings(QueueSettings(max_running=4))
    before = time.time()
    assert _record_autostop(store, 900.0, "/c/aws.yaml") == 900.0
    settings = store.settings()
    assert (settings.max_running, settings.autostop_s, settings.cluster_file) == (4, 900.0, "/c/aws.yaml")
    assert armed_at(settings) >= before
    assert _record_autostop(store, None, "/c/aws.yaml") == 900.0  # no --autostop: as it was
    assert _record_autostop(store, False, "/c/aws.yaml") is None  # --autostop off
    assert store.settings().max_running == 4 and store.settings().autostop_s is None


def test_up_waits_only_for_a_teardown_that_is_under_way(tmp_path):
    import time

    from hpo.cluster.autostop import write_status
    from hpo.cluster.lifecycle import STALE_TEARDOWN_S, _tearing_down

    store = QueueStore(tmp_path)
    assert not _tearing_down(store) and not _tearing_down(None)
    write_status(store, {"state": "teardown", "teardown_started_at": time.time()})
    assert _tearing_down(store)
    write_status(store, {"state": "teardown", "teardown_started_at": time.time() - STALE_TEARDOWN_S - 1})
    assert not _tearing_down(store)
    write_status(store, {"state": "counting", "teardown_started_at": time.time()})
    assert not _tearing_down(store)


def test_the_status_file_is_never_seen_half_written(tmp_path):
    from hpo.cluster.autostop import STATUS_PATH, write_status

    store = QueueStore(tmp_path)
    path = tmp_path.joinpath(*STATUS_PATH)
    write_status(store, {"state": "idle", "n": 0})
    done, seen, torn = threading.Event(), [], []

    def read() -> None:
        while not done.is_set():
            text = path.read_text()
            try:
                seen.append(json.loads(text)["n"])
            except ValueError:
                torn.append(text)

    reader = threading.Thread(target=read)
    reader.start()
    for n in range(1, 400):
        write_status(store, {"state": "busy", "n": n, "pad": "x" * 4000})
    done.set()
    reader.join()
    assert not torn and seen and read_status(store)["n"] == 399
    assert sorted(p.name for p in path.parent.iterdir()) == ["autostop.json"]  # no temporary file left
