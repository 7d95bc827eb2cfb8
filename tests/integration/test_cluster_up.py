"""``hpo cluster up/down`` and the autostop on a real autoscaling cluster: Ray's fake_multinode provider.

``hpo cluster up`` starts the head of a copy of cluster/local-fake.yaml on a free port (a ``ray start --head
--block`` in its own session, recorded under a temporary ``HPO_STATE_DIR``); the queue lives in a temporary
storage and is written through the queue's own store, as the dispatcher writes it. Every process a test
started is killed by PID at the end; never ``ray stop``.
"""

from __future__ import annotations

import json
import os
import socket
import subprocess
import sys
import textwrap
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest
import yaml

from hpo.queue.entry import EntryState, QueueEntry
from hpo.queue.store import QueueStore
from tests.conftest import ROOT, ensure_ray_token, kill_tree

pytestmark = [pytest.mark.cluster, pytest.mark.slow]

FAKE = ROOT / "cluster" / "local-fake.yaml"
RAY = str(Path(sys.executable).with_name("ray"))


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Place:
    """One test's cluster file, state directory and storage, and how to run ``hpo`` against them."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.port = free_port()
        config = yaml.safe_load(FAKE.read_text())
        config["provider"]["gcs_address"] = f"127.0.0.1:{self.port}"
        self.file = root / "cluster.yaml"
        self.file.write_text(yaml.safe_dump(config, sort_keys=False))
        self.state = root / "state"
        self.storage = root / "runs"
        self.store = QueueStore(self.storage)
        self.env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
                    "HPO_STATE_DIR": str(self.state), "HPO_AUTOSTOP_POLL_S": "0.5",
                    "AUTOSCALER_UPDATE_INTERVAL_S": "1", "RAY_USAGE_STATS_ENABLED": "0"}
        self.env.pop("HPO_STORAGE", None)

    def hpo(self, *args: str, timeout: float = 240) -> subprocess.CompletedProcess:
        return subprocess.run([sys.executable, "-m", "hpo.cli.main", *map(str, args)], cwd=self.root, env=self.env,
                              capture_output=True, text=True, timeout=timeout)

    def record(self) -> dict | None:
        found = list((self.state / "clusters").glob(f"*-{self.port}.json"))
        return json.loads(found[0].read_text()) if found else None

    def heads(self) -> list[psutil.Process]:
        """``ray start --head`` processes of this test's port."""
        out = []
        for proc in psutil.process_iter(["cmdline"]):
            cmd = " ".join(proc.info["cmdline"] or [])
            if "--head" in cmd and f"--port={self.port}" in cmd and "--block" in cmd:
                out.append(proc)
        return out

    def watchers(self) -> list[psutil.Process]:
        out = []
        for proc in psutil.process_iter(["cmdline"]):
            cmd = " ".join(proc.info["cmdline"] or [])
            if "hpo.cluster.autostop" in cmd and str(self.file) in cmd:
                out.append(proc)
        return out

    def status(self) -> dict:
        path = self.storage / "_cluster" / "autostop.json"
        return json.loads(path.read_text()) if path.exists() else {}

    def stop_everything(self) -> None:
        """Kills what this test started, by PID: the head's tree, its Ray processes, the watcher."""
        record = self.record()
        pids = [p.pid for p in self.heads() + self.watchers()]
        kill_tree(pids, record["temp_dir"] if record else f"--port={self.port}")


@pytest.fixture
def place(tmp_path: Path) -> Iterator[Place]:
    ensure_ray_token(RAY)
    here = Place(tmp_path)
    try:
        yield here
    finally:
        here.stop_everything()


DRIVER = textwrap.dedent("""
    import pathlib, sys, time
    import ray
    ray.init(address=sys.argv[1], log_to_driver=False, logging_level="ERROR")

    @ray.remote(num_cpus=1)
    def hold(started, release):
        pathlib.Path(started).touch()
        while not pathlib.Path(release).exists():
            time.sleep(0.2)
        return "released"

    print(ray.get(hold.remote(sys.argv[2], sys.argv[3])), flush=True)
""")


