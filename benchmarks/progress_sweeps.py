"""How well ``hpo.progress`` foresees a real sweep's wall time: real ``hpo tune`` runs, recorded and replayed.

``benchmarks/progress.py`` measures the sweep forecast on simulated replays of real learning curves. This
script measures it on **real sweeps**: each is an ``hpo tune`` run through the whole stack (Ray Tune, its
searcher and scheduler, Horovod/Gloo workers, Petastorm, MLflow) on this machine, with settings drawn at
random per sweep: model and data (an MLP on ``builtin:digits``, a CNN on the digits images, an MLP
regression on diabetes), searcher, scheduler (ASHA, HyperBand, median stopping, FIFO), trials,
concurrency, workers per trial, epochs, patience, grace period, reduction factor, batch size.

Recorded per sweep (``--record``, gzip-compressed JSON lines, one per sweep; a rerun records only the sweeps
missing there): the
settings, the sweep's progress journal (``progress_events.jsonl``: every trial start, epoch and end with its
time), the forecast on each ``--json-progress`` line the user saw, the trials' end states and the wall
time (the ``end`` line's ``elapsed_s``: from the sweep's start to Tune's end, after its last trial).

Evaluated: when ``ceil(f × planned)`` trials have ended (f = 25, 50, 75 %), the forecast of the sweep's wall
time, ``elapsed + remaining_s_median``, against the true wall time:

- **replayed**: the journal up to that moment rebuilt through today's ``SweepProgress`` and estimator
  (the target; the same inputs the live view had, so an estimator changed later is judged on the same
  sweeps);
- **shown**: the forecast on the progress line written at that moment, by the estimator of the commit that
  recorded the sweep;
- **naive**: elapsed × planned / ended, the straight-line extrapolation a user would do by hand.

Writes ``benchmarks/results/progress_sweeps.json`` and prints a table. Timing: run it alone on the machine
(its sweeps' wall times are what is forecast). ``--evaluate-only`` re-evaluates the recordings.
"""

from __future__ import annotations

import argparse
import gzip
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import yaml
from _report import write_report

from hpo.progress.journal import EVENTS_FILE, read_events, replay, segments

ROOT = Path(__file__).resolve().parents[1]
HPO = str(Path(sys.executable).with_name("hpo"))
FRACTIONS = (0.25, 0.5, 0.75)
TOLERANCE = 0.25
MIN_SWEEPS = 20
#: Monte-Carlo samples of the replayed estimate: the live monitor's (``SweepProgress``'s default).
SAMPLES = 300
KINDS = ("mlp", "mlp", "mlp", "mlp", "cnn", "regression", "regression")
#: Seeds recorded after the estimator's last change made on a recording (seed 0: changes made on its sweeps
#: 0-2; seed 1: recorded after them, then one change made on its sweep 4; seed 2: recorded after that, then
#: one change made on its sweep 1; seed 3: recorded after every change; see docs/progress.md).
HELD_OUT_SEEDS = (3,)


# ------------------------------------------------------------------------------------------- settings

