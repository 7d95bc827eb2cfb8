"""The trial runtime for real: checkpoints and resume after a SIGKILLed worker, warm workers, cleanup."""

from __future__ import annotations

import csv
import json
import os
import signal
import subprocess
import time
from pathlib import Path

import psutil
import pytest
import yaml

from tests.conftest import HPO, ROOT

pytestmark = pytest.mark.slow
SMALL = ROOT / "tests" / "integration" / "sweeps" / "small.yaml"


def horovod_workers(root: psutil.Process) -> list[psutil.Process]:
    """Live Horovod worker actor processes below ``root``."""
    found = []
    for proc in root.children(recursive=True):
        try:
            if "BaseHorovodWorker" in " ".join(proc.cmdline()) and proc.status() != psutil.STATUS_ZOMBIE:
                found.append(proc)
        except psutil.Error:
            continue
    return found


def progress(trial_dir: Path) -> list[dict[str, str]]:
    path = trial_dir / "progress.csv"
    if not path.exists():
        return []
    with path.open() as f:
        return list(csv.DictReader(f))


def test_sigkilled_worker_resumes_from_its_checkpoint(tmp_path, write_sweep):
    sweep = yaml.safe_load(SMALL.read_text())
    sweep.update(name="crash")
    sweep["search"].update(num_samples=1, max_concurrent=1)
    sweep["scheduler"] = {"type": "fifo"}
    sweep["trial"].update(max_epochs=8, batch_size_per_worker=8, max_failures=2, early_stopping={"patience": 8})
    sweep["space"] = {"learning_rate": {"type": "categorical", "choices": [0.002]}}
    path = write_sweep(sweep)
    proc = subprocess.Popen(
        [HPO, "tune", str(path), "--storage", str(tmp_path / "runs")],
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
        start_new_session=True,
    )
    killed_at = None
    try:
        deadline = time.time() + 300
        while killed_at is None and time.time() < deadline and proc.poll() is None:
            for trial_dir in (tmp_path / "runs" / "crash").glob("hpo_trial_*"):
                rows = progress(trial_dir)
                if len(rows) >= 2:
                    victims = horovod_workers(psutil.Process(proc.pid))
                    if victims:
                        victims[-1].send_signal(signal.SIGKILL)
                        killed_at = (trial_dir, len(rows))
                        break
            time.sleep(0.05)
        _, err = proc.communicate(timeout=400)
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
    assert killed_at is not None, "never saw a trial reach epoch 2"
    assert proc.returncode == 0, err[-3000:]
    summary = json.loads((tmp_path / "runs" / "crash" / "summary.json").read_text())
    assert [t["status"] for t in summary["trials"]] == ["completed"]
    assert all(t["epochs"] == 8 for t in summary["trials"])
    trial_dir, seen = killed_at
    rows = progress(trial_dir)
    epochs = [int(r["epoch"]) for r in rows]
    resumed = [int(r["resumed_from_epoch"]) for r in rows]
    assert max(resumed) >= seen, f"resumed from {max(resumed)}, but {seen} epochs were checkpointed"
    first_resumed = resumed.index(max(resumed))
    assert epochs[first_resumed] == max(resumed) + 1  # continued, not restarted from epoch 1
    assert sorted(set(epochs)) == list(range(1, 9)) and epochs[-1] == 8
    assert all((Path(t["checkpoint"]) / "model.keras").is_file() for t in summary["trials"])


@pytest.fixture
def own_ray(in_tmp):
    """A local Ray started by the test, so it outlives the sweep and its processes can be listed."""
    import ray

    from hpo.ray_session import start_ray

    assert start_ray(num_cpus=2)
    yield
    ray.shutdown()


def test_warm_workers_reused_and_nothing_left_behind(own_ray, in_tmp):
    import hpo

    sweep = yaml.safe_load(SMALL.read_text())
    sweep.update(name="warm")
    sweep["search"].update(num_samples=6)
    config = hpo.SweepConfig.model_validate(sweep)
    result = hpo.tune(config, storage=in_tmp / "runs")
    trials = result.trials
    assert len(trials) == 6 and set(trials["status"]) <= {"completed", "stopped_early"}
    firsts = [progress(d)[0] for d in (in_tmp / "runs" / "warm").glob("hpo_trial_*")]
    warm = [r for r in firsts if r["warm_start"] == "True"]
    cold = [r for r in firsts if r["warm_start"] == "False"]
    assert len(cold) <= 2 < len(warm) + len(cold)  # one cold start per concurrent slot
    assert warm, "no trial reused warm workers"
    assert max(float(r["startup_s"]) for r in warm) < min(float(r["startup_s"]) for r in cold)
    # Every worker is gone soon after the sweep, while Ray itself keeps running.
    me = psutil.Process()
    deadline = time.time() + 20
    while horovod_workers(me) and time.time() < deadline:
        time.sleep(0.5)
    assert horovod_workers(me) == []
    # Rank 0 read back the learning rate its optimizer really uses: the searched rate x 2 workers.
    audits = list((in_tmp / "runs" / "warm").glob("*/checkpoint_*/rows.json"))
    assert audits
    for audit in audits:
        params = json.loads((audit.parent.parent / "params.json").read_text())
        for rank in json.loads(audit.read_text()):
            assert rank["learning_rate"] == pytest.approx(2 * params["learning_rate"], rel=1e-5)


def test_horovod_rendezvous_listens_on_one_address_only(own_ray):
    """Horovod's unauthenticated rendezvous: loopback on a local Ray hpo started, else the node's address."""
    import ray

    @ray.remote(num_cpus=0)
    def rendezvous_listeners(host: str | None) -> tuple[str, list[str]]:
        from hpo import compat
        from hpo.trial.backend import HorovodBackend

        group = HorovodBackend(2, 0.5, 0, rendezvous_host=host)  # started: both ranks reached the rendezvous
        try:
            port = group.executor.adapter.coordinator.global_rendezv_port
            listening = [c.laddr.ip for c in psutil.Process().net_connections("tcp")
                         if c.status == psutil.CONN_LISTEN and c.laddr.port == port]
            return compat.ray_node_address(), listening
        finally:
            group.release(False)

    _, listening = ray.get(rendezvous_listeners.remote("127.0.0.1"), timeout=300)
    assert listening == ["127.0.0.1"]
    node, listening = ray.get(rendezvous_listeners.remote(None), timeout=300)
    assert listening == [node] and node not in ("0.0.0.0", "")
