"""The tracker seam: what a sweep asks of a tracking backend, and the record that declares one.

:class:`Tracker` is every member :mod:`hpo.sweep` uses (``tests/unit/test_tracker.py`` fails when the
sweep calls something it does not declare); :class:`TrackerKind` is how a backend plugs in: how a sweep
opens its tracker, whether a sweep directory holds one to resume, and what ``hpo sync`` and ``hpo ui``
do for it. :data:`hpo.tracking.kinds.TRACKERS` maps a name to its kind; MLflow
(:class:`~hpo.tracking.sweep_tracker.MlflowTracker`) is the one registered.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol, runtime_checkable

from hpo.config import SweepConfig
from hpo.storage import Storage
from hpo.sweep_summary import Goal, SweepSummary
from hpo.trial.protocol import TrialRow


@dataclass(frozen=True)
class TrackerStart:
    """What a tracker is opened with, once the checks passed and Ray is up.

    Attributes:
        config: The sweep.
        source: The sweep file (logged as an artifact) or ``<SweepConfig …>``.
        sweep_dir: ``STORAGE/NAME`` on the driver (the tracker's state and spool go there).
        artifact_root: Where a local store puts the artifacts of a new experiment.
        resume: Reopen what an interrupted sweep started (:attr:`TrackerKind.resumable` said it can).
        sample: ``(validation URL, features column)``: rows for the registered model's signature.
        storage: Where the trials' checkpoints are (the best model is read from there).
    """

    config: SweepConfig
    source: str
    sweep_dir: Path
    artifact_root: Path
    resume: bool
    sample: tuple[str, str]
    storage: Storage


@runtime_checkable
class Tracker(Protocol):
    """One sweep's tracking, from the parent run to the final close, as the sweep uses it.

    Attributes:
        callback: The Tune callback that logs every trial (handed to the ``Tuner`` as it is).
    """

    callback: Any

    def mark_interrupted(self) -> None:
        """Ctrl-C or SIGTERM is stopping the sweep (called from the signal handler: no I/O)."""
        ...

    def log_progress(self, metrics: dict[str, float], step: int) -> None:
        """Logs the sweep's progress figures at ``step`` (the forecast: seconds since the start)."""
        ...

    def open_trials(self) -> list[str]:
        """Ids of the trials whose record was opened and not closed yet."""
        ...

    def run_ids(self) -> dict[str, str]:
        """Trial id → the tracker's id of its record (``mlflow_run_id`` in ``summary.json``)."""
        ...

    def summary_section(self) -> dict[str, Any]:
        """Where the sweep is tracked, for ``summary.json`` (MLflow: ``{uri, experiment_id, parent_run_id}``)."""
        ...

    def finish(
        self, rows: list[TrialRow], best: TrialRow | None, goal: Goal | None, summary: SweepSummary,
        report: Path | None = None,
    ) -> int:
        """Closes the records, logs the best model and the report, fills its part of ``summary``.

        Returns:
            Writes that could not be sent yet (kept for ``hpo sync``).
        """
        ...

    def fail(self) -> None:
        """Marks the sweep failed (it stopped with an error)."""
        ...

    def interrupt(self, summary: SweepSummary | None) -> int:
        """Marks the sweep and its running trials interrupted (no model); returns unsent writes."""
        ...

    def unsent_note(self, pending: int) -> str:
        """The console line for ``pending`` writes that could not be sent: where they are, how to send them."""
        ...


@dataclass(frozen=True)
class TrackerKind:
    """A tracking backend: how a sweep opens it, and what the CLI's tracking commands do with it.

    Attributes:
        open: Opens (or, with ``start.resume``, reopens) one sweep's tracker.
        resumable: True if a sweep directory holds the state of a tracker opened before.
        sync: ``hpo sync``: sends what a sweep could not log, given its summary (updated in place) and the
            summary's path; returns ``(sent, still waiting)``.
        serve: ``hpo ui``: serves a store (the ``--mlflow-uri`` given, else the one a sweep's summary
            names, else the default) on 127.0.0.1 until Ctrl-C; arguments: store, state root, port.
    """

    open: Callable[[TrackerStart], Tracker]
    resumable: Callable[[Path], bool]
    sync: Callable[[SweepSummary, Path], tuple[int, int]]
    serve: Callable[[str | None, Path, int | None], None]
