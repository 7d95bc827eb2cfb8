"""The queue's rules on plain data: admission (priority, submission order, saturation, max_running),
``--changed-since`` selection, what a sweep packs, and the job's command line."""

from __future__ import annotations

import subprocess
import zipfile
from io import BytesIO
from pathlib import Path

import pytest

from hpo.config import load_sweep
from hpo.errors import ConfigError
from hpo.progress.live import Snapshot
from hpo.queue import EntryState, QueueEntry, QueueSettings
from hpo.queue.admission import next_to_admit, positions, saturated
from hpo.queue.changed import changed_paths, select, short_commit
from hpo.queue.dispatcher import progress_fields, sweep_command
from hpo.queue.package import MANIFEST, SweepInputs, build, sweep_inputs
from tests.conftest import base_sweep


def _entry(name: str, at: float, **kw) -> QueueEntry:
    return QueueEntry(name=name, submitted_at=at, **kw)


def _live(pending: int, *, state: str = "running", at: float = 100.0) -> Snapshot:
    return Snapshot(name="x", state=state, time=at, elapsed_s=1.0, metric="m", mode="max", max_epochs=3,
                    planned=4, pending=pending, running=2, completed=1, remaining_s_median=12.5)


def test_nothing_running_admits_the_highest_priority_then_the_earliest():
    entries = [_entry("b", 20.0), _entry("a", 10.0), _entry("urgent", 30.0, priority=3),
               _entry("gone", 1.0, state=EntryState.CANCELLED)]
    assert next_to_admit(entries, QueueSettings(max_running=2), {}).name == "urgent"
    assert positions(entries) == {"urgent": 1, "a": 2, "b": 3}


def test_the_next_sweep_waits_until_every_running_one_has_started_all_its_trials():
    running = _entry("r", 1.0, state=EntryState.RUNNING, started_at=50.0)
    entries = [running, _entry("q", 2.0)]
    settings = QueueSettings(max_running=2)
    assert next_to_admit(entries, settings, {}) is None  # no progress yet
    assert next_to_admit(entries, settings, {"r": _live(pending=1)}) is None  # a trial waits for a slot
    assert next_to_admit(entries, settings, {"r": _live(pending=0, state="starting")}) is None
    assert next_to_admit(entries, settings, {"r": _live(pending=0, at=40.0)}) is None  # an earlier run's file
    assert next_to_admit(entries, settings, {"r": _live(pending=0)}).name == "q"  # only its tail runs


def test_never_more_than_max_running():
    entries = [_entry("r1", 1.0, state=EntryState.RUNNING), _entry("r2", 2.0, state=EntryState.RUNNING),
               _entry("q", 3.0)]
    live = {"r1": _live(0), "r2": _live(0)}
    assert next_to_admit(entries, QueueSettings(max_running=2), live) is None
    assert next_to_admit(entries, QueueSettings(max_running=3), live).name == "q"


def test_a_queued_entry_with_a_cancel_is_never_admitted():
    entries = [_entry("c", 1.0, cancel_requested=True), _entry("d", 2.0)]
    assert next_to_admit(entries, QueueSettings(), {}).name == "d"
    assert saturated(_entry("r", 1.0, state=EntryState.RUNNING), None) is False


def test_progress_fields_come_from_the_live_snapshot():
    assert progress_fields(_live(0)) == {"trials_ended": 1, "trials_total": 4, "forecast_remaining_s": 12.5}


def _inputs(sweep: str, model: list[str] | None = None, data: dict[str, str] | None = None) -> SweepInputs:
    return SweepInputs(Path("/r"), sweep, model or [], data or {})


