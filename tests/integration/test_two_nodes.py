"""Two Ray nodes that do not share a disk, as on any cluster ``ray up`` starts, with object storage.

The head has no CPUs (every trial runs on the second node); the second node runs in its own mount
namespace with a tmpfs over the head's working directory, so it cannot see anything the driver writes
locally (``unshare --mount``; needs root). The storage is a real S3 endpoint (moto's server). Every port
is explicit, Ray's token authentication stays on, and every process is stopped by its PID.
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest
import yaml

from hpo.data import write_dataset
from tests.conftest import ROOT, ensure_ray_token, kill_tree, quiet_ports
from tests.integration.s3 import MotoServer

# Every port of both nodes comes from one block out of the kernel's ephemeral range (tests.conftest.quiet_ports):
# with ports picked by bind(0), the other test process's Ray could take one first and the head never came up.
pytestmark = [pytest.mark.cluster, pytest.mark.slow, pytest.mark.two_nodes]
RAY = str(Path(sys.executable).with_name("ray"))
SMALL = ROOT / "tests" / "integration" / "sweeps" / "small.yaml"
WORKER_CPUS = 2
WORKER_PORTS = 100  # per node: one per Ray worker process
REPLACEMENTS = 1  # worker nodes a test may start after losing one


@dataclass
class TwoNodes:
    """A head (0 CPUs) and a worker node that cannot see ``disk``, the driver's working directory."""

    address: str
    disk: Path
    moto: MotoServer
    bucket: str
    procs: list[subprocess.Popen]
    start_worker: Callable[[], subprocess.Popen]

    def worker(self) -> subprocess.Popen:
        """The newest worker node's process (``unshare`` → ``ray start --block`` → raylet and its workers)."""
        return self.procs[-1]

    def lose_worker(self) -> None:
        """SIGKILLs the newest worker node's whole process tree at once, as when its machine is gone."""
        kill_tree([self.worker().pid], "\0never-matches\0")

    def replace_worker(self) -> float:
        """A new worker node with a fresh disk and ports of its own joins, as an autoscaler would start one.

        Returns:
            When the new node was first seen alive in the cluster.
        """
        self.procs.append(self.start_worker())
        return _wait_for_nodes({**self.env(), "RAY_AUTH_MODE": "token"}, self.address, 1, [self.procs[0]],
                               port=self.procs[-1].args[-1].split("--node-manager-port=")[1].split()[0])

    def env(self) -> dict[str, str]:
        """hpo's environment: the S3 endpoint and credentials; no RAY_AUTH_MODE (hpo finds the token itself)."""
        env = {
            **os.environ, **self.moto.env(),
            "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
        }
        env.pop("RAY_AUTH_MODE", None)
        return env

    def hpo(self, *args: str, timeout: int = 600) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "hpo.cli.main", *args], cwd=self.disk, capture_output=True,
                              text=True, timeout=timeout, env=self.env())


def _ports(ports: Iterator[int]) -> list[str]:
    """Every port a Ray node would otherwise pick at random, explicit and out of the kernel's ephemeral range."""
    low = next(ports)
    for _ in range(WORKER_PORTS):
        high = next(ports)
    return [
        f"--node-manager-port={next(ports)}", f"--object-manager-port={next(ports)}",
        f"--dashboard-agent-listen-port={next(ports)}", f"--dashboard-agent-grpc-port={next(ports)}",
        f"--metrics-export-port={next(ports)}", f"--runtime-env-agent-port={next(ports)}",
        f"--min-worker-port={low}", f"--max-worker-port={high}",
    ]  # fmt: skip


def _wait_for_nodes(env: dict[str, str], address: str, count: int, procs: list[subprocess.Popen],
                    port: str = "") -> float:
    """Waits until ``count`` nodes are alive (with node-manager ``port`` only, if given); returns when."""
    probe = (
        "import ray, sys; ray.init(address=sys.argv[1], logging_level='ERROR', log_to_driver=False);"
        "print(sum(1 for n in ray.nodes() if n['Alive'] and sys.argv[2] in ('', str(n['NodeManagerPort']))))"
    )
    deadline, out = time.time() + 300, None  # a busy 2-core machine (the rest of make test) starts Ray slowly
    while time.time() < deadline:
        if any(p.poll() is not None for p in procs):
            break
        try:
            out = subprocess.run([sys.executable, "-c", probe, address, port], capture_output=True, text=True,
                                 env=env, timeout=90)
        except subprocess.TimeoutExpired:
            continue
        if out.returncode == 0 and out.stdout.strip().splitlines()[-1:] == [str(count)]:
            return time.time()
        time.sleep(1)
    seen = f"probe rc {out.returncode}: {out.stdout[-500:]} {out.stderr[-1500:]}" if out else "no probe ran"
    raise RuntimeError(f"{count} Ray nodes did not come up ({seen})")