def sweep_file(seed: int, index: int, data: Path) -> dict[str, Any]:
    """The sweep file of sweep ``index``: its settings drawn from ``(seed, index)``."""
    rng = np.random.default_rng([seed, index])

    def pick(*options: Any) -> Any:
        return options[int(rng.integers(len(options)))]

    kind = pick(*KINDS)
    workers = int(pick(1, 2))
    trial = {"workers": workers, "cpus_per_worker": 1.0 if workers == 1 else 0.5,
             "max_epochs": int(pick(10, 15, 20)), "batch_size_per_worker": int(pick(8, 16, 32)),
             "early_stopping": {"patience": int(pick(2, 3, 5))}}
    config: dict[str, Any] = {
        "name": f"forecast-{seed}-{index}",
        "search": {"algorithm": pick("optuna-tpe", "random"), "num_samples": int(rng.integers(8, 17)),
                   "max_concurrent": int(pick(1, 2)), "seed": index},
        "scheduler": {"type": pick("asha", "hyperband", "median", "fifo"), "grace_period": int(pick(1, 2, 3)),
                      "reduction_factor": int(pick(2, 3))},
        "trial": trial,
    }
    if kind == "mlp":
        config.update(model="hpo.models.mlp:build", data={"train": "builtin:digits", "validation_fraction": 0.2},
                      objective={"metric": "val_accuracy", "mode": "max"},
                      space={"learning_rate": {"type": "float", "low": 1e-4, "high": 3e-2, "log": True},
                             "units": {"type": "int", "low": 16, "high": 256, "step": 16},
                             "layers": {"type": "int", "low": 1, "high": 3},
                             "dropout": {"type": "float", "low": 0.0, "high": 0.4},
                             "optimizer": {"type": "categorical", "choices": ["adam", "sgd"]}})
    elif kind == "cnn":
        config.update(model="hpo.models.cnn:build",
                      data={"train": f"file://{data}/digits_images/train",
                            "validation": f"file://{data}/digits_images/validation", "features": "x", "label": "y"},
                      objective={"metric": "val_accuracy", "mode": "max"},
                      space={"learning_rate": {"type": "float", "low": 5e-4, "high": 1e-2, "log": True},
                             "filters": {"type": "int", "low": 8, "high": 32, "step": 8},
                             "blocks": {"type": "categorical", "choices": [1, 2]},
                             "dense": {"type": "categorical", "choices": [0, 32, 64]},
                             "dropout": {"type": "float", "low": 0.0, "high": 0.3}})
    else:
        config.update(model="hpo.models.mlp:build",
                      data={"train": f"file://{data}/diabetes/train", "validation": f"file://{data}/diabetes/validation",
                            "label": "progression", "task": "regression"},
                      objective={"metric": "val_mae", "mode": "min"},
                      space={"learning_rate": {"type": "float", "low": 1e-3, "high": 3e-2, "log": True},
                             "units": {"type": "int", "low": 16, "high": 128, "step": 16},
                             "layers": {"type": "categorical", "choices": [1, 2]},
                             "dropout": {"type": "float", "low": 0.0, "high": 0.2}})
    return config


def example_data(root: Path) -> Path:
    """The digits images and the diabetes table as hpo datasets under ``root`` (made once, as the examples say)."""
    if (root / "digits_images").is_dir() and (root / "diabetes").is_dir():
        return root
    root.mkdir(parents=True, exist_ok=True)
    run = [sys.executable, str(ROOT / "search_spaces" / "make_example_data.py"), str(root)]
    subprocess.run(run, check=True, capture_output=True, timeout=300)
    for args in (["digits_images.npz", "digits_images", "--features", "x", "--label", "y"],
                 ["diabetes.csv", "diabetes", "--label", "progression", "--task", "regression"]):
        subprocess.run([HPO, "data", "convert", str(root / args[0]), str(root / args[1]), *args[2:],
                        "--validation-fraction", "0.2"], check=True, capture_output=True, timeout=300, cwd=root)
    return root


# ------------------------------------------------------------------------------------------ recording

def _shown(line: dict[str, Any]) -> list[Any]:
    ended = sum(line.get(k, 0) for k in ("completed", "stopped_early", "failed", "diverged"))
    return [line["elapsed_s"], ended, line.get("running"), line.get("pending"), line.get("remaining_s_median"),
            line.get("remaining_s_low"), line.get("remaining_s_high"), line.get("method")]


def record_sweep(seed: int, index: int, data: Path, timeout: int) -> dict[str, Any]:
    """Runs sweep ``index`` for real in a temporary directory and returns its recording."""
    config = sweep_file(seed, index, data)
    work = Path(tempfile.mkdtemp(prefix="hpo-forecast-"))
    try:
        path = work / "sweep.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        began = time.time()
        proc = subprocess.run([HPO, "tune", str(path), "--storage", str(work / "runs"), "--json-progress"],
                              cwd=work, capture_output=True, text=True, timeout=timeout)
        lines = []
        for text in proc.stdout.splitlines():
            try:
                lines.append(json.loads(text))
            except ValueError:
                continue
        end = next((x for x in lines if x.get("event") == "end"), None)
        state = work / "runs" / config["name"]
        summary_file = state / "summary.json"
        summary = json.loads(summary_file.read_text()) if summary_file.is_file() else {}
        events = list(segments(read_events(state / EVENTS_FILE))) if (state / EVENTS_FILE).is_file() else []
        return {
            "index": index, "seed": seed, "config": config, "exit_code": proc.returncode,
            "command_s": round(time.time() - began, 2),
            "wall_s": None if end is None else end["elapsed_s"],
            "statuses": [t.get("status") for t in summary.get("trials", [])],
            "shown": [_shown(x) for x in lines if x.get("event") == "progress"],
            "events": events[-1] if events else [],
            "stderr_tail": proc.stderr[-2000:] if proc.returncode else "",
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)  # the benchmark's own temporary directory


