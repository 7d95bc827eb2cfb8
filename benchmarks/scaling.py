"""Trial runtime figures: data-parallel scaling, cold vs warm trial start-up, sweep efficiency.

Writes ``benchmarks/results/scaling.json``:

- ``scaling``: median epoch time of a compute-bound MLP (synthetic 256-feature data) with 1 worker × 1 CPU,
  2 workers × 1 CPU (same per-worker batch, so the same work per epoch split in two), and 1 worker × 2
  CPUs for reference; ``speedup`` = 1×1 / 2×1 (target ≥ 1.7 on 2 cores).
- ``startup``: trial start → first epoch, for the cold first trial and the warm ones after it (target
  warm ≤ 2 s).
- ``efficiency``: a FIFO sweep of ~30 s trials, one at a time: sum of in-trial training time / (sweep wall
  × concurrent slots) (target ≥ 0.90).

Measures only; never asserts on time. Takes about 6 minutes on 2 cores.
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


def _sweep(name: str, train: str, val: str, *, workers: int, cpus: float, epochs: int, samples: int,
           units: int, layers: int, batch: int) -> dict[str, Any]:
    return {
        "name": name,
        "model": "hpo.models.mlp:build",
        "data": {"train": train, "validation": val},
        "search": {"algorithm": "random", "num_samples": samples, "max_concurrent": 1, "seed": 0},
        "scheduler": {"type": "fifo"},
        "trial": {"workers": workers, "cpus_per_worker": cpus, "max_epochs": epochs, "batch_size_per_worker": batch,
                  "early_stopping": {"patience": epochs}},
        "space": {"learning_rate": {"type": "float", "low": 1e-4, "high": 1e-3, "log": True},
                  "units": {"type": "categorical", "choices": [units]},
                  "layers": {"type": "categorical", "choices": [layers]}},
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
    parser.add_argument("--rows", type=int, default=24_000)
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "scaling.json"))
    args = parser.parse_args()

    import hpo._env  # noqa: F401
    from hpo.data import path_to_url, write_dataset
    from hpo.sweep import start_ray

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
        start_ray(num_cpus=os.cpu_count())
        storage = work / "runs"

        scaling = {}
        for label, workers, cpus in (("1x1", 1, 1), ("2x1", 2, 1), ("1x2", 1, 2)):
            _, hist = _run(_sweep(f"scale-{label}", train, val, workers=workers, cpus=cpus, epochs=3, samples=1,
                                  units=1024, layers=3, batch=64), storage)
            later = [float(v) for h in hist for v in h["epoch_time_s"].iloc[1:]]
            scaling[label] = {"epoch_s_median": round(statistics.median(later), 3), "epochs": later}
        scaling["speedup_2x1_vs_1x1"] = round(scaling["1x1"]["epoch_s_median"] / scaling["2x1"]["epoch_s_median"], 3)
        report["scaling"] = scaling

        _, hist = _run(_sweep("startup", train, val, workers=2, cpus=1, epochs=1, samples=6, units=64, layers=1,
                              batch=256), storage)
        firsts = [h.iloc[0] for h in hist]
        cold = [float(r["startup_s"]) for r in firsts if not bool(r["warm_start"])]
        warm = [float(r["startup_s"]) for r in firsts if bool(r["warm_start"])]
        report["startup"] = {"cold_s": cold, "warm_s": warm,
                             "warm_s_median": round(statistics.median(warm), 3) if warm else None}

        summary, hist = _run(_sweep("efficiency", train, val, workers=2, cpus=1, epochs=6, samples=4, units=512,
                                    layers=3, batch=64), storage)
        training = sum(float(h["epoch_time_s"].sum()) for h in hist)
        trial_s = [float(h["epoch_time_s"].sum()) for h in hist]
        report["efficiency"] = {
            "trials": len(hist),
            "trial_training_s": [round(t, 2) for t in trial_s],
            "sweep_wall_s": summary["wall_time_s"],
            "concurrent_slots": 1,
            "efficiency": round(training / summary["wall_time_s"], 4),
        }
        import ray

        ray.shutdown()
        os.chdir(ROOT)
    report["load_avg_end"] = os.getloadavg()  # figures taken on a busy machine are not comparable
    write_report(report, args.out)


if __name__ == "__main__":
    main()
