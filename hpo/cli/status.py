"""``hpo status NAME``: a sweep's state, live while it runs (``progress.json``), from ``summary.json`` after."""

from __future__ import annotations

import json
import time
from typing import Annotated, Any

import typer
from rich.console import Console

from hpo.cli.errors import one_line_errors
from hpo.cli.options import StorageOption
from hpo.errors import ConfigError
from hpo.options import summary_path
from hpo.progress.live import PROGRESS_FILE, Snapshot, read_live
from hpo.progress.views import number, sweep_text, trial_text
from hpo.storage import DEFAULT_STORAGE, Storage
from hpo.sweep_summary import SweepSummary

#: A live state not updated for this long: its driver may be gone.
STALE_S = 60.0
console = Console(soft_wrap=True)


def live_or_summary(storage: Storage, name: str) -> tuple[Snapshot | None, SweepSummary | None]:
    """The sweep's live snapshot while it runs (else None) and its summary once it has one (else None).

    Raises:
        ConfigError: Neither exists, or the summary cannot be read.
    """
    live = read_live(storage.state_dir(name) / PROGRESS_FILE)
    path = summary_path(storage, name)
    if not path.is_file():
        storage.pull_state(name)
    summary = SweepSummary.read(path) if path.is_file() else None
    running = live is not None and live.state in ("starting", "running")
    if running and summary is not None and path.stat().st_mtime >= live.time:  # type: ignore[union-attr]
        running = False  # a resumed sweep's old summary is older than its live state
    if live is None and summary is None:
        raise ConfigError(f"{path}: (file): no sweep '{name}' there; run 'hpo tune' first or pass --storage")
    return (live if running or summary is None else None), summary


def _summary_status(name: str, summary: SweepSummary) -> dict[str, Any]:
    """``hpo status --json`` of an ended sweep (docs/cli.md)."""
    best = summary.best
    return {"name": name, "state": summary.status, "trials": len(summary.trials),
            "statuses": summary.status_counts(), "best_trial_id": best.trial_id if best else None,
            "best_value": best.metric if best else None, "metric": summary.objective.metric,
            "wall_time_s": summary.wall_time_s}


@one_line_errors
def status(
    name: Annotated[str, typer.Argument(help="Sweep name.")],
    storage: StorageOption = DEFAULT_STORAGE,
    as_json: Annotated[bool, typer.Option("--json", help="One JSON object instead of lines.")] = False,
) -> None:
    """A sweep's state: live while it runs (from another terminal), from its summary.json after."""
    live, summary = live_or_summary(Storage.parse(storage), name)
    if live is not None:
        age = max(0.0, time.time() - live.time)
        if as_json:
            print(json.dumps({**live.to_dict(), "age_s": round(age, 1)}, default=str))
            return
        note = f"updated {age:.0f}s ago" if age < STALE_S else (
            f"no update for {age:.0f}s: its driver may have stopped ('hpo tune FILE --resume' continues it)")
        console.print(f"{name}: {live.state} ({note})", highlight=False)
        console.print(sweep_text(live), highlight=False)
        for trial in live.trials:
            if trial.status == "running":
                console.print("  " + trial_text(live, trial), highlight=False)
        return
    if summary is None:  # live_or_summary gives one of them
        return
    data = _summary_status(name, summary)
    if as_json:
        print(json.dumps(data, default=str))
        return
    counts = ", ".join(f"{v} {k}" for k, v in sorted(data["statuses"].items()))
    console.print(f"{name}: {data['state']}, {data['trials']} trials ({counts})", highlight=False)
    if data["best_trial_id"]:
        console.print(f"best: {data['best_trial_id']} {data['metric']}={number(data['best_value'])}", highlight=False)
    if summary.deadline is not None:
        from hpo.progress.deadline import clock_time

        d = summary.deadline
        last = "" if d.p_meet is None else f" (the last forecast gave p_meet {d.p_meet:.2f})"
        console.print(f"deadline {clock_time(d.deadline_at)}: {'met' if d.met else 'missed'}{last}", highlight=False)
