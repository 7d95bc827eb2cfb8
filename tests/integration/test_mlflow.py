"""The main real sweep, and MLflow against a real ``mlflow server`` process on a free 127.0.0.1 port.

``hpo tune`` runs the small sweep (local Ray, Horovod workers over Gloo, Petastorm shards) once in a git
work tree, logging to the server (stopped by PID); the tests read back what it printed, ``summary.json``,
the shards each rank read, the saved models, and in MLflow the nesting, metric histories, tags, the
sweep-file artifact and the registered best model, which must load and predict. Then MLflow outages.
"""

from __future__ import annotations

import contextlib
import importlib.util
import json
import os
import shutil
import signal
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import numpy as np
import pyarrow.parquet as pq
import pytest
import yaml

from hpo.tracking import MlflowServer, free_port, health
from tests.conftest import HPO, ROOT, quiet_ports

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


def restartable_port() -> int:
    """A port for a server killed and restarted on the same port (see :func:`tests.conftest.quiet_ports`).

    An ephemeral port, once the server is down, may be handed to any process (a Ray worker's gRPC server,
    say), and the sweep's HTTP writes then hang on a server that never answers HTTP/1.1 instead of being
    refused.
    """
    return quiet_ports(1, "server")[0]


def wait_for_an_epoch(client, experiment: str, proc: subprocess.Popen, timeout: float = 300,
                      what: str = "metrics.val_accuracy > -1") -> bool:
    """Waits until a run of ``experiment`` has an epoch's metric on the server; False if ``proc`` ended first.

    ``what``: the runs' filter to wait for (``""``: any run, e.g. the sweep's parent run).
    """
    deadline = time.monotonic() + timeout
    while proc.poll() is None:
        assert time.monotonic() < deadline, f"no run of {experiment} matched {what!r} in {timeout:.0f} s"
        exp = client.get_experiment_by_name(experiment)
        if exp and client.search_runs([exp.experiment_id], what, max_results=1):
            return True
        time.sleep(0.5)
    return False


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
    """The small sweep (6 trials, ASHA) run once through the CLI inside a git work tree, logging to the server.

    A second, smaller sweep (``conc``, its own process and local Ray) logs to the same server while it runs:
    two sweeps at once must stay separate (see ``test_two_sweeps_logging_to_one_server_at_once_stay_separate``).
    """
    work = tmp_path_factory.mktemp("work")
    sweep = yaml.safe_load(SMALL.read_text())
    sweep["name"] = "srv"
    sweep_file = work / "srv.yaml"
    sweep_file.write_text(yaml.safe_dump(sweep, sort_keys=False))
    git("init", "-q", cwd=work)
    git("add", "srv.yaml", cwd=work)
    git("commit", "-qm", "sweep", cwd=work)
    args = [HPO, "tune", str(sweep_file), "--storage", str(work / "runs"), "--mlflow-uri", server.url]
    with (work / "srv.out").open("w") as out, (work / "srv.err").open("w") as err:
        proc = subprocess.Popen(args, cwd=work, stdout=out, stderr=err, text=True, start_new_session=True)
    conc = None
    try:
        conc = _start_second_sweep(server, work.parent / "conc", proc)
        returncode = proc.wait(timeout=600)
        conc_out = conc.communicate(timeout=600)[0] if conc is not None else ""
    finally:
        for started in (proc, conc):
            if started is not None and started.poll() is None:
                os.killpg(started.pid, signal.SIGKILL)
                started.wait()
    completed = subprocess.CompletedProcess(args, returncode, (work / "srv.out").read_text(),
                                            (work / "srv.err").read_text())
    assert returncode == 0, completed.stdout[-2000:] + completed.stderr[-3000:]
    summary = json.loads((work / "runs" / "srv" / "summary.json").read_text())
    return {
        "work": work,
        "proc": completed,
        "summary": summary,
        "sweep_file": sweep_file,
        "commit": git("rev-parse", "HEAD", cwd=work),
        "conc": (work.parent / "conc", conc.returncode if conc is not None else None, conc_out),
    }


