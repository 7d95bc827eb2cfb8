"""The tracking backends a sweep can log to: name → :class:`~hpo.tracking.tracker.TrackerKind`.

Adding one is one entry in :data:`TRACKERS`: its tracker (the :class:`~hpo.tracking.tracker.Tracker`
protocol), how a resume finds it, and its ``hpo sync`` / ``hpo ui``.
"""

from __future__ import annotations

from pathlib import Path

from hpo.errors import ConfigError
from hpo.tracking.sync import send_spool
from hpo.tracking.tracker import Tracker, TrackerKind, TrackerStart
from hpo.tracking.ui import serve


def _open_mlflow(start: TrackerStart) -> Tracker:
    from hpo.tracking.sweep_tracker import MlflowTracker  # Ray Tune's Callback base: imported by a sweep only

    return MlflowTracker(start)


def _mlflow_resumable(sweep_dir: Path) -> bool:
    from hpo.tracking.sweep_tracker import MlflowTracker  # (the state file is the tracker's)

    return MlflowTracker.resumable(sweep_dir)


#: Tracker name → its :class:`TrackerKind`.
TRACKERS: dict[str, TrackerKind] = {
    "mlflow": TrackerKind(open=_open_mlflow, resumable=_mlflow_resumable, sync=send_spool, serve=serve),
}
#: The tracker every sweep logs to (``tracking.mlflow_uri`` names its store).
DEFAULT_TRACKER = "mlflow"


def tracker_kind(name: str = DEFAULT_TRACKER) -> TrackerKind:
    """The registered tracker ``name``.

    Raises:
        ConfigError: No tracker of that name is registered.
    """
    if name not in TRACKERS:
        raise ConfigError(f"tracker: '{name}' is not registered; use one of {', '.join(sorted(TRACKERS))}")
    return TRACKERS[name]
