"""Real sweeps: local Ray, Horovod workers over Gloo, Petastorm shards, MLflow sqlite store."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
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


@pytest.fixture(scope="module")
def cli_sweep(tmp_path_factory) -> dict:
    """Runs the small sweep once through the CLI; the tests below read what it left."""
    work = tmp_path_factory.mktemp("cli")
    proc = subprocess.run(
        [HPO, "tune", str(SMALL), "--storage", str(work / "runs")],
        cwd=work,
        capture_output=True,
        text=True,
        timeout=600,
    )
    return {"work": work, "proc": proc}


def test_cli_sweep_exits_0_and_prints_best_and_summary(cli_sweep):
    proc = cli_sweep["proc"]
    assert proc.returncode == 0, proc.stderr[-3000:]
    summary_path = cli_sweep["work"] / "runs" / "small" / "summary.json"
    assert f"summary: {summary_path}" in proc.stdout
    assert "best: " in proc.stdout and "val_accuracy=" in proc.stdout


def test_summary_json_contents(cli_sweep):
    summary = json.loads((cli_sweep["work"] / "runs" / "small" / "summary.json").read_text())
    assert summary["name"] == "small"
    assert summary["objective"] == {"metric": "val_accuracy", "mode": "max"}
    trials = summary["trials"]
    assert len(trials) == 6
    assert {t["status"] for t in trials} <= {"completed", "stopped_early"}
    for t in trials:
        assert set(t) >= {"trial_id", "params", "status", "epochs", "metric", "stopped_early", "mlflow_run_id"}
        assert 1 <= t["epochs"] <= 4 and 0.0 <= t["metric"] <= 1.0
        assert t["stopped_early"] == (t["status"] == "stopped_early")
        assert set(t["params"]) == {"learning_rate", "units"}
    best = max(trials, key=lambda t: t["metric"])
    assert summary["best"] == {"trial_id": best["trial_id"], "params": best["params"], "metric": best["metric"]}
    assert best["metric"] > 0.8  # the better rates learn digits within a few epochs
    assert summary["mlflow"]["uri"] == f"sqlite:///{cli_sweep['work']}/mlflow.db"


def test_asha_stopped_weak_trials_mid_training(cli_sweep):
    trials = json.loads((cli_sweep["work"] / "runs" / "small" / "summary.json").read_text())["trials"]
    stopped = [t for t in trials if t["stopped_early"]]
    assert stopped, "ASHA stopped no trial"
    assert all(t["epochs"] < 4 for t in stopped)
    # The freed workers were reused: every trial ran, on a machine that fits two trials at a time.
    assert sum(t["status"] == "completed" for t in trials) + len(stopped) == 6


def test_ranks_trained_on_disjoint_shards_covering_the_set(cli_sweep):
    sweep_dir = cli_sweep["work"] / "runs" / "small"
    audits = sorted(sweep_dir.glob("*/checkpoint_*/rows.json"))
    assert audits, "no completed trial left a row audit"
    train_dir = next((cli_sweep["work"] / "runs" / "_data").glob("digits-*")) / "train"
    all_ids = np.sort(pq.read_table(train_dir, columns=["row_id"]).column(0).to_numpy())
    for audit in audits:
        ranks = json.loads(audit.read_text())
        assert [r["rank"] for r in ranks] == [0, 1] and all(r["size"] == 2 for r in ranks)
        epochs = len(ranks[0]["epoch_ids"])
        assert epochs >= 1 and len(ranks[1]["epoch_ids"]) == epochs
        for e in range(epochs):
            a, b = set(ranks[0]["epoch_ids"][e]), set(ranks[1]["epoch_ids"][e])
            assert not a & b, f"{audit}: epoch {e}: ranks share rows"
            assert sorted(a | b) == all_ids.tolist(), f"{audit}: epoch {e}: rows missing"
            assert ranks[0]["epoch_rows"][e] + ranks[1]["epoch_rows"][e] == len(all_ids)


def test_completed_trials_saved_their_best_model(cli_sweep):
    import tf_keras

    from hpo import _env

    _env.apply()  # TF_USE_LEGACY_KERAS before TensorFlow loads

    summary = json.loads((cli_sweep["work"] / "runs" / "small" / "summary.json").read_text())
    completed = {t["trial_id"] for t in summary["trials"] if t["status"] == "completed"}
    by_id = {t["trial_id"]: t for t in summary["trials"]}
    models = [Path(by_id[i]["checkpoint"]) / "model.keras" for i in completed]
    assert len(models) >= 1 and all(m.is_file() for m in models)
    model = tf_keras.models.load_model(models[0])
    probabilities = model.predict(np.zeros((3, 64), dtype=np.float32), verbose=0)
    assert probabilities.shape == (3, 10) and np.allclose(probabilities.sum(axis=1), 1, atol=1e-4)


def test_mlflow_parent_with_nested_trial_runs(cli_sweep):
    summary = json.loads((cli_sweep["work"] / "runs" / "small" / "summary.json").read_text())
    client, children = mlflow_children(summary["mlflow"]["uri"], summary)
    parent = client.get_run(summary["mlflow"]["parent_run_id"])
    assert parent.info.run_name == "small" and parent.info.status == "FINISHED"
    assert parent.data.metrics["best_val_accuracy"] == pytest.approx(summary["best"]["metric"])
    assert len(children) == 6
    by_id = {t["mlflow_run_id"]: t for t in summary["trials"]}
    assert set(by_id) == {c.info.run_id for c in children}
    for child in children:
        trial = by_id[child.info.run_id]
        assert child.data.tags["hpo.trial_id"] == trial["trial_id"]
        assert child.data.tags["hpo.status"] == trial["status"]
        assert child.data.params["learning_rate"] == str(trial["params"]["learning_rate"])
        assert float(child.data.params["effective_learning_rate"]) == pytest.approx(
            2 * trial["params"]["learning_rate"]
        )  # linear rule, 2 workers
        history = client.get_metric_history(child.info.run_id, "val_accuracy")
        assert [m.step for m in history] == list(range(1, trial["epochs"] + 1))
        assert max(m.value for m in history) == pytest.approx(trial["metric"])


def test_report_and_status_read_the_summary(cli_sweep):
    work = cli_sweep["work"]
    proc = subprocess.run(
        [HPO, "status", "small", "--storage", str(work / "runs")], cwd=work, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and proc.stdout.startswith("small: 6 trials (")


def test_python_api_with_user_model_and_failing_trials(in_tmp):
    import hpo

    sweep = yaml.safe_load(SMALL.read_text())
    sweep.update(name="api", model="tests.integration.flaky_model:build")
    sweep["search"].update(algorithm="grid", seed=3)  # both values of `fail`, twice each
    sweep["scheduler"] = {"type": "fifo"}
    sweep["trial"].update(max_epochs=2, max_failures=0)
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
    _, children = mlflow_children(result.summary["mlflow"]["uri"], result.summary)
    statuses = sorted(c.data.tags["hpo.status"] for c in children)
    assert statuses == sorted(trials["status"])
    assert {c.info.status for c in children if c.data.tags["hpo.status"] == "failed"} == {"FAILED"}