@contextmanager
def two_nodes(root: Path, replacements: int = REPLACEMENTS) -> Iterator[TwoNodes]:
    """Starts the head, the worker node and a moto S3 server under ``root``; stops every process by PID.

    Args:
        root: An empty directory for the head's disk and the logs.
        replacements: How many worker nodes may be started after the first (each takes ports of its own).

    Raises:
        RuntimeError: A node did not come up (with the end of both nodes' logs).
    """
    disk = root / "head-disk"
    disk.mkdir()
    moto = MotoServer(root / "moto.log").start()
    temp_dir = Path(tempfile.mkdtemp(prefix="hpo-2n-", dir="/tmp"))  # short: Ray's socket paths are limited
    ports = iter(quiet_ports((2 + replacements) * (WORKER_PORTS + 8) + 3, "cluster"))
    port = next(ports)
    # Token authentication on: both nodes and the probes present the token (hpo finds it on its own).
    env = {**os.environ, **moto.env(), "RAY_USAGE_STATS_ENABLED": "0", "TF_USE_LEGACY_KERAS": "1",
           "RAY_DISABLE_PYARROW_VERSION_CHECK": "1", "RAY_AUTH_MODE": "token"}
    ensure_ray_token(RAY)
    common = ["--block", "--node-ip-address=127.0.0.1", f"--temp-dir={temp_dir}", "--disable-usage-stats"]
    head_cmd = [RAY, "start", "--head", f"--port={port}", "--num-cpus=0", "--num-gpus=0",
                f"--ray-client-server-port={next(ports)}", f"--dashboard-port={next(ports)}",
                "--include-dashboard=false", *common, *_ports(ports)]
    procs: list[subprocess.Popen] = []
    logs = [(root / "head.log").open("w")]

    def start_worker() -> subprocess.Popen:
        """A worker node: its own mount namespace, where the head's disk is an empty tmpfs, and its own ports."""
        worker = " ".join([RAY, "start", f"--address=127.0.0.1:{port}", f"--num-cpus={WORKER_CPUS}",
                           "--num-gpus=0", *common, *_ports(ports)])
        cmd = ["unshare", "--mount", "--propagation", "private", "sh", "-c",
               f"mount -t tmpfs hpo-other-disk {disk} && exec {worker}"]
        logs.append((root / f"worker{len(logs)}.log").open("w"))
        return subprocess.Popen(cmd, env=env, stdout=logs[-1], stderr=subprocess.STDOUT, start_new_session=True)

    try:
        procs.append(subprocess.Popen(head_cmd, env=env, stdout=logs[0], stderr=subprocess.STDOUT,
                                      start_new_session=True))
        _wait_for_nodes(env, f"127.0.0.1:{port}", 1, procs)
        procs.append(start_worker())
        try:
            _wait_for_nodes(env, f"127.0.0.1:{port}", 2, procs)
        except RuntimeError as exc:
            raise RuntimeError(f"{exc}: {(root / 'head.log').read_text()[-2000:]} "
                               f"{(root / 'worker1.log').read_text()[-2000:]}") from None
        yield TwoNodes(f"127.0.0.1:{port}", disk, moto, moto.bucket("team-sweeps"), procs, start_worker)
    finally:
        kill_tree([p.pid for p in procs], str(temp_dir))
        moto.stop()
        for log in logs:
            log.close()
        shutil.rmtree(temp_dir, ignore_errors=True)
    assert all(p.poll() is not None for p in procs)


@pytest.fixture(scope="module")
def cluster(tmp_path_factory) -> Iterator[TwoNodes]:
    if os.geteuid() != 0 or shutil.which("unshare") is None:
        pytest.skip("needs root and unshare (util-linux) to give the second node a mount namespace of its own")
    try:
        with two_nodes(tmp_path_factory.mktemp("two-nodes")) as nodes:
            yield nodes
    except RuntimeError as exc:
        pytest.fail(str(exc))


