"""MLflow nesting: one parent run per sweep, one nested run per trial, written from the sweep's driver.

Ray's ``MLflowLoggerCallback`` makes flat runs; :class:`MlflowNesting` is a Tune callback that runs in
the sweep's driver process (the only MLflow writer, so a sqlite store sees no concurrent writers) and
nests every trial run under the sweep's parent run.

Its work per trial does not grow with the sweep: the trial → run map is kept as runs are created (a
resumed sweep reads the runs of its earlier attempt once, not at every trial start), and epoch metrics,
parameters and progress figures are queued and sent as one ``log_batch`` per run at most every
``flush_every_s`` seconds and when the run is closed (the sweep's end, Ctrl-C, a failure), so a
store commit is not paid for every epoch.
"""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

from ray.tune import Callback

from hpo.object_store import error_status
from hpo.results import (
    BOOKKEEPING_KEYS,
    EFFECTIVE_KEYS,
    EPOCH_KEY,
    ITERATION_KEY,
    REPEAT_KEY,
    epochs_of,
    finished,
    stop_reason,
    trial_status,
)
from hpo.tracking.outbox import SPOOL_NAME, Outbox
from hpo.tracking.runs import SweepRun, finite, trial_run_ids
from hpo.tracking.writer import OutboxProcess
from hpo.trial.protocol import trial_error_line


