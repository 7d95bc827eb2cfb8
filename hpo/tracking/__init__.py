"""Tracking: MLflow nesting (a parent run per sweep, a nested run per trial), outbox, server, best model.

Modules: :mod:`~hpo.tracking.uri` (store URIs), :mod:`~hpo.tracking.runs` (parent run, run lookups),
:mod:`~hpo.tracking.nesting` (the Tune callback), :mod:`~hpo.tracking.outbox` (retries and spool),
:mod:`~hpo.tracking.writer` (the outbox run by a process of its own, for large sweeps),
:mod:`~hpo.tracking.server` (``mlflow server``, reachability), :mod:`~hpo.tracking.best_model`,
:mod:`~hpo.tracking.tracker` (the :class:`Tracker` protocol the sweep uses, :class:`TrackerKind`),
:mod:`~hpo.tracking.kinds` (``TRACKERS``: name → kind), :mod:`~hpo.tracking.sweep_tracker` (the MLflow
tracker), :mod:`~hpo.tracking.sync` (``hpo sync``), :mod:`~hpo.tracking.ui` (``hpo ui``).
"""

from __future__ import annotations

from hpo.tracking.server import MlflowServer, check_reachable, free_port, health
from hpo.tracking.uri import SQLITE_SUFFIXES, is_local, is_server, normalize_uri

__all__ = [
    "SQLITE_SUFFIXES",
    "MlflowServer",
    "check_reachable",
    "free_port",
    "health",
    "is_local",
    "is_server",
    "normalize_uri",
]