def sweep_file(cluster: TwoNodes, name: str, trials: int = 3, epochs: int = 3, **data: object) -> str:
    sweep = yaml.safe_load(SMALL.read_text())
    sweep["name"] = name
    sweep["data"] = data or sweep["data"]
    sweep["search"].update(num_samples=trials, max_concurrent=1)
    sweep["trial"].update(max_epochs=epochs, cpus_per_worker=1)
    sweep["tracking"] = {"mlflow_uri": f"sqlite:///{cluster.disk}/mlflow.db"}
    (cluster.disk / f"{name}.yaml").write_text(yaml.safe_dump(sweep))
    return f"{name}.yaml"


def test_the_worker_node_cannot_see_the_drivers_disk(cluster):
    (cluster.disk / "marker").write_text("head only")
    import ray

    # A zero-CPU task may land on either node: pin one to every node and ask each whether it sees the file.
    probe = (
        "import ray, sys, os\n"
        "from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy as A\n"
        "ray.init(address=sys.argv[1], logging_level='ERROR', log_to_driver=False)\n"
        "f = ray.remote(num_cpus=0)(lambda p: os.path.exists(p))\n"
        "print(sorted(ray.get([f.options(scheduling_strategy=A(n['NodeID'], soft=False)).remote(sys.argv[2])"
        " for n in ray.nodes() if n['Alive']])))\n"
    )
    del ray
    out = subprocess.run([sys.executable, "-c", probe, cluster.address, str(cluster.disk / "marker")],
                         capture_output=True, text=True, env={**cluster.env(), "RAY_AUTH_MODE": "token"}, timeout=120)
    assert out.stdout.strip().splitlines()[-1] == "[False, True]", out.stderr[-2000:]


def test_a_local_storage_is_refused_before_any_trial(cluster):
    name = sweep_file(cluster, "local-storage")
    proc = cluster.hpo("tune", name, "--address", cluster.address, "--storage", str(cluster.disk / "runs"))
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-2000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {name}: --storage: {cluster.disk / 'runs'} is a directory")
    assert "s3://bucket/prefix" in lines[0]
    assert not list((cluster.disk / "runs").glob("local-storage/hpo_trial_*"))  # no trial started


def _text(output: str | bytes | None) -> str:
    return output.decode(errors="replace") if isinstance(output, bytes) else output or ""


def _final_models(cluster: TwoNodes, name: str) -> list[str]:
    return [k for k in cluster.moto.keys(cluster.bucket, f"runs/{name}/") if k.endswith("/model.keras")]


def _finished_in_bucket(cluster: TwoNodes, name: str) -> set[str]:
    """The trials Tune's newest experiment state in the bucket holds as finished (``TERMINATED``)."""
    states = sorted(k for k in cluster.moto.keys(cluster.bucket, f"runs/{name}/")
                    if k.rsplit("/", 1)[-1].startswith("experiment_state-") and k.endswith(".json"))
    if not states:
        return set()
    body = cluster.moto.client().get_object(Bucket=cluster.bucket, Key=states[-1])["Body"].read()
    try:
        trial_data = json.loads(body)["trial_data"]
    except ValueError:  # caught mid-upload
        return set()
    trials = [json.loads(state) for state, _ in trial_data]
    return {t["trial_id"] for t in trials if t.get("status") == "TERMINATED"}


