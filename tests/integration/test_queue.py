"""``hpo submit`` / ``queue`` / ``cancel`` / ``logs`` against a real Ray head with its job server.

One head per module (``ray start --head`` with the dashboard on 127.0.0.1, every port explicit, token
authentication on), started by the test and stopped by PID; the head restart case kills it by PID and starts
it again on the same ports. The sweeps are tiny: the simulated backend on real time, except one sweep that
trains for real (Horovod over Gloo) end to end.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml
from mlflow.tracking import MlflowClient

from hpo.queue import EntryState, QueueEntry, QueueSettings, QueueStore
from tests.conftest import ROOT, ensure_ray_token, kill_tree, quiet_ports

pytestmark = [pytest.mark.cluster, pytest.mark.slow]
RAY = str(Path(sys.executable).with_name("ray"))
HEAD_CPUS = 2
WORKER_PORTS = 60


@dataclass
class Head:
    """A Ray head with its job server, restartable on the same ports."""

    root: Path
    ports: list[int]
    env: dict[str, str]
    procs: list[subprocess.Popen] = field(default_factory=list)
    temp_dirs: list[Path] = field(default_factory=list)

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.ports[1]}"

    def start(self) -> None:
        temp_dir = Path(tempfile.mkdtemp(prefix="hpo-q-", dir="/tmp"))  # short: Ray's socket paths are limited
        self.temp_dirs.append(temp_dir)
        p = iter(self.ports)
        port, dashboard = next(p), next(p)
        low = next(p)
        for _ in range(WORKER_PORTS):
            high = next(p)
        cmd = [RAY, "start", "--head", "--block", f"--port={port}", f"--num-cpus={HEAD_CPUS}", "--num-gpus=0",
               "--node-ip-address=127.0.0.1", f"--temp-dir={temp_dir}", "--disable-usage-stats",
               "--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard}",
               f"--ray-client-server-port={next(p)}", f"--node-manager-port={next(p)}",
               f"--object-manager-port={next(p)}", f"--dashboard-agent-listen-port={next(p)}",
               f"--dashboard-agent-grpc-port={next(p)}", f"--metrics-export-port={next(p)}",
               f"--runtime-env-agent-port={next(p)}", f"--min-worker-port={low}", f"--max-worker-port={high}"]
        log = (self.root / f"head-{len(self.procs)}.log").open("w")
        self.procs.append(subprocess.Popen(cmd, env=self.env, stdout=log, stderr=subprocess.STDOUT,
                                           start_new_session=True))
        deadline = time.time() + 240  # a busy 2-core machine starts the dashboard slowly
        while time.time() < deadline:
            if self.procs[-1].poll() is not None:
                break
            try:
                urllib.request.urlopen(f"{self.url}/api/version", timeout=5)
                return
            except urllib.error.HTTPError:
                return  # it answers (and wants the token)
            except OSError:
                time.sleep(1)
        raise RuntimeError(f"the head's job server did not come up: {log.name}")

    def kill(self) -> None:
        """Kills the head and everything under it (the dispatcher and the sweeps' drivers too), by PID."""
        kill_tree([self.procs[-1].pid], str(self.temp_dirs[-1]))
        self.procs[-1].wait(timeout=30)


@pytest.fixture(scope="module")
def head(tmp_path_factory) -> Iterator[Head]:
    root = tmp_path_factory.mktemp("queue")
    ensure_ray_token(RAY)
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "TF_USE_LEGACY_KERAS": "1",
           "RAY_DISABLE_PYARROW_VERSION_CHECK": "1", "RAY_AUTH_MODE": "token",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    cluster = Head(root, quiet_ports(WORKER_PORTS + 12, "cluster"), env)
    try:
        cluster.start()
        yield cluster
    finally:
        for proc in cluster.procs:
            kill_tree([proc.pid], str(cluster.temp_dirs[cluster.procs.index(proc)]))
        for temp_dir in cluster.temp_dirs:
            shutil.rmtree(temp_dir, ignore_errors=True)


def hpo(cwd: Path, *args: str, timeout: int = 300) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("RAY_AUTH_MODE", None)  # hpo finds the token itself
    return subprocess.run([sys.executable, "-m", "hpo.cli.main", *args], cwd=cwd, capture_output=True, text=True,
                          timeout=timeout, env=env)


def sweep(name: str, mlflow: Path, *, epochs: int = 3, samples: int = 2, epoch_s: float = 0.2,
          model: str = "hpo.models.mlp:build", real: bool = False) -> dict:
    trial = {"workers": 1, "cpus_per_worker": 1, "max_epochs": epochs, "early_stopping": {"patience": 50}}
    if not real:
        trial |= {"backend": "simulated", "simulated_epoch_s": epoch_s, "simulated_clock": False}
    else:
        trial |= {"batch_size_per_worker": 64}
    return {"name": name, "model": model, "data": {"train": "builtin:digits"},
            "objective": {"metric": "val_accuracy", "mode": "max"},
            "search": {"algorithm": "random", "num_samples": samples, "max_concurrent": HEAD_CPUS, "seed": 5},
            "scheduler": {"type": "fifo"}, "trial": trial,
            "tracking": {"mlflow_uri": f"sqlite:///{mlflow / (name + '.db')}"},
            "space": {"learning_rate": {"type": "float", "low": 0.001, "high": 0.1, "log": True}}}


def write(path: Path, data: dict) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def wait_for(what: Callable[[], bool], head: Head, timeout: float = 600, store: QueueStore | None = None) -> None:
    deadline = time.time() + timeout
    while time.time() < deadline:
        if what():
            return
        time.sleep(0.5)
    seen = [e.model_dump(include={"name", "state", "message", "job_id"}) for e in store.entries()] if store else ""
    raise AssertionError(f"timed out; queue: {seen}")


def entry(store: QueueStore, name: str) -> QueueEntry:
    found = store.get(name)
    assert found is not None, name
    return found


def ended(store: QueueStore, *names: str) -> Callable[[], bool]:
    return lambda: all(entry(store, n).state not in (EntryState.QUEUED, EntryState.RUNNING) for n in names)


def mlflow_runs_once(db: Path) -> tuple[int, int]:
    """(parent runs, nested runs of the sweep's trials) in a sweep's MLflow store; every trial's run appears once.

    A trial the head's loss took away before Tune saved it keeps its run, closed as ``lost`` (KILLED) by the
    resumed sweep, which trains that configuration again as a new trial: those runs are checked, not counted.
    """
    client = MlflowClient(tracking_uri=f"sqlite:///{db}")
    runs = [r for e in client.search_experiments() for r in client.search_runs([e.experiment_id])]
    parents = [r for r in runs if "mlflow.parentRunId" not in r.data.tags]
    nested = [r for r in runs if "mlflow.parentRunId" in r.data.tags]
    lost = [r for r in nested if r.data.tags.get("hpo.status") == "lost"]
    assert all(r.info.status == "KILLED" for r in lost), [(r.info.run_name, r.info.status) for r in lost]
    kept = [r for r in nested if r not in lost]
    names = [r.info.run_name for r in kept]
    assert len(names) == len(set(names)), names
    return len(parents), len(kept)


def test_a_bad_file_among_three_queues_nothing(head: Head, tmp_path: Path):
    good = [write(tmp_path / f"{n}.yaml", sweep(n, tmp_path)) for n in ("one", "two")]
    bad = write(tmp_path / "bad.yaml", {**sweep("bad", tmp_path), "search": {"algorithm": "nope"}})
    storage = tmp_path / "runs"
    proc = hpo(tmp_path, "submit", str(good[0]), str(bad), str(good[1]), "--address", head.url,
               "--storage", str(storage))
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.startswith(f"error: {bad}: search.algorithm:"), proc.stderr
    assert QueueStore(storage).entries() == []
    assert not (storage / "_queue").exists()


def driver_logs(head: Head) -> str:
    """The tails of every job's output on the head (for failure messages)."""
    texts = []
    for log in sorted(head.temp_dirs[-1].glob("session_*/logs/job-driver-*.log")):
        texts.append(f"--- {log.name}\n{log.read_text()[-1500:]}")
    return "\n".join(texts)


def git(repo: Path, *args: str) -> str:
    out = subprocess.run(["git", "-c", "user.email=t@example.com", "-c", "user.name=t", *args], cwd=repo,
                         capture_output=True, text=True, check=True)
    return out.stdout.strip()


def test_changed_sweeps_run_in_priority_order_and_cancel_stops_or_drops_them(head: Head, tmp_path: Path):
    repo, mlflow, storage = tmp_path / "repo", tmp_path / "mlflow", tmp_path / "runs"
    mlflow.mkdir()
    write(repo / "sweeps" / "real.yaml", sweep("real", mlflow, real=True, epochs=2, samples=1))
    write(repo / "sweeps" / "same.yaml", sweep("same", mlflow))
    write(repo / "sweeps" / "own.yaml", sweep("own", mlflow, model="mymodel:build"))
    (repo / "mymodel.py").write_text("from hpo.models.mlp import build  # noqa: F401\n")
    git(repo.parent, "init", "-q", str(repo))
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "-m", "one")
    # the second commit changes one sweep file and the model module of another; 'same' is unchanged
    changed = sweep("real", mlflow, real=True, epochs=2, samples=1)
    changed["search"]["seed"] = 6
    write(repo / "sweeps" / "real.yaml", changed)
    (repo / "mymodel.py").write_text("from hpo.models.mlp import build  # noqa: F401  (v2)\n")
    git(repo, "commit", "-q", "-am", "two")
    commit = git(repo, "rev-parse", "--short", "HEAD")
    store = QueueStore(storage)
    store.put_settings(QueueSettings(max_running=1))  # one at a time: the order is observable
    files = ["sweeps/real.yaml", "sweeps/same.yaml", "sweeps/own.yaml"]
    proc = hpo(repo, "submit", *files, "--changed-since", "HEAD~1", "--address", head.url, "--storage", str(storage))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        "skipped sweeps/same.yaml: unchanged since HEAD~1 (sweep file)",
        f"queued real-{commit} (position 1)", f"queued own-{commit} (position 2)"]
    wait_for(lambda: entry(store, f"real-{commit}").state == EntryState.RUNNING, head, store=store)
    urgent = write(repo / "sweeps" / "urgent.yaml", sweep("urgent", mlflow, epochs=60, epoch_s=0.3, samples=2))
    proc = hpo(repo, "submit", str(urgent), "--priority", "5", "--address", head.url, "--storage", str(storage),
               "--json", "--deadline", "1h")
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout) == [{"name": "urgent", "state": "queued", "position": 1}]  # before own
    listed = json.loads(hpo(repo, "queue", "--storage", str(storage), "--json").stdout)
    assert [(r["name"], r["state"], r["position"]) for r in listed] == [
        (f"real-{commit}", "running", None), ("urgent", "queued", 1), (f"own-{commit}", "queued", 2)]
    assert hpo(repo, "cancel", f"own-{commit}", "--storage", str(storage)).returncode == 0
    # 'urgent' runs once the real sweep has no trial waiting (max_running 1: once it ended); cancel it running
    wait_for(lambda: entry(store, "urgent").state == EntryState.RUNNING and entry(store, "urgent").trials_ended
             + (entry(store, "urgent").trials_total or 0) > 0, head, store=store)
    proc = hpo(repo, "cancel", "urgent", "--address", head.url, "--storage", str(storage))
    assert proc.returncode == 0, proc.stderr
    wait_for(ended(store, "urgent", f"real-{commit}"), head, store=store)
    real, urgent_e, own = entry(store, f"real-{commit}"), entry(store, "urgent"), entry(store, f"own-{commit}")
    assert real.state == EntryState.SUCCEEDED, (real, driver_logs(head))
    assert own.state == EntryState.CANCELLED and own.job_id is None and own.started_at is None
    assert urgent_e.state == EntryState.INTERRUPTED and urgent_e.resumes == 0, urgent_e
    assert real.started_at < urgent_e.started_at
    summary = json.loads((storage / "urgent" / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["mlflow"].get("registered_model") is None
    # the deadline reached the queued job as a time: an hour from the submission, less what it spent queued
    assert [a for a in urgent_e.args if a.startswith("--deadline=")], urgent_e.args
    assert 1800 < summary["deadline"]["deadline_s"] <= 3600 and summary["deadline"]["met"] is True
    time.sleep(3)  # the queue does not resume a sweep the user cancelled
    assert entry(store, "urgent").state == EntryState.INTERRUPTED
    # MLflow: the real sweep's parent run once, each of its trials once
    assert mlflow_runs_once(mlflow / "real.db") == (1, 1)
    # hpo queue lists them; hpo logs shows the real sweep's output; no credential reached a job
    listed = json.loads(hpo(repo, "queue", "--storage", str(storage), "--json").stdout)
    assert {r["name"]: r["state"] for r in listed} == {
        f"real-{commit}": "succeeded", "urgent": "interrupted", f"own-{commit}": "cancelled"}
    logs = hpo(repo, "logs", f"real-{commit}", "--address", head.url, "--storage", str(storage))
    assert logs.returncode == 0 and "best:" in logs.stdout, logs.stderr
    followed = hpo(repo, "logs", f"real-{commit}", "--follow", "--address", head.url, "--storage", str(storage))
    assert followed.returncode == 0 and "best:" in followed.stdout, followed.stderr  # an ended job: all, then exit
    token = (Path.home() / ".ray" / "auth_token").read_text().strip()
    assert token not in driver_logs(head) and token not in logs.stdout
    assert token not in (storage / "_queue").joinpath("entries", f"real-{commit}.json").read_text()


def test_a_head_restart_loses_nothing_the_running_sweep_resumes_and_the_queued_one_runs_after(
        head: Head, tmp_path: Path):
    mlflow, storage = tmp_path / "mlflow", tmp_path / "runs"
    mlflow.mkdir()
    store = QueueStore(storage)
    store.put_settings(QueueSettings(max_running=1))
    long = write(tmp_path / "long.yaml", sweep("long", mlflow, epochs=30, epoch_s=0.3, samples=3))
    after = write(tmp_path / "after.yaml", sweep("after", mlflow, epochs=2, samples=1))
    proc = hpo(tmp_path, "submit", str(long), str(after), "--address", head.url, "--storage", str(storage))
    assert proc.returncode == 0, proc.stderr
    # kill the head by PID while 'long' runs (a trial has ended: its results must survive) and 'after' waits
    wait_for(lambda: entry(store, "long").trials_ended >= 1, head, store=store)
    first_job = entry(store, "long").job_id
    head.kill()
    head.start()
    assert [e.state for e in (entry(store, "long"), entry(store, "after"))] == [EntryState.RUNNING,
                                                                                 EntryState.QUEUED]
    # the first queue command brings the dispatcher back: it finds the lost job, resumes it, then runs 'after'
    assert hpo(tmp_path, "queue", "--address", head.url, "--storage", str(storage)).returncode == 0
    wait_for(ended(store, "long", "after"), head, timeout=900, store=store)
    long_e, after_e = entry(store, "long"), entry(store, "after")
    assert long_e.state == EntryState.SUCCEEDED and long_e.resumes == 1, (long_e, driver_logs(head))
    assert long_e.job_id != first_job
    assert after_e.state == EntryState.SUCCEEDED and after_e.started_at > long_e.started_at, after_e
    summary = json.loads((storage / "long" / "summary.json").read_text())
    assert summary["status"] == "finished" and len(summary["trials"]) == 3
    # the resumed sweep reopened its MLflow parent run: one parent, each trial once
    assert mlflow_runs_once(mlflow / "long.db") == (1, 3)
    assert mlflow_runs_once(mlflow / "after.db") == (1, 1)