def load_records(path: Path) -> dict[tuple[int, int], dict[str, Any]]:
    """The recordings in ``path`` by ``(seed, index)``, the last of each (none if the file does not exist)."""
    if not path.is_file():
        return {}
    with gzip.open(path, "rt") as handle:
        records = [json.loads(line) for line in handle if line.strip()]
    return {(r["seed"], r["index"]): r for r in records}


# ----------------------------------------------------------------------------------------- evaluation

def evaluate(record: dict[str, Any], fraction: float) -> dict[str, Any] | None:
    """The forecasts of one recorded sweep when ``ceil(fraction × planned)`` trials have ended (None: never)."""
    events, truth = record["events"], record["wall_s"]
    if not events or not truth:
        return None
    planned = events[0]["plan"]["planned_trials"]
    needed = max(1, math.ceil(fraction * planned))
    ends = sorted(e["t"] for e in events if e["event"] == "end")
    if len(ends) < needed or needed >= planned:
        return None
    moment = ends[needed - 1]
    snapshot = replay(events, until=moment, samples=SAMPLES).snapshot(now=moment)
    elapsed = snapshot.elapsed_s
    out: dict[str, Any] = {"sweep": _key(record), "truth_s": truth, "elapsed_s": elapsed, "ended": needed,
                           "planned": planned, "naive_s": round(elapsed * planned / needed, 2)}
    if snapshot.remaining_s_median is not None:
        out.update(replayed_s=round(elapsed + snapshot.remaining_s_median, 2),
                   replayed_low_s=round(elapsed + snapshot.remaining_s_low, 2),
                   replayed_high_s=round(elapsed + snapshot.remaining_s_high, 2))
    shown = next((s for s in record["shown"] if s[1] >= needed and s[4] is not None), None)
    if shown is not None:
        out.update(shown_s=round(shown[0] + shown[4], 2), shown_at_s=shown[0])
    for key in ("replayed", "shown", "naive"):
        if f"{key}_s" in out:
            out[f"{key}_pct_error"] = round(100.0 * (out[f"{key}_s"] - truth) / truth, 2)
    if "replayed_s" in out:
        out["replayed_covered"] = out["replayed_low_s"] <= truth <= out["replayed_high_s"]
    return out


def summarize(rows: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """Median, 90th percentile and worst absolute % error of forecast ``key``, and how many were within 25 %."""
    errors = [abs(r[f"{key}_pct_error"]) for r in rows if f"{key}_pct_error" in r]
    if not errors:
        return {"sweeps": 0}
    return {
        "sweeps": len(errors),
        "median_abs_pct_error": round(statistics.median(errors), 2),
        "p90_abs_pct_error": round(float(np.percentile(errors, 90)), 2),
        "max_abs_pct_error": round(max(errors), 2),
        "within_25pct": sum(e <= 100 * TOLERANCE for e in errors),
        "median_signed_pct_error": round(statistics.median(r[f"{key}_pct_error"] for r in rows
                                                           if f"{key}_pct_error" in r), 2),
    }


def report(records: dict[tuple[int, int], dict[str, Any]], began: float, held_out: set[str]) -> dict[str, Any]:
    """The benchmark's JSON result over every usable recording (and the ``held_out`` ones apart)."""
    usable = [records[k] for k in sorted(records) if records[k]["exit_code"] == 0 and records[k]["wall_s"]]
    by_fraction, per_sweep = {}, {_key(r): {} for r in usable}
    for fraction in FRACTIONS:
        rows = [x for x in (evaluate(r, fraction) for r in usable) if x is not None]
        covered = [r["replayed_covered"] for r in rows if "replayed_covered" in r]
        by_fraction[f"{fraction:.0%}"] = {
            "replayed": {**summarize(rows, "replayed"),
                         "coverage_80": round(sum(covered) / len(covered), 3) if covered else None},
            "replayed_held_out": summarize([r for r in rows if r["sweep"] in held_out], "replayed"),
            "shown": summarize(rows, "shown"),
            "naive_elapsed_x_planned_over_ended": summarize(rows, "naive"),
        }
        for row in rows:
            per_sweep[row["sweep"]][f"{fraction:.0%}"] = row
    first = by_fraction["25%"]["replayed"]
    measured = {k: first.get(k) for k in ("sweeps", "within_25pct", "median_abs_pct_error", "max_abs_pct_error")}
    settings = [{"sweep": _key(r), "wall_s": r["wall_s"], "statuses": _count(r["statuses"]),
                 "model": r["config"]["model"].split(".")[-1], "data": r["config"]["data"]["train"].split("/")[-1],
                 "search": r["config"]["search"], "scheduler": r["config"]["scheduler"],
                 "trial": r["config"]["trial"]} for r in usable]
    return {
        "benchmark": "progress_sweeps",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count()},
        "method": "real hpo tune sweeps on this machine, recorded (progress journal + JSON progress lines) and "
                  "evaluated when ceil(f x planned) trials had ended; replayed = today's estimator on the journal "
                  "up to that moment; shown = the forecast the user saw; naive = elapsed x planned / ended",
        "recorded": len(records),
        "usable": len(usable),
        "failed_recordings": [_key(r) for r in records.values() if r not in usable],
        "held_out": sorted(held_out),
        "by_trials_ended": by_fraction,
        "targets": [
            {"name": "sweeps_within_25pct_at_25pct_ended",
             "target": f"at 25 % of trials ended, elapsed + median remaining within 25 % of the true wall time on "
                       f">= {MIN_SWEEPS} real recorded sweeps of varied settings",
             "measured": measured, "met": (first.get("within_25pct") or 0) >= MIN_SWEEPS},
            {"name": "every_sweep_within_25pct_at_25pct_ended",
             "target": "the same on every recorded sweep (the stricter reading)",
             "measured": measured,
             "met": first.get("sweeps", 0) >= MIN_SWEEPS and first.get("within_25pct") == first.get("sweeps")},
        ],
        "sweeps": settings,
        "per_sweep": per_sweep,
        "wall_s": round(time.time() - began, 1),
    }


