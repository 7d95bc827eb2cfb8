"""MLflow against a real ``mlflow server`` process started here on a free 127.0.0.1 port (stopped by PID).

A small real sweep (Ray + Horovod workers) logs to the server; the tests read back nesting, metric
histories, tags, the sweep-file artifact, and the registered best model, which must load and predict.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pytest
import yaml

from hpo.mlflow_server import MlflowServer, free_port, health
from tests.conftest import ROOT

pytestmark = pytest.mark.slow
SMALL = ROOT / "tests" / "integration" / "sweeps" / "small.yaml"
HPO_MODULE = [sys.executable, "-m", "hpo.cli.main"]


def hpo_env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}


def run_hpo(*args: str, cwd: Path, timeout: int = 600) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["nice", "-n", "10", *HPO_MODULE, *args],
        cwd=cwd,
        capture_output=True,
        text=True,
        timeout=timeout,
        env=hpo_env(),
    )


def tiny_sweep(name: str, num_samples: int = 3, max_epochs: int = 2) -> dict:
    sweep = yaml.safe_load(SMALL.read_text())
    sweep["name"] = name
    sweep["search"].update(num_samples=num_samples)
    sweep["trial"]["max_epochs"] = max_epochs
    sweep["scheduler"] = {"type": "asha", "grace_period": 1, "reduction_factor": 2}
    return sweep


def git(*args: str, cwd: Path) -> str:
    env = {
        **os.environ,
        "GIT_AUTHOR_NAME": "t",
        "GIT_AUTHOR_EMAIL": "t@t",
        "GIT_COMMITTER_NAME": "t",
        "GIT_COMMITTER_EMAIL": "t@t",
    }
    return subprocess.run(["git", *args], cwd=cwd, check=True, capture_output=True, text=True, env=env).stdout.strip()


@pytest.fixture(scope="module")
def server(tmp_path_factory):
    """A real mlflow server (sqlite store) on a free port; stopped by its process group at the end."""
    root = tmp_path_factory.mktemp("server")
    srv = MlflowServer(f"sqlite:///{root}/server.db", root / "artifacts", log_path=root / "server.log").start()
    yield srv
    pid = srv.pid
    srv.stop()
    with pytest.raises(ProcessLookupError):
        os.killpg(pid, 0)


@pytest.fixture(scope="module")
def server_sweep(server, tmp_path_factory) -> dict:
    """A 3-trial sweep run through the CLI inside a git work tree, logging to the server."""
    work = tmp_path_factory.mktemp("work")
    sweep_file = work / "srv.yaml"
    sweep_file.write_text(yaml.safe_dump(tiny_sweep("srv"), sort_keys=False))
    git("init", "-q", cwd=work)
    git("add", "srv.yaml", cwd=work)
    git("commit", "-qm", "sweep", cwd=work)
    proc = run_hpo("tune", str(sweep_file), "--storage", str(work / "runs"), "--mlflow-uri", server.url, cwd=work)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    summary = json.loads((work / "runs" / "srv" / "summary.json").read_text())
    return {
        "work": work,
        "proc": proc,
        "summary": summary,
        "sweep_file": sweep_file,
        "commit": git("rev-parse", "HEAD", cwd=work),
    }


@pytest.fixture(scope="module")
def client(server):
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=server.url)


def children_of(client, summary: dict) -> list:
    parent_id = summary["mlflow"]["parent_run_id"]
    return client.search_runs(
        [summary["mlflow"]["experiment_id"]], filter_string=f"tags.mlflow.parentRunId = '{parent_id}'"
    )


def test_parent_run_holds_sweep_settings_file_commit_and_best(server_sweep, client, server):
    summary = server_sweep["summary"]
    assert summary["mlflow"]["uri"] == server.url
    parent = client.get_run(summary["mlflow"]["parent_run_id"])
    assert parent.info.run_name == "srv" and parent.info.status == "FINISHED"
    tags, params = parent.data.tags, parent.data.params
    assert tags["hpo.kind"] == "sweep"
    assert tags["hpo.searcher"] == "optuna-tpe" and tags["hpo.scheduler"] == "asha"
    assert tags["hpo.objective"] == "val_accuracy (max)"
    assert params["objective.metric"] == "val_accuracy" and params["search.algorithm"] == "optuna-tpe"
    assert tags["mlflow.source.git.commit"] == server_sweep["commit"] == tags["hpo.git_commit"]
    assert tags["hpo.git_dirty"] == "false"
    best = summary["best"]
    assert tags["hpo.best_trial_id"] == best["trial_id"]
    assert json.loads(tags["hpo.best_params"]) == best["params"]
    assert parent.data.metrics["best_val_accuracy"] == pytest.approx(best["metric"])
    assert parent.data.metrics["trials"] == 3
    # The sweep file itself, byte for byte.
    assert [a.path for a in client.list_artifacts(parent.info.run_id, "sweep")] == ["sweep/srv.yaml"]
    local = client.download_artifacts(parent.info.run_id, "sweep/srv.yaml", str(server_sweep["work"] / "dl"))
    assert Path(local).read_text() == server_sweep["sweep_file"].read_text()


def test_one_nested_run_per_trial_with_params_tags_and_metric_history(server_sweep, client):
    summary = server_sweep["summary"]
    children = children_of(client, summary)
    assert len(children) == 3
    by_run = {t["mlflow_run_id"]: t for t in summary["trials"]}
    assert set(by_run) == {c.info.run_id for c in children}
    for child in children:
        trial = by_run[child.info.run_id]
        tags = child.data.tags
        assert tags["hpo.kind"] == "trial" and tags["hpo.sweep"] == "srv"
        assert tags["hpo.trial_id"] == trial["trial_id"] and tags["hpo.repeat"] == "0"
        assert tags["hpo.status"] == trial["status"] and tags["hpo.epochs"] == str(trial["epochs"])
        assert tags["hpo.stop_reason"] in {"max_epochs", "early_stopping_patience", "scheduler"}
        assert child.info.status == "FINISHED"
        assert float(child.data.params["learning_rate"]) == pytest.approx(trial["params"]["learning_rate"])
        assert float(child.data.params["effective_learning_rate"]) == pytest.approx(
            2 * trial["params"]["learning_rate"]
        )
        assert child.data.params["global_batch_size"] == "64"
        for key in ("val_accuracy", "loss", "accuracy", "val_loss"):
            history = client.get_metric_history(child.info.run_id, key)
            assert [m.step for m in history] == list(range(1, trial["epochs"] + 1)), key  # each epoch once
        history = client.get_metric_history(child.info.run_id, "val_accuracy")
        assert max(m.value for m in history) == pytest.approx(trial["metric"])


def test_best_model_is_registered_and_predicts(server_sweep, client, server):
    import mlflow

    summary = server_sweep["summary"]
    model = summary["mlflow"]["model"]
    assert model["registered_name"] == "srv" and model["version"] == "1"
    finished = {t["trial_id"]: t for t in summary["trials"] if t["status"] == "completed"}
    assert model["trial_id"] in finished
    assert finished[model["trial_id"]]["metric"] == max(t["metric"] for t in finished.values())
    version = client.get_model_version("srv", "1")
    assert version.run_id == summary["mlflow"]["parent_run_id"]
    parent = client.get_run(summary["mlflow"]["parent_run_id"])
    assert parent.data.tags["hpo.registered_model"] == "srv/1"
    mlflow.set_tracking_uri(server.url)
    try:
        loaded = mlflow.pyfunc.load_model("models:/srv/1")
        inputs = loaded.metadata.get_input_schema().inputs
        assert inputs[0].shape == (-1, 64)
        x = np.random.default_rng(0).random((4, 64), dtype=np.float32)
        probabilities = np.asarray(loaded.predict(x))
        assert probabilities.shape == (4, 10) and np.allclose(probabilities.sum(axis=1), 1, atol=1e-4)
        keras_model = mlflow.tensorflow.load_model("models:/srv/1")
        assert type(keras_model).__module__.startswith("tf_keras")
        assert np.allclose(keras_model.predict(x, verbose=0), probabilities, atol=1e-5)
    finally:
        mlflow.set_tracking_uri(None)


def test_unreachable_server_is_one_line_exit_2_and_nothing_starts(tmp_path):
    sweep_file = tmp_path / "s.yaml"
    sweep_file.write_text(yaml.safe_dump(tiny_sweep("down"), sort_keys=False))
    url = f"http://127.0.0.1:{free_port()}"
    proc = run_hpo("tune", str(sweep_file), "--storage", str(tmp_path / "runs"), "--mlflow-uri", url, cwd=tmp_path)
    assert proc.returncode == 2
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    assert lines[0].startswith(f"error: {sweep_file}: tracking.mlflow_uri: MLflow server {url} is unreachable (")
    assert not (tmp_path / "runs").exists() and not (tmp_path / "mlflow.db").exists()


def test_hpo_ui_serves_the_store_and_stops_on_ctrl_c(tmp_path):
    from mlflow.tracking import MlflowClient

    db = tmp_path / "mlflow.db"
    MlflowClient(tracking_uri=f"sqlite:///{db}").create_experiment("ui-check")
    port = free_port()
    proc = subprocess.Popen(
        [*HPO_MODULE, "ui", "--mlflow-uri", str(db), "--port", str(port), "--storage", str(tmp_path / "runs")],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        env=hpo_env(),
        start_new_session=True,
    )
    try:
        url = f"http://127.0.0.1:{port}"
        deadline = time.monotonic() + 120
        while health(url, timeout=2) is not None:
            assert proc.poll() is None, proc.stderr.read()
            assert time.monotonic() < deadline, "hpo ui: server not healthy"
            time.sleep(0.5)
        line = proc.stdout.readline()
        assert line.startswith(f"MLflow UI: {url}  (store sqlite:///{db}, server pid "), line
        server_pid = int(line.split("server pid ")[1].split(";")[0])
        with urllib.request.urlopen(f"{url}/api/2.0/mlflow/experiments/get-by-name?experiment_name=ui-check") as r:
            assert json.loads(r.read())["experiment"]["name"] == "ui-check"
        os.kill(proc.pid, signal.SIGINT)  # what Ctrl-C sends
        assert proc.wait(timeout=60) == 0, proc.stderr.read()
        with pytest.raises(ProcessLookupError):
            os.killpg(server_pid, 0)  # the server's whole process group is gone
        assert health(url, timeout=2) is not None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
