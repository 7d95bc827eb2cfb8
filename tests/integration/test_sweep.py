"""Real sweeps through the Python API and the CLI: a user model module, failing and diverging trials.

The main CLI sweep and its checks are in ``test_mlflow.py`` (it logs to a real ``mlflow server``).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest
import yaml

from tests.conftest import HPO, ROOT

pytestmark = pytest.mark.slow
SMALL = ROOT / "tests" / "integration" / "sweeps" / "small.yaml"


def mlflow_children(uri: str, summary: dict) -> tuple[object, list]:
    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=uri)
    parent_id = summary["mlflow"]["parent_run_id"]
    children = client.search_runs(
        [summary["mlflow"]["experiment_id"]], filter_string=f"tags.mlflow.parentRunId = '{parent_id}'"
    )
    return client, children


def test_python_api_with_user_model_failing_and_diverging_trials(in_tmp):
    import hpo

    sweep = yaml.safe_load(SMALL.read_text())
    sweep.update(name="api", model="tests.integration.flaky_model:build")
    sweep["search"].update(algorithm="grid", seed=3, num_samples=4)  # every (fail, nan) pair once
    sweep["scheduler"] = {"type": "fifo"}
    sweep["trial"].update(max_epochs=2, max_failures=0)
    sweep["search"]["max_concurrent"] = 2  # a failed trial's group is not reused: two cold starts overlap
    sweep["space"] = {
        "learning_rate": {"type": "categorical", "choices": [0.02]},
        "fail": {"type": "categorical", "choices": [True, False]},
        "nan": {"type": "categorical", "choices": [True, False]},
    }
    config = hpo.SweepConfig.model_validate(sweep)
    result = hpo.tune(config, num_samples=4, storage=in_tmp / "runs")
    trials = result.trials
    assert len(trials) == 4 and list(trials.columns[:2]) == ["trial_id", "status"]
    failed = trials[trials["fail"]]
    diverged = trials[~trials["fail"] & trials["nan"]]
    ok = trials[~trials["fail"] & ~trials["nan"]]
    assert set(failed["status"]) == {"failed"} and len(failed) == 2
    assert all("broken on purpose" in e for e in failed["error"])
    # NaN losses from the first batch: stopped at epoch 1 on both ranks, its own status, never the best.
    assert list(diverged["status"]) == ["diverged"] and list(diverged["epochs"]) == [1]
    assert list(ok["status"]) == ["completed"] and list(ok["epochs"]) == [2]
    assert result.best_params == {"learning_rate": 0.02, "fail": False, "nan": False}
    assert result.best_metric == ok["metric"].max()
    assert result.summary["mlflow"]["model"]["trial_id"] == ok["trial_id"].iloc[0]  # the registered model
    assert Path(result.summary_path).is_file()
    assert result.summary["mlflow"]["uri"] == f"sqlite:///{in_tmp}/mlflow.db"  # the default store, in the cwd
    _, children = mlflow_children(result.summary["mlflow"]["uri"], result.summary)
    statuses = sorted(c.data.tags["hpo.status"] for c in children)
    assert statuses == sorted(trials["status"])
    assert {c.info.status for c in children if c.data.tags["hpo.status"] == "failed"} == {"FAILED"}
    assert [c.data.tags["hpo.stop_reason"] for c in children if c.data.tags["hpo.status"] == "diverged"] == ["diverged"]
    # A failed trial's run says why, in the line the console and summary.json show (not "trial failed").
    reasons = sorted(c.data.tags["hpo.stop_reason"] for c in children if c.data.tags["hpo.status"] == "failed")
    assert reasons == sorted(failed["error"]) and all("broken on purpose" in r for r in reasons), reasons


def test_sweep_where_every_trial_diverges_exits_1_with_one_line(tmp_path, write_sweep):
    sweep = yaml.safe_load(SMALL.read_text())
    sweep.update(name="nan", model="tests.integration.flaky_model:build")
    sweep["search"].update(algorithm="random", num_samples=1)
    sweep["scheduler"] = {"type": "fifo"}
    sweep["trial"].update(workers=1, cpus_per_worker=1, max_epochs=2)
    sweep["space"] = {"nan": {"type": "categorical", "choices": [True]}}
    proc = subprocess.run([HPO, "tune", str(write_sweep(sweep)), "--storage", str(tmp_path / "runs")],
                          cwd=tmp_path, capture_output=True, text=True, timeout=600,
                          env={**os.environ, "PYTHONPATH": str(ROOT)})
    assert proc.returncode == 1, proc.stderr[-3000:]
    assert proc.stderr.strip().splitlines() == ["error: sweep 'nan': every trial diverged or failed: 1 diverged"]
    assert "diverged" in proc.stdout and "best: none (every trial diverged or failed: 1 diverged)" in proc.stdout
