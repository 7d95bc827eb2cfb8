"""The queue's standby runner as plain data: when the dispatcher starts one, what it hands it, what it runs."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpo.errors import ConfigError
from hpo.progress.live import Snapshot
from hpo.queue import Assignment, EntryState, QueueEntry, QueueSettings, QueueStore, StandbyRecord
from hpo.queue.admission import CLAIM_S, STANDBY_RETRY_S, awaited, handover_step, start_standby, starting
from hpo.queue.dispatcher import sweep_command, tune_args
from hpo.queue.package import SweepInputs, build, read_package, remove_unpacked, store_package, unpack
from hpo.queue.standby import claim as standby_claim
from hpo.queue.standby import command, job_config, wait
from hpo.storage import Storage


def _live(*, running: int, completed: int = 0, state: str = "running", at: float = 100.0) -> Snapshot:
    return Snapshot(name="x", state=state, time=at, elapsed_s=1.0, metric="m", mode="max", max_epochs=3,
                    planned=4, pending=4 - running - completed, running=running, completed=completed)


def test_a_sweep_is_starting_until_a_trial_of_its_latest_start_runs_or_ended():
    entry = QueueEntry(name="r", submitted_at=1.0, state=EntryState.RUNNING, started_at=50.0)
    assert starting(entry, None)
    assert starting(entry, _live(running=2, at=40.0))  # the progress of an earlier run of a resumed sweep
    assert starting(entry, _live(running=0, state="starting"))
    assert starting(entry, _live(running=0))  # its trials wait for slots
    assert not starting(entry, _live(running=1))
    assert not starting(entry, _live(running=0, completed=4))


def test_one_standby_waits_a_new_one_once_it_took_a_sweep_and_that_sweep_runs():
    record = StandbyRecord(job_id="hpo-standby-1", started_at=1000.0)
    now = 1001.0
    assert start_standby(None, taken=False, alive=False, busy_starting=False, now=now)  # none yet
    assert not start_standby(record, taken=False, alive=True, busy_starting=False, now=now)  # one waits
    assert start_standby(record, taken=True, alive=False, busy_starting=False, now=now)  # it took a sweep
    # while an admitted sweep starts, a new runner's start-up would take the CPU it needs
    assert not start_standby(record, taken=True, alive=False, busy_starting=True, now=now)
    assert not start_standby(None, taken=False, alive=False, busy_starting=True, now=now)


def test_a_standby_that_ended_without_a_sweep_is_not_restarted_every_pass():
    record = StandbyRecord(job_id="hpo-standby-1", started_at=1000.0)
    assert not start_standby(record, taken=False, alive=False, busy_starting=False, now=1010.0)
    assert start_standby(record, taken=False, alive=False, busy_starting=False, now=1000.0 + STANDBY_RETRY_S)


def test_the_standby_runs_the_command_a_sweep_job_runs_with_packed_data_from_its_directory():
    entry = QueueEntry(name="s", submitted_at=1.0, sweep_file="sweeps/a b.yaml", args=["--set=trial.max_epochs=2"],
                       data={"train": "data/train"})
    args = tune_args(entry, "/runs", resume=True)
    assert args == ["tune", "sweeps/a b.yaml", "--name", "s", "--storage", "/runs", "--address", "auto", "--quiet",
                    "--resume", "--set=trial.max_epochs=2"]
    assert "hpo.cli.main tune 'sweeps/a b.yaml'" in sweep_command(entry, "/runs", resume=True)  # a job of its own
    handed = Assignment(name="s", args=args, data=entry.data, assigned_at=2.0)
    assert command(handed, Path("/tmp/hpo-sweep-x")) == [*args, "--set=data.train=file:///tmp/hpo-sweep-x/data/train"]


def test_the_package_becomes_the_working_dir_of_the_job_config_ray_gives_the_driver():
    given = json.dumps({"runtime_env": {"env_vars": {"A": "1"}}, "metadata": {"hpo_role": "standby"}})
    config = json.loads(job_config(given, "/runs/_queue/packages/abc.zip"))
    assert config == {"runtime_env": {"env_vars": {"A": "1"}, "working_dir": "/runs/_queue/packages/abc.zip"},
                      "metadata": {"hpo_role": "standby"}}
    assert json.loads(job_config(None, "s3://b/p.zip")) == {"runtime_env": {"working_dir": "s3://b/p.zip"}}
    assert json.loads(job_config(given, None)) == json.loads(given)  # nothing packaged: as Ray gave it


def test_the_standby_unpacks_the_stored_package_and_removes_only_what_it_unpacked(tmp_path):
    src = tmp_path / "src"
    (src / "mymodels").mkdir(parents=True)
    (src / "mymodels" / "__init__.py").write_text("")
    (src / "sweep.yaml").write_text("name: s\n")
    storage = Storage.parse(tmp_path / "runs")
    content = build(SweepInputs(src, "sweep.yaml", ["mymodels"]))
    package = store_package(storage, content)
    assert read_package(storage, package) == content
    into = unpack(content, tmp_path / "work")
    assert (into / "sweep.yaml").read_text() == "name: s\n" and (into / "mymodels" / "__init__.py").is_file()
    (into / "mlflow.db").write_text("the sweep wrote this")
    remove_unpacked(content, into)
    assert sorted(p.name for p in into.rglob("*")) == ["mlflow.db"]  # hpo removes only the files it wrote
    (into / "mlflow.db").unlink()
    remove_unpacked(content, into)
    assert not into.exists()


def test_a_package_path_climbing_out_of_its_directory_is_refused(tmp_path):
    import io
    import zipfile

    out = io.BytesIO()
    with zipfile.ZipFile(out, "w") as zf:
        zf.writestr("../evil.py", "x")
    with pytest.raises(ConfigError, match="outside its directory"):
        unpack(out.getvalue(), tmp_path / "work")
    assert not (tmp_path / "evil.py").exists()


def test_the_standby_record_and_the_sweep_handed_to_it_round_trip_through_the_storage(tmp_path):
    store = QueueStore(tmp_path)
    assert store.standby() is None and store.assignment("job-1") is None
    store.put_standby(StandbyRecord(job_id="job-1", started_at=5.0))
    assert store.standby() == StandbyRecord(job_id="job-1", started_at=5.0)
    handed = Assignment(name="s", args=["tune", "s.yaml"], package="file:///p.zip", working_dir="/p.zip",
                        assigned_at=6.0)
    store.assign("job-1", handed)
    assert store.assignment("job-1") == handed
    assert store.entries() == []  # not an entry of the queue


def test_a_handed_over_sweep_is_given_back_only_once_its_runner_ended_without_claiming_it():
    step = lambda **kw: handover_step(**{"assigned_at": 100.0, "now": 101.0, **kw})  # noqa: E731
    assert step(claimed=True, alive=True) == "claimed"
    assert step(claimed=True, alive=False) == "claimed"  # it ran: its job's end is the sweep's end
    assert step(claimed=False, alive=True) == "wait"
    assert step(claimed=False, alive=False) == "requeue"  # it ended (idle, crashed, head restarted) first
    assert step(claimed=False, alive=True, now=100.0 + CLAIM_S) == "stop"  # alive but stuck: stop it first
    assert step(claimed=False, alive=False, now=100.0 + CLAIM_S) == "requeue"


def test_the_runner_claims_the_sweep_in_a_file_of_its_own_and_the_claim_reads_back(tmp_path):
    store = QueueStore(tmp_path)
    handed = Assignment(name="s", args=["tune", "s.yaml"], assigned_at=5.0)
    store.assign("hpo-standby-1", handed)
    assert store.claimed("hpo-standby-1") is None
    assert standby_claim(store, "hpo-standby-1", handed)
    claim = store.claimed("hpo-standby-1")
    assert claim is not None and (claim.job_id, claim.name) == ("hpo-standby-1", "s")
    assert store.assignment("hpo-standby-1") == handed  # the dispatcher's file is left as it wrote it
    assert store.claimed("hpo-standby-2") is None


def test_a_runner_that_cannot_write_its_claim_does_not_run_the_sweep(tmp_path):
    blocked = tmp_path / "runs"
    blocked.mkdir()
    (blocked / "_queue").write_text("a file where the queue's directory would be")
    handed = Assignment(name="s", args=["tune", "s.yaml"], assigned_at=5.0)
    assert not standby_claim(QueueStore(blocked), "hpo-standby-1", handed, tries=1)


def test_a_runner_waits_for_a_sweep_for_a_bounded_time(tmp_path):
    store = QueueStore(tmp_path)
    assert wait(store, "hpo-standby-1", poll_s=0.0, idle_s=0.0) is None  # none came: it ends
    handed = Assignment(name="s", args=["tune", "s.yaml"], assigned_at=5.0)
    store.assign("hpo-standby-1", handed)
    assert wait(store, "hpo-standby-1", poll_s=0.0, idle_s=0.0) == handed  # one already there is taken


def test_admission_watches_only_the_running_sweeps_a_queued_sweep_waits_for():
    settings = QueueSettings(max_running=2)
    placing = QueueEntry(name="r", submitted_at=1.0, state=EntryState.RUNNING, started_at=50.0)
    queued = QueueEntry(name="q", submitted_at=2.0)
    waiting = _live(running=3)  # 4 planned: one trial waits for a slot
    assert awaited([placing, queued], settings, {"r": waiting}) == ["r"]
    assert awaited([placing, queued], settings, {"r": _live(running=4)}) == []  # saturated: admitted now
    assert awaited([placing], settings, {"r": waiting}) == []  # nothing queued
    assert awaited([placing, queued], QueueSettings(max_running=1), {"r": waiting}) == []  # no room anyway
    cancelled = queued.model_copy(update={"cancel_requested": True})
    assert awaited([placing, cancelled], settings, {"r": waiting}) == []
