"""A real autoscaling cluster on this machine: Ray's fake_multinode provider + a real GPU-shaped sweep.

The head (no GPU) is started from cluster/local-fake.yaml with ``ray start --head --block`` as a child
process in its own session; every process it spawned (fake nodes included) is killed by PID at the end.
Never ``ray stop``: other Ray instances may run on the machine.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import datetime
from pathlib import Path

import psutil
import pytest
import yaml

from tests.conftest import ROOT, ensure_ray_token, kill_tree

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

FAKE = ROOT / "cluster" / "local-fake.yaml"
SWEEP = ROOT / "tests" / "integration" / "sweeps" / "fake_gpu.yaml"
RAY = str(Path(sys.executable).with_name("ray"))
RESULTS = ROOT / "benchmarks" / "results" / "cluster.json"
HEAD_CPUS = 2


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class FakeCluster:
    """A running fake-multinode head and what the test needs to observe it."""

    head: subprocess.Popen
    address: str
    config_path: Path
    temp_dir: Path
    idle_timeout_s: float
    samples: list[tuple[float, int]] = field(default_factory=list)

    def fake_nodes(self) -> int:
        """Fake worker nodes alive now: raylets under the head other than the head's own."""
        try:
            procs = psutil.Process(self.head.pid).children(recursive=True)
        except psutil.NoSuchProcess:
            return 0
        raylets = 0
        for proc in procs:
            try:
                if proc.name() == "raylet":
                    raylets += 1
            except psutil.NoSuchProcess:
                continue
        return max(0, raylets - 1)

    def monitor_log(self) -> str:
        logs = list(self.temp_dir.glob("session_*/logs/monitor.log"))
        return logs[0].read_text() if logs else ""


@pytest.fixture(scope="module")
def fake_cluster() -> Iterator[FakeCluster]:
    """Starts cluster/local-fake.yaml on free ports; stops exactly the processes it started."""
    ensure_ray_token(RAY)  # before the head: fake nodes the autoscaler starts then share it from the start
    temp_dir = Path(tempfile.mkdtemp(prefix="hpo-ray-", dir="/tmp"))  # short: Ray's socket paths are limited
    port = free_port()
    config = yaml.safe_load(FAKE.read_text())
    config["provider"]["gcs_address"] = f"127.0.0.1:{port}"
    config_path = temp_dir / "cluster.yaml"
    config_path.write_text(yaml.safe_dump(config, sort_keys=False))
    env = {
        **os.environ,
        "RAY_FAKE_CLUSTER": "1",
        "AUTOSCALER_UPDATE_INTERVAL_S": "1",
        "RAY_DISABLE_PYARROW_VERSION_CHECK": "1",
        "TF_USE_LEGACY_KERAS": "1",
        "RAY_USAGE_STATS_ENABLED": "0",
    }
    cmd = [
        RAY, "start", "--head", "--block",
        f"--port={port}",
        f"--num-cpus={HEAD_CPUS}", "--num-gpus=0",
        f"--temp-dir={temp_dir}",
        f"--autoscaling-config={config_path}",
        f"--ray-client-server-port={free_port()}",
        f"--dashboard-port={free_port()}",
        f"--dashboard-agent-listen-port={free_port()}",
        "--include-dashboard=false",
        "--disable-usage-stats",
    ]  # fmt: skip
    log = (temp_dir / "head.log").open("w")
    head = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    cluster = FakeCluster(head, f"127.0.0.1:{port}", config_path, temp_dir, config["idle_timeout_minutes"] * 60)
    try:
        deadline = time.time() + 60
        while "Autoscaler status" not in cluster.monitor_log():
            if head.poll() is not None or time.time() > deadline:
                pytest.fail(f"fake cluster did not start: {(temp_dir / 'head.log').read_text()[-3000:]}")
            time.sleep(0.5)
        yield cluster
    finally:
        kill_tree([head.pid], str(temp_dir))
        head.wait(timeout=10)
        log.close()
        shutil.rmtree(temp_dir, ignore_errors=True)


def status_blocks(monitor_log: str) -> list[tuple[float, str]]:
    """(time, text) of every autoscaler status block in monitor.log."""
    blocks = []
    parts = re.split(r"======== Autoscaler status: (\S+ \S+) ========", monitor_log)
    for stamp, text in zip(parts[1::2], parts[2::2], strict=True):
        body = text.split("\n20", 1)[0]  # up to the next log line
        blocks.append((datetime.fromisoformat(stamp).timestamp(), body))
    return blocks


def section(block: str, name: str) -> str:
    match = re.search(rf"{name}:\n(.*?)(?:\n[A-Z][\w ]+:\n|\n-{{5,}}|\Z)", block, re.DOTALL)
    return match.group(1) if match else ""


def sweep_variant(tmp_path: Path, **trial: object) -> Path:
    data = yaml.safe_load(SWEEP.read_text())
    data["trial"].update(trial)
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def hpo_env(**extra: str) -> dict[str, str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]), **extra}
    env.pop("RAY_AUTH_MODE", None)  # hpo must find the Ray token itself when one exists
    return env


