"""Synthetic past sweeps for the plan's tests: a state directory with sweep.yaml, a journal and summary.json."""

from __future__ import annotations

import json
import os
from pathlib import Path
from typing import Any

import yaml

from tests.conftest import base_sweep


def sweep_file(path: Path, *, name: str = "p", trials: int = 8, at_once: int = 1, workers: int = 1,
               max_epochs: int = 1, batch: int = 32, patience: int = 50, scheduler: str = "fifo",
               cost: dict[str, float] | None = None) -> Path:
    """Writes a sweep file of this shape and returns its path."""
    data: dict[str, Any] = base_sweep(
        name=name,
        search={"algorithm": "random", "num_samples": trials, "max_concurrent": at_once, "seed": 0},
        scheduler={"type": scheduler},
        trial={"workers": workers, "cpus_per_worker": 1.0, "max_epochs": max_epochs,
               "batch_size_per_worker": batch, "early_stopping": {"patience": patience}},
    )
    if cost:
        data["cost"] = cost
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(yaml.safe_dump(data))
    return path


def past_sweep(directory: Path, *, epochs: list[list[float]], name: str = "p", at_once: int = 1,
               workers: int = 1, max_epochs: int = 1, batch: int = 32, startup_s: float = 0.0,
               warm_startup_s: float | None = None, launch_s: float = 0.0, before_s: float | None = None,
               after_s: float | None = None, handover_s: float = 0.0, t0: float = 1_800_000_000.0,
               **file: Any) -> Path:
    """A finished sweep in ``directory``: trial ``i`` trains ``epochs[i]`` (seconds per epoch), FIFO in its slots.

    Every trial's value rises each epoch (no early stop); trials start as slots free up, the first
    ``at_once`` after ``startup_s``, the later (warm) ones ``handover_s`` after their slot's trial ended and
    then after ``warm_startup_s`` (default the same);
    the journal's process started ``before_s`` before the sweep and ``summary.json`` is written
    ``after_s`` after the last trial ended.
    """
    directory.mkdir(parents=True, exist_ok=True)
    sweep_file(directory / "sweep.yaml", name=name, trials=len(epochs), at_once=at_once, workers=workers,
               max_epochs=max_epochs, batch=batch, **file)
    plan = {"planned_trials": len(epochs), "max_concurrent": at_once, "max_epochs": max_epochs, "mode": "max",
            "patience": 50, "min_delta": 0.0, "goal": None, "scheduler": file.get("scheduler", "fifo"),
            "grace_period": 1, "reduction_factor": 2.0, "time_budget_s": None, "elapsed_s": 0.0,
            "cpus_per_trial": float(workers), "gpus_per_trial": 0.0, "cost_per_cpu_hour": 0.0,
            "cost_per_gpu_hour": 0.0}
    head = {"event": "sweep", "t": t0, "name": name, "metric": "val_accuracy", "samples_per_epoch": 100,
            "plan": plan, "process_started": None if before_s is None else t0 - before_s}
    events = [head]
    free = [t0 + launch_s] * at_once
    for i, seconds in enumerate(epochs):
        slot = min(range(at_once), key=lambda s: free[s])
        start = free[slot] + (handover_s if i >= at_once else 0.0)
        trial = f"t{i:03d}"
        events.append({"event": "start", "t": start, "trial": trial, "params": {"i": i}})
        now = start + (startup_s if i < at_once or warm_startup_s is None else warm_startup_s)
        for epoch, s in enumerate(seconds, 1):
            now += s
            events.append({"event": "result", "t": now, "trial": trial, "epoch": epoch, "value": 0.1 * epoch,
                           "seconds": s})
        events.append({"event": "end", "t": now, "trial": trial, "status": "completed"})
        free[slot] = now
    events.sort(key=lambda e: e["t"])
    (directory / "progress_events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in events))
    summary = directory / "summary.json"
    summary.write_text(json.dumps({"name": name, "status": "finished", "trials": []}))
    last = max(free)
    if after_s is not None:
        os.utime(summary, (last + after_s, last + after_s))
    else:
        os.utime(summary, (last + 10_000, last + 10_000))  # too late to be the sweep's own end: unknown
    return directory
