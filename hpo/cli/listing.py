"""``hpo list``: the sweeps in a storage, one line each: name, state, when, best value, trials.

A sweep's state is its ``summary.json``'s (``finished`` or ``interrupted``) unless a newer live state
says it runs: ``running`` while its driver is alive (``driver.json``, :mod:`hpo.driver`) or its
``progress.json`` is fresh, ``stale`` when neither holds and no summary was written (the driver was killed
outright: ``hpo tune FILE --resume`` continues it).
"""

from __future__ import annotations

import json
import time
from dataclasses import asdict, dataclass
from datetime import UTC, datetime
from pathlib import Path

from rich.console import Console
from rich.table import Table

from hpo.cli.errors import one_line_errors
from hpo.cli.options import JsonOption, StorageOption
from hpo.cli.status import STALE_S
from hpo.driver import DRIVER_FILE, running_driver
from hpo.errors import ConfigError
from hpo.options import SUMMARY_FILE
from hpo.progress.live import PROGRESS_FILE, read_live
from hpo.progress.views import number
from hpo.storage import DEFAULT_STORAGE, STATE_COPY, Storage
from hpo.sweep_summary import SweepSummary

console = Console(soft_wrap=True)
#: Files of which any marks a directory of the storage as a sweep's.
_MARKS = (SUMMARY_FILE, PROGRESS_FILE, DRIVER_FILE, "hpo_state.json", "sweep.yaml")


@dataclass(frozen=True)
class SweepEntry:
    """One sweep of ``hpo list``.

    Attributes:
        name: The sweep.
        state: ``running``, ``finished``, ``interrupted`` or ``stale``.
        when: Unix time of its summary (ended) or of its latest live state (running, stale).
        metric: The objective, or None if unknown.
        mode: ``max`` or ``min``, or None if unknown.
        best: The best trial's value so far, or None.
        best_trial_id: That trial, or None.
        trials: Trials it holds (ended and running).
    """

    name: str
    state: str
    when: float | None
    metric: str | None
    mode: str | None
    best: float | None
    best_trial_id: str | None
    trials: int


def sweep_names(storage: Storage) -> list[str]:
    """The sweeps in a storage, sorted: local state directories and, for a shared storage, its sweeps."""
    names = {p.parent.name for mark in _MARKS for p in storage.state_root.glob(f"*/{mark}")}
    if storage.shared:
        import pyarrow.fs as pafs

        fs, base = storage.filesystem()
        try:
            infos = fs.get_file_info(pafs.FileSelector(base, allow_not_found=True))
        except OSError:
            infos = []
        for info in infos:
            if info.type == pafs.FileType.Directory and fs.get_file_info(
                f"{info.path}/{STATE_COPY}/{SUMMARY_FILE}"
            ).type == pafs.FileType.File:
                names.add(info.base_name)
    return sorted(n for n in names if not n.startswith(("_", ".")))


def entry(storage: Storage, name: str) -> SweepEntry:
    """What ``hpo list`` shows of sweep ``name``."""
    state_dir = storage.state_dir(name)
    path = state_dir / SUMMARY_FILE
    if not path.is_file():
        storage.pull_state(name)
    summary = _read_summary(path)
    live = read_live(state_dir / PROGRESS_FILE)
    driver = running_driver(state_dir)
    newer = live is not None and (summary is None or live.time > path.stat().st_mtime)
    if live is not None and newer and live.state in ("starting", "running"):
        fresh = driver is not None or time.time() - live.time < STALE_S
        return SweepEntry(name, "running" if fresh else "stale", live.time, live.metric, live.mode, live.best_value,
                          live.best_trial_id, len(live.trials))
    if summary is None:
        state = "running" if driver is not None else "stale"
        return SweepEntry(name, state, live.time if live else None, live.metric if live else None,
                          live.mode if live else None, None, None, len(live.trials) if live else 0)
    best = summary.best
    return SweepEntry(name, summary.status, path.stat().st_mtime, summary.objective.metric, summary.objective.mode,
                      best.metric if best else None, best.trial_id if best else None, len(summary.trials))


def _read_summary(path: Path) -> SweepSummary | None:
    """The sweep's summary, or None when it has none or it cannot be read (the list goes on)."""
    if not path.is_file():
        return None
    try:
        return SweepSummary.read(path)
    except ConfigError:
        return None


def _when(stamp: float | None) -> str:
    if stamp is None:
        return "-"
    return datetime.fromtimestamp(stamp, tz=UTC).astimezone().strftime("%Y-%m-%d %H:%M")


@one_line_errors
def list_sweeps(storage: StorageOption = DEFAULT_STORAGE, as_json: JsonOption = False) -> None:
    """The sweeps in a storage: name, state (running, finished, interrupted, stale), when, best value, trials."""
    store = Storage.parse(storage)
    entries = [entry(store, name) for name in sweep_names(store)]
    if as_json:
        print(json.dumps({"storage": str(store), "sweeps": [asdict(e) for e in entries]}))
        return
    if not entries:
        console.print(f"no sweeps in {store}; run 'hpo tune FILE' (or pass --storage)", highlight=False)
        return
    table = Table(title=f"sweeps in {store}")
    for column in ("name", "state", "when", "best", "trials"):
        table.add_column(column)
    for e in entries:
        best = "-" if e.best is None else f"{e.metric}={number(e.best)}"
        table.add_row(e.name, e.state, _when(e.when), best, str(e.trials))
    console.print(table)

