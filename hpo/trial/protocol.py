"""What crosses a process boundary in a trial, and how it becomes the result Tune records.

Rank 0 of a trial sends :class:`TrialStarted` once and an :class:`EpochReport` per epoch to the trial
driver (through the backend's channel actor); the driver turns each report into one Tune result
(:func:`epoch_result`), which the scheduler, the searcher, MLflow tracking, the console and
``summary.json`` read back with the keys of :mod:`hpo.results`.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Any

from hpo.results import (
    DIVERGED_KEY,
    EFFECTIVE_KEYS,
    EPOCH_KEY,
    EPOCH_TIME_KEY,
    FINISHED_KEY,
    STOPPED_BY_GOAL_KEY,
    STOPPED_BY_PATIENCE_KEY,
    TrialStatus,
)


@dataclass(frozen=True)
class TrialStarted:
    """Rank 0 is about to train its first epoch (``time``: wall clock)."""

    time: float


@dataclass(frozen=True)
class EpochCheckpoint:
    """What a resumed trial needs: training state plus the weights (Ray object refs, or arrays once fetched).

    Rank 0 sends one with each epoch; the trial driver writes it into the Tune checkpoint and reads it back
    (weights as arrays) for the attempt that resumes from it, which gets it as its ``resume`` argument.

    Attributes:
        state: ``{"epoch": n, "early_stopping": {"best", "wait", "best_epoch"}}`` (``state.json`` of the
            checkpoint).
        weights: The model's weights after this epoch.
        best_weights: EarlyStopping's best weights, if they are not this epoch's (else None).
    """

    state: dict[str, Any]
    weights: Any
    best_weights: Any = None

    @property
    def epoch(self) -> int:
        """The epochs trained when the checkpoint was taken: where a resumed trial starts."""
        return int(self.state.get("epoch", 0) or 0)

    @property
    def early_stopping(self) -> dict[str, Any] | None:
        """EarlyStopping's ``best``, ``wait`` and ``best_epoch`` at the checkpoint (None if not recorded)."""
        return self.state.get("early_stopping") or None

    @property
    def best_or_last_weights(self) -> Any:
        """EarlyStopping's best weights: :attr:`best_weights`, else this epoch's (it was the best one)."""
        return self.weights if self.best_weights is None else self.best_weights


@dataclass(frozen=True)
class EpochReport:
    """One epoch of a trial, from rank 0 to the trial driver (metrics averaged over ranks).

    Attributes:
        epoch: 1-based epoch number.
        metrics: Keras' epoch logs (``loss``, ``val_accuracy``, ...), as floats.
        epoch_time_s: Seconds the epoch took on rank 0.
        time: Wall-clock time at the end of the epoch.
        last: True if training ends with this epoch (max_epochs, patience, goal or divergence).
        stopped_by_patience: EarlyStopping ended training.
        stopped_by_goal: The objective goal was reached at this epoch.
        checkpoint: The epoch's checkpoint.
        diverged: The loss (or objective) is NaN or infinite at this epoch; training ended.
    """

    epoch: int
    metrics: dict[str, float]
    epoch_time_s: float
    time: float
    last: bool
    stopped_by_patience: bool = False
    stopped_by_goal: bool = False
    checkpoint: EpochCheckpoint = field(default_factory=lambda: EpochCheckpoint({}, None))
    diverged: bool = False


Message = TrialStarted | EpochReport


@dataclass(frozen=True)
class TrialContext:
    """Facts about a trial the driver adds to every epoch's result.

    Attributes:
        startup_s: Seconds from the trial's start to rank 0's first epoch (None before it started).
        warm_start: The workers were kept warm from an earlier trial.
        resumed_from_epoch: The checkpoint's epoch this attempt resumed from (0: a fresh start).
        settings: The effective training settings (:data:`EFFECTIVE_KEYS` and more, see ``TrialSpec.hyper``).
    """

    startup_s: float | None
    warm_start: bool
    resumed_from_epoch: int
    settings: dict[str, Any]


