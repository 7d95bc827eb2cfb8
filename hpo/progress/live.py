"""A running sweep's state, trial by trial, and the snapshot every view of it shows.

:class:`SweepProgress` records what the trials report (start, each epoch's value and seconds, their end)
and turns it into a :class:`Snapshot`: counts, the best trial so far, speed, and the Monte-Carlo
estimates of each running trial (:func:`~hpo.progress.trial.estimate_trial`) and of the whole sweep
(:func:`~hpo.progress.sweep.estimate_sweep`). The console, the JSON lines, ``progress.json`` (what ``hpo
status`` reads while the sweep runs) and the MLflow forecast metrics all show the same snapshot. Pure
Python and NumPy: no Ray.
"""

from __future__ import annotations

import bisect
import json
import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, fields, replace
from pathlib import Path
from typing import Any, Literal

from hpo.progress.deadline import p_meet
from hpo.progress.sweep import SweepEstimate, SweepPlan, TrialHistory, estimate_sweep
from hpo.progress.trial import estimate_trial

#: How a trial stands: running, or how it ended.
TrialState = Literal["running", "completed", "stopped_early", "failed", "diverged", "interrupted"]
SweepState = Literal["starting", "running", "finished", "interrupted"]
#: Each tracked status → the estimator's (a diverged trial ended by its own rule).
_HISTORY_STATUS = {"running": "running", "completed": "finished", "stopped_early": "stopped",
                   "failed": "failed", "diverged": "finished", "interrupted": "failed"}


@dataclass
class TrialTrack:
    """What one trial has reported so far (mutable, driver side)."""

    trial_id: str
    params: dict[str, Any]
    started: float
    cpus: float | None = None
    gpus: float | None = None
    values: list[float] = field(default_factory=list)
    seconds: list[float] = field(default_factory=list)
    status: TrialState = "running"
    ended: float | None = None
    #: When its first epoch was reported.
    first_at: float | None = None

    @property
    def startup_s(self) -> float | None:
        """Seconds from its start to the start of its first epoch (actors, workers, data), if measured."""
        if self.first_at is None or not self.seconds:
            return None
        return max(0.0, self.first_at - self.started - self.seconds[0])


@dataclass(frozen=True)
class TrialLine:
    """One trial as the views show it (estimates only while it runs; low/high: the 80 % interval)."""

    trial_id: str
    status: str
    epoch: int
    value: float | None
    best: float | None
    elapsed_s: float
    epochs_median: int | None = None
    epochs_low: int | None = None
    epochs_high: int | None = None
    remaining_s_median: float | None = None
    remaining_s_low: float | None = None
    remaining_s_high: float | None = None
    percent_done: float | None = None
    method: str | None = None
    params: dict[str, Any] = field(default_factory=dict)

    def to_dict(self) -> dict[str, Any]:
        """The line as JSON-ready data, converted once per line.

        An ended trial's line is reused by every later snapshot, so a sweep of thousands of trials does not
        convert them all again at each write.
        """
        cached = self.__dict__.get("_as_dict")
        if cached is None:
            cached = asdict(self)
            object.__setattr__(self, "_as_dict", cached)
        return dict(cached)

    def to_json(self) -> str:
        """The line as JSON text (``json.dumps`` of :meth:`to_dict`), made once per line, as :meth:`to_dict`."""
        cached = self.__dict__.get("_as_json")
        if cached is None:
            cached = json.dumps(asdict(self), default=str)
            object.__setattr__(self, "_as_json", cached)
        return cached


