"""Trial runtime figures: data-parallel scaling, cold vs warm trial start-up, sweep efficiency.

Writes ``benchmarks/results/scaling.json``:

- ``scaling``: median epoch time (epochs 2-4) of a compute-bound model (``hpo.models.cnn``, 2 blocks of
  16/32 filters, on synthetic 28×28 images) with 1 worker × 1 CPU, 2 workers × 1 CPU (same per-worker batch,
  so the same work per epoch split in two), and 1 worker × 2 CPUs for reference, for each per-worker batch
  in ``--batches``; ``speedup`` = 1×1 / 2×1 (target ≥ 1.7 on 2 cores).
- ``startup``: trial start → first epoch, for the cold first trial and the warm ones after it (target
  warm ≤ 2 s).
- ``efficiency``: a FIFO sweep of six trials (3×512 MLP; 13–50 s each, depending on the CPU), one at a time:
  sum of in-trial training time / (sweep wall × concurrent slots) (target ≥ 0.90), with where the rest went
  (before the first epoch, between trials, after the last).

Measures only; never asserts on time. Takes 5–15 minutes on 2 cores (5 on 2026-11-24's CPU).
"""

from __future__ import annotations

import argparse
import os
import platform
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np
import pandas as pd
from _report import write_report

ROOT = Path(__file__).resolve().parents[1]


def _mlp(units: int, layers: int) -> dict[str, Any]:
    return {"units": {"type": "categorical", "choices": [units]},
            "layers": {"type": "categorical", "choices": [layers]}}


def _cnn(filters: int, blocks: int) -> dict[str, Any]:
    return {"filters": {"type": "categorical", "choices": [filters]},
            "blocks": {"type": "categorical", "choices": [blocks]}}


def _sweep(name: str, train: str, val: str, *, workers: int, cpus: float, epochs: int, samples: int,
           model: str, space: dict[str, Any], batch: int) -> dict[str, Any]:
    return {
        "name": name,
        "model": f"hpo.models.{model}:build",
        "data": {"train": train, "validation": val},
        "search": {"algorithm": "random", "num_samples": samples, "max_concurrent": 1, "seed": 0},
        "scheduler": {"type": "fifo"},
        "trial": {"workers": workers, "cpus_per_worker": cpus, "max_epochs": epochs, "batch_size_per_worker": batch,
                  "early_stopping": {"patience": epochs}},
        "space": {"learning_rate": {"type": "float", "low": 1e-4, "high": 1e-3, "log": True}, **space},
    }


def _histories(storage: Path, name: str) -> list[pd.DataFrame]:
    return [pd.read_csv(p) for p in sorted((storage / name).glob("*/progress.csv"))]


def _run(config: dict[str, Any], storage: Path) -> tuple[dict[str, Any], list[pd.DataFrame]]:
    import hpo

    result = hpo.tune(hpo.SweepConfig.model_validate(config), storage=storage)
    return result.summary, _histories(storage, config["name"])


