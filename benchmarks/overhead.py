"""Per-trial overhead and sweep efficiency of the default sweep.

Runs ``search_spaces/digits_mlp.yaml`` (or ``--sweep FILE``) in a scratch directory and writes
``benchmarks/results/overhead.json``:

- ``startup_s``: trial start (the trainable begins) → rank 0 starts its first epoch, per trial;
- ``first_epoch_s``: the first epoch's duration (includes tf.function tracing and the first read);
- ``efficiency``: sum of in-trial training time (all epochs of all trials) / (wall × concurrent slots).

Never asserts on time; it measures.
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path

import pandas as pd
from _report import write_report

ROOT = Path(__file__).resolve().parents[1]


def _stats(values: list[float]) -> dict[str, float]:
    if not values:
        return {}
    return {
        "mean": round(statistics.fmean(values), 3),
        "median": round(statistics.median(values), 3),
        "min": round(min(values), 3),
        "max": round(max(values), 3),
    }


def main() -> None:
    """Runs the sweep and writes the JSON result."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweep", default=str(ROOT / "search_spaces" / "digits_mlp.yaml"))
    parser.add_argument("--num-samples", type=int, default=None)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "overhead.json"))
    args = parser.parse_args()

    import hpo

    config = hpo.load_sweep(args.sweep, {"search.num_samples": args.num_samples} if args.num_samples else None)
    with tempfile.TemporaryDirectory(prefix="hpo-bench-") as scratch:
        cwd = os.getcwd()
        os.chdir(scratch)
        try:
            started = time.time()
            result = hpo.tune(config, storage=Path(scratch) / "runs")
            wall = time.time() - started
            histories = [pd.read_csv(p) for p in sorted((Path(scratch) / "runs" / config.name).glob("*/progress.csv"))]
        finally:
            os.chdir(cwd)

    startup = [float(h["startup_s"].iloc[0]) for h in histories if "startup_s" in h and len(h)]
    first_epoch = [float(h["epoch_time_s"].iloc[0]) for h in histories if len(h)]
    later_epochs = [float(v) for h in histories for v in h["epoch_time_s"].iloc[1:]]
    training = sum(float(h["epoch_time_s"].sum()) for h in histories)
    slots = config.search.max_concurrent
    report = {
        "benchmark": "overhead",
        "sweep": Path(args.sweep).name,
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "load_avg_end": os.getloadavg(),
        "trials": len(result.trials),
        "trials_stopped_early": int(result.trials["stopped_early"].sum()),
        "workers_per_trial": config.trial.workers,
        "concurrent_slots": slots,
        "wall_s": round(wall, 2),
        "startup_s": _stats(startup),
        "first_epoch_s": _stats(first_epoch),
        "later_epoch_s": _stats(later_epochs),
        "training_s_total": round(training, 2),
        "efficiency": round(training / (wall * slots), 4),
        "best_metric": result.best_metric,
    }
    write_report(report, args.out)


if __name__ == "__main__":
    main()