def _start_second_sweep(server: MlflowServer, work: Path, first: subprocess.Popen) -> subprocess.Popen | None:
    """Starts the ``conc`` sweep once ``srv`` has its parent run on the server; None if ``srv`` ended first.

    ``srv`` makes its parent run after its Ray start (two Ray starts at once time out on a loaded 2-core
    machine), and from then on runs for about 30 s: ``conc`` has those to reach its own parent run, which
    must come before ``srv`` ends (``test_two_sweeps_logging_to_one_server_at_once_stay_separate``). Waiting
    for ``srv``'s first epoch instead left ``conc`` too little of them.
    """
    from mlflow.tracking import MlflowClient

    if not wait_for_an_epoch(MlflowClient(tracking_uri=server.url), "srv", first, what=""):
        return None
    work.mkdir()
    sweep = fifo_sweep("conc", num_samples=2, max_epochs=2)
    sweep["search"]["max_concurrent"] = 1  # two sweeps share two cores
    (work / "s.yaml").write_text(yaml.safe_dump(sweep, sort_keys=False))
    args = ["tune", str(work / "s.yaml"), "--storage", str(work / "runs"), "--mlflow-uri", server.url]
    return subprocess.Popen(["nice", "-n", "10", *HPO_MODULE, *args], cwd=work, stdout=subprocess.PIPE,
                            stderr=subprocess.STDOUT, text=True, env=hpo_env(), start_new_session=True)


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
    # the sweep file leaves these to TPE: logged as it runs them
    assert (params["search.random_fraction"], params["search.random_after"]) == ("0.5", "60")
    assert tags["mlflow.source.git.commit"] == server_sweep["commit"] == tags["hpo.git_commit"]
    assert tags["hpo.git_dirty"] == "false"
    best = summary["best"]
    assert tags["hpo.best_trial_id"] == best["trial_id"]
    assert json.loads(tags["hpo.best_params"]) == best["params"]
    assert parent.data.metrics["best_val_accuracy"] == pytest.approx(best["metric"])
    assert parent.data.metrics["trials"] == 6
    # The sweep file itself, byte for byte.
    assert [a.path for a in client.list_artifacts(parent.info.run_id, "sweep")] == ["sweep/srv.yaml"]
    local = client.download_artifacts(parent.info.run_id, "sweep/srv.yaml", str(server_sweep["work"] / "dl"))
    assert Path(local).read_text() == server_sweep["sweep_file"].read_text()


def test_one_nested_run_per_trial_with_params_tags_and_metric_history(server_sweep, client):
    summary = server_sweep["summary"]
    children = children_of(client, summary)
    assert len(children) == 6
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
        assert child.data.params["learning_rate"] == str(trial["params"]["learning_rate"])
        assert float(child.data.params["effective_learning_rate"]) == pytest.approx(
            2 * trial["params"]["learning_rate"]
        )  # linear rule, 2 workers
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
        # Pinned to what trained it (given, not inferred by re-loading the model in a subprocess).
        requirements = Path(mlflow.pyfunc.get_model_dependencies("models:/srv/1")).read_text()
        import tensorflow as tf

        assert f"tensorflow=={tf.__version__}" in requirements.split()
        keras_model = mlflow.tensorflow.load_model("models:/srv/1")
        assert type(keras_model).__module__.startswith("tf_keras")
        assert np.allclose(keras_model.predict(x, verbose=0), probabilities, atol=1e-5)
    finally:
        mlflow.set_tracking_uri(None)


def test_cli_sweep_exits_0_and_prints_best_and_summary(server_sweep):
    summary_path = server_sweep["work"] / "runs" / "srv" / "summary.json"
    assert f"summary: {summary_path}" in server_sweep["proc"].stdout
    out = server_sweep["proc"].stdout
    assert "best: " in out and "val_accuracy=" in out
    # Progress before any trial ends: the header, then an epoch line with an estimate, then outcomes.
    lines = out.splitlines()
    assert lines[0].startswith("sweep srv: 6 trials × 2 workers, optuna-tpe + asha, up to 4 epochs each")
    # the study's optuna-dashboard line only where optuna-dashboard is installed (it is not a dependency)
    dashboard = importlib.util.find_spec("optuna_dashboard") is not None
    assert any(line.startswith("  study:  optuna-dashboard sqlite:///") for line in lines[:4]) == dashboard
    first_epoch = next(i for i, line in enumerate(lines) if " epoch 1/4 val_accuracy=" in line)
    first_end = next(i for i, line in enumerate(lines) if line.startswith("[1/6] "))
    assert first_epoch < first_end and ", est. " in lines[first_epoch]


