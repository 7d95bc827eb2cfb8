"""Ctrl-C (SIGINT to the process group, as a terminal sends it) and SIGTERM during real sweeps."""

from __future__ import annotations

import itertools
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from hpo.progress.journal import EVENTS_FILE, read_events, replay, segments
from tests.conftest import HPO, ROOT

pytestmark = pytest.mark.slow


#: Epochs of each trial of the Ctrl-C sweep: a warm trial's epoch takes a tenth of a second here, and Tune
#: needs a moment to stop a trial after Ctrl-C, so the trial it arrives in must have epochs left.
EPOCHS = 20


def _wait_for(check, proc: subprocess.Popen, timeout: float = 300) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline and proc.poll() is None:
        if check():
            return
        time.sleep(0.2)
    raise AssertionError(f"not seen before the sweep ended or {timeout}s passed (exit {proc.poll()})")


def _epochs_logged(trial_dir: Path) -> int:
    progress = trial_dir / "progress.csv"
    return max(0, len(progress.read_text().splitlines()) - 1) if progress.is_file() else 0


def test_ctrl_c_keeps_what_finished_registers_nothing_and_resume_completes(tmp_path, write_sweep):
    sweep = yaml.safe_load((ROOT / "tests" / "integration" / "sweeps" / "small.yaml").read_text())
    sweep.update(name="stopped")
    sweep["search"].update(num_samples=3, max_concurrent=1)
    sweep["scheduler"] = {"type": "fifo"}
    # One Horovod rank: the interruption is about Tune, MLflow and the summary, not data parallelism.
    sweep["trial"].update(workers=1, cpus_per_worker=1, max_epochs=EPOCHS, early_stopping={"patience": 30})
    path = write_sweep(sweep)
    runs = tmp_path / "runs"
    cmd = [HPO, "tune", str(path), "--storage", str(runs)]
    first = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
                             start_new_session=True)
    try:  # Ctrl-C once the first trial has ended and the second has trained two epochs
        # in the order Tune made them (hpo_trial_<id>_<index>_…): a directory's mtime also moves when hpo
        # deletes a trial's superseded checkpoints
        trial_dirs = lambda: sorted(runs.glob("stopped/hpo_trial_*"), key=lambda p: int(p.name.split("_")[3]))  # noqa: E731
        _wait_for(lambda: len(trial_dirs()) >= 2 and _epochs_logged(trial_dirs()[-1]) >= 2, first)
        os.killpg(first.pid, signal.SIGINT)
        out, err = first.communicate(timeout=120)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    assert first.returncode == 130, err[-3000:]
    lines = out.splitlines()  # a pipe: plain lines, no escape codes, the first epoch before the first trial's end
    first_epoch = next(i for i, line in enumerate(lines) if f" epoch 1/{EPOCHS} val_accuracy=" in line)
    first_end = next(i for i, line in enumerate(lines) if line.startswith("[1/3] "))
    assert first_epoch < first_end and "\x1b[" not in out
    assert any(line.startswith("sweep: ") and " left [" in line for line in lines[:first_end])
    assert f"resume with: hpo tune {path} --storage {runs} --resume" in err
    summary = json.loads((runs / "stopped" / "summary.json").read_text())
    assert summary["status"] == "interrupted"
    statuses = {t["trial_id"]: t["status"] for t in summary["trials"]}
    # Ctrl-C comes in the second trial; on a loaded machine that trial may finish before Tune stops it, and
    # the third is the one interrupted. Either way: what finished stays completed, one trial is interrupted.
    completed = sum(status == "completed" for status in statuses.values())
    assert sorted(statuses.values()) == ["completed"] * completed + ["interrupted"] and completed >= 1, statuses
    client = MlflowClient(tracking_uri=summary["mlflow"]["uri"])
    assert client.search_registered_models() == []  # no model from an interrupted sweep
    parent = client.get_run(summary["mlflow"]["parent_run_id"])
    assert parent.info.status == "KILLED" and parent.data.tags["hpo.status"] == "interrupted"

    second = subprocess.run([*cmd, "--resume"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    summary = json.loads((runs / "stopped" / "summary.json").read_text())
    assert summary["status"] == "finished" and len(summary["trials"]) == 3
    assert set(statuses) <= {t["trial_id"] for t in summary["trials"]}
    assert all(t["status"] == "completed" and t["epochs"] == EPOCHS for t in summary["trials"])
    parent = client.get_run(summary["mlflow"]["parent_run_id"])
    assert parent.info.status == "FINISHED" and parent.data.tags["hpo.status"] == "finished"
    children = client.search_runs([summary["mlflow"]["experiment_id"]],
                                  filter_string=f"tags.mlflow.parentRunId = '{parent.info.run_id}'")
    assert len(children) == 3
    for child in children:
        steps = [m.step for m in client.get_metric_history(child.info.run_id, "val_accuracy")]
        assert steps == list(range(1, EPOCHS + 1)), (child.data.tags["hpo.trial_id"], steps)  # each epoch exactly once
    versions = client.search_model_versions("name = 'stopped'")
    assert len(versions) == 1
    # The progress journal: one segment per run of the driver; the first holds the trial that finished before
    # Ctrl-C, epoch by epoch, and a replay of it gives that run's last counts.
    parts = list(segments(read_events(runs / "stopped" / EVENTS_FILE)))
    assert len(parts) == 2
    done = next(trial for trial, status in statuses.items() if status == "completed")
    events = [e for e in parts[0] if e.get("trial") == done]
    assert [e["event"] for e in events] == ["start", *["result"] * EPOCHS, "end"]
    assert [e["epoch"] for e in events if e["event"] == "result"] == list(range(1, EPOCHS + 1))
    assert all(a["t"] <= b["t"] for a, b in itertools.pairwise(events))
    assert replay(parts[0]).snapshot().completed == completed
    assert replay(parts[1]).snapshot().completed == 3


def test_sigterm_exits_143_and_the_sweep_says_interrupted(tmp_path, write_sweep):
    sweep = {
        "name": "termed", "model": "hpo.models.mlp:build", "data": {"train": "builtin:digits"},
        "search": {"algorithm": "random", "num_samples": 6, "max_concurrent": 1, "seed": 3},
        "scheduler": {"type": "fifo"},
        "trial": {"workers": 1, "max_epochs": 30, "backend": "simulated", "simulated_epoch_s": 0.3,
                  "simulated_clock": False,  # real time: the sweep must still run when the signal comes
                  "early_stopping": {"patience": 40}},
        "space": {"learning_rate": {"type": "float", "low": 0.001, "high": 0.1, "log": True}},
    }
    path = write_sweep(sweep)
    runs = tmp_path / "runs"
    proc = subprocess.Popen([HPO, "tune", str(path), "--storage", str(runs)], cwd=tmp_path,
                            stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, start_new_session=True)
    try:
        _wait_for(lambda: any(_epochs_logged(d) >= 2 for d in runs.glob("termed/hpo_trial_*")), proc)
        time.sleep(2.5)  # the live state is rewritten about every 2 s
        # from another terminal, while it runs: the live state, not summary.json (there is none yet)
        live = subprocess.run([HPO, "status", "termed", "--storage", str(runs), "--json"], cwd=tmp_path,
                              capture_output=True, text=True, timeout=120)
        shown = subprocess.run([HPO, "status", "termed", "--storage", str(runs)], cwd=tmp_path,
                               capture_output=True, text=True, timeout=120)
        record = json.loads((runs / "termed" / "driver.json").read_text())
        listed = subprocess.run([HPO, "list", "--storage", str(runs), "--json"], cwd=tmp_path, capture_output=True,
                                text=True, timeout=120)
        # `hpo stop` from another terminal: SIGTERM to the driver that driver.json names
        stopped = subprocess.run([HPO, "stop", "termed", "--storage", str(runs)], cwd=tmp_path,
                                 capture_output=True, text=True, timeout=120)
        _, err = proc.communicate(timeout=120)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert record["pid"] == proc.pid
    assert [(s["name"], s["state"]) for s in json.loads(listed.stdout)["sweeps"]] == [("termed", "running")]
    assert stopped.returncode == 0 and stopped.stdout.startswith(f"termed: sent SIGTERM to its driver (pid {proc.pid})")
    assert not (runs / "termed" / "driver.json").exists()  # removed by the driver as it ended
    assert live.returncode == 0, live.stderr
    state = json.loads(live.stdout)
    assert state["state"] == "running" and state["running"] == 1 and state["age_s"] < 10
    running = [t for t in state["trials"] if t["status"] == "running"]
    assert running[0]["epoch"] >= 2 and running[0]["epochs_low"] <= running[0]["epochs_high"] <= 30
    assert state["remaining_s_median"] is not None and state["pending"] == 6 - len(state["trials"])
    assert shown.stdout.startswith("termed: running (updated ") and "sweep: " in shown.stdout
    assert proc.returncode == 143, err[-3000:]
    assert "SIGTERM: stopping the running trials" in err
    summary = json.loads((runs / "termed" / "summary.json").read_text())
    assert summary["status"] == "interrupted" and "interrupted" in {t["status"] for t in summary["trials"]}
    refused = subprocess.run([HPO, "tune", str(path), "--storage", str(runs)], cwd=tmp_path, capture_output=True,
                             text=True, timeout=300)
    assert refused.returncode == 2 and "started and did not finish" in refused.stderr and "--resume" in refused.stderr