def _key(record: dict[str, Any]) -> str:
    return f"{record['seed']}-{record['index']}"


def _count(statuses: list[str | None]) -> dict[str, int]:
    out: dict[str, int] = {}
    for status in statuses:
        out[str(status)] = out.get(str(status), 0) + 1
    return out


def print_table(result: dict[str, Any], out: str) -> None:
    """A short summary: per fraction of trials ended, the three forecasts' errors."""
    print(f"\n{result['usable']} real sweeps (of {result['recorded']} recorded)")
    print(f"{'ended':>6} {'forecast':>9} {'median err':>11} {'p90 err':>8} {'max err':>8} {'within25':>9}")
    for fraction, row in result["by_trials_ended"].items():
        for key in ("replayed", "replayed_held_out", "shown", "naive_elapsed_x_planned_over_ended"):
            s = row[key]
            if s.get("sweeps"):
                name = "held-out" if key.endswith("held_out") else key.split("_")[0]
                print(f"{fraction:>6} {name:>9} {s['median_abs_pct_error']:>10}% "
                      f"{s['p90_abs_pct_error']:>7}% {s['max_abs_pct_error']:>7}% {s['within_25pct']:>4}/{s['sweeps']}")
    for t in result["targets"]:
        print(f"[{'met' if t['met'] else 'NOT met'}] {t['name']}: {t['measured']}")
    print(out)


def main() -> None:
    """Records the missing sweeps (unless ``--evaluate-only``), evaluates every recording, writes the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sweeps", type=int, default=24, help="sweeps to have recorded (indices 0..N-1)")
    parser.add_argument("--seed", type=int, default=0, help="seed of the sweeps' settings")
    parser.add_argument("--timeout", type=int, default=900, help="seconds one sweep may take")
    parser.add_argument("--evaluate-only", action="store_true", help="evaluate the recordings, run nothing")
    parser.add_argument("--held-out-seeds", nargs="*", type=int, default=list(HELD_OUT_SEEDS), metavar="SEED",
                        help="seeds whose sweeps no estimator choice was made on, reported apart")
    parser.add_argument("--data", default=str(Path.home() / ".cache" / "hpo" / "forecast_examples"))
    parser.add_argument("--record", default=str(ROOT / "benchmarks" / "results" / "progress_sweeps.jsonl.gz"))
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "progress_sweeps.json"))
    args = parser.parse_args()
    began = time.time()
    path = Path(args.record)
    records = load_records(path)
    if not args.evaluate_only:
        data = example_data(Path(args.data))
        for index in range(args.sweeps):
            if (args.seed, index) in records:
                continue
            rec = record_sweep(args.seed, index, data, args.timeout)
            records[(args.seed, index)] = rec
            with gzip.open(path, "at") as handle:  # a gzip member per sweep: the file stays one gzip stream
                handle.write(json.dumps(rec) + "\n")
            print(f"sweep {index}: exit {rec['exit_code']}, wall {rec['wall_s']} s, {_count(rec['statuses'])}",
                  flush=True)
    held_out = {_key(r) for r in records.values() if r["seed"] in args.held_out_seeds}
    result = report(records, began, held_out)
    write_report(result, args.out)
    print_table(result, args.out)


if __name__ == "__main__":
    main()
