"""``hpo sync NAME``: send the MLflow writes a sweep spooled while its tracking server was unreachable.

The sending is the tracker's (:attr:`hpo.tracking.tracker.TrackerKind.sync`); this module reads the
sweep's summary and writes it back with the run ids and what is still waiting.
"""

from __future__ import annotations

from typing import Annotated

import typer

from hpo.cli.errors import one_line_errors
from hpo.cli.options import StorageOption
from hpo.errors import HpoError
from hpo.storage import DEFAULT_STORAGE, Storage


@one_line_errors
def sync(
    name: Annotated[str, typer.Argument(help="Sweep name.")],
    storage: StorageOption = DEFAULT_STORAGE,
) -> None:
    """Send what a sweep could not log to MLflow (kept in STORAGE/NAME/mlflow_spool.jsonl)."""
    sent, left = sync_sweep(Storage.parse(storage), name)
    print(f"{name}: {sent} MLflow writes sent, {left} waiting", flush=True)
    if left:
        raise HpoError(f"{left} MLflow writes of '{name}' could not be sent; rerun 'hpo sync {name}'")


def sync_sweep(storage: Storage, name: str) -> tuple[int, int]:
    """Sends a sweep's spooled writes through its tracker and updates its ``summary.json``.

    Returns:
        (writes sent, writes still waiting).

    Raises:
        ConfigError: No summary, or the tracking server is unreachable.
    """
    from hpo.options import summary_path
    from hpo.sweep_summary import SweepSummary
    from hpo.tracking.kinds import tracker_kind

    summary = SweepSummary.load(storage, name)
    before = summary.model_copy(deep=True)
    path = summary_path(storage, name)
    sent, left = tracker_kind().sync(summary, path)
    if summary != before:  # unchanged (nothing was spooled): the file is left as it is
        summary.write(path)
    return sent, left