def _upload_users_dataset(cluster: TwoNodes, tmp_path: Path) -> str:
    """A user's Parquet dataset (digits) written locally and uploaded to the bucket; returns its s3:// URL."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    local = tmp_path / "digits"
    write_dataset(((digits.data / 16).astype(np.float32), digits.target), f"file://{local}")
    for file in local.iterdir():
        cluster.moto.client().upload_file(str(file), cluster.bucket, f"data/digits/{file.name}")
    return f"s3://{cluster.bucket}/data/digits"


def test_sweep_of_a_users_s3_dataset_killed_and_resumed_on_two_nodes(cluster, tmp_path):
    """One sweep: the user's data in S3, SIGKILLed mid-sweep and resumed, then read back by another driver."""
    name = sweep_file(cluster, "two-nodes", train=_upload_users_dataset(cluster, tmp_path), validation_fraction=0.2)
    storage = f"s3://{cluster.bucket}/runs"
    cmd = [sys.executable, "-m", "hpo.cli.main", "tune", name, "--address", cluster.address, "--storage", storage]
    first = subprocess.Popen(cmd, cwd=cluster.disk, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env=cluster.env(), start_new_session=True)
    try:
        deadline = time.time() + 400
        while time.time() < deadline and first.poll() is None and not _final_models(cluster, "two-nodes"):
            time.sleep(1)
        assert first.poll() is None, f"the sweep ended before it could be killed: {first.stdout.read()[-3000:]}"
        # Killed once the bucket holds Tune's state with a finished trial: what a resume must keep. A trial
        # whose model lands just before the kill, after Tune's last upload, may be run again under a new id.
        while time.time() < deadline and first.poll() is None and not _finished_in_bucket(cluster, "two-nodes"):
            time.sleep(0.5)
        finished_before = _finished_in_bucket(cluster, "two-nodes")
        assert finished_before, "Tune's state in the bucket never recorded a finished trial"
        os.killpg(first.pid, signal.SIGKILL)
        first.wait(timeout=30)
    finally:
        if first.poll() is None:
            os.killpg(first.pid, signal.SIGKILL)

    try:
        second = subprocess.run([*cmd, "--resume"], cwd=cluster.disk, capture_output=True, text=True, timeout=420,
                                env=cluster.env())
    except subprocess.TimeoutExpired as exc:  # say what the resumed sweep was doing, not only that it hung
        pytest.fail(f"the resumed sweep did not end in 420 s: {_text(exc.stdout)[-3000:]}{_text(exc.stderr)[-3000:]}")
    assert second.returncode == 0, second.stdout[-3000:] + second.stderr[-3000:]
    state = next((cluster.disk / "hpo_runs" / "_shared").glob("s3-*")) / "two-nodes"
    summary = json.loads((state / "summary.json").read_text())
    trials = summary["trials"]
    assert len(trials) == 3 and len({t["trial_id"] for t in trials}) == 3
    assert finished_before <= {t["trial_id"] for t in trials}
    assert all(t["status"] in ("completed", "stopped_early") for t in trials), trials
    assert summary["best"] is not None
    # The bucket holds the sweep complete: Tune's state, checkpoints, the data hpo wrote, the driver's copy.
    keys = cluster.moto.keys(cluster.bucket, "runs/")
    assert "runs/two-nodes/_driver/summary.json" in keys
    # The train/validation split of the user's dataset hpo wrote, where the second node reads it.
    assert any(k.startswith("runs/_data/two-nodes/train/") and k.endswith(".parquet") for k in keys)
    assert any(k.startswith("runs/_data/two-nodes/validation/") and k.endswith(".parquet") for k in keys)
    assert all(t["checkpoint"].startswith(f"s3://{cluster.bucket}/runs/two-nodes/") for t in trials)

    # The Optuna study was told how every trial ended; none is left RUNNING (one handed out just before the
    # kill, which Tune never recorded, is closed as FAIL).
    with sqlite3.connect(state / "optuna.db") as db:
        states = dict(db.execute("select state, count(*) from trials group by state").fetchall())
    assert states.get("COMPLETE", 0) + states.get("PRUNED", 0) == 3 and "RUNNING" not in states, states

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=summary["mlflow"]["uri"])
    experiment = summary["mlflow"]["experiment_id"]
    parents = client.search_runs([experiment], filter_string="tags.hpo.kind = 'sweep'")
    assert [p.info.run_id for p in parents] == [summary["mlflow"]["parent_run_id"]]  # no second parent
    children = client.search_runs(
        [experiment], filter_string=f"tags.mlflow.parentRunId = '{summary['mlflow']['parent_run_id']}'"
    )
    live = [c for c in children if c.data.tags.get("hpo.status") != "lost"]
    assert sorted(c.data.tags["hpo.trial_id"] for c in live) == sorted(t["trial_id"] for t in trials)
    by_id = {t["trial_id"]: t for t in trials}
    for run in live:
        steps = [m.step for m in client.get_metric_history(run.info.run_id, "val_accuracy")]
        epochs = by_id[run.data.tags["hpo.trial_id"]]["epochs"]
        assert steps == list(range(1, epochs + 1)), (run.data.tags["hpo.trial_id"], steps)  # each epoch once

    from hpo import _env

    _env.apply()
    import mlflow

    mlflow.set_tracking_uri(summary["mlflow"]["uri"])
    model = mlflow.pyfunc.load_model(f"models:/two-nodes/{summary['mlflow']['model']['version']}")
    assert np.asarray(model.predict(np.zeros((2, 64), dtype=np.float32))).shape == (2, 10)

    # Another driver with nothing on its disk reads the sweep back from the bucket.
    other = tmp_path / "elsewhere"
    other.mkdir()
    report = subprocess.run([sys.executable, "-m", "hpo.cli.main", "report", "two-nodes", "--storage", storage],
                            cwd=other, capture_output=True, text=True, env=cluster.env(), timeout=120)
    assert report.returncode == 0 and summary["best"]["trial_id"] in report.stdout, report.stderr[-2000:]