def test_summary_json_contents(server_sweep, server):
    summary = server_sweep["summary"]
    assert summary["name"] == "srv"
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
    assert summary["mlflow"]["uri"] == server.url


def test_asha_stopped_weak_trials_mid_training(server_sweep):
    trials = server_sweep["summary"]["trials"]
    stopped = [t for t in trials if t["stopped_early"]]
    assert stopped, "ASHA stopped no trial"
    assert all(t["epochs"] < 4 for t in stopped)
    # The freed workers were reused: every trial ran.
    assert sum(t["status"] == "completed" for t in trials) + len(stopped) == 6


def test_ranks_trained_on_disjoint_shards_covering_the_set(server_sweep):
    sweep_dir = server_sweep["work"] / "runs" / "srv"
    audits = sorted(sweep_dir.glob("*/checkpoint_*/rows.json"))
    assert audits, "no completed trial left a row audit"
    train_dir = next((server_sweep["work"] / "runs" / "_data").glob("digits-*")) / "train"
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


def test_completed_trials_saved_their_best_model(server_sweep):
    import tf_keras

    from hpo import _env

    _env.apply()  # TF_USE_LEGACY_KERAS before TensorFlow loads

    summary = server_sweep["summary"]
    completed = {t["trial_id"] for t in summary["trials"] if t["status"] == "completed"}
    by_id = {t["trial_id"]: t for t in summary["trials"]}
    models = [Path(by_id[i]["checkpoint"]) / "model.keras" for i in completed]
    assert len(models) >= 1 and all(m.is_file() for m in models)
    model = tf_keras.models.load_model(models[0])
    probabilities = model.predict(np.zeros((3, 64), dtype=np.float32), verbose=0)
    assert probabilities.shape == (3, 10) and np.allclose(probabilities.sum(axis=1), 1, atol=1e-4)


def test_report_and_status_read_the_summary(server_sweep):
    work = server_sweep["work"]
    proc = subprocess.run(
        [HPO, "status", "srv", "--storage", str(work / "runs")], cwd=work, capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0 and proc.stdout.startswith("srv: finished, 6 trials (")
    best = server_sweep["summary"]["best"]
    assert f"best: {best['trial_id']} val_accuracy={best['metric']:.4f}" in proc.stdout


def test_rerun_of_the_finished_sweep_is_refused_and_resume_changes_nothing(server_sweep, client, server):
    work, summary = server_sweep["work"], server_sweep["summary"]
    experiment = summary["mlflow"]["experiment_id"]
    runs_before = sorted(r.info.run_id for r in client.search_runs([experiment]))
    state_before = {p.name: p.read_bytes() for p in (work / "runs" / "srv").iterdir() if p.is_file()}
    base = [HPO, "tune", str(server_sweep["sweep_file"]), "--storage", str(work / "runs"), "--mlflow-uri", server.url]

    again = subprocess.run(base, cwd=work, capture_output=True, text=True, timeout=300)
    assert again.returncode == 2 and len(again.stderr.strip().splitlines()) == 1, again.stderr
    assert "name: sweep 'srv' finished in" in again.stderr and "--resume" in again.stderr
    resumed = subprocess.run([*base, "--resume"], cwd=work, capture_output=True, text=True, timeout=300)
    assert resumed.returncode == 0, resumed.stderr[-2000:]
    assert "sweep 'srv' finished already; nothing to resume" in resumed.stdout
    assert f"best: {summary['best']['trial_id']}" in resumed.stdout
    nothing = subprocess.run([*base, "--resume", "--name", "never-ran"], cwd=work, capture_output=True, text=True,
                             timeout=300)
    assert nothing.returncode == 2 and "--resume: there is no sweep 'never-ran'" in nothing.stderr

    # MLflow and the sweep's files are as they were: no run, no model version, no byte changed.
    assert sorted(r.info.run_id for r in client.search_runs([experiment])) == runs_before
    assert [v.version for v in client.search_model_versions("name='srv'")] == ["1"]
    assert {p.name: p.read_bytes() for p in (work / "runs" / "srv").iterdir() if p.is_file()} == state_before


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


@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM], ids=["ctrl-c", "kill"])
def test_hpo_ui_serves_the_store_and_stops_on_ctrl_c(tmp_path, sig):
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
    server_pid = None
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
        os.kill(proc.pid, sig)  # SIGINT is what Ctrl-C sends
        assert proc.wait(timeout=60) == 0, proc.stderr.read()
        with pytest.raises(ProcessLookupError):
            os.killpg(server_pid, 0)  # the server's whole process group is gone
        assert health(url, timeout=2) is not None
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        if server_pid is not None and proc.returncode != 0:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(server_pid, signal.SIGKILL)


