"""How well ``hpo plan`` foresees a sweep's wall time at a shape, from another shape's sweep only.

Each *group* is one sweep file and seed (an MLP on ``builtin:digits``, TPE + ASHA, patience 2) run for real
with ``hpo tune`` (the whole stack: Ray, Horovod/Gloo workers, Petastorm, MLflow) at several shapes: one
trial at a time of one worker, two at a time, two workers per trial, a per-worker batch twice as large.
Every ordered pair (A, B) of a group's sweeps is one pair: ``hpo.plan`` is given A's state directory only
(its journal, ``sweep.yaml``, ``summary.json``) and B's sweep file with B's shape as the one candidate, and
its forecast is compared with B's real wall time, from the ``hpo tune`` command's start to its end (Ray's
start and stop and the best model's logging included).

Reported: the median and worst absolute error of the median forecast, how often the 80 % interval holds
the real time, and the Brier score of ``p_meet`` over deadlines drawn around each real time (0.6-1.4 ×)
against the naive rule "A's wall time × A's worker slots / B's" (a point forecast: ``p_meet`` 0 or 1), per
group and for the held-out groups apart (``--held-out``: recorded after the method was frozen). Also the
seconds ``hpo plan`` takes with history (a subprocess, the user's view).

Recordings (``--recordings``, JSON lines, one per real sweep: the settings, the journal, the summary's
time, the command's wall time) are kept, so ``--evaluate-only`` re-plans them with today's code; a rerun
records only the sweeps missing there. The machine is shared while it runs: say so with the figures.
"""

from __future__ import annotations

import argparse
import gzip
import json
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

from hpo.plan import Shape
from hpo.plan.planner import plan

ROOT = Path(__file__).resolve().parents[1]
#: A group's shapes: (trials at once, workers per trial, per-worker batch).
SHAPES = ((1, 1, 32), (2, 1, 32), (1, 2, 32), (1, 1, 64))
#: Deadlines around each real wall time, as fractions of it, for the Brier score.
DEADLINES = (0.6, 0.7, 0.8, 0.9, 1.0, 1.1, 1.2, 1.3, 1.4)


def sweep_config(group: int, shape: tuple[int, int, int], trials: int, epochs: int) -> dict[str, Any]:
    """Group ``group``'s sweep file at ``shape``."""
    at_once, workers, batch = shape
    return {
        "name": f"plan-{group}-{at_once}x{workers}w-b{batch}",
        "model": "hpo.models.mlp:build",
        "data": {"train": "builtin:digits", "validation_fraction": 0.2},
        "objective": {"metric": "val_accuracy", "mode": "max"},
        "search": {"algorithm": "optuna-tpe", "num_samples": trials, "max_concurrent": at_once, "seed": group},
        "scheduler": {"type": "asha", "grace_period": 1, "reduction_factor": 2},
        "trial": {"workers": workers, "cpus_per_worker": 1.0, "max_epochs": epochs, "batch_size_per_worker": batch,
                  "early_stopping": {"patience": 2}},
        "space": {"learning_rate": {"type": "float", "low": 1e-4, "high": 3e-2, "log": True},
                  "units": {"type": "int", "low": 16, "high": 128, "step": 16}},
    }


def record(group: int, shape: tuple[int, int, int], trials: int, epochs: int, timeout: int) -> dict[str, Any]:
    """Runs one sweep for real and returns its recording."""
    config = sweep_config(group, shape, trials, epochs)
    work = Path(tempfile.mkdtemp(prefix="hpo-plan-bench-"))
    try:
        path = work / "sweep.yaml"
        path.write_text(yaml.safe_dump(config, sort_keys=False))
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        load_before = os.getloadavg()[0]
        began = time.time()
        proc = subprocess.run([sys.executable, "-m", "hpo.cli.main", "tune", str(path), "--storage",
                               str(work / "runs"), "--quiet"], cwd=work, env=env, capture_output=True, text=True,
                              timeout=timeout)
        wall = time.time() - began
        state = work / "runs" / config["name"]
        summary = state / "summary.json"
        return {
            "group": group, "shape": list(shape), "config": config, "exit_code": proc.returncode,
            "command_s": round(wall, 2), "began": began,
            "events": (state / "progress_events.jsonl").read_text() if (state / "progress_events.jsonl").is_file()
            else "",
            "saved_config": (state / "sweep.yaml").read_text() if (state / "sweep.yaml").is_file() else "",
            "summary": summary.read_text() if summary.is_file() else "",
            "summary_mtime": summary.stat().st_mtime if summary.is_file() else None,
            "stderr_tail": proc.stderr[-2000:] if proc.returncode else "",
            "recorded": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
            "load_average": [round(load_before, 1), round(os.getloadavg()[0], 1)],  # 1-min, before and after
        }
    finally:
        shutil.rmtree(work, ignore_errors=True)  # the benchmark's own temporary directory


