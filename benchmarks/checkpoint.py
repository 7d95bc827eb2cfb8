"""Do per-epoch checkpoints of a large model to object storage stall training?

Runs one real 2-worker trial of a ~100 MB model (an MLP with a 5000×5000 hidden layer on the digits)
with ``--storage s3://…`` on a moto S3 server on 127.0.0.1, twice per setting, alternating:

- ``every_epoch``: ``trial.checkpoint_every_epoch: true`` (hpo's default): rank 0 hands over an epoch's
  weights only when the driver has persisted the previous checkpoint, so at most one upload is in flight
  and training never waits for one;
- ``final_only``: ``trial.checkpoint_every_epoch: false``: only the final checkpoint (with the model).

The figure is the steady-state epoch time on rank 0 (median gap between consecutive epoch ends, epoch 2
on, which includes handing the weights over) and their ratio; also how many epochs got a checkpoint, the
checkpoint's size, and how long the trial waited at its end for the final checkpoint. Writes
``benchmarks/results/checkpoint.json``. Never asserts on time; run it alone on the machine.
"""

from __future__ import annotations

import argparse
import itertools
import os
import platform
import statistics
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _report import write_report  # noqa: E402

HIDDEN = 5000  # 64·5000 + 5000·5000 + 5000·10 weights ≈ 25.4 M float32 ≈ 101 MB

MODEL = f'''
import tf_keras as keras


def build(params, input_shape, num_classes):
    return keras.Sequential([
        keras.Input(input_shape),
        keras.layers.Dense({HIDDEN}, activation="relu"),
        keras.layers.Dense({HIDDEN}, activation="relu"),
        keras.layers.Dense(num_classes, activation="softmax"),
    ])
'''


def sweep(name: str, every_epoch: bool, epochs: int) -> dict:
    return {
        "name": name,
        "model": "bigmodel:build",
        "data": {"train": "builtin:digits", "validation_fraction": 0.2},
        "objective": {"metric": "val_accuracy", "mode": "max"},
        "search": {"algorithm": "random", "num_samples": 1, "max_concurrent": 1, "seed": 1},
        "scheduler": {"type": "fifo"},
        "trial": {
            "workers": 2, "cpus_per_worker": 1, "max_epochs": epochs, "batch_size_per_worker": 128,
            "early_stopping": {"patience": 1000}, "checkpoint_every_epoch": every_epoch,
        },
        "space": {"learning_rate": {"type": "float", "low": 0.0001, "high": 0.0001001}},
    }


def trial_history(storage: str, name: str):
    """The trial's ``progress.csv`` rows, read from the storage."""
    import pandas as pd
    import pyarrow.fs as pafs

    from hpo.storage import Storage

    fs, base = Storage.parse(storage).filesystem()
    files = [i.path for i in fs.get_file_info(pafs.FileSelector(f"{base}/{name}", recursive=True))
             if i.path.endswith("/progress.csv")]
    with fs.open_input_stream(files[0]) as f:
        return pd.read_csv(f)


def run_one(storage: str, name: str, every_epoch: bool, epochs: int) -> dict:
    import hpo
    from hpo.config import parse_sweep

    config = parse_sweep(sweep(name, every_epoch, epochs))
    started = time.time()
    hpo.tune(config, storage=storage, mlflow_uri="sqlite:///mlflow.db")
    wall = time.time() - started
    history = trial_history(storage, name)
    ends = list(history["epoch_end_time"])
    gaps = [b - a for a, b in itertools.pairwise(ends[1:])]  # from epoch 2 on: no tracing, no first read
    return {
        "epoch_s_median": round(statistics.median(gaps), 3),
        "epoch_s": [round(g, 3) for g in gaps],
        "checkpointed_epochs": int(history["checkpointed"].sum()),
        "epochs": len(ends),
        "final_wait_s": round(float(history["timestamp"].iloc[-1] - ends[-1]), 2),
        "sweep_wall_s": round(wall, 1),
    }


def main() -> None:
    """Runs the trials and writes the JSON result."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--rounds", type=int, default=1)
    parser.add_argument("--storage", choices=("s3", "file"), default="s3",
                        help="s3: a moto S3 server on this machine; file: a local directory (no object store: "
                             "what hpo's own hand-over costs, without an S3 server's CPU on the same cores)")
    parser.add_argument("--out", default=None, help="default: benchmarks/results/checkpoint[_file].json")
    args = parser.parse_args()
    suffix = "" if args.storage == "s3" else "_file"
    args.out = args.out or str(ROOT / "benchmarks" / "results" / f"checkpoint{suffix}.json")

    from tests.integration.s3 import MotoServer

    runs: dict[str, list[dict]] = {"every_epoch": [], "final_only": []}
    with tempfile.TemporaryDirectory(prefix="hpo-bench-ckpt-") as scratch:
        # nice 19, below Ray's workers (nice 15): on these 2 cores the in-process S3 server would otherwise
        # take CPU from the two training workers, which an object store on other machines does not.
        server = MotoServer(Path(scratch) / "moto.log", nice=19).start()
        os.environ.update(server.env())
        server.bucket("bench")
        (Path(scratch) / "bigmodel.py").write_text(MODEL)
        cwd = os.getcwd()
        os.chdir(scratch)
        sys.path.insert(0, scratch)
        os.environ["PYTHONPATH"] = os.pathsep.join([scratch, str(ROOT), os.environ.get("PYTHONPATH", "")])
        try:
            for round_ in range(args.rounds):
                for setting in ("every_epoch", "final_only"):
                    name = f"ckpt-{setting.replace('_', '-')}-{round_}"
                    storage = "s3://bench/runs" if args.storage == "s3" else str(Path(scratch) / "runs")
                    runs[setting].append(run_one(storage, name, setting == "every_epoch", args.epochs))
                    print(setting, runs[setting][-1], flush=True)
            size = sum(os.path.getsize(p) for p in Path(scratch).rglob("best_model/model.keras")) / len(
                list(Path(scratch).rglob("best_model/model.keras")))
        finally:
            os.chdir(cwd)
            server.stop()

    medians = {k: statistics.median(r["epoch_s_median"] for r in v) for k, v in runs.items()}
    result = {
        "what": "steady-state epoch time of a ~100 MB model, per-epoch checkpoints vs final only, to "
                + ("S3 (a moto server on this machine, nice 19)" if args.storage == "s3" else "a local directory"),
        "storage": args.storage,
        "model_file_mb": round(size / 2**20, 1),
        "epoch_s": {k: round(v, 3) for k, v in medians.items()},
        "ratio_every_epoch_to_final_only": round(medians["every_epoch"] / medians["final_only"], 3),
        "target_ratio": 1.05,
        "runs": runs,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version()},
        "command": "python benchmarks/checkpoint.py" + ("" if args.storage == "s3" else " --storage file"),
    }
    write_report(result, args.out)
    print(f"ratio {result['ratio_every_epoch_to_final_only']} ({medians})")


if __name__ == "__main__":
    main()
