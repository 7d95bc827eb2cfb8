"""A sweep's progress journal: every trial start, epoch and end with its time, to replay the forecast.

The monitor appends one JSON line per event to ``STATE/NAME/progress_events.jsonl``: first a ``sweep``
line (its name, objective, plan and start time), then ``start``, ``result`` and ``end`` lines as Tune
reports them. :func:`replay` rebuilds the :class:`~hpo.progress.live.SweepProgress` the sweep had at any
moment, so the forecast shown live can be recomputed later, with today's estimator, from the same inputs
(``benchmarks/progress_sweeps.py`` does so for recorded real sweeps). A resumed sweep appends a new
``sweep`` line; each run of the driver is one segment. Pure Python: no Ray.
"""

from __future__ import annotations

import json
import logging
import math
from collections.abc import Callable, Iterable, Iterator
from dataclasses import asdict
from pathlib import Path
from typing import Any

from hpo.progress.live import SweepProgress
from hpo.progress.sweep import SweepPlan

logger = logging.getLogger(__name__)

#: The journal, in the sweep's state directory beside ``progress.json``.
EVENTS_FILE = "progress_events.jsonl"


class Journal:
    """Appends a sweep's progress events to a JSON-lines file; a write that fails is warned about once.

    Args:
        path: The file (created with its directory; an existing one is appended to).
    """

    def __init__(self, path: Path) -> None:
        self.path = path
        self._warned = False

    def __call__(self, event: dict[str, Any]) -> None:
        """Appends one event (non-finite numbers are written as null)."""
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a") as handle:
                handle.write(json.dumps(_finite(event), default=str) + "\n")
        except OSError as exc:
            if not self._warned:
                self._warned = True
                logger.warning("%s not written: %s", self.path, exc)


def sweep_event(progress: SweepProgress) -> dict[str, Any]:
    """The first line of a segment: what :func:`replay` needs to rebuild ``progress``."""
    event = {"event": "sweep", "t": progress.started, "name": progress.name, "metric": progress.metric,
             "samples_per_epoch": progress.samples_per_epoch, "plan": asdict(progress.plan),
             "process_started": process_started()}
    if progress.deadline_at is not None:
        event["deadline_at"] = progress.deadline_at
    return event


def process_started() -> float | None:
    """Unix time this process started (the ``hpo tune`` command's start, for the plan's wall times), if known."""
    try:
        import psutil

        return float(psutil.Process().create_time())
    except Exception:  # noqa: BLE001 - a missing psutil or an unreadable /proc only leaves it unknown
        return None


def record_exit() -> Callable[[Path], None]:
    """Arranges for an ``exit`` event to be appended to a journal when this process exits; returns its setter.

    Call it before the sweep starts, and the returned function with the journal's path once the sweep ran:
    handlers registered first run last at exit, so the event comes after Ray's and TensorFlow's own exit
    handlers (the ``hpo tune`` command's end, for the wall time the plan learns, :mod:`hpo.plan.history`).
    Replays skip the event. A journal that does not exist is left so, and so is one this command did not
    write to (a ``--resume`` of a finished sweep changes nothing of it).
    """
    import atexit
    import time

    where: list[Path] = []
    began = time.time() - 0.05  # file times come from the kernel's coarse clock, a tick behind

    def write() -> None:
        if where and where[0].is_file() and where[0].stat().st_mtime >= began:
            Journal(where[0])({"event": "exit", "t": time.time()})

    atexit.register(write)
    return where.append


def read_events(path: Path) -> list[dict[str, Any]]:
    """The events of a journal (a line that cannot be read, e.g. cut short by a crash, is skipped)."""
    events = []
    for line in path.read_text().splitlines():
        try:
            events.append(json.loads(line))
        except ValueError:
            continue
    return events


def segments(events: Iterable[dict[str, Any]]) -> Iterator[list[dict[str, Any]]]:
    """The journal's segments, one per run of the driver, each starting with its ``sweep`` line."""
    current: list[dict[str, Any]] = []
    for event in events:
        if event.get("event") == "sweep":
            if current:
                yield current
            current = [event]
        elif current:
            current.append(event)
    if current:
        yield current


def replay(segment: list[dict[str, Any]], until: float | None = None, samples: int = 300) -> SweepProgress:
    """The sweep's record as it stood at time ``until`` (Unix time; None: after every event of the segment).

    Args:
        segment: One segment of a journal (see :func:`segments`).
        until: Events after this time are left out.
        samples: Monte-Carlo samples of the rebuilt record's estimates.
    """
    head = segment[0]
    progress = SweepProgress(head["name"], head["metric"], SweepPlan(**head["plan"]),
                             samples_per_epoch=head.get("samples_per_epoch"), started=head["t"], samples=samples)
    progress.deadline_at = head.get("deadline_at")
    for event in segment[1:]:
        now = event["t"]
        if until is not None and now > until:
            break
        kind, trial = event["event"], event.get("trial")
        if kind == "start":
            progress.start(trial, event.get("params"), now=now)
        elif kind == "result":
            value = event.get("value")
            progress.result(trial, event["epoch"], math.nan if value is None else value, event.get("seconds"), now=now)
        elif kind == "end":
            progress.end(trial, event["status"], now=now)
    return progress


def _finite(event: dict[str, Any]) -> dict[str, Any]:
    return {k: (None if isinstance(v, float) and not math.isfinite(v) else v) for k, v in event.items()}
