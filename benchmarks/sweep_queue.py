"""Cluster utilisation over a queue of sweeps, and submit → first trial running, on a real local Ray head.

Starts a Ray head with its job server (``--slots`` logical CPUs, every trial takes one), then:

- submits the same three sweeps through ``hpo submit`` once per variant: ``one-after-another`` (the
  baseline: ``max_running: 1`` and no standby runner, each sweep a job of its own started when the one
  before ended: its tail of running trials and its successor's start-up leave slots idle), ``queue`` (the
  queue's defaults: the next sweep is admitted once the running ones have no trial waiting, and runs in the
  standby runner started ahead) and, with ``--variants``, ``queue-no-standby``; utilisation = Σ trial busy
  time / (wall × slots), from the first trial's start to the last one's end (the trials' start and end
  from each sweep's progress journal). ``ceiling`` is the best any order can do with these trials (equal
  trials: T / (slots × ⌈T / slots⌉));
- on the warm cluster (the dispatcher running, the queue empty), times ``hpo submit`` → the sweep's first
  trial running, ``--repeats`` times with the standby runner and as many without it, each split into its
  steps: the ``hpo submit`` command; the dispatcher taking the entry (it polls every second) and handing
  it over; the sweep's driver process starting (a job's own; none with the standby, started ahead); its
  imports, checks and Ray connection up to the sweep's first journal event; Tune up to its first trial
  (``hpo submit`` itself returns once the entry is queued and the dispatcher is known to run).

The sweeps use the simulated backend on real time (``simulated_clock: false``): a trial holds its slot for
its epochs' real seconds, with no TensorFlow start-up to blur the measure. Writes
``benchmarks/results/queue.json``. Never asserts on time; it measures.
"""

from __future__ import annotations

import sys
from pathlib import Path

# This script is named like the standard library's ``queue``, which Ray and pyarrow import: its folder goes to
# the end of the module path (``_report`` is still found there).
_HERE = Path(__file__).resolve().parent
sys.path[:] = [p for p in sys.path if Path(p or ".").resolve() != _HERE] + [str(_HERE)]

import argparse  # noqa: E402
import itertools  # noqa: E402
import os  # noqa: E402
import platform  # noqa: E402
import shutil  # noqa: E402
import signal  # noqa: E402
import socket  # noqa: E402
import statistics  # noqa: E402
import subprocess  # noqa: E402
import tempfile  # noqa: E402
import time  # noqa: E402
import urllib.error  # noqa: E402
import urllib.request  # noqa: E402

import yaml  # noqa: E402
from _report import write_report  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
RAY = str(Path(sys.executable).with_name("ray"))