def trial_errors(storage: Path) -> str:
    """Every failed trial's error (Tune's error.txt), for an assertion message."""
    out = [f"\n--- {path.parent.name}\n{path.read_text()[-2500:]}" for path in sorted(storage.glob("*/*/error.txt"))]
    for path in storage.glob("*/summary.json"):
        out += [f"\n{t['trial_id']}: {t.get('error')}" for t in json.loads(path.read_text())["trials"]]
    return "".join(out) or "\n(no error.txt or summary.json under the storage)"


def test_impossible_trial_fails_fast_against_the_autoscaler_node_types(fake_cluster: FakeCluster, tmp_path: Path):
    # No node type has 3 GPUs: exit 2 before any node is launched. An explicit address (not auto).
    started = time.time()
    proc = subprocess.run(
        [sys.executable, "-m", "hpo.cli.main", "tune", str(sweep_variant(tmp_path, gpus_per_worker=3)),
         "--address", fake_cluster.address, "--storage", str(tmp_path / "runs")],
        cwd=tmp_path, env=hpo_env(HPO_CLUSTER_CONFIG=str(fake_cluster.config_path)),
        capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(
        f"error: {tmp_path}/sweep.yaml: trial.gpus_per_worker: a trial needs 2 workers x {{CPU: 0.5, GPU: 3}} but "
        "the cluster can never hold more than 0 "
    ), proc.stderr
    assert "launchable node types: gpu.x2 {CPU: 2, GPU: 2} x2, gpu.x1 {CPU: 1, GPU: 1} x1" in lines[0]
    assert time.time() - started < 120
    assert fake_cluster.fake_nodes() == 0
    assert "Adding" not in fake_cluster.monitor_log()


def test_gpu_trial_on_local_ray_without_gpus_fails_fast(tmp_path: Path):
    # No address: hpo starts its own local Ray (no GPU here, no autoscaler): today's node is all there is.
    proc = subprocess.run(
        [sys.executable, "-m", "hpo.cli.main", "tune", str(sweep_variant(tmp_path, gpus_per_worker=1)),
         "--storage", str(tmp_path / "runs")],
        cwd=tmp_path, env=hpo_env(), capture_output=True, text=True, timeout=180,
    )  # fmt: skip
    assert proc.returncode == 2, proc.stdout[-2000:] + proc.stderr[-3000:]
    assert "trial.gpus_per_worker: a trial needs 2 workers x {CPU: 0.5, GPU: 1} but the cluster can never hold " \
        "more than 0 (nodes: node " in proc.stderr
    assert "(a local Ray: this machine is all there is; use --address for a cluster)" in proc.stderr


def test_gpu_sweep_scales_fake_gpu_nodes_up_and_down(fake_cluster: FakeCluster, tmp_path: Path):
    cluster = fake_cluster
    assert cluster.fake_nodes() == 0, "min_workers is 0: no GPU node before any trial needs one"
    stop = threading.Event()

    def sample() -> None:
        while not stop.is_set():
            cluster.samples.append((time.time(), cluster.fake_nodes()))
            time.sleep(0.5)

    sampler = threading.Thread(target=sample, daemon=True)
    sampler.start()
    # What `ray job submit` gives an entrypoint: RAY_ADDRESS, and `--address auto` in the command.
    env = hpo_env(RAY_ADDRESS=cluster.address, HPO_CLUSTER_CONFIG=str(cluster.config_path))
    sweep_started = time.time()
    try:
        proc = subprocess.run(
            [sys.executable, "-m", "hpo.cli.main", "tune", str(SWEEP), "--address", "auto",
             "--storage", str(tmp_path / "runs")],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=420,
        )  # fmt: skip
        sweep_ended = time.time()
        assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:] + trial_errors(tmp_path / "runs")

        # All trials completed, each one on fake GPU nodes (the head has no GPU, so nowhere else).
        summary = json.loads((tmp_path / "runs" / "fake-gpu" / "summary.json").read_text())
        assert [t["status"] for t in summary["trials"]] == ["completed"] * 3
        assert all(t["epochs"] == 2 for t in summary["trials"])
        peak = max(n for _, n in cluster.samples)
        assert peak >= 1, "no fake GPU node was launched"

        # Removed after the idle timeout.
        deadline = time.time() + cluster.idle_timeout_s + 60
        while cluster.fake_nodes() > 0 and time.time() < deadline:
            time.sleep(0.5)
        cluster.samples.append((time.time(), cluster.fake_nodes()))
        assert cluster.samples[-1][1] == 0, "fake GPU nodes were not removed after the idle timeout"
    finally:
        stop.set()
        sampler.join(timeout=5)

    log = cluster.monitor_log()
    (tmp_path / "monitor.log").write_text(log)  # kept with the test's tmp dir for a look afterwards
    launched = re.findall(r"Adding (\d+) node\(s\) of type (gpu\.\w+)", log)
    removals = re.findall(r"Removing (\d+) nodes of type (gpu\.\w+) \(([^)]*)\)", log)
    removed = [(n, t) for n, t, reason in removals if reason == "idle"]
    assert launched and {t for _, t in launched} <= {"gpu.x1", "gpu.x2"}
    assert removed, f"the autoscaler did not report removing idle GPU nodes: {removals}"
    assert sum(int(n) for n, _, _ in removals) == sum(int(n) for n, _ in launched), (launched, removals)

    # Scale-up: first status that shows a pending GPU demand → first status with a GPU node active.
    blocks = status_blocks(log)
    demand_at = next(t for t, b in blocks if "GPU" in section(b, "Pending Demands"))
    active_at = next(t for t, b in blocks if t >= demand_at and "gpu." in section(b, "Active"))
    # Scale-down: the last trial's last result → no fake node process left (includes the idle timeout).
    last_result_at = max(
        json.loads(path.read_text().strip().splitlines()[-1])["timestamp"]
        for path in (tmp_path / "runs" / "fake-gpu").glob("*/result.json")
    )
    last_busy_sample = max(t for t, n in cluster.samples if n > 0)
    scaled_down_at = min(t for t, n in cluster.samples if t > last_busy_sample)
    times = {
        "scale_up_s": round(active_at - demand_at, 2),
        "first_node_process_after_sweep_start_s": round(
            next(t for t, n in cluster.samples if n > 0) - sweep_started, 2
        ),
        "scale_down_after_last_trial_s": round(scaled_down_at - last_result_at, 2),
        "idle_timeout_s": cluster.idle_timeout_s,
        "sweep_wall_s": round(sweep_ended - sweep_started, 2),
        "peak_fake_gpu_nodes": peak,
        "nodes_launched": [f"{n}x {t}" for n, t in launched],
        "nodes_removed": [f"{n}x {t} ({reason})" for n, t, reason in removals],
        "trials": len(summary["trials"]),
    }
    print("\ncluster timings:", json.dumps(times))
    if os.environ.get("HPO_STORE_TIMINGS") == "1":  # recorded on request, on a quiet machine: not every run
        RESULTS.write_text(json.dumps(times, indent=2) + "\n")
    # Not before the idle timeout: the last trial's node was busy until its last result (a 1 s timestamp).
    assert times["scale_down_after_last_trial_s"] >= cluster.idle_timeout_s - 1.5, times


