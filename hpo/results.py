"""The keys of the results Tune records for a trial, and how a trial ended, read from its last result.

One result per epoch (made by :func:`hpo.trial.protocol.epoch_result`) is what the scheduler, the
searcher, MLflow tracking, the console and ``summary.json`` read; they read it with the keys defined
here, and decide how a trial ended (:func:`trial_status`, :func:`stop_reason`) with the rules defined
here, once. Nothing here imports another hpo module: the search, trial and tracking packages all stand on it.
"""

from __future__ import annotations

from typing import Any, Literal

#: Config key Tune's Repeater sets on each trial: its repeat index (0..repeats-1).
REPEAT_KEY = "__trial_index__"
#: Result key every epoch report carries: True on a trial's last epoch (max_epochs, patience or goal), so a
#: trial that ended without it was stopped by the scheduler (or with the whole sweep).
FINISHED_KEY = "trial_finished"
#: The epoch a result is about (1-based); MLflow's step.
EPOCH_KEY = "epoch"
#: Result key: True on the epoch whose loss (or objective) became NaN or infinite; training ended there.
DIVERGED_KEY = "diverged"
#: Result key: True when the objective goal was reached at this epoch.
STOPPED_BY_GOAL_KEY = "stopped_by_goal"
#: Result key: True when EarlyStopping's patience ended training at this epoch.
STOPPED_BY_PATIENCE_KEY = "stopped_by_patience"
#: Result key: seconds the epoch took on rank 0.
EPOCH_TIME_KEY = "epoch_time_s"
#: Tune's own result key: how many results the trial has reported (its time attribute).
ITERATION_KEY = "training_iteration"
#: Tune's own result key: seconds the trial has run, over all its attempts.
TOTAL_TIME_KEY = "time_total_s"
#: The trial's effective training settings, reported with every epoch; MLflow logs them once, as params.
EFFECTIVE_KEYS = ("effective_learning_rate", "global_batch_size", "steps_per_epoch", "validation_steps")
#: Result keys that describe the run, not the model: MLflow does not log them as metrics.
BOOKKEEPING_KEYS = frozenset(
    {
        *EFFECTIVE_KEYS,
        FINISHED_KEY,
        EPOCH_KEY,
        DIVERGED_KEY,
        "warm_start",
        "resumed_from_epoch",
        STOPPED_BY_PATIENCE_KEY,
        STOPPED_BY_GOAL_KEY,
        "startup_s",
        "epoch_end_time",
        "checkpointed",
        # Tune's own
        "done",
        ITERATION_KEY,
        "time_this_iter_s",
        TOTAL_TIME_KEY,
        "timestamp",
        "time_since_restore",
        "iterations_since_restore",
        "pid",
        "node_ip",
    }
)

TrialStatus = Literal["completed", "stopped_early", "diverged", "failed", "interrupted"]
#: Tune statuses of a trial that had ended when the sweep stopped (any other was running or waiting).
ENDED_TUNE_STATUSES = ("TERMINATED", "ERROR")
#: Statuses whose metric counts: a diverged or failed trial is never the best or the registered model.
SCORED_STATUSES = ("completed", "stopped_early")


def is_hidden_param(key: str) -> bool:
    """True for a trial config key Tune or hpo adds (``__trial_index__``), not a searched parameter."""
    return key.startswith("__")


def finished(result: dict[str, Any] | None) -> bool:
    """True if a trial's (last) result says it trained to its own end."""
    return bool((result or {}).get(FINISHED_KEY))


def trial_status(last_result: dict[str, Any] | None, errored: bool) -> TrialStatus:
    """How a trial ended: ``failed``, ``diverged`` (NaN/inf loss), ``completed`` or ``stopped_early`` (scheduler)."""
    if errored:
        return "failed"
    if (last_result or {}).get(DIVERGED_KEY):
        return "diverged"
    return "completed" if finished(last_result) else "stopped_early"


def stop_reason(last_result: dict[str, Any] | None) -> str:
    """Why a trial that did not fail ended: diverged, goal, early_stopping_patience, max_epochs or scheduler."""
    last = last_result or {}
    if last.get(DIVERGED_KEY):
        return "diverged"
    if not finished(last):
        return "scheduler"
    if last.get(STOPPED_BY_GOAL_KEY):
        return "goal"
    return "early_stopping_patience" if last.get(STOPPED_BY_PATIENCE_KEY) else "max_epochs"


def epochs_of(result: dict[str, Any] | None) -> int:
    """The epochs a trial trained, from its last result (0 without one)."""
    return int((result or {}).get(EPOCH_KEY, 0) or 0)

