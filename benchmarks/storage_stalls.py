"""Does an object store that stalls fail trials, or slow training? Stalls of 10-120 s and a longer outage.

Runs one real sweep per case with ``--storage s3://…`` on a moto S3 server on 127.0.0.1 (nice 19, as an
object store on other machines would be): 1 trial of 2 Horovod workers on the digits MLP, a checkpoint
every epoch, enough epochs to outlast the stall. Once the trial's second checkpoint is in the bucket, the
server is frozen (SIGSTOP) for the case's seconds and resumed (SIGCONT) — every request in that time hangs,
as in a brownout. Cases:

- ``stall_S``: a stall of S seconds (0 = none, the baseline), under the default retry limit: the trial must
  end completed (or stopped early), never failed, each epoch once, a checkpoint written after the stall;
- ``outage``: ``HPO_STORAGE_RETRY_S=30`` and a stall of 150 s: the trial must end *interrupted* (not failed)
  with its one-line reason, and ``hpo tune --resume`` after the store is back must complete it.

Figures: the median epoch time (rank 0's gaps between epoch ends) of the epochs that ended during the
stall against those that did not (training must not wait for uploads: within 1.1x), the epochs trained,
how many had a checkpoint, the sweep's wall time, and the lines the live view printed about the storage.
Writes ``benchmarks/results/storage_stalls.json``. Never asserts on time; run it alone on the machine.
"""

from __future__ import annotations

import argparse
import itertools
import json
import math
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _report import write_report  # noqa: E402

BUCKET = "stalls"


def sweep(name: str, epochs: int) -> dict:
    return {
        "name": name,
        "model": "hpo.models.mlp:build",
        "objective": {"metric": "val_accuracy", "mode": "max"},
        "search": {"algorithm": "random", "num_samples": 1, "max_concurrent": 1, "seed": 1},
        "scheduler": {"type": "fifo"},
        "data": {"train": "builtin:digits", "validation_fraction": 0.2},  # a node-local copy by default
        "trial": {"workers": 2, "cpus_per_worker": 0.5, "max_epochs": epochs, "batch_size_per_worker": 32,
                  "early_stopping": {"patience": 100000}},
        "space": {"learning_rate": {"type": "float", "low": 0.0001, "high": 0.0001001},
                  "units": {"type": "categorical", "choices": [32]}},
    }


def trial_history(fs, base: str, name: str):
    """The trial's ``progress.csv`` rows, read from the storage."""
    import pandas as pd
    import pyarrow.fs as pafs

    files = [i.path for i in fs.get_file_info(pafs.FileSelector(f"{base}/{name}", recursive=True))
             if i.path.endswith("/progress.csv")]
    with fs.open_input_stream(files[0]) as f:
        return pd.read_csv(f)