@dataclass(frozen=True)
class Snapshot:
    """A sweep at one moment: what every progress view shows, and what ``progress.json`` holds.

    Attributes:
        name: The sweep.
        state: ``starting``, ``running``, ``finished`` or ``interrupted``.
        time: Unix time of the snapshot (the wall clock's, also for a sweep on a simulated clock).
        elapsed_s: Seconds since the sweep started (on the sweep's clock, as every trial time here).
        metric: The objective.
        mode: ``max`` or ``min``.
        max_epochs: The most epochs a trial trains.
        planned: Trials the sweep plans.
        completed: Trials that ended by their own rules (max_epochs, patience, goal).
        stopped_early: Trials the scheduler stopped.
        failed: Trials that failed.
        diverged: Trials whose loss became NaN/inf.
        interrupted: Trials stopped before their end and resumable (storage unreachable past its retry limit).
        running: Trials running now.
        pending: Trials not started yet.
        remaining_s_median: Estimated seconds left (None: no timings yet); low/high: the 80 % interval.
        cost_spent: What the epochs trained so far cost (None: no price set).
        cost_total_median: Estimated cost of the whole sweep (None: no price or no timings); low/high.
        epochs_per_min: Epochs trained per minute, all trials together.
        samples_per_s: Training examples per second, all trials together (None: unknown dataset size).
        best_trial_id: The best trial so far (completed or stopped early), or None.
        best_value: Its best epoch's value.
        method: The sweep estimate's method (``monte-carlo``, ``prior`` or ``done``).
        trials: Every trial, running ones first.
        storage_down_since: Unix time since which the sweep's object storage does not answer (None: it does).
        storage_waiting: Running trials that have reported nothing since then (their checkpoint waits for it).
        resources_waiting_since: Unix time since which a trial's placement group is unplaced (a node was lost,
            or none has room), or None.
        resources_waiting: Placement groups unplaced now.
        resources_note: Why, where known (``node 3fa2b1c0 lost``).
        resources_waited_s: Seconds the sweep has spent waiting for resources so far (ended waits).
        deadline_at: Unix time by which the sweep should end (``--deadline``), or None.
        p_meet: The share of the forecast's futures that end by then (None: no deadline or no timings yet).
    """

    name: str
    state: SweepState
    time: float
    elapsed_s: float
    metric: str
    mode: str
    max_epochs: int
    planned: int
    completed: int = 0
    stopped_early: int = 0
    failed: int = 0
    diverged: int = 0
    interrupted: int = 0
    running: int = 0
    pending: int = 0
    remaining_s_median: float | None = None
    remaining_s_low: float | None = None
    remaining_s_high: float | None = None
    cost_spent: float | None = None
    cost_total_median: float | None = None
    cost_total_low: float | None = None
    cost_total_high: float | None = None
    epochs_per_min: float = 0.0
    samples_per_s: float | None = None
    best_trial_id: str | None = None
    best_value: float | None = None
    method: str = "prior"
    trials: tuple[TrialLine, ...] = ()
    storage_down_since: float | None = None
    storage_waiting: int = 0
    resources_waiting_since: float | None = None
    resources_waiting: int = 0
    resources_note: str = ""
    resources_waited_s: float = 0.0
    deadline_at: float | None = None
    p_meet: float | None = None

    @property
    def ended(self) -> int:
        """Trials that ended, however."""
        return self.completed + self.stopped_early + self.failed + self.diverged + self.interrupted

    def to_dict(self) -> dict[str, Any]:
        """The snapshot as JSON-ready data (``progress.json``, ``--json-progress``)."""
        data = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "trials"}
        data["trials"] = [t.to_dict() for t in self.trials]
        return data

    def to_json(self) -> str:
        """``json.dumps(self.to_dict(), default=str)``, the same text, from each line's JSON made once.

        What ``progress.json`` holds: writing it costs a join over the ended trials' lines, not their
        conversion, however many trials the sweep has held.
        """
        data: dict[str, Any] = {f.name: getattr(self, f.name) for f in fields(self) if f.name != "trials"}
        data["trials"] = []
        head = json.dumps(data, default=str)  # ends with the empty list of the last key: `"trials": []}`
        return head[: -len("[]}")] + "[" + ", ".join(t.to_json() for t in self.trials) + "]}"

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> Snapshot:
        """A snapshot read back from ``progress.json``."""
        names = {f.name for f in fields(cls)}
        trial_names = {f.name for f in fields(TrialLine)}
        trials = tuple(TrialLine(**{k: v for k, v in t.items() if k in trial_names}) for t in data.get("trials", []))
        return cls(**{**{k: v for k, v in data.items() if k in names}, "trials": trials})

    def with_state(self, state: SweepState) -> Snapshot:
        """The same snapshot in another state (the sweep ended or was interrupted)."""
        return replace(self, state=state, time=time.time())


#: The live state of a running sweep, in its state directory.
PROGRESS_FILE = "progress.json"


def read_live(path: Path) -> Snapshot | None:
    """The snapshot in a ``progress.json`` (None if there is none or it cannot be read)."""
    try:
        return Snapshot.from_dict(json.loads(path.read_text()))
    except (OSError, ValueError, TypeError):
        return None