def epoch_result(report: EpochReport, context: TrialContext, now: float) -> dict[str, Any]:
    """The Tune result of one epoch: the model's metrics plus the trial's bookkeeping keys.

    Args:
        report: Rank 0's report.
        context: What the driver knows about the trial.
        now: The driver's clock when it reports (for ``report_lag_s``).
    """
    result: dict[str, Any] = dict(report.metrics)
    result.update(
        {
            FINISHED_KEY: report.last,
            EPOCH_KEY: report.epoch,
            DIVERGED_KEY: report.diverged,
            EPOCH_TIME_KEY: report.epoch_time_s,
            STOPPED_BY_PATIENCE_KEY: report.stopped_by_patience,
            STOPPED_BY_GOAL_KEY: report.stopped_by_goal,
            "startup_s": context.startup_s,
            "warm_start": context.warm_start,
            "resumed_from_epoch": context.resumed_from_epoch,
            **{key: context.settings[key] for key in EFFECTIVE_KEYS},
            # How far this report trails the workers' epoch end (a driver that cannot keep up shows here).
            "report_lag_s": now - report.time,
            # Rank 0's clock at the epoch's end, and whether the epoch came with a checkpoint.
            "epoch_end_time": report.time,
            "checkpointed": report.checkpoint.weights is not None,
        }
    )
    return result


@dataclass
class TrialRow:
    """One trial's outcome, as ``summary.json``, the results table and the DataFrame show it.

    Attributes:
        trial_id: Tune's trial id.
        params: Its sampled parameters (without the repeat index).
        status: ``completed``, ``stopped_early``, ``diverged``, ``failed`` or ``interrupted`` (running when
            Ctrl-C stopped the sweep; ``--resume`` continues it).
        epochs: Epochs trained.
        metric: The objective at its best epoch (None if it never reported a finite one).
        stopped_early: ``status == "stopped_early"``.
        mlflow_run_id: Its nested MLflow run (None while only in the spool).
        checkpoint: Its last checkpoint's location.
        repeat: Its repeat index.
        error: The failure's one line (failed trials only).
    """

    trial_id: str
    params: dict[str, Any]
    status: TrialStatus
    epochs: int
    metric: float | None
    stopped_early: bool
    mlflow_run_id: str | None
    checkpoint: str | None
    repeat: int = 0
    error: str | None = None

    def to_dict(self) -> dict[str, Any]:
        """The row as stored in ``summary.json`` (``error`` only for failed trials)."""
        out = asdict(self)
        if out["error"] is None:
            del out["error"]
        return out

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> TrialRow:
        """A row read back from ``summary.json``."""
        known = {k: data.get(k) for k in cls.__dataclass_fields__}
        known["repeat"] = int(known["repeat"] or 0)
        known["params"] = dict(known["params"] or {})
        return cls(**known)


def error_line(error: object) -> str:
    """A failed trial's error as one line of at most 500 characters.

    The worker's own exception (``FileNotFoundError: …``), without the wrappers Ray and hpo put around it.
    """
    lines = [line.strip() for line in str(error).splitlines() if line.strip()]
    line = lines[-1] if lines else type(error).__name__
    for wrapper in ("hpo.errors.TrialFailed: ", "TrialFailed: ", "hpo.object_store.StorageUnavailable: ",
                    "StorageUnavailable: "):
        line = line.removeprefix(wrapper)
    return line[:500]


#: The most characters of a failed trial's error line that the console, MLflow and ``summary.json`` show.
ERROR_LINE_LIMIT = 300


def trial_failure_line(error_file: str | None, error: object = None) -> str:
    """A failed trial's error as one line: the last non-empty line of its ``error.txt``, else of ``error``.

    The one line the console, the trial's MLflow run (``hpo.stop_reason``) and its ``summary.json`` row
    show, without the wrappers Ray and hpo put around the worker's exception.

    Args:
        error_file: Tune's ``error.txt`` of the trial (None or a missing file: ``error`` is used).
        error: The trial's exception or message.

    Returns:
        At most :data:`ERROR_LINE_LIMIT` characters ("" when there is neither).
    """
    lines: list[str] = []
    if error_file:
        try:
            with open(error_file) as f:
                lines = [line.strip() for line in f if line.strip()]
        except (OSError, UnicodeDecodeError):
            lines = []
    if lines:
        return error_line(lines[-1])[:ERROR_LINE_LIMIT]
    return error_line(error)[:ERROR_LINE_LIMIT] if error else ""


def trial_error_line(trial: Any) -> str:
    """:func:`trial_failure_line` of a failed Tune trial (its ``error_file``, else its ``error_msg`` if it has one)."""
    return trial_failure_line(getattr(trial, "error_file", None), getattr(trial, "error_msg", None))