def restore(rec: dict[str, Any], root: Path) -> Path:
    """A recording as a sweep state directory under ``root`` (the summary's time kept).

    A journal recorded before ``hpo tune`` wrote its ``exit`` event gets one at the command's end as this
    script measured it (the first sweep's own end, which its journal now records).
    """
    state = root / rec["config"]["name"]
    state.mkdir(parents=True, exist_ok=True)
    events = rec["events"]
    if '"event": "exit"' not in events:  # recorded before the journal had the command's end: as measured here
        events += json.dumps({"event": "exit", "t": rec["began"] + rec["command_s"]}) + "\n"
    (state / "progress_events.jsonl").write_text(events)
    (state / "sweep.yaml").write_text(rec["saved_config"])
    summary = state / "summary.json"
    summary.write_text(rec["summary"])
    os.utime(summary, (rec["summary_mtime"], rec["summary_mtime"]))
    return state


def evaluate(recs: list[dict[str, Any]], samples: int) -> list[dict[str, Any]]:
    """Every ordered pair of each group's recordings, planned from the first's journal only."""
    rows = []
    root = Path(tempfile.mkdtemp(prefix="hpo-plan-eval-"))
    try:
        dirs = {id(r): restore(r, root) for r in recs}
        for a in recs:
            for b in recs:
                if a is b or a["group"] != b["group"]:
                    continue
                at_once, workers, batch = b["shape"]
                shape = Shape(workers, at_once, 0.0, 1.0, batch)
                config = root / f"{b['config']['name']}.yaml"
                config.write_text(yaml.safe_dump(b["config"], sort_keys=False))
                real = b["command_s"]
                clock = time.perf_counter()
                result = plan(config, history=[dirs[id(a)]], shapes=[shape], samples=samples)
                seconds = time.perf_counter() - clock
                option = result.options[0]
                deadlines = [real * f for f in DEADLINES]
                p_meet = [plan(config, history=[dirs[id(a)]], shapes=[shape], samples=samples,
                               deadline_s=d).options[0].p_meet for d in deadlines]
                slots_a = a["shape"][0] * a["shape"][1]
                slots_b = at_once * workers
                naive = a["command_s"] * slots_a / slots_b
                met = [float(real <= d) for d in deadlines]
                rows.append({
                    "group": a["group"], "from": a["config"]["name"], "to": b["config"]["name"],
                    "from_shape": a["shape"], "to_shape": b["shape"], "real_s": real, "from_real_s": a["command_s"],
                    "median_s": round(option.wall_s_median, 2), "low_s": round(option.wall_s_low, 2),
                    "high_s": round(option.wall_s_high, 2),
                    "error": round((option.wall_s_median - real) / real, 4),
                    "inside": option.wall_s_low <= real <= option.wall_s_high,
                    "naive_s": round(naive, 2), "naive_error": round((naive - real) / real, 4),
                    "brier": round(float(np.mean([(p - m) ** 2 for p, m in zip(p_meet, met, strict=True)])), 4),
                    "naive_brier": round(float(np.mean([(float(naive <= d) - m) ** 2
                                                        for d, m in zip(deadlines, met, strict=True)])), 4),
                    "plan_s": round(seconds, 3),
                })
    finally:
        shutil.rmtree(root, ignore_errors=True)
    return rows


def summarize(rows: list[dict[str, Any]]) -> dict[str, Any]:
    """The figures of some pairs."""
    if not rows:
        return {"pairs": 0}
    errors = [abs(r["error"]) for r in rows]
    naive = [abs(r["naive_error"]) for r in rows]
    return {
        "pairs": len(rows),
        "median_abs_error": round(statistics.median(errors), 4),
        "worst_abs_error": round(max(errors), 4),
        "within_35pct": sum(e <= 0.35 for e in errors),
        "interval_coverage": round(sum(r["inside"] for r in rows) / len(rows), 4),
        "brier": round(statistics.mean(r["brier"] for r in rows), 4),
        "naive_brier": round(statistics.mean(r["naive_brier"] for r in rows), 4),
        "naive_median_abs_error": round(statistics.median(naive), 4),
        "median_signed_error": round(statistics.median(r["error"] for r in rows), 4),
    }


