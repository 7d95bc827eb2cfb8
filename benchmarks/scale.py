"""The driver's cost per trial as a sweep grows: hpo against bare Ray Tune, on simulated trials.

For each size (default 100, 1,000 and 5,000 trials) two sweeps run, one after the other, each in a fresh
Python process of its own (so that one's memory and caches do not weigh on the other):

- ``hpo``: ``hpo.tune`` of ``search_spaces/digits_mlp.yaml`` with the simulated backend
  (``trial.backend=simulated``, ``--epoch-s`` per epoch, 0.1 CPU per worker), ``--concurrent`` trials at
  once, random search, ASHA; MLflow into a sqlite store, the progress monitor, journal and ``progress.json``,
  ``summary.json`` and the HTML report: everything a real sweep does on its driver;
- ``tune``: the same trials through bare Ray Tune: the same Ray start, checks, trainable, searcher and
  scheduler (hpo's own ``build_tuner``), and no hpo callback, tracker, summary or report.

Measured in the process that runs the sweep (the driver): CPU seconds (user + system, all its threads),
wall seconds from the call to its return (Ray start and stop included), peak RSS. Then the hpo sweep's
MLflow store and ``summary.json`` are counted: one nested run per trial, each epoch of the objective once,
one summary row per trial (no run, epoch or row lost or duplicated).

``rate``: the epoch reports per second the driver keeps up with, hpo against bare Tune, offered more and
more (``--rate-grid`` of trials at once and epoch seconds, ``--rate-trials`` each; counted from Tune's own
``result.json`` lines, first to last).

Separately, Optuna's TPE is timed per suggestion with 100, 1,000 and 5,000 earlier trials in its study
(the searcher's own cost as a sweep grows, apart from the driver's bookkeeping).

Writes ``benchmarks/results/scale.json``. Timings need the machine to itself. Never asserts on time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from _report import write_report

ROOT = Path(__file__).resolve().parents[1]
SWEEP = ROOT / "search_spaces" / "digits_mlp.yaml"


def _overrides(trials: int, concurrent: int, epoch_s: float, mlflow_uri: str) -> dict[str, Any]:
    # Two workers a trial: 0.2 CPU a trial holds at most 10 trials at once on this 2-core machine.
    cpus = min(0.1, 1.0 / concurrent)
    return {
        "name": f"scale-{trials}",
        "search.num_samples": trials,
        "search.max_concurrent": concurrent,
        "search.algorithm": "random",
        "trial.backend": "simulated",
        "trial.simulated_epoch_s": epoch_s,
        "trial.simulated_clock": False,  # epochs in real time: the rate of reports offered is what is measured
        "trial.cpus_per_worker": cpus,
        "tracking.mlflow_uri": mlflow_uri,
    }


def _usage() -> tuple[float, float]:
    usage = resource.getrusage(resource.RUSAGE_SELF)
    return usage.ru_utime + usage.ru_stime, time.monotonic()


def run_one(kind: str, trials: int, concurrent: int, epoch_s: float, scratch: Path) -> dict[str, Any]:
    """Runs one sweep in this process and returns what its driver spent (``kind``: ``hpo`` or ``tune``)."""
    import logging

    import hpo
    from hpo.options import RunOptions

    writer_cpu: list[float] = []

    class WriterCpu(logging.Handler):
        def emit(self, record: logging.LogRecord) -> None:
            if getattr(record, "writer_cpu_s", None) is not None:
                writer_cpu.append(record.writer_cpu_s)

    writer_log = logging.getLogger("hpo.tracking.writer")
    writer_log.addHandler(WriterCpu())
    writer_log.setLevel(logging.DEBUG)
    os.chdir(scratch)
    config = hpo.load_sweep(SWEEP, _overrides(trials, concurrent, epoch_s, f"sqlite:///{scratch}/mlflow.db"))
    options = RunOptions(scratch / "runs")
    cpu0, wall0 = _usage()
    if kind == "hpo":
        result = hpo.tune(config, options=options, progress=False)
        ended = len(result.trials)
    else:
        ended = _bare_tune(config, options)
    cpu1, wall1 = _usage()
    rss_mb = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {"kind": kind, "trials": trials, "ended": ended, "driver_cpu_s": round(cpu1 - cpu0, 2),
            "wall_s": round(wall1 - wall0, 2), "driver_rss_mb": round(rss_mb, 1),
            "writer_process_cpu_s": round(sum(writer_cpu), 2) if writer_cpu else None,
            **reports_rate(scratch / "runs" / config.name)}


def reports_rate(experiment: Path) -> dict[str, Any]:
    """Epoch reports Tune recorded (its ``result.json`` lines) and how many per second, first to last."""
    stamps: list[float] = []
    for path in experiment.glob("*/result.json"):
        for line in path.read_text().splitlines():
            if line.strip():
                stamps.append(float(json.loads(line)["timestamp"]))
    if len(stamps) < 2:
        return {"epoch_reports": len(stamps)}
    span = max(stamps) - min(stamps) + 1.0  # Tune's timestamps are whole seconds
    return {"epoch_reports": len(stamps), "reports_span_s": span, "reports_per_s": round(len(stamps) / span, 1)}


def _bare_tune(config: Any, options: Any) -> int:
    """The same sweep through Ray Tune alone: hpo's checks, trainable, searcher and scheduler, no callbacks."""
    import time as clock

    from hpo.preflight import preflight
    from hpo.ray_session import start_ray, stop_ray
    from hpo.tuner import build_tuner

    spec = preflight(config, options.storage, str(SWEEP))
    started_ray = start_ray(None)
    try:
        tuner = build_tuner(config, options, spec, [], None, clock.time(), False)
        results = tuner.fit()
        return len(results)
    finally:
        stop_ray(started_ray)