def fifo_sweep(name: str, num_samples: int, max_epochs: int) -> dict:
    sweep = tiny_sweep(name, num_samples=num_samples, max_epochs=max_epochs)
    sweep["scheduler"] = {"type": "fifo"}  # every trial runs every epoch: a known count of metric points
    # About MLflow, not data parallelism (the main sweep has two ranks): one Horovod rank starts faster.
    sweep["trial"].update(workers=1, cpus_per_worker=1)
    sweep["space"]["learning_rate"] = {"type": "float", "low": 0.001, "high": 0.02, "log": True}
    return sweep


def test_server_killed_mid_sweep_training_goes_on_and_sync_sends_every_metric_once(tmp_path):
    from mlflow.tracking import MlflowClient

    backend, port = f"sqlite:///{tmp_path}/resilience.db", restartable_port()
    server = MlflowServer(backend, tmp_path / "artifacts", port=port, log_path=tmp_path / "server1.log").start()
    sweep_file = tmp_path / "resil.yaml"
    sweep_file.write_text(yaml.safe_dump(fifo_sweep("resil", num_samples=4, max_epochs=3), sort_keys=False))
    runs = tmp_path / "runs"
    args = ["tune", str(sweep_file), "--storage", str(runs), "--mlflow-uri", server.url]
    with (tmp_path / "tune.out").open("w") as out:
        proc = subprocess.Popen(
            ["nice", "-n", "10", *HPO_MODULE, *args],
            cwd=tmp_path,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=hpo_env(),
            start_new_session=True,
        )
    restarted = None
    try:
        client = MlflowClient(tracking_uri=server.url)
        # kill the server as soon as the first epoch of any trial is on it
        assert wait_for_an_epoch(client, "resil", proc), (tmp_path / "tune.out").read_text()[-3000:]
        server.stop()
        assert proc.wait(timeout=600) == 0, (tmp_path / "tune.out").read_text()[-3000:]
        output = (tmp_path / "tune.out").read_text()
        summary = json.loads((runs / "resil" / "summary.json").read_text())
        spool = runs / "resil" / "mlflow_spool.jsonl"
        assert summary["mlflow"]["pending_writes"] > 0 and spool.is_file()
        assert "run 'hpo sync resil' when the server is back" in output
        assert [t["status"] for t in summary["trials"]] == ["completed"] * 4  # training went on
        assert all(t["epochs"] == 3 for t in summary["trials"])

        restarted = MlflowServer(backend, tmp_path / "artifacts", port=port, log_path=tmp_path / "server2.log").start()
        proc_sync = run_hpo("sync", "resil", "--storage", str(runs), cwd=tmp_path)
        assert proc_sync.returncode == 0, proc_sync.stderr
        last_line = proc_sync.stdout.strip().splitlines()[-1]
        assert last_line.startswith("resil: ") and last_line.endswith(" MLflow writes sent, 0 waiting"), last_line
        assert not spool.exists()
        summary = json.loads((runs / "resil" / "summary.json").read_text())
        assert summary["mlflow"]["pending_writes"] == 0
        client = MlflowClient(tracking_uri=restarted.url)
        parent = client.get_run(summary["mlflow"]["parent_run_id"])
        assert parent.info.status == "FINISHED"
        assert parent.data.metrics["best_val_accuracy"] == pytest.approx(summary["best"]["metric"])
        children = children_of(client, summary)
        assert len(children) == 4
        assert {c.info.run_id for c in children} == {t["mlflow_run_id"] for t in summary["trials"]}
        by_run = {t["mlflow_run_id"]: t for t in summary["trials"]}
        for child in children:
            assert child.info.status == "FINISHED" and child.data.tags["hpo.status"] == "completed"
            assert child.data.params["global_batch_size"] == "32"  # one rank of 32
            for key in ("val_accuracy", "val_loss", "accuracy", "loss"):
                steps = sorted(m.step for m in client.get_metric_history(child.info.run_id, key))
                assert steps == [1, 2, 3], (key, steps)  # every epoch exactly once
            history = client.get_metric_history(child.info.run_id, "val_accuracy")
            assert max(m.value for m in history) == pytest.approx(by_run[child.info.run_id]["metric"])
        assert summary["mlflow"]["model"]["registered_name"] == "resil"
        assert client.get_model_version("resil", summary["mlflow"]["model"]["version"]).status == "READY"
        again = run_hpo("sync", "resil", "--storage", str(runs), cwd=tmp_path)
        assert again.returncode == 0 and again.stdout.strip().endswith("resil: 0 MLflow writes sent, 0 waiting")
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        server.stop()
        if restarted is not None:
            restarted.stop()