def main() -> None:
    """Runs the three measurements and writes the JSON result."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=24_000, help="Rows of the MLP dataset.")
    parser.add_argument("--image-rows", type=int, default=12_000, help="Rows of the CNN (scaling) dataset.")
    parser.add_argument("--batches", default="64,128",
                        help="Per-worker batches of the scaling runs, comma-separated (one set of runs each).")
    parser.add_argument("--trials", type=int, default=6, help="Trials of the efficiency sweep.")
    parser.add_argument("--parts", default="scaling,startup,efficiency", help="Comma-separated parts to run.")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "scaling.json"))
    args = parser.parse_args()

    from hpo import _env

    _env.apply()  # TF_USE_LEGACY_KERAS before TensorFlow loads
    from hpo.data import path_to_url, write_dataset
    from hpo.ray_session import start_ray

    report: dict[str, Any] = {
        "benchmark": "scaling",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "machine": {"cpus": os.cpu_count(), "platform": platform.platform(), "python": platform.python_version()},
        "load_avg_start": os.getloadavg(),
    }
    with tempfile.TemporaryDirectory(prefix="hpo-bench-") as scratch:
        work = Path(scratch)
        os.chdir(work)
        rng = np.random.default_rng(0)
        x = rng.normal(size=(args.rows, 256)).astype(np.float32)
        y = (x[:, :10].argmax(axis=1)).astype(np.int64)
        train, val = path_to_url(work / "train"), path_to_url(work / "val")
        write_dataset((x, y), train)
        write_dataset((x[:2400], y[:2400]), val)
        # Compute-bound: a small CNN on 28x28 images (~25k weights, ~10 MFLOP per example).
        images = rng.normal(size=(args.image_rows, 28, 28)).astype(np.float32)
        labels = (images[:, 10:18, 10:18].mean(axis=(1, 2)) > 0).astype(np.int64)
        img_train, img_val = path_to_url(work / "img_train"), path_to_url(work / "img_val")
        write_dataset((images, labels), img_train)
        write_dataset((images[:1200], labels[:1200]), img_val)
        start_ray(num_cpus=os.cpu_count())
        storage = work / "runs"

        parts = set(args.parts.split(","))
        scaling: dict[str, Any] = {}
        for batch in [int(b) for b in args.batches.split(",")] if "scaling" in parts else ():
            runs: dict[str, Any] = {"batch_size_per_worker": batch}
            for label, workers, cpus in (("1x1", 1, 1), ("2x1", 2, 1), ("1x2", 1, 2)):
                _, hist = _run(_sweep(f"scale-{batch}-{label}", img_train, img_val, workers=workers, cpus=cpus,
                                      epochs=4, samples=1, model="cnn", space=_cnn(16, 2), batch=batch), storage)
                later = [float(v) for h in hist for v in h["epoch_time_s"].iloc[1:]]
                runs[label] = {"epoch_s_median": round(statistics.median(later), 3), "epochs": later}
            runs["speedup_2x1_vs_1x1"] = round(runs["1x1"]["epoch_s_median"] / runs["2x1"]["epoch_s_median"], 3)
            scaling[f"batch_{batch}"] = runs
        if scaling:
            report["scaling"] = scaling

        if "startup" in parts:
            _, hist = _run(_sweep("startup", train, val, workers=2, cpus=1, epochs=1, samples=6, model="mlp",
                                  space=_mlp(64, 1), batch=256), storage)
            firsts = [h.iloc[0] for h in hist]
            cold = [float(r["startup_s"]) for r in firsts if not bool(r["warm_start"])]
            warm = [float(r["startup_s"]) for r in firsts if bool(r["warm_start"])]
            report["startup"] = {"cold_s": cold, "warm_s": warm,
                                 "warm_s_median": round(statistics.median(warm), 3) if warm else None}

        if "efficiency" in parts:
            began = time.time()
            summary, hist = _run(_sweep("efficiency", train, val, workers=2, cpus=1, epochs=6, samples=args.trials,
                                        model="mlp", space=_mlp(512, 3), batch=64), storage)
            ended = time.time()
            training = sum(float(h["epoch_time_s"].sum()) for h in hist)
            hist.sort(key=lambda h: float(h["timestamp"].iloc[0]))
            trial_s = [float(h["epoch_time_s"].sum()) for h in hist]
            # Where the rest of the wall clock went: before the first epoch, between trials, after the last.
            starts = [float(h["timestamp"].iloc[0] - h["epoch_time_s"].iloc[0]) for h in hist]
            ends = [float(h["timestamp"].iloc[-1]) for h in hist]
            report["efficiency"] = {
                "trials": len(hist),
                "trial_training_s": [round(t, 2) for t in trial_s],
                "sweep_wall_s": summary["wall_time_s"],
                "concurrent_slots": 1,
                "efficiency": round(training / summary["wall_time_s"], 4),
                "tune_call_s": round(ended - began, 2),
                "before_first_epoch_s": round(starts[0] - began, 2),
                "between_trials_s": [round(b - a, 2) for a, b in zip(ends[:-1], starts[1:], strict=True)],
                "after_last_epoch_s": round(ended - ends[-1], 2),
                # Driver report time minus the workers' epoch end: lag here is time the driver fell behind.
                "report_lag_s_median": round(statistics.median(
                    float(v) for h in hist for v in h.get("report_lag_s", pd.Series(dtype=float)).dropna()
                ), 3) if any("report_lag_s" in h for h in hist) else None,
            }
        import ray

        ray.shutdown()
        os.chdir(ROOT)
    report["load_avg_end"] = os.getloadavg()  # figures taken on a busy machine are not comparable
    write_report(report, args.out)


if __name__ == "__main__":
    main()