def count_records(scratch: Path, trials: int) -> dict[str, Any]:
    """Counts the hpo sweep's MLflow runs and epochs and its summary rows (lost or duplicated ones)."""
    from mlflow.tracking import MlflowClient

    summary = json.loads((scratch / "runs" / f"scale-{trials}" / "summary.json").read_text())
    rows = summary["trials"]
    client = MlflowClient(f"sqlite:///{scratch}/mlflow.db")
    parent = summary["mlflow"]["parent_run_id"]
    runs = client.search_runs([summary["mlflow"]["experiment_id"]],
                              filter_string=f"tags.mlflow.parentRunId = '{parent}'", max_results=50000)
    run_trials = [r.data.tags.get("hpo.trial_id") for r in runs]
    epochs_logged = epochs_duplicated = epochs_missing = 0
    by_trial = {r.data.tags.get("hpo.trial_id"): r for r in runs}
    for row in rows:
        run = by_trial.get(row["trial_id"])
        if run is None:
            continue
        steps = [m.step for m in client.get_metric_history(run.info.run_id, summary["objective"]["metric"])]
        epochs_logged += len(steps)
        epochs_duplicated += len(steps) - len(set(steps))
        epochs_missing += len(set(range(1, int(row["epochs"] or 0) + 1)) - set(steps))
    return {
        "summary_rows": len(rows),
        "summary_rows_duplicated": len(rows) - len({r["trial_id"] for r in rows}),
        "mlflow_runs": len(runs),
        "mlflow_runs_duplicated": len(run_trials) - len(set(run_trials)),
        "mlflow_runs_missing": len({r["trial_id"] for r in rows} - set(run_trials)),
        "summary_epochs": sum(int(r["epochs"] or 0) for r in rows),
        "mlflow_epochs": epochs_logged,
        "mlflow_epochs_duplicated": epochs_duplicated,
        "mlflow_epochs_missing": epochs_missing,
        "rows_with_run_id": sum(bool(r.get("mlflow_run_id")) for r in rows),
    }


def tpe_cost(sizes: list[int], asks: int = 20) -> list[dict[str, Any]]:
    """Seconds per TPE suggestion with ``n`` completed trials in the study (the digits MLP's space)."""
    import optuna
    from optuna.distributions import CategoricalDistribution, FloatDistribution, IntDistribution

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    space = {
        "learning_rate": FloatDistribution(1e-4, 1e-2, log=True),
        "units": IntDistribution(16, 128, step=16),
        "layers": IntDistribution(1, 3),
        "dropout": FloatDistribution(0.0, 0.4),
        "optimizer": CategoricalDistribution(["adam", "sgd"]),
    }
    out = []
    for n in sizes:
        study = optuna.create_study(direction="maximize", sampler=optuna.samplers.TPESampler(seed=0))
        random = optuna.samplers.RandomSampler(seed=1)
        filler = optuna.create_study(direction="maximize", sampler=random)
        for _ in range(n):
            trial = filler.ask(space)
            filler.tell(trial, sum(hash(str(v)) % 1000 for v in trial.params.values()) / 5000)
        study.add_trials(filler.trials)
        started = time.perf_counter()
        for _ in range(asks):
            trial = study.ask(space)
            study.tell(trial, 0.5)
        out.append({"trials_in_study": n, "seconds_per_suggestion": round((time.perf_counter() - started) / asks, 4)})
    return out


