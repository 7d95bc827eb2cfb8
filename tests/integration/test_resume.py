"""Kill a sweep's driver (and its local Ray) with SIGKILL mid-sweep, resume it, check nothing is lost."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time

import pytest
import yaml
from mlflow.tracking import MlflowClient

from tests.conftest import HPO, ROOT

pytestmark = pytest.mark.slow


def test_resume_after_sigkill(tmp_path, write_sweep):
    sweep = yaml.safe_load((ROOT / "tests" / "integration" / "sweeps" / "small.yaml").read_text())
    sweep.update(name="resumable")
    sweep["search"].update(num_samples=4, max_concurrent=2)
    sweep["scheduler"] = {"type": "fifo"}
    # One Horovod rank per trial: the kill and resume are about Tune, the study and MLflow (the trial
    # runtime test kills a rank of a two-rank group).
    sweep["trial"].update(max_epochs=3, workers=1, cpus_per_worker=1)
    path = write_sweep(sweep)
    sweep_dir = tmp_path / "runs" / "resumable"
    cmd = [HPO, "tune", str(path), "--storage", str(tmp_path / "runs")]
    first = subprocess.Popen(cmd, cwd=tmp_path, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             start_new_session=True)
    try:
        deadline = time.time() + 300
        # Kill once two trials have finished and others are running.
        while time.time() < deadline and first.poll() is None:
            done = [p for p in sweep_dir.glob("hpo_trial_*/checkpoint_*/model.keras")]
            if len(done) >= 2:
                break
            time.sleep(0.2)
        assert first.poll() is None, "the sweep ended before it could be killed"
        time.sleep(2.5)  # let Tune save its experiment state once more (TUNE_GLOBAL_CHECKPOINT_S=2)
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)
    assert not (sweep_dir / "summary.json").exists()
    finals = sweep_dir.glob("hpo_trial_*/checkpoint_*/model.keras")
    finished_before = {p.parent.parent.name.split("_")[2] for p in finals}

    second = subprocess.run([*cmd, "--resume"], cwd=tmp_path, capture_output=True, text=True, timeout=600)
    assert second.returncode == 0, second.stderr[-3000:]
    summary = json.loads((sweep_dir / "summary.json").read_text())
    trials = summary["trials"]
    ids = [t["trial_id"] for t in trials]
    assert len(ids) == len(set(ids)) == 4
    assert finished_before <= set(ids)
    assert all(t["status"] == "completed" and t["epochs"] == 3 for t in trials)

    client = MlflowClient(tracking_uri=summary["mlflow"]["uri"])
    parents = client.search_runs([summary["mlflow"]["experiment_id"]], filter_string="tags.hpo.kind = 'sweep'")
    assert [p.info.run_id for p in parents] == [summary["mlflow"]["parent_run_id"]]  # no second parent
    assert parents[0].info.status == "FINISHED"
    children = client.search_runs(
        [summary["mlflow"]["experiment_id"]],
        filter_string=f"tags.mlflow.parentRunId = '{summary['mlflow']['parent_run_id']}'",
    )
    live = [c for c in children if c.data.tags.get("hpo.status") != "lost"]
    assert sorted(c.data.tags["hpo.trial_id"] for c in live) == sorted(ids)  # one run per trial, none lost
    assert all(c.info.status in ("FINISHED", "KILLED") for c in children)
    for child in live:
        steps = [m.step for m in client.get_metric_history(child.info.run_id, "val_accuracy")]
        assert steps == [1, 2, 3], (child.data.tags["hpo.trial_id"], steps)  # each epoch exactly once