def test_changed_since_selects_sweeps_whose_file_model_or_data_changed():
    sweeps = [("a.yaml", _inputs("sweeps/a.yaml")),
              ("b.yaml", _inputs("sweeps/b.yaml", ["mymodels"])),
              ("c.yaml", _inputs("sweeps/c.yaml", ["net.py"], {"train": "data/train"})),
              ("d.yaml", _inputs("sweeps/d.yaml", ["net.py"]))]
    changed = {"sweeps/a.yaml", "mymodels/layers.py", "data/train/part-0.parquet", "README.md"}
    choices = select(sweeps, changed, "abc123")
    assert [(c.file, c.submit) for c in choices] == [("a.yaml", True), ("b.yaml", True), ("c.yaml", True),
                                                     ("d.yaml", False)]
    assert choices[0].reason == "changed: sweep file"
    assert choices[1].reason == "changed: model mymodels"
    assert choices[2].reason == "changed: data.train data/train"
    assert choices[3].reason == "unchanged since abc123 (sweep file, model net.py)"
    assert not select([("e.yaml", _inputs("data/trainer.yaml"))], {"data/train/x"}, "r")[0].submit  # not a prefix


def _git(root: Path, *args: str) -> None:
    subprocess.run(["git", *args], cwd=root, check=True, capture_output=True)


def test_changed_paths_and_short_commit_from_git(tmp_path):
    _git(tmp_path, "init", "-q")
    _git(tmp_path, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "--allow-empty", "-m", "one")
    (tmp_path / "sub").mkdir()
    (tmp_path / "sub" / "a.yaml").write_text("x")
    (tmp_path / "top.txt").write_text("x")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "-c", "user.email=t@t", "-c", "user.name=t", "commit", "-q", "-m", "two")
    assert changed_paths(tmp_path, "HEAD~1") == {"sub/a.yaml", "top.txt"}
    assert changed_paths(tmp_path / "sub", "HEAD~1") == {"a.yaml"}  # relative to where hpo submit runs
    assert len(short_commit(tmp_path)) >= 7
    with pytest.raises(ConfigError, match=r"--changed-since: git .*; pass a commit of this repository"):
        changed_paths(tmp_path, "no-such-ref")


def test_a_sweep_packs_its_file_its_model_package_and_its_local_data(tmp_path, write_sweep):
    (tmp_path / "mymodels").mkdir()
    (tmp_path / "mymodels" / "__init__.py").write_text("")
    (tmp_path / "mymodels" / "net.py").write_text("def build(**kw): ...\n")
    (tmp_path / "data" / "train").mkdir(parents=True)
    (tmp_path / "data" / "train" / "part-0.parquet").write_bytes(b"PAR1")
    path = write_sweep(base_sweep(model="mymodels.net:build",
                                  data={"train": f"file://{tmp_path}/data/train", "validation": "file:///elsewhere/v"}))
    inputs = sweep_inputs(path, load_sweep(path), tmp_path)
    assert (inputs.sweep_file, inputs.model, inputs.data) == ("sweep.yaml", ["mymodels"], {"train": "data/train"})
    content = build(inputs)
    assert content == build(inputs)  # same code, same package
    names = set(zipfile.ZipFile(BytesIO(content)).namelist())
    assert names == {MANIFEST, "sweep.yaml", "mymodels/__init__.py", "mymodels/net.py", "data/train/part-0.parquet"}
    bundled = sweep_inputs(write_sweep(base_sweep(), "b.yaml"), load_sweep(tmp_path / "b.yaml"), tmp_path)
    assert bundled.model == [] and bundled.data == {}  # hpo's own models and builtin data come with hpo


def test_a_sweep_file_outside_the_submitting_directory_is_refused(tmp_path, write_sweep):
    path = write_sweep(base_sweep())
    with pytest.raises(ConfigError, match=r"not under the submitting directory"):
        sweep_inputs(path, load_sweep(path), tmp_path / "elsewhere")


def test_the_job_runs_hpo_tune_on_the_cluster_with_packed_data_from_its_working_directory():
    entry = _entry("s-abc1234", 1.0, sweep_file="sweeps/a b.yaml", args=["--set=trial.max_epochs=2"],
                   data={"train": "data/train"})
    command = sweep_command(entry, "/runs", resume=True)
    assert " -m hpo.cli.main tune 'sweeps/a b.yaml' --name s-abc1234 --storage /runs --address auto --quiet " \
           "--resume --set=trial.max_epochs=2 --set=data.train=file://\"$PWD\"/data/train" in command
    assert "--resume" not in sweep_command(entry, "/runs", resume=False)