def _port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def start_head(slots: int, temp_dir: Path, env: dict[str, str]) -> tuple[subprocess.Popen, str]:
    """A Ray head with its dashboard on 127.0.0.1; returns (its process, the job server's URL)."""
    dashboard = _port()
    cmd = [RAY, "start", "--head", "--block", f"--port={_port()}", f"--num-cpus={slots}", "--num-gpus=0",
           "--node-ip-address=127.0.0.1", f"--temp-dir={temp_dir}", "--disable-usage-stats",
           "--include-dashboard=true", "--dashboard-host=127.0.0.1", f"--dashboard-port={dashboard}",
           f"--ray-client-server-port={_port()}", f"--dashboard-agent-listen-port={_port()}"]
    log = (temp_dir / "head.log").open("w")
    head = subprocess.Popen(cmd, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    url = f"http://127.0.0.1:{dashboard}"
    deadline = time.time() + 300
    while time.time() < deadline and head.poll() is None:
        try:
            urllib.request.urlopen(f"{url}/api/version", timeout=5)
            return head, url
        except urllib.error.HTTPError:
            return head, url
        except OSError:
            time.sleep(1)
    raise RuntimeError(f"the head did not start: {temp_dir / 'head.log'}")


def stop_head(head: subprocess.Popen) -> None:
    """Stops the head and everything under it, by PID (never ``ray stop``)."""
    import psutil

    try:
        procs = [psutil.Process(head.pid), *psutil.Process(head.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        procs = []
    for proc in procs:
        try:
            proc.kill()
        except psutil.NoSuchProcess:
            pass
    psutil.wait_procs(procs, timeout=15)
    try:
        os.killpg(head.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass


def sweep(name: str, slots: int, trials: int, epochs: int, epoch_s: float) -> dict:
    return {"name": name, "model": "hpo.models.mlp:build", "data": {"train": "builtin:digits"},
            "objective": {"metric": "val_accuracy", "mode": "max"},
            "search": {"algorithm": "random", "num_samples": trials, "max_concurrent": slots, "seed": 1},
            "scheduler": {"type": "fifo"},
            "trial": {"workers": 1, "cpus_per_worker": 1, "max_epochs": epochs, "backend": "simulated",
                      "simulated_epoch_s": epoch_s, "simulated_clock": False, "early_stopping": {"patience": 999}},
            "tracking": {"mlflow_uri": "sqlite:////tmp/hpo-bench-queue-mlflow.db"},
            "space": {"learning_rate": {"type": "float", "low": 0.001, "high": 0.1, "log": True}}}


def hpo(cwd: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    env.pop("RAY_AUTH_MODE", None)
    proc = subprocess.run([sys.executable, "-m", "hpo.cli.main", *args], cwd=cwd, capture_output=True, text=True,
                          env=env, timeout=600)
    if proc.returncode != 0:
        raise RuntimeError(f"hpo {' '.join(args)}: {proc.stderr[-2000:]}")
    return proc


def spans(storage: Path, name: str) -> list[tuple[float, float]]:
    """(start, end) of every trial of a sweep, from its progress journal."""
    from hpo.progress.journal import EVENTS_FILE, read_events

    starts, out = {}, []
    for event in read_events(storage / name / EVENTS_FILE):
        if event["event"] == "start":
            starts.setdefault(event["trial"], event["t"])
        elif event["event"] == "end" and event["trial"] in starts:
            out.append((starts[event["trial"]], event["t"]))
    return out


def checked_at(storage: Path, name: str) -> float | None:
    """When the sweep's driver had passed its checks and connected to Ray (its journal's latest segment)."""
    from hpo.progress.journal import EVENTS_FILE, read_events

    times = [e["t"] for e in read_events(storage / name / EVENTS_FILE) if e["event"] == "sweep"]
    return max(times) if times else None


def idle_slot_s(all_spans: list[tuple[float, float]], slots: int, start: float, end: float) -> float:
    """Slot-seconds no trial held between ``start`` and ``end`` (``slots`` minus the trials running, integrated)."""
    if end <= start:
        return 0.0
    points = sorted({start, end, *(t for span in all_spans for t in span if start < t < end)})
    idle = 0.0
    for a, b in itertools.pairwise(points):
        mid = (a + b) / 2
        busy = sum(1 for s, e in all_spans if s <= mid < e)
        idle += max(0, slots - busy) * (b - a)
    return idle


def timeline(names: list[str], per_sweep: dict, handed: dict, checked: dict, slots: int) -> list[dict]:
    """Where the idle slot-seconds are, phase by phase, from the first trial's start to the last one's end.

    Per sweep (in queue order): while it starts its trials (its first trial's start → its last one's); then,
    before the next sweep: its last trial's start → the next sweep handed over (the queue learning that it
    has no trial waiting, or, one after another, its tail and its end); the handed-over sweep's driver up to
    its checks passed and Ray connected; its Tune start up to its first trial running. After the last sweep's
    last trial start: its tail.
    """
    all_spans = [s for n in names for s in per_sweep[n]]
    first = min(s for s, _ in all_spans)
    last = max(e for _, e in all_spans)
    phases = []

    def phase(what: str, a: float, b: float) -> None:
        a, b = max(a, first), min(b, last)
        phases.append({"phase": what, "from_s": round(a - first, 2), "to_s": round(b - first, 2),
                       "idle_slot_s": round(idle_slot_s(all_spans, slots, a, b), 2)})

    for i, name in enumerate(names):
        starts = [s for s, _ in per_sweep[name]]
        phase(f"{name}: starting its trials", min(starts), max(starts))
        if i + 1 == len(names):
            phase(f"{name}: its tail (no sweep left)", max(starts), last)
            break
        nxt = names[i + 1]
        phase(f"{nxt}: until handed over", max(starts), handed[nxt])
        if checked.get(nxt) is not None:
            phase(f"{nxt}: driver up to checks passed and Ray connected", handed[nxt], checked[nxt])
            phase(f"{nxt}: Tune start up to its first trial running", checked[nxt], min(s for s, _ in per_sweep[nxt]))
    return phases


def wait_ended(storage: Path, names: list[str], timeout: float) -> dict[str, str]:
    from hpo.queue import EntryState, QueueStore

    store = QueueStore(storage)
    deadline = time.time() + timeout
    while time.time() < deadline:
        states = {n: store.get(n).state for n in names}  # type: ignore[union-attr]
        if all(s not in (EntryState.QUEUED, EntryState.RUNNING) for s in states.values()):
            return {n: s.value for n, s in states.items()}
        time.sleep(1)
    raise RuntimeError(f"sweeps did not end in {timeout:.0f} s: {states}")


def stop_queue(url: str, storage: Path) -> None:
    """Stops the dispatcher of ``storage`` and its waiting standby runner (the next variant's do not share)."""
    from hpo.queue import QueueStore
    from hpo.queue.jobs import ENDED_JOB_STATES, Jobs, dispatcher_id

    jobs = Jobs(url)
    record = QueueStore(storage).standby()
    ours = (dispatcher_id(str(storage)), *([record.job_id] if record else []))
    for job in jobs.listed():
        if (job.submission_id or "").startswith(ours) and str(getattr(job.status, "value", job.status)) \
                not in ENDED_JOB_STATES:
            jobs.stop(job.submission_id)


def ceiling(slots: int, total_trials: int) -> float:
    """The best utilisation equal trials can reach in any order: T / (slots × ⌈T / slots⌉)."""
    return round(total_trials / (slots * -(-total_trials // slots)), 4)


def run_queue(url: str, scratch: Path, label: str, max_running: int, standby: bool,
              args: argparse.Namespace) -> dict:
    """Three sweeps through the queue with ``max_running`` (and the standby runner or not); their utilisation."""
    from hpo.queue import QueueSettings, QueueStore

    storage = scratch / label
    QueueStore(storage).put_settings(QueueSettings(max_running=max_running, standby=standby))
    hpo(scratch, "queue", "--address", url, "--storage", str(storage))  # its dispatcher (and standby) start
    time.sleep(args.warmup_s)  # a warm cluster: the dispatcher polls, the standby runner waits
    names = [f"{label}-{i}" for i in range(args.sweeps)]
    files = []
    for name in names:
        path = scratch / f"{name}.yaml"
        path.write_text(yaml.safe_dump(sweep(name, args.slots, args.trials, args.epochs, args.epoch_s)))
        files.append(path.name)
    hpo(scratch, "submit", *files, "--address", url, "--storage", str(storage))
    states = wait_ended(storage, names, args.timeout)
    stop_queue(url, storage)
    per_sweep = {n: spans(storage, n) for n in names}
    all_spans = [s for n in names for s in per_sweep[n]]
    first, last = min(s for s, _ in all_spans), max(e for _, e in all_spans)
    busy = sum(e - s for s, e in all_spans)
    wall = last - first
    store = QueueStore(storage)
    handed = {n: store.get(n).started_at for n in names}  # type: ignore[union-attr]
    checked = {n: checked_at(storage, n) for n in names}
    return {"max_running": max_running, "standby": standby, "states": states, "trials": len(all_spans),
            "wall_s": round(wall, 2), "busy_s": round(busy, 2), "utilisation": round(busy / (wall * args.slots), 4),
            "idle_slot_s": round(wall * args.slots - busy, 2),
            "sweeps": {n: {"handed_over_s": round(handed[n] - first, 2),  # seconds from the first trial's start
                           "checked_s": None if checked[n] is None else round(checked[n] - first, 2),
                           "first_start_s": round(min(s for s, _ in sp) - first, 2),
                           "last_start_s": round(max(s for s, _ in sp) - first, 2),
                           "last_end_s": round(max(e for _, e in sp) - first, 2)} for n, sp in per_sweep.items()},
            "idle_timeline": timeline(names, per_sweep, handed, checked, args.slots)}


def _driver_started(url: str, job_id: str) -> float | None:
    """When the process of job ``job_id``'s driver started (it runs on this machine's head)."""
    import psutil

    from hpo.queue.jobs import Jobs

    for job in Jobs(url).listed():
        if job.submission_id == job_id and job.driver_info is not None:
            try:
                return psutil.Process(int(job.driver_info.pid)).create_time()
            except (psutil.NoSuchProcess, ValueError):
                return None
    return None


def one_latency(url: str, scratch: Path, storage: Path, name: str, args: argparse.Namespace) -> dict:
    """``hpo submit`` of a one-trial sweep → its first trial running, split into its steps."""
    from hpo.progress.journal import EVENTS_FILE, read_events
    from hpo.queue import QueueStore

    path = scratch / f"{name}.yaml"
    path.write_text(yaml.safe_dump(sweep(name, args.slots, 1, 2, 0.2)))
    started = time.time()
    hpo(scratch, "submit", path.name, "--address", url, "--storage", str(storage))
    returned = time.time()
    journal = storage / name / EVENTS_FILE
    store = QueueStore(storage)
    deadline = time.time() + args.timeout
    driver = None
    while time.time() < deadline:
        entry = store.get(name)
        if driver is None and entry is not None and entry.job_id:
            driver = _driver_started(url, entry.job_id)
        events = read_events(journal) if journal.is_file() else []
        starts = [e["t"] for e in events if e["event"] == "start"]
        if starts:
            break
        time.sleep(0.2)
    else:
        raise RuntimeError(f"{name}: no trial started in {args.timeout:.0f} s")
    entry = store.get(name)
    checked = min(e["t"] for e in events if e["event"] == "sweep")
    first = min(starts)
    handed = entry.started_at
    process = None if driver is None or driver < handed else driver  # the standby's process began before
    steps = {  # one after another: they add up to the total
        "submit_until_queued_s": entry.submitted_at - started,
        "queued_until_handed_over_s": handed - entry.submitted_at,
        "handed_over_until_driver_process_s": None if process is None else process - handed,
        "driver_imports_checks_ray_s": checked - (process or handed),
        "tune_to_first_trial_s": first - checked,
    }
    wait_ended(storage, [name], args.timeout)
    return {"total_s": round(first - started, 2), "job_id": entry.job_id,
            "hpo_submit_returned_s": round(returned - started, 2),
            "steps": {k: None if v is None else round(v, 2) for k, v in steps.items()}}


def submit_latency(url: str, scratch: Path, label: str, standby: bool, args: argparse.Namespace) -> dict:
    """``hpo submit`` → first trial running on a warm cluster with an empty queue, ``--repeats`` times."""
    from hpo.queue import QueueSettings, QueueStore

    storage = scratch / label
    QueueStore(storage).put_settings(QueueSettings(standby=standby))
    hpo(scratch, "queue", "--address", url, "--storage", str(storage))  # starts the dispatcher
    runs = []
    for i in range(args.repeats):
        time.sleep(args.warmup_s)  # the dispatcher polls; the standby runner (a new one after each sweep) waits
        runs.append(one_latency(url, scratch, storage, f"{label}-{i}", args))
    stop_queue(url, storage)
    totals = [r["total_s"] for r in runs]
    return {"standby": standby, "median_s": statistics.median(totals), "runs": runs}


def import_time() -> float:
    """Seconds a fresh Python takes for the imports the standby runner does ahead (this machine, now)."""
    code = "import time; t = time.time(); from hpo.queue.standby import warm; warm(); print(time.time() - t)"
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])}
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=600,
                         check=True)
    return round(float(out.stdout.strip().splitlines()[-1]), 2)


def main() -> None:
    """Runs the benchmark and writes the JSON result."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--slots", type=int, default=3)
    parser.add_argument("--sweeps", type=int, default=3)
    parser.add_argument("--trials", type=int, default=4, help="per sweep (more than --slots: a tail)")
    parser.add_argument("--epochs", type=int, default=10)
    parser.add_argument("--epoch-s", type=float, default=2.0)
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--warmup-s", type=float, default=20.0)
    parser.add_argument("--timeout", type=float, default=1200.0)
    parser.add_argument("--variants", action="store_true", help="also the queue without its standby runner")
    parser.add_argument("--skip-latency", action="store_true")
    parser.add_argument("--skip-baseline", action="store_true", help="not the one-after-another variant")
    parser.add_argument("--note", default="a shared, loaded 2-core machine (other people's test suites ran at the "
                        "same time), the benchmark under CPU priority: every time here is this machine's, "
                        "start-up latencies most of all")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "queue.json"))
    args = parser.parse_args()

    sys.path.insert(0, str(ROOT))
    temp_dir = Path(tempfile.mkdtemp(prefix="hpo-bq-", dir="/tmp"))
    scratch = Path(tempfile.mkdtemp(prefix="hpo-bench-queue-"))
    env = {**os.environ, "RAY_USAGE_STATS_ENABLED": "0", "TF_USE_LEGACY_KERAS": "1", "RAY_AUTH_MODE": "token",
           "RAY_DISABLE_PYARROW_VERSION_CHECK": "1",
           "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
           "PATH": os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")])}
    if not (Path.home() / ".ray" / "auth_token").exists():
        subprocess.run([RAY, "get-auth-token", "--generate"], check=True, capture_output=True)
    imports_s = import_time()
    head, url = start_head(args.slots, temp_dir, env)
    latency = {}
    try:
        baseline = None if args.skip_baseline else run_queue(url, scratch, "one-after-another", 1, False, args)
        queued = run_queue(url, scratch, "queue", 2, True, args)
        cold_queue = run_queue(url, scratch, "queue-no-standby", 2, False, args) if args.variants else None
        if not args.skip_latency:
            latency = {"standby": submit_latency(url, scratch, "warm", True, args),
                       "job_of_its_own": submit_latency(url, scratch, "cold", False, args)}
    finally:
        stop_head(head)
        shutil.rmtree(temp_dir, ignore_errors=True)
        shutil.rmtree(scratch, ignore_errors=True)
    total = args.sweeps * args.trials
    report = {
        "benchmark": "queue",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version(),
                    "note": args.note},
        "load_avg_end": list(os.getloadavg()),
        "setup": {"slots": args.slots, "sweeps": args.sweeps, "trials_per_sweep": args.trials, "epochs": args.epochs,
                  "epoch_s": args.epoch_s, "backend": "simulated (real time)", "ceiling": ceiling(args.slots, total)},
        "utilisation": {"queue": queued["utilisation"],
                        **({"one_after_another": baseline["utilisation"]} if baseline else {}),
                        **({"queue_no_standby": cold_queue["utilisation"]} if cold_queue else {}),
                        "ceiling": ceiling(args.slots, total), "target_queue": 0.90},
        "queue": queued,
        **({"one_after_another": baseline} if baseline else {}),
        **({"queue_no_standby": cold_queue} if cold_queue else {}),
        "submit_to_first_trial_s": {
            **{k: v["median_s"] for k, v in latency.items()}, "target": 10.0, **latency},
        "imports_done_ahead_by_the_standby_s": imports_s,
        "method": "utilisation = sum of trial busy time / (wall x slots) from the first trial start to the last "
                  "trial end, trial start/end from each sweep's progress journal; submit latency = start of "
                  "'hpo submit' to the sweep's first trial start (Tune's on_trial_start: its actor runs), with "
                  "the dispatcher already running; steps: the hpo submit command until the entry is written "
                  "(entry.submitted_at), to the dispatcher handing it over (entry.started_at), to the driver "
                  "process starting (a job of its own: "
                  "the process's start time; the standby's began earlier), to the sweep's first journal event "
                  "(its checks passed and Ray connected), to the first trial start",
    }
    write_report(report, args.out)


if __name__ == "__main__":
    main()