def test_up_twice_at_once_starts_one_cluster_a_second_up_leaves_a_running_job_alone_and_down_waits(place: Place):
    # Two `hpo cluster up` at the same moment: one starts the head, the other waits and finds it up.
    with ThreadPoolExecutor(2) as pool:
        runs = list(pool.map(lambda _: place.hpo("cluster", "up", place.file, "--storage", place.storage), [0, 1]))
    for run in runs:
        assert run.returncode == 0, run.stdout[-2000:] + run.stderr[-2000:]
    outs = sorted(r.stdout for r in runs)
    assert sum("starting (fake_multinode)" in o for o in outs) == 1, outs
    assert sum("already up; Ray not restarted and nothing synced" in o for o in outs) == 1, outs
    [head] = place.heads()

    # A Ray job runs a task on the cluster; `hpo cluster up` again leaves Ray (and the task) alone.
    started, release = place.root / "started", place.root / "release"
    driver = subprocess.Popen([sys.executable, "-c", DRIVER, f"127.0.0.1:{place.port}", str(started), str(release)],
                              env={**place.env, "RAY_AUTH_MODE": "token"}, stdout=subprocess.PIPE,
                              stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 120
        while not started.exists():
            assert driver.poll() is None and time.time() < deadline, driver.communicate()[1][-3000:]
            time.sleep(0.2)
        again = place.hpo("cluster", "up", place.file, "--storage", place.storage)
        assert again.returncode == 0 and "already up" in again.stdout, again.stdout + again.stderr
        assert [p.pid for p in place.heads()] == [head.pid]
        release.touch()
        out, err = driver.communicate(timeout=120)
        assert driver.returncode == 0 and out.strip() == "released", err[-3000:]
    finally:
        if driver.poll() is None:
            driver.kill()

    # A running sweep on the queue: `down` refuses and leaves the head; `--force` tears it down.
    place.store.put(QueueEntry(name="sweep-a", submitted_at=time.time(), state=EntryState.RUNNING,
                               started_at=time.time()))
    refused = place.hpo("cluster", "down", place.file, "--storage", place.storage)
    assert refused.returncode == 1, refused.stdout + refused.stderr
    assert refused.stderr.strip().splitlines() == [
        "error: cluster hpo-local-fake: 1 sweep running (sweep-a); not tearing it down: wait for them "
        "(hpo queue), cancel them (hpo cancel NAME) or pass --force"]
    assert [p.pid for p in place.heads()] == [head.pid]
    forced = place.hpo("cluster", "down", place.file, "--storage", place.storage, "--force")
    assert forced.returncode == 0 and "cluster hpo-local-fake: down" in forced.stdout, forced.stdout + forced.stderr
    assert place.heads() == [] and place.record() is None
    assert not psutil.pid_exists(head.pid) or psutil.Process(head.pid).status() == psutil.STATUS_ZOMBIE


def test_autostop_waits_while_a_sweep_is_queued_and_tears_down_after_the_idle_time(place: Place):
    place.store.put(QueueEntry(name="sweep-q", submitted_at=time.time()))
    up = place.hpo("cluster", "up", place.file, "--storage", place.storage, "--autostop", "2s")
    assert up.returncode == 0, up.stdout[-2000:] + up.stderr[-2000:]
    assert "autostop: the cluster is torn down 2s after the queue" in up.stdout
    settings = place.store.settings()
    assert settings.autostop_s == 2.0 and settings.cluster_file == str(place.file) and settings.max_running == 2
    [head] = place.heads()
    [watcher] = place.watchers()

    # Queued: several times the autostop passes, and nothing is torn down.
    deadline = time.time() + 60
    while place.status().get("state") != "busy" and time.time() < deadline:
        time.sleep(0.2)
    time.sleep(4 * 2.0)
    assert place.status()["state"] == "busy"
    assert [p.pid for p in place.heads()] == [head.pid]

    # A second `up` finds the watcher running and starts no other.
    place.hpo("cluster", "up", place.file, "--storage", place.storage, "--autostop", "2s")
    assert [p.pid for p in place.watchers()] == [watcher.pid]

    # The sweep ends: the cluster is torn down, head and all, once the queue has been empty for 2 s.
    ended = time.time()
    place.store.put(QueueEntry(name="sweep-q", submitted_at=ended - 10, state=EntryState.SUCCEEDED,
                               started_at=ended - 5, ended_at=ended))
    deadline = time.time() + 120
    while (place.heads() or place.status().get("state") != "torn_down") and time.time() < deadline:
        time.sleep(0.5)
    status = place.status()
    assert status.get("state") == "torn_down" and place.heads() == [], status
    assert status["teardown_started_at"] >= ended + 2.0 and status["idle_since"] >= ended
    assert place.record() is None
    watcher.wait(timeout=30)  # the watcher ends after the teardown
