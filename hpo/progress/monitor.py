"""The Ray Tune callback that watches a sweep: views, ``progress.json`` and the MLflow forecast.

:class:`SweepMonitor` feeds every trial's start, epochs and end into a
:class:`~hpo.progress.live.SweepProgress` and, about every ``tick_s`` seconds, hands a fresh snapshot to
its views (plain lines, live view, JSON lines), writes it to ``STATE/NAME/progress.json`` (what ``hpo
status`` reads while the sweep runs) and, every ``log_every_s``, logs the forecast on the MLflow parent
run (step = seconds since the start). Each trial that ends logs the best value so far (step = how many
trials ended), so the MLflow UI charts the optimisation history.
"""

from __future__ import annotations

import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import replace
from pathlib import Path
from typing import Any

from ray.tune import Callback

from hpo.object_store import error_status
from hpo.progress.deadline import DeadlineWatch
from hpo.progress.journal import Journal, sweep_event
from hpo.progress.live import Snapshot, SweepProgress, TrialLine
from hpo.progress.placement_watch import ResourceWait
from hpo.progress.storage_watch import StorageWatch
from hpo.progress.views import Header, View
from hpo.results import EPOCH_KEY, EPOCH_TIME_KEY, ITERATION_KEY, REPEAT_KEY, trial_status
from hpo.storage import write_text_atomic
from hpo.trial.protocol import trial_error_line

logger = logging.getLogger(__name__)

#: Metric logger: ``(metrics, step)`` onto the sweep's parent run.
LogMetrics = Callable[[dict[str, float], int], None]


