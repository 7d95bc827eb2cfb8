"""A real sweep through the Python API: a user model module, failing trials, MLflow sqlite store.

The main CLI sweep and its checks are in ``test_mlflow.py`` (it logs to a real ``mlflow server``).
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT

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


def test_python_api_with_user_model_and_failing_trials(in_tmp):
    import hpo

    sweep = yaml.safe_load(SMALL.read_text())
    sweep.update(name="api", model="tests.integration.flaky_model:build")
    sweep["search"].update(algorithm="grid", seed=3)  # both values of `fail`, twice each
    sweep["scheduler"] = {"type": "fifo"}
    sweep["trial"].update(max_epochs=2, max_failures=0)
    sweep["search"]["max_concurrent"] = 2  # a failed trial's group is not reused: two cold starts overlap
    sweep["space"] = {
        "learning_rate": {"type": "categorical", "choices": [0.02]},
        "fail": {"type": "categorical", "choices": [True, False]},
    }
    config = hpo.SweepConfig.model_validate(sweep)
    result = hpo.tune(config, num_samples=4, storage=in_tmp / "runs")
    trials = result.trials
    assert len(trials) == 4 and list(trials.columns[:2]) == ["trial_id", "status"]
    failed = trials[trials["fail"]]
    ok = trials[~trials["fail"]]
    assert len(failed) == 2 and len(ok) == 2
    assert set(failed["status"]) == {"failed"}
    assert all("broken on purpose" in e for e in failed["error"])
    assert set(ok["status"]) == {"completed"} and (ok["epochs"] == 2).all()
    assert result.best_params["fail"] is False and result.best_metric == ok["metric"].max()
    assert Path(result.summary_path).is_file()
    assert result.summary["mlflow"]["uri"] == f"sqlite:///{in_tmp}/mlflow.db"  # the default store, in the cwd
    _, children = mlflow_children(result.summary["mlflow"]["uri"], result.summary)
    statuses = sorted(c.data.tags["hpo.status"] for c in children)
    assert statuses == sorted(trials["status"])
    assert {c.info.status for c in children if c.data.tags["hpo.status"] == "failed"} == {"FAILED"}
