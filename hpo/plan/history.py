"""A past sweep as the plan reads it: its shape, its trials' epochs and start-ups, and its fixed overheads.

A sweep's state directory (``STORAGE/NAME``) holds what it ran with (``sweep.yaml``), its progress journal
(``progress_events.jsonl``: every trial's start, epochs with their seconds, and end) and ``summary.json``.
From them :func:`read_sweep` takes the trials as :class:`~hpo.progress.TrialHistory` (in start order, the
first ``max_concurrent`` cold, the rest warm) and the seconds the user's clock saw outside the trials: from
the command's start to the sweep's (imports, checks, Ray's start: ``before_s``) and from its last trial's end
to ``summary.json`` being written (the best model logged, the report: ``after_s``). Pure Python: no Ray.
"""

from __future__ import annotations

import bisect
import math
import statistics
from dataclasses import dataclass, replace
from pathlib import Path

from hpo.config import SweepConfig, load_sweep
from hpo.errors import ConfigError
from hpo.plan.types import Shape
from hpo.progress.journal import EVENTS_FILE, read_events, replay, segments
from hpo.progress.sweep import TrialHistory
from hpo.progress.trial import epoch_times

#: The sweep's settings in its state directory (what ``hpo repeat`` re-runs).
CONFIG_FILE = "sweep.yaml"
#: A gap longer than this between the process start and the sweep's is not the command's own (a notebook
#: that ran ``hpo.tune()`` long after it started): unknown.
_MAX_BEFORE_S = 900.0
#: The same for the time from the last trial's end to the summary's write (a summary rewritten by ``hpo sync``).
_MAX_AFTER_S = 900.0
#: The longest wait from a trial's end to the next trial's start the plan counts as the hand-over between them.
_MAX_HANDOVER_S = 30.0
#: A trial's status in the journal → the estimator's.
_STATUS = {"running": "running", "completed": "finished", "stopped_early": "stopped", "failed": "failed",
           "diverged": "finished", "interrupted": "failed"}


@dataclass(frozen=True)
class SweepRecord:
    """One past sweep, read for the plan.

    Attributes:
        name: The sweep.
        shape: The shape it ran at.
        trials: Its ended trials in start order (``warm`` set: the first ``max_concurrent`` cold).
        planned: Trials it planned.
        before_s: Seconds from its command's start to its sweep's start (None: unknown).
        after_s: Seconds from its last trial's end to its command's end (or, for a journal without the
            ``exit`` event, to its summary's write; None: unknown).
        wall_s: Seconds from its command's start to its end, where both are known.
        loop_s: Seconds from its sweep's start to its last trial's end.
        launch_s: Seconds from its sweep's start to its first trial's start (Tune's set-up, placement).
        max_epochs: Its ``trial.max_epochs``.
    """

    name: str
    shape: Shape
    trials: tuple[TrialHistory, ...]
    planned: int
    before_s: float | None
    after_s: float | None
    wall_s: float | None
    loop_s: float
    launch_s: float = 0.0
    max_epochs: int | None = None

    @property
    def epoch_cost(self) -> float | None:
        """The median over its trials of each one's mean epoch time after the first (None: none timed)."""
        costs = [c for t in self.trials if (c := steady_cost(t)) is not None]
        return statistics.median(costs) if costs else None


def handover_s(started: float, ended_at: list[float]) -> float:
    """Seconds a trial that took a freed slot started after the latest trial end before it (0: none).

    ``ended_at`` is every trial's end, sorted.

    A trial's slot is busy from its start to its last epoch, and then for this hand-over: its end, Tune's
    scheduling of the next trial and that trial's start (about 0.2 s a trial on a quiet 2-core machine). The
    plan counts it into the start-up of each trial that took a freed slot; a wait over
    :data:`_MAX_HANDOVER_S` is not a hand-over (the slot waited for something else: nodes, the searcher).
    """
    ended = bisect.bisect_right(ended_at, started)  # ``ended_at`` is sorted: the ends up to the start
    waited = started - ended_at[ended - 1] if ended else 0.0
    return waited if waited <= _MAX_HANDOVER_S else 0.0


def steady_cost(trial: TrialHistory) -> float | None:
    """A trial's mean epoch time after its first (its only epoch's time where it has one)."""
    times = epoch_times(trial.epoch_seconds)
    if not len(times):
        return None
    return float(times[1:].mean()) if len(times) > 1 else float(times[0])