class MlflowNesting(Callback):
    """Tune callback: a nested MLflow run per trial, with per-epoch metrics and a final status.

    Every write goes through the sweep's :class:`~hpo.outbox.Outbox`, so a tracking server that goes
    away mid-sweep costs no results: they are spooled and sent later.

    Args:
        sweep: The parent run.
        objective: The objective metric name.
        mode: ``max`` or ``min``.
        sweep_name: The sweep's name (tag ``hpo.sweep`` of every trial run).
        spool_path: The sweep's spool file (``STORAGE/NAME/mlflow_spool.jsonl``).
        resume: The sweep was started before: a trial may have a run already (looked up once, on the first
            trial start).
        flush_every_s: Seconds queued metrics and parameters may wait before they are sent, at least;
            longer where a flush of every run costs more than ``flush_share`` of the time between flushes
            (a store that can't keep up lags, the driver's loop does not stall on it).
        flush_share: The most of one core periodic flushes may take.
        writer_process: Send the writes from a child process (:class:`~hpo.tracking.writer.OutboxProcess`),
            so the driver's loop does not wait on the store; False: from the driver itself.
    """

    def __init__(
        self, sweep: SweepRun, objective: str, mode: str, sweep_name: str = "", spool_path: Path | None = None,
        resume: bool = False, flush_every_s: float = 2.0, flush_share: float = 0.1, writer_process: bool = False,
    ) -> None:
        self.sweep = sweep
        self.sweep_name = sweep_name
        self.objective = objective
        self.mode = mode
        outbox = OutboxProcess if writer_process else Outbox
        self.outbox: Outbox | OutboxProcess = outbox(
            sweep.uri, spool_path or Path(SPOOL_NAME).resolve(), sweep.parent_run_id, sweep.experiment_id
        )
        self._started: set[str] = set()
        self._closed: set[str] = set()
        self._last_step: dict[str, int] = {}
        #: Runs of the earlier attempt of a resumed sweep, by trial id (None: not read yet); {} for a new sweep.
        self._earlier: dict[str, str] | None = None if resume else {}
        #: Writes waiting for the next flush: run key → (metrics, params).
        self._queued: dict[str, tuple[list[tuple[str, float, int, int]], dict[str, str]]] = {}
        self.flush_every_s = flush_every_s
        self.flush_share = flush_share
        self._last_flush = time.monotonic()
        self._flush_cost_s = 0.0
        #: Set (from the signal handler) when Ctrl-C or SIGTERM stops the sweep, before Tune stops the trials.
        self.interrupted = False

    @property
    def run_ids(self) -> dict[str, str]:
        """Trial id → MLflow run id, for the runs created so far (not those still in the spool)."""
        return {k.split(":", 1)[1]: v for k, v in self.outbox.run_ids.items() if k.startswith("trial:")}

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        """Creates the trial's nested run and logs its sampled parameters."""
        if trial.trial_id in self._started:
            return
        self._started.add(trial.trial_id)
        key = f"trial:{trial.trial_id}"
        existing = self._existing_run(trial.trial_id)
        if existing is not None:
            # A resumed sweep (or a retried trial): keep logging into the same run, after its last epoch.
            self.outbox.adopt(key, existing)
            history = self.outbox.client.get_metric_history(existing, self.objective)
            self._last_step[trial.trial_id] = max((m.step for m in history), default=0)
            self.outbox.terminate(key, "RUNNING")
            return
        self.outbox.create_run(
            key,
            run_name=f"trial-{trial.trial_id}",
            tags={
                "mlflow.parentRunId": self.sweep.parent_run_id,
                "hpo.kind": "trial",
                "hpo.trial_id": trial.trial_id,
                "hpo.sweep": self.sweep_name,
                "hpo.repeat": str(trial.config.get(REPEAT_KEY, 0)),
            },
        )
        params = {str(k): str(v)[:6000] for k, v in trial.config.items() if k != REPEAT_KEY}
        self.queue(key, params=params)

    def _existing_run(self, trial_id: str) -> str | None:
        """The run of ``trial_id`` if the earlier attempt of a resumed sweep made one.

        None for a new sweep, and while the server is down.
        """
        if self._earlier is None:
            if self.outbox.down:
                return None
            try:
                self._earlier = trial_run_ids(self.sweep, self.outbox.client)
            except Exception:  # noqa: BLE001  (server just went away: the outbox spools the new run's writes)
                return None
        return self._earlier.get(trial_id)

    def queue(
        self, key: str, metrics: list[tuple[str, float, int, int]] | None = None, params: dict[str, str] | None = None
    ) -> None:
        """Queues metrics and parameters for the run of ``key``; they are sent by the next :meth:`flush`."""
        queued_metrics, queued_params = self._queued.setdefault(key, ([], {}))
        queued_metrics.extend(metrics or ())
        queued_params.update(params or {})

    def flush(self, key: str | None = None, tags: dict[str, str] | None = None) -> None:
        """Sends what is queued: for every run (``key`` None), or for one run together with ``tags``."""
        keys = list(self._queued) if key is None else [key]
        for each in keys:
            metrics, params = self._queued.pop(each, ([], {}))
            if metrics or params or (tags and each == key):
                self.outbox.log(each, metrics=metrics, params=params, tags=tags if each == key else None)
        if key is None:
            self._last_flush = time.monotonic()
            self.outbox.push()

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        """Sends the queued writes once the flush interval has passed since the last time."""
        interval = max(self.flush_every_s, self._flush_cost_s / self.flush_share)
        if self._queued and time.monotonic() - self._last_flush >= interval:
            started = time.monotonic()
            self.flush()
            self._flush_cost_s = time.monotonic() - started

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        """Logs one epoch's metrics (step = epoch); the effective LR and global batch as params."""
        step = int(result.get(EPOCH_KEY, result.get(ITERATION_KEY, 0)))
        if step <= self._last_step.get(trial.trial_id, 0):
            return  # already logged before the sweep or the trial was resumed
        self._last_step[trial.trial_id] = step
        ts = int(result.get("timestamp", 0) * 1000)
        metrics = [
            (key, float(value), ts, step)
            for key, value in result.items()
            if key not in BOOKKEEPING_KEYS and finite(value)
        ]
        params = {}
        if step == 1 or result.get(ITERATION_KEY) == 1:
            params = {k: str(result[k]) for k in EFFECTIVE_KEYS if k in result}
        self.queue(f"trial:{trial.trial_id}", metrics=metrics, params=params)

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        """Tags the run completed (max epochs, patience or goal) or stopped_early (scheduler) and closes it."""
        last = trial.last_result
        tags = {"hpo.status": trial_status(last, False), "hpo.stop_reason": stop_reason(last),
                "hpo.epochs": str(epochs_of(last))}
        self._finish(trial, "FINISHED", tags)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        """Tags the run failed, with the error's last line, and closes it."""
        reason = trial_error_line(trial) or "trial failed"  # the line the console shows
        status = error_status(reason)  # a storage outage past its limit interrupts the trial (resumable)
        self._finish(trial, "KILLED" if status == "interrupted" else "FAILED",
                     {"hpo.status": status, "hpo.stop_reason": reason})

    def mark_interrupted(self) -> None:
        """Ctrl-C or SIGTERM is stopping the sweep (called from the signal handler).

        The queued writes are sent by the tracker's :meth:`~hpo.tracking.sweep_tracker.MlflowTracker.interrupt`.
        """
        self.interrupted = True

    def open_trials(self) -> list[str]:
        """Trials whose run this callback started (or reopened) and has not closed."""
        return sorted(self._started - self._closed)

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        """Closes the runs of trials Tune stopped with the whole sweep (time budget, goal), which it does not report.

        Tune calls no trial hook for them, so their runs would stay RUNNING. After Ctrl-C (:attr:`interrupted`)
        the trials still open are left to :meth:`~hpo.tracking.sweep_tracker.MlflowTracker.interrupt`.
        """
        if self.interrupted:
            return
        self.flush()
        for trial in trials:
            if trial.trial_id in self._started and trial.trial_id not in self._closed:
                if finished(trial.last_result):
                    self.on_trial_complete(0, trials, trial)
                    continue
                tags = {"hpo.status": "stopped_early", "hpo.stop_reason": "sweep_stopped",
                        "hpo.epochs": str(epochs_of(trial.last_result))}
                self._finish(trial, "FINISHED", tags)

    def _finish(self, trial: Any, mlflow_status: str, tags: dict[str, str]) -> None:
        self._closed.add(trial.trial_id)
        key = f"trial:{trial.trial_id}"
        self.flush(key, tags=tags)
        self.outbox.terminate(key, mlflow_status)
