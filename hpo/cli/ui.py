"""``hpo ui``: a real ``mlflow server`` over a sweep's tracking store, on 127.0.0.1, until Ctrl-C.

The serving is the tracker's (:attr:`hpo.tracking.tracker.TrackerKind.serve`); this module reads the
arguments and, for a sweep NAME, the store its summary names.
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from hpo.cli.errors import one_line_errors
from hpo.cli.options import StorageOption
from hpo.storage import DEFAULT_STORAGE, Storage
from hpo.sweep_summary import SweepSummary


@one_line_errors
def ui(
    name: Annotated[Optional[str], typer.Argument(help="Sweep whose store to serve (from its summary).")] = None,
    storage: StorageOption = DEFAULT_STORAGE,
    mlflow_uri: Annotated[
        Optional[str],
        typer.Option("--mlflow-uri", envvar="HPO_MLFLOW_URI", help="Tracking store to serve (sqlite:/// or a path)."),
    ] = None,
    port: Annotated[Optional[int], typer.Option(help="Port on 127.0.0.1 (default: a free one).")] = None,
) -> None:
    """Start the MLflow UI (a real mlflow server) on 127.0.0.1; Ctrl-C stops it."""
    from hpo.tracking.kinds import tracker_kind

    where = Storage.parse(storage)
    if mlflow_uri is None and name is not None:
        mlflow_uri = SweepSummary.load(where, name).mlflow.uri
    tracker_kind().serve(mlflow_uri, where.state_root, port)