def shape_of(config: SweepConfig) -> Shape:
    """The shape a sweep file runs at."""
    trial = config.trial
    return Shape(trial.workers, config.search.max_concurrent, trial.gpus_per_worker, trial.cpus_per_worker,
                 trial.batch_size_per_worker)


def read_sweep(directory: str | Path) -> SweepRecord:
    """Reads a past sweep from its state directory.

    Args:
        directory: ``STORAGE/NAME`` (with ``sweep.yaml`` and ``progress_events.jsonl``).

    Raises:
        ConfigError: The directory holds no sweep that ran, or its journal has no ended trial with timed epochs.
    """
    directory = Path(directory)
    journal = directory / EVENTS_FILE
    if not (directory / CONFIG_FILE).is_file() or not journal.is_file():
        raise ConfigError(
            f"{directory}: (history): no {CONFIG_FILE} and {EVENTS_FILE} there; name a sweep that ran "
            "(hpo list shows them)"
        )
    config = load_sweep(directory / CONFIG_FILE)
    parts = list(segments(read_events(journal)))
    if not parts:
        raise ConfigError(f"{journal}: (history): no sweep recorded; name a sweep that ran")
    segment = parts[-1]  # the last run of the driver (a resumed sweep's earlier runs were cut short)
    progress = replay(segment, samples=10)
    head = segment[0]
    order = sorted(progress.trials.values(), key=lambda t: t.started)
    first = config.search.max_concurrent
    ended_at = sorted(e["t"] for e in segment if e.get("event") == "end")
    trials = tuple(
        TrialHistory(t.values, t.seconds or None, _STATUS[t.status], t.cpus, t.gpus,  # type: ignore[arg-type]
                     t.startup_s + handover_s(t.started, ended_at) if i >= first and t.startup_s is not None
                     else t.startup_s, warm=i >= first)
        for i, t in enumerate(order) if t.status != "running"
    )
    if not any(steady_cost(t) is not None for t in trials if t.status != "failed"):
        raise ConfigError(f"{journal}: (history): no trial ended with a timed epoch; plan from a sweep that trained")
    ends = [e["t"] for e in segment if e.get("event") in ("end", "result", "start")]
    last = max(ends) if ends else head["t"]
    started = head.get("process_started")
    before = head["t"] - started if isinstance(started, (int, float)) else None
    before = before if before is not None and 0 <= before <= _MAX_BEFORE_S else None
    summary = directory / "summary.json"
    exits = [e["t"] for e in segment if e.get("event") == "exit"]
    if exits:  # the hpo tune command's end (Ray stopped)
        after: float | None = exits[-1] - last
    else:  # older journals: summary.json's write, the best model logged
        after = summary.stat().st_mtime - last if summary.is_file() and len(parts) == 1 else None
    after = after if after is not None and 0 <= after <= _MAX_AFTER_S else None
    wall = None if before is None or after is None else before + (last - head["t"]) + after
    launch = max(0.0, order[0].started - head["t"]) if order else 0.0
    return SweepRecord(config.name, shape_of(config), trials, head["plan"]["planned_trials"], before, after,
                       wall, last - head["t"], launch, config.trial.max_epochs)


def finite(values: list[float | None]) -> list[float]:
    """The finite numbers of ``values``."""
    return [float(v) for v in values if v is not None and math.isfinite(v)]


def extended(record: SweepRecord, max_epochs: int, mode: str, patience: int, min_delta: float) -> SweepRecord:
    """``record`` with the trials its own ``max_epochs`` cut (a pilot's) continued to ``max_epochs``.

    Such a trial is continued to the median of :func:`~hpo.progress.estimate_trial`'s projection of its
    curve (its last value repeated, its epochs at its mean epoch time): a pilot tells epoch times and
    start-ups, and only a guess of the lengths.
    """
    from hpo.progress.trial import estimate_trial

    cap = record.max_epochs
    if cap is None or cap >= max_epochs:
        return record
    out = []
    for trial in record.trials:
        values = list(trial.values)
        if trial.status != "finished" or len(values) < cap or (cost := steady_cost(trial)) is None:
            out.append(trial)
            continue
        est = estimate_trial(values, mode=mode, patience=patience, min_delta=min_delta, max_epochs=max_epochs)
        more = max(0, est.epochs_median - len(values))
        seconds = list(epoch_times(trial.epoch_seconds)) + [cost] * more
        out.append(replace(trial, values=values + [values[-1]] * more, epoch_seconds=seconds))
    return replace(record, trials=tuple(out), max_epochs=max_epochs)