class SweepMonitor(Callback):
    """Watches a sweep for its views, ``progress.json`` and MLflow.

    Args:
        progress: The sweep's progress record (its plan, the start time).
        header: What the views show first.
        views: Where snapshots go (none: only ``progress.json`` and MLflow).
        live_file: ``STATE/NAME/progress.json``; None: not written.
        events_file: ``STATE/NAME/progress_events.jsonl`` (:mod:`~hpo.progress.journal`); None: not written.
        tick_s: Seconds between snapshots written to ``progress.json`` (and fresh estimates, at most).
        log_every_s: Seconds between forecasts logged to MLflow.
        estimate_share: The most of one core the sweep estimate may take: fresh estimates come at most every
            ``max(tick_s, cost of the last one / estimate_share)`` seconds (the estimate's cost grows with the
            trials a sweep plans), so a sweep of thousands of trials refreshes its forecast less often instead
            of slowing its driver down. None: every ``tick_s``.

    Between fresh estimates, a trial's first epoch or end still reaches the views at once, and every
    ``tick_s`` the views and ``progress.json`` get a snapshot with fresh counts and trial lines and the last
    estimate (:meth:`SweepProgress.snapshot` with ``estimate=False``); MLflow gets only the fresh ones.
    ``progress.json`` is written from each trial line's JSON made once (:meth:`Snapshot.to_json`), so the
    driver's work per trial event does not grow with the sweep.
    """

    def __init__(
        self, progress: SweepProgress, header: Header, views: list[View], live_file: Path | None = None,
        tick_s: float = 2.0, log_every_s: float = 30.0, events_file: Path | None = None,
        estimate_share: float | None = 0.05,
    ) -> None:
        self.progress = progress
        self.header = header
        self.views = views
        self.live_file = live_file
        self.events_file = events_file
        self.tick_s = tick_s
        self.log_every_s = log_every_s
        self.estimate_share = estimate_share
        #: Logs metrics on the parent run; set once the tracker exists.
        self.log: LogMetrics | None = None
        #: Probes the sweep's object storage (:meth:`watch_storage`); None: not watched.
        self.storage_watch: StorageWatch | None = None
        #: Trial id → when it last reported (a trial silent since the storage went down waits on it).
        self.reported_at: dict[str, float] = {}
        #: Trials that ended because the storage did not answer (interrupted: ``--resume`` continues them).
        self.storage_interrupted: set[str] = set()
        #: Trials waiting for resources (:meth:`resources_changed`); None: none waits.
        self.resource_wait: ResourceWait | None = None
        #: Seconds spent waiting for resources in waits that ended.
        self.resources_waited_s = 0.0
        #: The sweep's deadline, whose warning it gives once (:mod:`~hpo.progress.deadline`); None: none.
        self.deadline: DeadlineWatch | None = None
        self._lock = threading.RLock()
        self.last_tick = 0.0
        self.last_write = 0.0
        self.last_log = -math.inf
        self.synced = False
        self.snapshot: Snapshot | None = None

    def __getstate__(self) -> dict[str, Any]:
        # Tune pickles its callbacks with the Tuner; a resumed sweep is given a new monitor instead.
        return {"progress": None, "header": self.header, "views": [], "live_file": None, "events_file": None,
                "log": None, "storage_watch": None, "reported_at": {}, "storage_interrupted": set(),
                "resource_wait": None, "resources_waited_s": 0.0, "deadline": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state, tick_s=2.0, log_every_s=30.0, last_tick=0.0, last_write=0.0, last_log=-math.inf,
                             synced=True, snapshot=None, estimate_share=0.05, _lock=threading.RLock())

    # -- the sweep's own calls ---------------------------------------------------------------------

    def begin(self) -> None:
        """The sweep starts: the header on every view (nothing is written: its checks have not passed yet)."""
        for view in self.views:
            view.start(self.header)

    def checked(self) -> None:
        """The sweep's checks passed: the journal starts a segment; ``progress.json`` says ``starting``."""
        if self.events_file is not None:
            journal = Journal(self.events_file)
            journal(sweep_event(self.progress))
            self.progress.recorder = journal
        self._write(self.progress.snapshot(state="starting"))

    def watch_storage(self, probe: Callable[[], None], every_s: float = 10.0) -> None:
        """Probes the sweep's object storage in the background; the views say when it stops answering."""
        self.storage_watch = StorageWatch(probe, self._storage_changed, every_s).start()

    def resources_changed(self, wait: ResourceWait | None) -> None:
        """Trials started or stopped waiting for resources (:class:`~hpo.progress.placement_watch.PlacementWatch`).

        The views show it at once, and the journal records it (a ``resources`` event).
        """
        now = time.time()
        with self._lock:
            if self.resource_wait is not None and wait is None:
                self.resources_waited_s += now - self.resource_wait.since
            self.resource_wait = wait
            recorder = getattr(self.progress, "recorder", None) if self.progress is not None else None
            if recorder is not None:
                recorder({"event": "resources", "t": now, "since": wait.since if wait else None,
                          "groups": wait.groups if wait else 0, "note": wait.lost if wait else ""})
            if self.snapshot is None:
                return
            snapshot = self._with_storage(replace(self.snapshot, time=now))
            self.snapshot = snapshot
            for view in self.views:
                view.update(snapshot)
            self._write(snapshot)

    def close(self, state: str) -> Snapshot | None:
        """The sweep ended (``finished`` or ``interrupted``): the last snapshot everywhere."""
        if self.storage_watch is not None:
            self.storage_watch.stop()
        if self.progress is None:
            return None
        snapshot = self._with_storage(self.progress.snapshot(state=state))  # type: ignore[arg-type]
        for view in self.views:
            view.close(snapshot)
        self._write(snapshot)
        self._log_forecast(snapshot, force=True)
        return snapshot

    # -- Tune's calls -------------------------------------------------------------------------------

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        """Records the trial with its parameters."""
        if self.progress is None:
            return
        params = {k: v for k, v in (trial.config or {}).items() if k != REPEAT_KEY}
        self.progress.start(trial.trial_id, params)
        if len(self.progress.trials) >= self.progress.plan.planned_trials:
            self._all_started()

    def _all_started(self) -> None:
        """Every planned trial has started: ``progress.json`` says so at once (``pending`` 0).

        A sweep queue admits the next sweep on that word (:mod:`hpo.queue.admission`): written on the next
        refresh instead, it would reach the queue up to ``tick_s`` later, with slots idle meanwhile.
        """
        try:
            snapshot = self._with_storage(self.progress.snapshot(estimate=False))
        except Exception:  # progress is a view; a bug in it must not stop the sweep
            logger.warning("progress snapshot failed", exc_info=True)
            return
        with self._lock:
            self._write(snapshot)

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        """Records an epoch; a trial's first epoch is shown at once."""
        if self.progress is None:
            return
        track = self.progress.start(trial.trial_id)
        self.reported_at[trial.trial_id] = time.time()
        first = not track.values
        epoch = int(result.get(EPOCH_KEY, result.get(ITERATION_KEY, len(track.values) + 1)) or 0)
        self.progress.result(trial.trial_id, epoch, result.get(self.progress.metric), result.get(EPOCH_TIME_KEY))
        self._tick(force=first, event=(trial.trial_id, "first_epoch", "") if first else None)

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        """A trial ended by its own rules or the scheduler's."""
        self._ended(trial, trial_status(trial.last_result, False))

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        """A trial failed."""
        line = trial_error_line(trial)
        status = error_status(line)  # a storage outage past its limit interrupts, not fails
        if status == "failed" and self.storage_watch is not None and self.storage_watch.down_since is not None:
            status = "interrupted"  # failed while the storage did not answer (e.g. in Tune's own restore)
        if status == "interrupted":
            self.storage_interrupted.add(trial.trial_id)
        self._ended(trial, status, line)

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        """Refreshes the views (time passes between results too); a resumed sweep learns its ended trials."""
        if self.progress is None:
            return
        if not self.synced:
            self.synced = True
            self._sync(trials)
        self._tick()

    # -- inside -------------------------------------------------------------------------------------

    def _sync(self, trials: list) -> None:
        """Trials that ended before a resume (Tune reports nothing for them) enter the counts."""
        for trial in trials:
            if trial.trial_id in self.progress.trials or trial.status not in ("TERMINATED", "ERROR"):
                continue
            last = trial.last_result or {}
            self.progress.start(trial.trial_id, {k: v for k, v in (trial.config or {}).items() if k != REPEAT_KEY})
            epochs = int(last.get(EPOCH_KEY, 0) or 0)
            for epoch in range(1, epochs + 1):  # the curve itself is in the trial's files; its length counts here
                self.progress.result(trial.trial_id, epoch, last.get(self.progress.metric))
            self.progress.end(trial.trial_id, "failed" if trial.status == "ERROR" else trial_status(last, False))

    def _ended(self, trial: Any, status: str, detail: str = "") -> None:
        if self.progress is None:
            return
        self.progress.end(trial.trial_id, status)  # type: ignore[arg-type]
        self._tick(force=True, event=(trial.trial_id, "ended", detail))
        best = self.progress.best_so_far()
        if self.log is not None and best is not None:
            self._send({f"best_so_far_{self.progress.metric}": best}, len(self.progress.order))

    def _tick(self, force: bool = False, event: tuple[str, str, str] | None = None) -> Snapshot | None:
        """A snapshot to the views (``event``: a trial's first epoch or end, shown first).

        Every ``tick_s`` the snapshot also goes to the file; once the estimate's refresh interval has passed,
        it has fresh estimates and also goes to MLflow. Between fresh estimates it carries the last one, with
        fresh counts and trial lines.
        """
        now = time.monotonic()
        # A trial's event refreshes the estimate too while the last one had no time left to show yet.
        untimed = self.snapshot is None or self.snapshot.remaining_s_median is None
        fresh = now - self.last_tick >= self._interval() or (force and untimed)
        write = fresh or now - self.last_write >= self.tick_s
        if not force and not write:
            return None
        try:
            snapshot = self._with_storage(self.progress.snapshot(estimate=fresh))
        except Exception:  # progress is a view; a bug in it must not stop the sweep
            logger.warning("progress estimate failed", exc_info=True)
            return None
        if fresh:
            self.last_tick = now
        if write:
            self.last_write = now
        with self._lock:
            self.snapshot = snapshot
            line = None if event is None else _line_of(snapshot, event[0], self.progress)
            for view in self.views:
                if line is not None:
                    view.trial_event(snapshot, line, event[1], event[2])  # type: ignore[index]
                view.update(snapshot)
            if write:
                self._write(snapshot)
                self._deadline(snapshot)
        if fresh:
            self._log_forecast(snapshot)
        return snapshot

    def _deadline(self, snapshot: Snapshot) -> None:
        """The first time ``p_meet`` falls below 0.5: one line on the views, the log and the journal."""
        watch = getattr(self, "deadline", None)
        recorder = getattr(self.progress, "recorder", None)
        if (watch is not None and watch.prediction is None and recorder is not None
                and snapshot.method == "monte-carlo" and snapshot.remaining_s_median is not None
                and watch.started_at is not None):  # the first forecast: the report's predicted wall time
            spent = snapshot.time - watch.started_at
            watch.prediction = {"source": "forecast", "wall_s_median": spent + snapshot.remaining_s_median,
                                "wall_s_low": spent + (snapshot.remaining_s_low or 0.0),
                                "wall_s_high": spent + (snapshot.remaining_s_high or 0.0)}
            recorder({"event": "prediction", "t": snapshot.time, "deadline_at": watch.deadline_at,
                      **watch.prediction})
        # a prior's forecast (no epoch timed yet) is no ground for a warning
        line = None if watch is None or snapshot.method == "prior" else watch.check(
            snapshot.p_meet, done=snapshot.method == "done")
        if line is None:
            return
        logger.info("sweep %s: %s", self.progress.name, line)
        if recorder is not None:
            recorder({"event": "deadline_warning", "t": time.time(), "p_meet": snapshot.p_meet,
                      "deadline_at": watch.deadline_at, "text": line})  # type: ignore[union-attr]
        for view in self.views:
            view.note(snapshot, line)

    def _with_storage(self, snapshot: Snapshot) -> Snapshot:
        """``snapshot`` with the trials' wait for resources and the storage's state.

        The storage's: since when it does not answer, which trials wait on it.
        """
        wait = getattr(self, "resource_wait", None)
        snapshot = replace(snapshot, resources_waiting_since=wait.since if wait else None,
                           resources_waiting=wait.groups if wait else 0, resources_note=wait.lost if wait else "",
                           resources_waited_s=round(getattr(self, "resources_waited_s", 0.0), 1))
        since = self.storage_watch.down_since if self.storage_watch is not None else None
        if since is None:
            return snapshot
        running = {t.trial_id for t in snapshot.trials[: snapshot.running]}
        waiting = sum(1 for t in running if self.reported_at.get(t, 0.0) < since)
        return replace(snapshot, storage_down_since=since, storage_waiting=waiting)

    def _storage_changed(self, since: float | None) -> None:
        """The storage stopped or started answering (the watch's thread): the last snapshot, updated, everywhere.

        The sweep's loop may be waiting on the storage too, so the views hear it from here.
        """
        with self._lock:
            if self.snapshot is None:
                return
            snapshot = self._with_storage(replace(self.snapshot, time=time.time(), storage_down_since=None,
                                                  storage_waiting=0))
            self.snapshot = snapshot
            for view in self.views:
                view.update(snapshot)
            self._write(snapshot)

    def _interval(self) -> float:
        """Seconds between fresh estimates: ``tick_s``, or longer where an estimate costs more than its share."""
        if self.estimate_share is None:
            return self.tick_s
        return max(self.tick_s, self.progress.estimate_cost_s / self.estimate_share)

    def _write(self, snapshot: Snapshot) -> None:
        if self.live_file is None:
            return
        try:
            write_text_atomic(self.live_file, snapshot.to_json())
        except OSError as exc:
            logger.warning("%s not written: %s", self.live_file, exc)

    def _log_forecast(self, snapshot: Snapshot, force: bool = False) -> None:
        if self.log is None or (not force and snapshot.elapsed_s - self.last_log < self.log_every_s):
            return
        self.last_log = snapshot.elapsed_s
        metrics = {
            "forecast_remaining_s": snapshot.remaining_s_median,
            "forecast_remaining_s_low": snapshot.remaining_s_low,
            "forecast_remaining_s_high": snapshot.remaining_s_high,
            "forecast_p_meet": snapshot.p_meet,
            "forecast_cost_total": snapshot.cost_total_median,
            "progress_trials_ended": float(snapshot.ended),
            "progress_epochs_per_min": snapshot.epochs_per_min,
            # Seconds the sweep waited for resources (a lost node): the forecast counts training time only.
            "progress_resources_waited_s": snapshot.resources_waited_s + (
                snapshot.time - snapshot.resources_waiting_since if snapshot.resources_waiting_since else 0.0),
        }
        self._send({k: v for k, v in metrics.items() if v is not None}, int(snapshot.elapsed_s))

    def _send(self, metrics: dict[str, float], step: int) -> None:
        try:
            self.log(metrics, step)  # type: ignore[misc]
        except Exception as exc:  # noqa: BLE001 - the forecast is extra; the trials' results are what counts
            logger.warning("forecast not logged to MLflow: %s", exc)


def _line_of(snapshot: Snapshot, trial_id: str, progress: SweepProgress) -> TrialLine | None:
    """A trial's line in ``snapshot``: an ended one by its id, a running one among the first lines."""
    line = progress.ended_line(trial_id)
    if line is not None:
        return line
    return next((t for t in snapshot.trials[: snapshot.running] if t.trial_id == trial_id), None) or next(
        (t for t in snapshot.trials if t.trial_id == trial_id), None)