CHROMIUM_FLAGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
    "--no-first-run",
    "--virtual-time-budget=20000",  # let the single-page app fetch and render before the dump
    "--window-size=1400,1000",
]


def page_text(html_text: str) -> str:
    import html
    import re

    text = re.sub(r"<script.*?</script>|<style.*?</style>", " ", html_text, flags=re.S)
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", text)))


def chromium(url: str, *args: str, profile: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        ["chromium", *CHROMIUM_FLAGS, f"--user-data-dir={profile}", *args, url],
        capture_output=True,
        text=True,
        timeout=180,
        cwd=profile.parent,
    )


@pytest.mark.skipif(
    shutil.which("chromium") is None, reason="Debian's chromium is not installed (make install installs it as root)"
)
def test_browser_shows_the_parent_run_with_its_nested_trial_runs(server_sweep, server, client, tmp_path):
    summary = server_sweep["summary"]
    experiment, parent_id = summary["mlflow"]["experiment_id"], summary["mlflow"]["parent_run_id"]
    trial_names = sorted(c.info.run_name for c in children_of(client, summary))
    assert trial_names == sorted(f"trial-{t['trial_id']}" for t in summary["trials"])

    # The parent run's page: its name, tags and its child runs, by name.
    url = f"{server.url}/#/experiments/{experiment}/runs/{parent_id}"
    dump = chromium(url, "--dump-dom", profile=tmp_path / "profile")
    assert dump.returncode == 0, dump.stderr[-2000:]
    text = page_text(dump.stdout)
    assert f"Run {parent_id} - MLflow" in text and "Status Finished" in text
    child_runs = text.split("Child runs", 1)[1][:200]
    assert all(name in child_runs for name in trial_names), child_runs
    assert "hpo.kind : sweep" in text and "hpo.searcher : optuna-tpe" in text

    # The experiment's training runs: the parent run at the top level, all four runs found.
    runs_url = f"{server.url}/#/experiments/{experiment}/runs"
    dump = chromium(runs_url, "--dump-dom", profile=tmp_path / "profile")
    text = page_text(dump.stdout)
    assert "Training runs" in text and " srv " in text and "7 matching runs" in text, text[:2000]

    shot = tmp_path / "parent_run.png"
    taken = chromium(url, f"--screenshot={shot}", profile=tmp_path / "profile")
    assert taken.returncode == 0 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 20_000