#: Run by the driver of :func:`test_a_deadline_request_brings_a_node_up_before_any_trial_asks`: what
#: ``hpo tune --deadline`` does on a cluster once its plan recommends nodes, then what it does at the end.
REQUEST = """
import json, sys, time
import ray
from hpo import deadline
from hpo.ray_session import start_ray
start_ray(sys.argv[1])
capacity = deadline.cluster_capacity()
print("BUNDLES", json.dumps(deadline.request_nodes({"gpu.x2": 1}, capacity)), flush=True)
end = time.time() + 120
while time.time() < end and not any(n["Alive"] and n["Resources"].get("GPU") == 2 for n in ray.nodes()):
    time.sleep(0.5)
print("UP", any(n["Alive"] and n["Resources"].get("GPU") == 2 for n in ray.nodes()), flush=True)
deadline.release(deadline.DeadlineRun(0.0, 0.0, None, requested={"gpu.x2": 1}))
time.sleep(3)  # a status round of the autoscaler (every second here) after the withdrawal
"""


def test_a_deadline_request_brings_a_node_up_before_any_trial_asks(fake_cluster: FakeCluster, tmp_path: Path):
    """The bundles hpo asks the autoscaler for launch the planned node type with no task or actor waiting,
    and hpo's release withdraws the request. Last in the module: the node is left to the fixture's teardown."""
    assert fake_cluster.fake_nodes() == 0
    began, earlier_log = time.time(), len(fake_cluster.monitor_log())  # the module's other tests logged before
    proc = subprocess.run(
        [sys.executable, "-c", REQUEST, fake_cluster.address], cwd=tmp_path, capture_output=True, text=True,
        env=hpo_env(HPO_CLUSTER_CONFIG=str(fake_cluster.config_path)), timeout=240,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    bundles = json.loads(proc.stdout.split("BUNDLES", 1)[1].splitlines()[0])
    assert bundles == [{"CPU": 2.0, "GPU": 2.0, "object_store_memory": 200000000.0}]  # one gpu.x2, as declared
    assert "UP True" in proc.stdout, proc.stdout[-2000:] + proc.stderr[-3000:]

    log = fake_cluster.monitor_log()[earlier_log:]
    assert re.findall(r"Adding (\d+) node\(s\) of type (gpu\.\w+)", log) == [("1", "gpu.x2")]
    blocks = [(t, b) for t, b in status_blocks(log) if t >= began - 1]
    asked = [t for t, b in blocks if "'GPU': 2.0" in section(b, "From request_resources")]
    assert asked, "no autoscaler status showed the request"
    # Nothing but the request asked for it: no task or actor demand at any time.
    assert all("pending tasks/actors" not in section(b, "Pending Demands") for _, b in blocks)
    # Withdrawn: a status after the last one that showed the request shows none.
    assert any(t > asked[-1] and section(b, "From request_resources").strip() == "(none)" for t, b in blocks)