def run_case(server, scratch: Path, name: str, stall_s: float, epochs: int, env: dict[str, str]) -> dict:
    """Runs one sweep, freezes the server for ``stall_s`` after the second checkpoint, returns its figures."""
    (scratch / f"{name}.yaml").write_text(yaml.safe_dump(sweep(name, epochs)))
    storage = f"s3://{BUCKET}/runs"
    cmd = [sys.executable, "-m", "hpo.cli.main", "tune", f"{name}.yaml", "--storage", storage,
           "--mlflow-uri", f"sqlite:///{scratch}/mlflow.db"]
    log = (scratch / f"{name}.log").open("w")
    started = time.time()
    proc = subprocess.Popen(cmd, cwd=scratch, stdout=log, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    frozen_at = thawed_at = None
    try:
        while proc.poll() is None and stall_s > 0 and frozen_at is None:
            if any("checkpoint_000001/" in k for k in server.keys(BUCKET, f"runs/{name}/")):
                os.kill(server.proc.pid, signal.SIGSTOP)
                frozen_at = time.time()
            time.sleep(0.2)
        if frozen_at is not None:
            time.sleep(max(0.0, frozen_at + stall_s - time.time()))
            os.kill(server.proc.pid, signal.SIGCONT)
            thawed_at = time.time()
        rc = proc.wait(timeout=1800)
    finally:
        if server.proc.poll() is None:
            os.kill(server.proc.pid, signal.SIGCONT)
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
    wall = time.time() - started
    output = (scratch / f"{name}.log").read_text()
    summary = json.loads(next(scratch.glob(f"hpo_runs/_shared/s3-*/{name}/summary.json")).read_text())
    from hpo.storage import Storage

    fs, base = Storage.parse(storage).filesystem()
    history = trial_history(fs, base, name)
    ends = list(history["epoch_end_time"])
    gaps = [(b, b - a) for a, b in itertools.pairwise(ends[1:])]  # from epoch 2 on (no tracing)
    during = [g for t, g in gaps if frozen_at and frozen_at <= t <= thawed_at]
    outside = [g for t, g in gaps if not (frozen_at and frozen_at <= t <= thawed_at)]
    keys = server.keys(BUCKET, f"runs/{name}/")
    after = sorted({k.split("/")[3] for k in keys if "/checkpoint_" in k})
    return {
        "rc": rc,
        "stall_s": stall_s,
        "trial_status": [t["status"] for t in summary["trials"]],
        "trial_error": [t.get("error") for t in summary["trials"]],
        "epochs": len(ends),
        "epochs_unique": len(set(history["training_iteration"])) if "training_iteration" in history else None,
        "checkpointed_epochs": int(history["checkpointed"].sum()) if "checkpointed" in history else None,
        "epoch_s_outside_stall": round(statistics.median(outside), 4) if outside else None,
        "epoch_s_during_stall": round(statistics.median(during), 4) if during else None,
        "epochs_during_stall": len(during),
        "checkpoints_in_bucket": len(after),
        "wall_s": round(wall, 1),
        "storage_lines": [line.strip() for line in output.splitlines() if "storage" in line.lower()][:8],
    }


def main() -> None:
    """Runs the cases and writes the JSON result."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--stalls", default="0,10,30,60,120", help="stall lengths in seconds, comma-separated")
    parser.add_argument("--no-outage", action="store_true", help="skip the outage past the retry limit")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "storage_stalls.json"))
    parser.add_argument("--keep", action="store_true", help="keep the cases of --out that this run does not redo")
    args = parser.parse_args()

    from tests.integration.s3 import MotoServer

    cases: dict[str, dict] = {}
    scratch = Path(tempfile.mkdtemp(prefix="hpo-bench-stall-"))  # kept: each sweep's log and state
    print("scratch:", scratch, flush=True)
    if True:
        server = MotoServer(scratch / "moto.log", nice=19).start()
        server.bucket(BUCKET)
        os.environ.update(server.env())  # this process reads the bucket too
        path = os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")])
        env = {**os.environ, **server.env(), "PYTHONPATH": path}
        try:
            epoch_s = 0.5  # a first guess; the baseline's figure sizes the rest
            for stall in [float(s) for s in args.stalls.split(",") if s.strip()]:
                epochs = max(12, math.ceil((stall + 30) / epoch_s))
                name = f"stall-{int(stall)}"
                cases[name] = run_case(server, scratch, name, stall, epochs, env)
                epoch_s = cases[name]["epoch_s_outside_stall"] or epoch_s
                print(name, json.dumps(cases[name]), flush=True)
            if not args.no_outage:
                limit, stall = 30.0, 150.0
                env_out = {**env, "HPO_STORAGE_RETRY_S": str(limit)}
                case = run_case(server, scratch, "outage", stall, math.ceil((stall + 30) / epoch_s), env_out)
                resume = subprocess.run(
                    [sys.executable, "-m", "hpo.cli.main", "tune", "outage.yaml", "--storage", f"s3://{BUCKET}/runs",
                     "--mlflow-uri", f"sqlite:///{scratch}/mlflow.db", "--resume"],
                    cwd=scratch, capture_output=True, text=True, env=env_out, timeout=1800)
                summary = json.loads(next(scratch.glob("hpo_runs/_shared/s3-*/outage/summary.json")).read_text())
                case.update(retry_limit_s=limit, resume_rc=resume.returncode,
                            status_after_resume=[t["status"] for t in summary["trials"]],
                            resume_tail=resume.stdout[-600:] if resume.returncode else "")
                cases["outage"] = case
                print("outage", json.dumps(case), flush=True)
        finally:
            server.stop()

    if args.keep and Path(args.out).is_file():
        cases = {**json.loads(Path(args.out).read_text())["cases"], **cases}
    ratios = {k: round(c["epoch_s_during_stall"] / c["epoch_s_outside_stall"], 3)
              for k, c in cases.items() if c.get("epoch_s_during_stall") and c.get("epoch_s_outside_stall")}
    write_report({
        "what": "1 trial of 2 Horovod workers (digits MLP), a checkpoint per epoch to S3 (moto on this machine, "
                "nice 19), the server frozen (SIGSTOP) after the trial's second checkpoint",
        "cases": cases,
        "epoch_time_ratio_during_stall": ratios,
        "target_ratio": 1.1,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "command": "python benchmarks/storage_stalls.py",
    }, args.out)


if __name__ == "__main__":
    main()