class SweepProgress:
    """Records a sweep's trials as they report, and snapshots them.

    The counts, the best ended trial, the optimisation history and the ended trials' lines are kept as
    trials report, so a snapshot costs the running trials (and the sweep estimate), not every trial the
    sweep has held; a trial that reports again after its end makes the next snapshot rebuild them once.

    Args:
        name: The sweep.
        metric: The objective.
        plan: The sweep's plan (its ``elapsed_s`` is replaced by the time since ``started``).
        samples_per_epoch: Training examples in one epoch of one trial (None: unknown).
        started: Unix time the sweep started (default: now).
        samples: Monte-Carlo samples per estimate.

    Attributes:
        recorder: Called with each trial event (``start``, ``result``, ``end``, with its time ``t``) as it is
            recorded; None: none (the monitor sets a :class:`~hpo.progress.journal.Journal`).
        clock: The sweep's clock, read for every event and snapshot not given a time (a simulated sweep's
            simulated clock, which starts at ``started``); None: the wall clock. A snapshot's ``time`` is the
            wall clock's either way.
        estimate_cost_s: Seconds the last sweep estimate took (what a caller bounds its refresh rate by).
        deadline_at: Unix time by which the sweep should end (``--deadline``); None: none. Snapshots then
            carry ``p_meet``, read from the last estimate's draws.
        tail_s: Seconds the command takes after its last trial, counted into ``p_meet`` (the earlier
            round's, where the sweep has one; 0 otherwise).
    """

    def __init__(
        self, name: str, metric: str, plan: SweepPlan, samples_per_epoch: int | None = None,
        started: float | None = None, samples: int = 300,
    ) -> None:
        self.name = name
        self.metric = metric
        self.plan = plan
        self.samples_per_epoch = samples_per_epoch
        self.started = time.time() if started is None else started
        self.samples = samples
        self.trials: dict[str, TrialTrack] = {}
        self.order: list[str] = []  # trial ids in the order they ended
        self.recorder: Callable[[dict[str, Any]], None] | None = None
        self.clock: Callable[[], float] | None = None
        self.estimate_cost_s = 0.0
        self.deadline_at: float | None = None
        self.tail_s = 0.0
        self._estimate: SweepEstimate | None = None
        self._estimated_at = 0.0  # the sweep clock's time of the last estimate
        self._estimates: dict[str, tuple[tuple[int, int], Any]] = {}  # running trial -> (inputs, its estimate)
        self._seq: dict[str, int] = {}  # trial id -> its place in self.trials (ties go to the earlier trial)
        self._stale = False
        self._reset()

    def _clock(self) -> float:
        """Now on the sweep's clock."""
        return time.time() if self.clock is None else self.clock()

    def _reset(self) -> None:
        """Empties the kept state (rebuilt from :attr:`trials` by :meth:`_rebuild`)."""
        self._running: dict[str, TrialTrack] = {}
        self._ended_keys: list[tuple[float, int]] = []  # (started, seq) of the ended lines, sorted
        self._ended_lines: list[TrialLine] = []
        self._line_of: dict[str, TrialLine] = {}
        self._counts = dict.fromkeys(("completed", "stopped_early", "failed", "diverged", "interrupted"), 0)
        self._epochs = 0
        self._best_ended: tuple[int, str, float] | None = None  # (seq, trial id, value)
        self._history: list[float] = []
        self._histories: dict[str, TrialHistory] = {}  # ended trial -> its history for the estimate, kept

    def _rebuild(self) -> None:
        """Rebuilds the kept state from every trial (after a trial reported again once it had ended)."""
        self._reset()
        order, self.order = self.order, []
        for track in self.trials.values():
            self._epochs += len(track.values)
            if track.ended is None:
                self._running[track.trial_id] = track
        for trial_id in order:
            self._ended(self.trials[trial_id])
        self._stale = False

    def start(self, trial_id: str, params: dict[str, Any] | None = None, now: float | None = None) -> TrialTrack:
        """A trial started (or was seen again after a resume); returns its record (an ended one stays ended)."""
        track = self.trials.get(trial_id)
        if track is None:
            started = self._clock() if now is None else now
            track = self.trials[trial_id] = TrialTrack(trial_id, dict(params or {}), started)
            self._seq[trial_id] = len(self._seq)
            self._running[trial_id] = track
            self._record({"event": "start", "t": started, "trial": trial_id, "params": track.params})
        return track

    def result(
        self, trial_id: str, epoch: int, value: Any, epoch_seconds: Any = None, now: float | None = None
    ) -> None:
        """A trial reported epoch ``epoch`` (1-based): its objective value and the seconds it took."""
        track = self.start(trial_id, now=now)
        now = self._clock() if now is None else now
        if track.first_at is None and not track.values:
            track.first_at = now
        self._stale |= track.ended is not None  # an ended trial's line, counts and history change
        self._histories.pop(trial_id, None)
        self._record({"event": "result", "t": now, "trial": trial_id, "epoch": epoch, "value": value,
                      "seconds": epoch_seconds})
        number = float(value) if isinstance(value, (int, float)) and not isinstance(value, bool) else math.nan
        if epoch > len(track.values):
            self._epochs -= len(track.values)
            track.values.extend([math.nan] * (epoch - 1 - len(track.values)))
            track.values.append(number)
            self._epochs += len(track.values)
        if isinstance(epoch_seconds, (int, float)) and math.isfinite(epoch_seconds) and epoch_seconds >= 0:
            track.seconds.append(float(epoch_seconds))

    def end(self, trial_id: str, status: TrialState, now: float | None = None) -> None:
        """A trial ended (``completed``, ``stopped_early``, ``failed`` or ``diverged``)."""
        track = self.start(trial_id, now=now)
        again = track.ended is not None
        track.status = status
        track.ended = self._clock() if now is None else now
        self._estimates.pop(trial_id, None)
        self._histories.pop(trial_id, None)
        if again:
            self._stale = True
        else:
            self._running.pop(trial_id, None)
            if not self._stale:
                self._ended(track)
            else:
                self.order.append(trial_id)
        self._record({"event": "end", "t": track.ended, "trial": trial_id, "status": status})

    def _ended(self, track: TrialTrack) -> None:
        """Adds an ended trial to the order, the counts, the best, the history and the sorted ended lines."""
        self.order.append(track.trial_id)
        self._counts[track.status] += 1
        mode = self.plan.mode
        seq = self._seq.get(track.trial_id, len(self._seq))
        value = _best(track.values, mode) if track.status in ("completed", "stopped_early") else None
        if value is not None and _better_first((seq, track.trial_id, value), self._best_ended, mode):
            self._best_ended = (seq, track.trial_id, value)
        best = self._history[-1] if self._history else None
        if value is not None and (best is None or (value > best if mode == "max" else value < best)):
            best = value
        if best is not None:
            self._history.append(best)
        line = self._line_of[track.trial_id] = self._line(track, track.ended or track.started)
        key = (track.started, seq)
        at = bisect.bisect_right(self._ended_keys, key)
        self._ended_keys.insert(at, key)
        self._ended_lines.insert(at, line)

    def _record(self, event: dict[str, Any]) -> None:
        if self.recorder is not None:
            self.recorder(event)

    def _fresh(self) -> None:
        if self._stale:
            self._rebuild()

    def best(self) -> tuple[str | None, float | None]:
        """The best trial so far among completed, stopped-early and running ones: ``(trial id, value)``."""
        self._fresh()
        mode = self.plan.mode
        best = self._best_ended
        for track in self._running.values():
            value = _best(track.values, mode)
            if value is not None:
                candidate = (self._seq.get(track.trial_id, 0), track.trial_id, value)
                if _better_first(candidate, best, mode):
                    best = candidate
        return (None, None) if best is None else (best[1], best[2])

    def best_after_each_trial(self) -> list[float]:
        """The best value after each ended trial, in the order they ended (the optimisation history)."""
        self._fresh()
        return list(self._history)

    def best_so_far(self) -> float | None:
        """The last value of :meth:`best_after_each_trial` (None before any trial scored)."""
        self._fresh()
        return self._history[-1] if self._history else None

    def ended_line(self, trial_id: str) -> TrialLine | None:
        """The line of an ended trial as the last snapshot showed it (None for a running or unknown one)."""
        return None if self._stale else self._line_of.get(trial_id)

    def snapshot(self, now: float | None = None, state: SweepState = "running", estimate: bool = True) -> Snapshot:
        """The sweep now (a few hundred milliseconds at most for a large sweep).

        Args:
            now: Unix time of the snapshot (default: now).
            state: The sweep's state.
            estimate: Compute fresh Monte-Carlo estimates; False: counts, trials and best are fresh and the
                sweep's estimate is the last one computed (what a caller does between its bounded refreshes).
        """
        self._fresh()
        now = self._clock() if now is None else now
        elapsed = max(0.0, now - self.started)
        plan = replace(self.plan, elapsed_s=elapsed)
        if estimate or self._estimate is None:
            clock = time.perf_counter()
            # The first trials of a sweep start its workers; later ones start on workers an ended trial warmed.
            histories = [self._history_of(t, warm=i >= plan.max_concurrent) for i, t in enumerate(self.trials.values())]
            self._estimate = estimate_sweep(histories, plan, samples=self.samples)
            self._estimated_at = now
            self.estimate_cost_s = time.perf_counter() - clock
        sweep = self._estimate
        best_id, best_value = self.best()
        spent = sweep.cost_spent
        total = [None if c is None else (spent or 0.0) + c
                 for c in (sweep.cost_median, sweep.cost_low, sweep.cost_high)]
        epochs = self._epochs
        running = sorted(self._running.values(), key=lambda t: (t.started, self._seq.get(t.trial_id, 0)))
        return Snapshot(
            name=self.name, state=state, time=now if self.clock is None else time.time(),
            elapsed_s=round(elapsed, 2), metric=self.metric,
            mode=plan.mode, max_epochs=plan.max_epochs, planned=max(plan.planned_trials, len(self.trials)),
            **self._counts, running=len(running), pending=max(0, plan.planned_trials - len(self.trials)),
            remaining_s_median=sweep.remaining_s_median, remaining_s_low=sweep.remaining_s_low,
            remaining_s_high=sweep.remaining_s_high, cost_spent=spent if plan.priced else None,
            cost_total_median=total[0], cost_total_low=total[1], cost_total_high=total[2],
            epochs_per_min=round(60.0 * epochs / elapsed, 2) if elapsed > 0 else 0.0,
            samples_per_s=(round(epochs * self.samples_per_epoch / elapsed, 1)
                           if self.samples_per_epoch and elapsed > 0 else None),
            best_trial_id=best_id, best_value=best_value, method=sweep.method,
            trials=tuple(self._line(t, now) for t in running) + tuple(self._ended_lines),
            deadline_at=self.deadline_at,
            p_meet=None if self.deadline_at is None else _rounded(
                p_meet(sweep.remaining_s_draws, self._estimated_at, self.deadline_at, self.tail_s)),
        )

    def _history_of(self, track: TrialTrack, warm: bool) -> TrialHistory:
        """The trial's history for the sweep estimate.

        An ended trial's is made once and kept (with what the estimate derives from it); a running trial's afresh.
        """
        if track.ended is None:
            return _history(track, warm)
        kept = self._histories.get(track.trial_id)
        if kept is None or kept.warm != warm:
            kept = self._histories[track.trial_id] = _history(track, warm, frozen=True)
        return kept

    def _line(self, track: TrialTrack, now: float) -> TrialLine:
        plan = self.plan
        base = TrialLine(
            trial_id=track.trial_id, status=track.status, epoch=len(track.values),
            value=_finite(track.values[-1]) if track.values else None, best=_best(track.values, plan.mode),
            elapsed_s=round((track.ended or now) - track.started, 2), params=track.params,
        )
        if track.status != "running":
            return base
        # A running trial's estimate depends only on what it reported: made again once it reports more.
        inputs = (len(track.values), len(track.seconds))
        cached = self._estimates.get(track.trial_id)
        if cached is not None and cached[0] == inputs:
            est = cached[1]
        else:
            est = estimate_trial(track.values, mode=plan.mode, patience=plan.patience, min_delta=plan.min_delta,
                                 max_epochs=plan.max_epochs, epoch_seconds=track.seconds or None, goal=plan.goal,
                                 samples=min(self.samples, 200))
            self._estimates[track.trial_id] = (inputs, est)
        return replace(
            base, epochs_median=est.epochs_median, epochs_low=est.epochs_low, epochs_high=est.epochs_high,
            remaining_s_median=est.remaining_s_median, remaining_s_low=est.remaining_s_low,
            remaining_s_high=est.remaining_s_high, method=est.method,
            percent_done=round(100.0 * len(track.values) / max(est.epochs_median, 1), 1),
        )


def _history(track: TrialTrack, warm: bool | None = None, frozen: bool = False) -> TrialHistory:
    """The trial as the sweep estimate takes it (``frozen``: copies of its lists, for an ended trial's kept one)."""
    values, seconds = (tuple(track.values), tuple(track.seconds)) if frozen else (track.values, track.seconds)
    return TrialHistory(values, seconds or None, _HISTORY_STATUS[track.status],  # type: ignore[arg-type]
                        track.cpus, track.gpus, track.startup_s, warm)


def _better_first(candidate: tuple[int, str, float], best: tuple[int, str, float] | None, mode: str) -> bool:
    """Whether ``candidate`` ``(seq, trial id, value)`` beats ``best``.

    A better value wins, and of equal values the earlier trial's (as ``max``/``min`` over the trials in order).
    """
    if best is None:
        return True
    if candidate[2] == best[2]:
        return candidate[0] < best[0]
    return candidate[2] > best[2] if mode == "max" else candidate[2] < best[2]


def _rounded(value: float | None) -> float | None:
    return None if value is None else round(value, 3)


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None


def _best(values: list[float], mode: str) -> float | None:
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return None
    return max(finite) if mode == "max" else min(finite)