def test_two_sweeps_logging_to_one_server_at_once_stay_separate(server_sweep, client):
    work, returncode, output = server_sweep["conc"]
    assert returncode is not None, "srv ended before the second sweep could start"
    assert returncode == 0, output[-3000:]
    conc = json.loads((work / "runs" / "conc" / "summary.json").read_text())
    srv = server_sweep["summary"]
    assert conc["mlflow"]["experiment_id"] != srv["mlflow"]["experiment_id"]
    srv_parent = client.get_run(srv["mlflow"]["parent_run_id"])
    for name, summary, trials in (("conc", conc, 2), ("srv", srv, 6)):
        assert client.get_experiment(summary["mlflow"]["experiment_id"]).name == name
        parent = client.get_run(summary["mlflow"]["parent_run_id"])
        assert parent.info.run_name == name and parent.info.status == "FINISHED"
        runs = client.search_runs([summary["mlflow"]["experiment_id"]])
        children = children_of(client, summary)
        assert len(runs) == trials + 1 and len(children) == trials  # its parent and its own trials, nothing else
        assert {c.data.tags["hpo.sweep"] for c in children} == {name}
        assert {c.info.run_id for c in children} == {t["mlflow_run_id"] for t in summary["trials"]}
        assert summary["mlflow"]["model"]["registered_name"] == name
        assert client.get_model_version(name, summary["mlflow"]["model"]["version"]).run_id == parent.info.run_id
        # They ran at the same time: each started before the other ended.
        assert parent.info.start_time < srv_parent.info.end_time
    for child in children_of(client, conc):
        steps = [m.step for m in client.get_metric_history(child.info.run_id, "val_accuracy")]
        assert steps == [1, 2]


def test_server_back_mid_sweep_gets_the_spool_without_hpo_sync(tmp_path):
    from mlflow.tracking import MlflowClient

    backend, port = f"sqlite:///{tmp_path}/auto.db", restartable_port()
    server = MlflowServer(backend, tmp_path / "artifacts", port=port, log_path=tmp_path / "server1.log").start()
    sweep_file = tmp_path / "auto.yaml"
    # Four trials of eight epochs: enough sweep left to outlast a server restart on a busy machine.
    sweep = fifo_sweep("auto", num_samples=4, max_epochs=8)
    sweep["search"]["max_concurrent"] = 1
    sweep["trial"]["early_stopping"] = {"patience": 8}
    sweep_file.write_text(yaml.safe_dump(sweep, sort_keys=False))
    runs = tmp_path / "runs"
    spool = runs / "auto" / "mlflow_spool.jsonl"
    args = ["tune", str(sweep_file), "--storage", str(runs), "--mlflow-uri", server.url]
    with (tmp_path / "tune.out").open("w") as out:
        proc = subprocess.Popen(
            ["nice", "-n", "10", *HPO_MODULE, *args],
            cwd=tmp_path,
            stdout=out,
            stderr=subprocess.STDOUT,
            env=hpo_env(),
            start_new_session=True,
        )
    restarted = None
    try:
        client = MlflowClient(tracking_uri=server.url)
        assert wait_for_an_epoch(client, "auto", proc), (tmp_path / "tune.out").read_text()[-3000:]
        server.stop()
        while not spool.is_file():  # the next write finds the server gone
            assert proc.poll() is None, "the sweep ended before it spooled anything"
            time.sleep(0.2)
        restarted = MlflowServer(backend, tmp_path / "artifacts", port=port, log_path=tmp_path / "server2.log").start()
        if proc.poll() is not None:
            pytest.skip("the sweep ended before the server was back (machine too busy to time this)")
        assert proc.wait(timeout=600) == 0, (tmp_path / "tune.out").read_text()[-3000:]
        summary = json.loads((runs / "auto" / "summary.json").read_text())
        assert summary["mlflow"]["pending_writes"] == 0 and not spool.exists()
        client = MlflowClient(tracking_uri=restarted.url)
        children = children_of(client, summary)
        assert len(children) == 4 and all(c.info.status == "FINISHED" for c in children)
        by_run = {t["mlflow_run_id"]: t for t in summary["trials"]}
        for child in children:
            steps = sorted(m.step for m in client.get_metric_history(child.info.run_id, "val_accuracy"))
            assert steps == list(range(1, by_run[child.info.run_id]["epochs"] + 1))
        assert client.get_run(summary["mlflow"]["parent_run_id"]).info.status == "FINISHED"
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
            proc.wait()
        server.stop()
        if restarted is not None:
            restarted.stop()