def _run_pair(kinds: list[str], trials: int, concurrent: int, epoch_s: float) -> dict[str, Any]:
    """Runs each kind of sweep in a fresh process and compares hpo with bare Tune."""
    by_kind: dict[str, Any] = {"trials": trials, "concurrent": concurrent, "epoch_s": epoch_s}
    for kind in kinds:
        with tempfile.TemporaryDirectory(prefix="hpo-scale-") as scratch:
            proc = subprocess.run(
                [sys.executable, __file__, "--one", f"{kind}:{trials}:{scratch}", "--concurrent",
                 str(concurrent), "--epoch-s", str(epoch_s)],
                capture_output=True, text=True, cwd=ROOT,
            )
            if proc.returncode != 0:
                raise SystemExit(f"{kind} {trials}: exit {proc.returncode}\n{proc.stderr[-3000:]}")
            row = json.loads(proc.stdout.strip().splitlines()[-1])
            if kind == "hpo":
                row["records"] = count_records(Path(scratch), trials)
            row["driver_cpu_per_trial_s"] = round(row["driver_cpu_s"] / trials, 4)
            by_kind[kind] = row
            print(json.dumps(row), flush=True)
    if "hpo" in by_kind and "tune" in by_kind:
        hpo_row, tune_row = by_kind["hpo"], by_kind["tune"]
        extra = (hpo_row["driver_cpu_s"] - tune_row["driver_cpu_s"]) / trials
        by_kind["extra_driver_cpu_per_trial_s"] = round(extra, 4)
        by_kind["wall_ratio"] = round(hpo_row["wall_s"] / tune_row["wall_s"], 3)
    return by_kind


def main() -> None:
    """Runs the parts asked for and writes (or updates) the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--parts", default="scale,rate,tpe", help="scale, rate and/or tpe")
    parser.add_argument("--sizes", default="100,1000,5000")
    parser.add_argument("--concurrent", type=int, default=8)
    parser.add_argument("--epoch-s", type=float, default=0.05)
    parser.add_argument("--kinds", default="tune,hpo")
    parser.add_argument("--rate-trials", type=int, default=400)
    parser.add_argument("--rate-grid", default="8:0.05,8:0.01,16:0.01", help="concurrent:epoch_s pairs")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "scale.json"))
    parser.add_argument("--note", help="what the JSON should say about the run (e.g. a shared machine)")
    parser.add_argument("--shared", action="store_true", help="the machine ran other work meanwhile (said in the JSON)")
    parser.add_argument("--one", help=argparse.SUPPRESS)  # kind:trials:scratch, run in this process
    args = parser.parse_args()
    if args.one:
        kind, trials, scratch = args.one.split(":", 2)
        print(json.dumps(run_one(kind, int(trials), args.concurrent, args.epoch_s, Path(scratch))))
        return
    parts = set(args.parts.split(","))
    kinds = args.kinds.split(",")
    out = Path(args.out)
    report: dict[str, Any] = json.loads(out.read_text()) if out.is_file() else {}
    report.update({
        "benchmark": "scale",
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(), "shared": args.shared},
        "settings": {"sweep": "search_spaces/digits_mlp.yaml", "searcher": "random", "scheduler": "asha",
                     "backend": "simulated", "workers_per_trial": 2},
        "targets": {"cpu_per_trial_largest_over_smallest": 1.5, "extra_driver_cpu_per_trial_s": 0.05,
                    "wall_ratio": 1.3, "driver_rss_mb_at_largest": 1500},
    })
    if args.note:
        report["note"] = args.note
    if "scale" in parts:
        sizes = [int(s) for s in args.sizes.split(",")]
        runs = [_run_pair(kinds, trials, args.concurrent, args.epoch_s) for trials in sizes]
        hpo_rows = [r["hpo"] for r in runs if "hpo" in r]
        report["runs"] = runs
        report["hpo_cpu_per_trial_largest_over_smallest"] = (
            round(hpo_rows[-1]["driver_cpu_per_trial_s"] / hpo_rows[0]["driver_cpu_per_trial_s"], 3)
            if len(hpo_rows) > 1 else None)
    if "rate" in parts:
        grid = [(int(c), float(e)) for c, e in (pair.split(":") for pair in args.rate_grid.split(","))]
        rate = []
        for concurrent, epoch_s in grid:
            row = _run_pair(kinds, args.rate_trials, concurrent, epoch_s)
            row["offered_reports_per_s"] = round(concurrent / epoch_s, 1)
            rate.append(row)
        report["rate"] = rate
    if "tpe" in parts:
        report["tpe_seconds_per_suggestion"] = tpe_cost([100, 1000, 5000])
    write_report(report, out)


if __name__ == "__main__":
    main()