def plan_command_seconds(rec: dict[str, Any], other: dict[str, Any], repeats: int = 3) -> list[float]:
    """Seconds ``hpo plan B.yaml --from A`` takes as a command (a new interpreter each time)."""
    root = Path(tempfile.mkdtemp(prefix="hpo-plan-cli-"))
    try:
        restore(rec, root)
        config = root / "b.yaml"
        config.write_text(yaml.safe_dump(other["config"], sort_keys=False))
        env = {**os.environ, "PYTHONPATH": str(ROOT)}
        out = []
        for _ in range(repeats):
            began = time.perf_counter()
            subprocess.run([sys.executable, "-m", "hpo.cli.main", "plan", str(config), "--deadline", "1h",
                            "--from", rec["config"]["name"], "--storage", str(root)], check=True, env=env,
                           capture_output=True, timeout=120)
            out.append(round(time.perf_counter() - began, 3))
        return out
    finally:
        shutil.rmtree(root, ignore_errors=True)


def _open(path: Path, mode: str) -> Any:
    """The recordings file (gzip-compressed where its name ends in .gz; appending adds a gzip member)."""
    return gzip.open(path, mode) if path.suffix == ".gz" else path.open(mode)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--groups", type=int, nargs="+", default=[0], help="group seeds to record and evaluate")
    parser.add_argument("--held-out", type=int, nargs="*", default=[], help="groups recorded after the freeze")
    parser.add_argument("--trials", type=int, default=6)
    parser.add_argument("--epochs", type=int, default=4)
    parser.add_argument("--samples", type=int, default=1000)
    parser.add_argument("--timeout", type=int, default=600)
    parser.add_argument("--recordings", default=str(ROOT / "benchmarks" / "results" / "plan_sweeps.jsonl.gz"))
    parser.add_argument("--evaluate-only", action="store_true")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "plan.json"))
    parser.add_argument("--note", default="", help="what the report should say about how the groups were used")
    parser.add_argument("--machine", default="shared with other work while it ran (sweeps recorded under CPU "
                        "priority, /tmp/prio.sh); timings are disturbed",
                        help="how loaded the machine was while the recordings ran (said in the report)")
    args = parser.parse_args()
    path = Path(args.recordings)
    recs = [json.loads(line) for line in _open(path, "rt") if line.strip()] if path.is_file() else []
    have = {(r["group"], tuple(r["shape"])) for r in recs}
    if not args.evaluate_only:
        for group in args.groups:
            for shape in SHAPES:
                if (group, shape) in have:
                    continue
                rec = record(group, shape, args.trials, args.epochs, args.timeout)
                print(f"recorded {rec['config']['name']}: exit {rec['exit_code']}, {rec['command_s']} s", flush=True)
                if rec["exit_code"] != 0:
                    print(rec["stderr_tail"], file=sys.stderr)
                    continue
                recs.append(rec)
                with _open(path, "at") as handle:
                    handle.write(json.dumps(rec) + "\n")
    recs = [r for r in recs if r["group"] in set(args.groups) | set(args.held_out) and r["exit_code"] == 0]
    rows = evaluate(recs, args.samples)
    held = set(args.held_out)
    cli = plan_command_seconds(recs[0], recs[1]) if len(recs) > 1 else []
    report = {
        "benchmark": "plan",
        "machine": f"{platform.machine()}, {os.cpu_count()} cores, {args.machine}",
        "python": sys.version.split()[0],
        "method": "hpo.plan from the first sweep's journal only; wall time from the hpo tune command's start to its "
                  "end; pairs are ordered pairs of one group's sweeps (same file and seed, shapes "
                  f"{[list(s) for s in SHAPES]} as [trials at once, workers per trial, per-worker batch])",
        "trials_per_sweep": args.trials, "max_epochs": args.epochs,
        "note": args.note,
        "sweeps": [{"name": r["config"]["name"], "group": r["group"], "shape": r["shape"], "command_s": r["command_s"],
                    "recorded": r.get("recorded"), "load_average": r.get("load_average")} for r in recs],
        "development_groups": sorted({r["group"] for r in recs} - held),
        "held_out_groups": sorted(held),
        "all": summarize(rows),
        "per_group": {str(g): summarize([r for r in rows if r["group"] == g])
                      for g in sorted({r["group"] for r in rows})},
        "development": summarize([r for r in rows if r["group"] not in held]),
        "held_out": summarize([r for r in rows if r["group"] in held]),
        "targets": {"median_abs_error": 0.15, "worst_abs_error": 0.35, "interval_coverage": [0.7, 0.9],
                    "brier": "below naive_brier", "plan_command_s": 2.0, "pairs": 12},
        "plan_command_s": cli,
        "plan_call_s_median": round(statistics.median(r["plan_s"] for r in rows), 3) if rows else None,
        "pairs": rows,
    }
    write_report(report, args.out)


if __name__ == "__main__":
    main()
