"""Queue empty → the autostop starts the teardown: how long after the autostop time?

Each round starts the local fake cluster with ``hpo cluster up cluster/local-fake.yaml --autostop A
--storage DIR`` (a copy of the file on a free port, a temporary ``HPO_STATE_DIR``), with one sweep
``running`` on the queue (written through the queue's store, as the dispatcher writes it), so the watcher
is busy. After a random wait (so the queue empties at a random point of the watcher's poll cycle) the
sweep ends (``succeeded``, ``ended_at`` = now): from then on the queue is empty. Figures per round, from
the watcher's own status file (``STORAGE/_cluster/autostop.json``) and the processes:

- ``teardown_after_empty_s``: the sweep's end → ``teardown_started_at``; the target is the autostop time
  plus at most 60 s, i.e. ``over_autostop_s`` ≤ 60 (the watcher polls every 30 s by default);
- ``head_gone_after_empty_s``: the sweep's end → no head process left (the fake head's teardown).

Writes ``benchmarks/results/autostop.json``. Never asserts on time. The machine this ran on was shared
with other jobs (its load is recorded): the figures carry that noise.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import psutil
import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from benchmarks._report import write_report  # noqa: E402
from hpo.queue.entry import EntryState, QueueEntry  # noqa: E402
from hpo.queue.store import QueueStore  # noqa: E402


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def heads(port: int) -> list[int]:
    out = []
    for proc in psutil.process_iter(["cmdline"]):
        cmd = " ".join(proc.info["cmdline"] or [])
        if "--head" in cmd and f"--port={port}" in cmd and "--block" in cmd:
            out.append(proc.pid)
    return out


def one_round(work: Path, autostop_s: float, poll_s: float | None) -> dict:
    port = free_port()
    config = yaml.safe_load((ROOT / "cluster" / "local-fake.yaml").read_text())
    config["provider"]["gcs_address"] = f"127.0.0.1:{port}"
    file = work / "cluster.yaml"
    file.write_text(yaml.safe_dump(config, sort_keys=False))
    storage = work / "runs"
    store = QueueStore(storage)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "HPO_STATE_DIR": str(work / "state"),
           "RAY_USAGE_STATS_ENABLED": "0"}
    env.pop("HPO_STORAGE", None)
    if poll_s is not None:
        env["HPO_AUTOSTOP_POLL_S"] = str(poll_s)
    now = time.time()
    store.put(QueueEntry(name="sweep", submitted_at=now, state=EntryState.RUNNING, started_at=now))
    up = subprocess.run([sys.executable, "-m", "hpo.cli.main", "cluster", "up", str(file), "--storage", str(storage),
                         "--autostop", f"{autostop_s:g}s"], env=env, capture_output=True, text=True, timeout=600)
    try:
        if up.returncode != 0:
            raise SystemExit(f"hpo cluster up failed: {up.stdout[-2000:]}{up.stderr[-2000:]}")
        return _measure(store, port, now, autostop_s, poll_s)
    finally:  # whatever happened: nothing of this round keeps running (by PID, never `ray stop`)
        subprocess.run([sys.executable, "-m", "hpo.cli.main", "cluster", "down", str(file), "--force"], env=env,
                       capture_output=True, timeout=300, check=False)


def _measure(store: QueueStore, port: int, now: float, autostop_s: float, poll_s: float | None) -> dict:
    time.sleep(random.uniform(0, poll_s or 30.0))
    ended = time.time()
    store.put(QueueEntry(name="sweep", submitted_at=now, state=EntryState.SUCCEEDED, started_at=now, ended_at=ended))
    status_path = Path(store.storage.root) / "_cluster" / "autostop.json"
    deadline = ended + autostop_s + 600
    gone = None
    while time.time() < deadline:
        status = json.loads(status_path.read_text()) if status_path.exists() else {}
        if gone is None and not heads(port):
            gone = time.time()
        if gone is not None and status.get("state") == "torn_down":
            break
        time.sleep(0.25)
    status = json.loads(status_path.read_text())
    started = status.get("teardown_started_at")
    if started is None or gone is None:
        raise SystemExit(f"no teardown within {autostop_s + 600:g}s: {status}")
    return {"teardown_after_empty_s": round(started - ended, 2),
            "over_autostop_s": round(started - ended - autostop_s, 2),
            "head_gone_after_empty_s": round(gone - ended, 2)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--autostop-s", type=float, default=30.0)
    parser.add_argument("--poll-s", type=float, default=None, help="HPO_AUTOSTOP_POLL_S (default: the watcher's 30 s)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "autostop.json"))
    args = parser.parse_args()
    if not (Path.home() / ".ray" / "auth_token").exists():  # the head and its fake nodes share one from the start
        subprocess.run([str(Path(sys.executable).with_name("ray")), "get-auth-token", "--generate"], check=True)
    rounds = []
    load_before = os.getloadavg()
    for i in range(args.rounds):
        with tempfile.TemporaryDirectory(prefix="hpo-autostop-") as work:
            rounds.append(one_round(Path(work), args.autostop_s, args.poll_s))
            print(f"round {i + 1}: {rounds[-1]}", flush=True)
    over = [r["over_autostop_s"] for r in rounds]
    write_report({
        "what": "hpo cluster up --autostop on the local fake_multinode cluster: a running sweep ends (queue empty) "
                "at a random point of the watcher's poll cycle; time until the watcher starts the teardown and "
                "until the head's processes are gone",
        "machine": f"{platform.node()}, {os.cpu_count()} cores, SHARED with other jobs while it ran "
                   f"(load average {load_before[0]:.1f} before, {os.getloadavg()[0]:.1f} after): the figures carry "
                   "that noise",
        "measured_at": time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
        "autostop_s": args.autostop_s,
        "poll_s": args.poll_s or 30.0,
        "target": "teardown starts at most 60 s after the autostop time (over_autostop_s <= 60)",
        "over_autostop_s_max": max(over),
        "over_autostop_s_median": sorted(over)[len(over) // 2],
        "met": max(over) <= 60.0,
        "rounds": rounds,
    }, args.out)


if __name__ == "__main__":
    main()