def test_a_minute_long_storage_stall_mid_trial_fails_nothing(cluster):
    """The S3 server frozen for 60 s once the first trial has checkpointed: every trial still ends well."""
    name = sweep_file(cluster, "stall", trials=2, epochs=8, train="builtin:digits", validation_fraction=0.2)
    storage = f"s3://{cluster.bucket}/runs"
    cmd = [sys.executable, "-m", "hpo.cli.main", "tune", name, "--address", cluster.address, "--storage", storage]
    sweep = subprocess.Popen(cmd, cwd=cluster.disk, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env=cluster.env(), start_new_session=True)
    server = cluster.moto.proc.pid
    try:
        deadline = time.time() + 400
        while time.time() < deadline and sweep.poll() is None and not any(
                "/checkpoint_000001/" in k for k in cluster.moto.keys(cluster.bucket, "runs/stall/")):
            time.sleep(0.5)
        assert sweep.poll() is None, f"the sweep ended before the stall: {sweep.stdout.read()[-3000:]}"
        os.kill(server, signal.SIGSTOP)
        time.sleep(60)
        os.kill(server, signal.SIGCONT)
        thawed = time.time()
        output, _ = sweep.communicate(timeout=400)
    finally:
        os.kill(server, signal.SIGCONT)
        if sweep.poll() is None:
            os.killpg(sweep.pid, signal.SIGKILL)
    assert sweep.returncode == 0, output[-3000:]
    assert "storage unreachable since" in output, output[-3000:]  # the view said why no epoch came

    state = next((cluster.disk / "hpo_runs" / "_shared").glob("s3-*")) / "stall"
    summary = json.loads((state / "summary.json").read_text())
    assert [t["status"] in ("completed", "stopped_early") for t in summary["trials"]] == [True, True], summary["trials"]
    # A checkpoint written after the stall is in the bucket.
    listing = cluster.moto.client().list_objects_v2(Bucket=cluster.bucket, Prefix="runs/stall/")["Contents"]
    assert any("/checkpoint_" in o["Key"] and o["LastModified"].timestamp() >= thawed - 1 for o in listing)

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=summary["mlflow"]["uri"])
    by_id = {t["trial_id"]: t for t in summary["trials"]}
    children = client.search_runs(
        [summary["mlflow"]["experiment_id"]],
        filter_string=f"tags.mlflow.parentRunId = '{summary['mlflow']['parent_run_id']}'",
    )
    assert sorted(c.data.tags["hpo.trial_id"] for c in children) == sorted(by_id)
    for run in children:
        steps = [m.step for m in client.get_metric_history(run.info.run_id, "val_accuracy")]
        trial = by_id[run.data.tags["hpo.trial_id"]]
        reported = {d: [(r["epoch"], r["resumed_from_epoch"]) for r in rows]
                    for d, rows in _results(cluster, "stall").items()}
        assert steps == list(range(1, trial["epochs"] + 1)), (steps, trial, reported, output[-3000:])  # each epoch once


def _results(cluster: TwoNodes, name: str) -> dict[str, list[dict]]:
    """Every trial's ``result.json`` rows, read from the bucket: trial directory → one row per report."""
    client = cluster.moto.client()
    out: dict[str, list[dict]] = {}
    for key in cluster.moto.keys(cluster.bucket, f"runs/{name}/"):
        if key.endswith("/result.json"):
            body = client.get_object(Bucket=cluster.bucket, Key=key)["Body"].read().decode()
            out[key.split("/")[2]] = [json.loads(line) for line in body.splitlines() if line.strip()]
    return out


def test_a_lost_worker_node_costs_a_trial_only_its_epochs_since_the_last_checkpoint(cluster):
    """The worker node dies mid-trial (its whole process tree SIGKILLed); a new node joins 10 s later.

    Last in this module: the fixture's worker node is a new one after it.
    """
    name = sweep_file(cluster, "node-loss", trials=2, epochs=8, train="builtin:digits", validation_fraction=0.2)
    storage = f"s3://{cluster.bucket}/runs"
    cmd = [sys.executable, "-m", "hpo.cli.main", "tune", name, "--address", cluster.address, "--storage", storage]
    sweep = subprocess.Popen(cmd, cwd=cluster.disk, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True,
                             env=cluster.env(), start_new_session=True)
    try:
        deadline = time.time() + 400
        while time.time() < deadline and sweep.poll() is None and not any(
                "/checkpoint_000001/" in k for k in cluster.moto.keys(cluster.bucket, "runs/node-loss/")):
            time.sleep(0.5)
        assert sweep.poll() is None, f"the sweep ended before the node loss: {sweep.stdout.read()[-3000:]}"
        cluster.lose_worker()
        time.sleep(10)
        cluster.replace_worker()
        output, _ = sweep.communicate(timeout=400)
    except subprocess.TimeoutExpired:
        os.killpg(sweep.pid, signal.SIGKILL)
        pytest.fail(f"the sweep did not end after the node loss: {sweep.communicate()[0][-4000:]}")
    finally:
        if sweep.poll() is None:
            os.killpg(sweep.pid, signal.SIGKILL)
    assert sweep.returncode == 0, output[-4000:]

    state = next((cluster.disk / "hpo_runs" / "_shared").glob("s3-*")) / "node-loss"
    summary = json.loads((state / "summary.json").read_text())
    assert [t["status"] in ("completed", "stopped_early") for t in summary["trials"]] == [True, True], summary["trials"]
    # The trial on the lost node went on from its last checkpoint: the epochs it trained again are those
    # reported after it, without one (a checkpoint per epoch, unless rank 0 went on while one was uploading).
    resumed = {d: rows for d, rows in _results(cluster, "node-loss").items() if any(
        r.get("resumed_from_epoch") for r in rows)}
    assert len(resumed) == 1, output[-3000:]
    [rows] = resumed.values()
    first = next(i for i, r in enumerate(rows) if r["resumed_from_epoch"])
    start = rows[first]["resumed_from_epoch"]
    lost = {r["epoch"]: r["checkpointed"] for r in rows[:first]}
    assert start >= 1 and lost[start] is True, rows  # the epoch it resumed from had a checkpoint
    # None later did, except possibly the last epoch reported before the loss: Tune registers a reported
    # checkpoint in a second round trip to the trial's actor (a save after the result is processed), and a
    # node lost between the two takes that one registration with it.
    later = [epoch for epoch, checkpointed in lost.items() if epoch > start and checkpointed]
    assert later in ([], [max(lost)]), rows

    from mlflow.tracking import MlflowClient

    client = MlflowClient(tracking_uri=summary["mlflow"]["uri"])
    by_id = {t["trial_id"]: t for t in summary["trials"]}
    children = client.search_runs(
        [summary["mlflow"]["experiment_id"]],
        filter_string=f"tags.mlflow.parentRunId = '{summary['mlflow']['parent_run_id']}'",
    )
    assert sorted(c.data.tags["hpo.trial_id"] for c in children) == sorted(by_id)  # the same run continued
    for run in children:
        steps = [m.step for m in client.get_metric_history(run.info.run_id, "val_accuracy")]
        trial = by_id[run.data.tags["hpo.trial_id"]]
        reported = {d: [(r["epoch"], r["resumed_from_epoch"]) for r in rows]
                    for d, rows in _results(cluster, "node-loss").items()}
        assert steps == list(range(1, trial["epochs"] + 1)), (steps, trial, reported, output[-3000:])  # each epoch once
