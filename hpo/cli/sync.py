"""``hpo sync NAME``: send the MLflow writes a sweep spooled while its tracking server was unreachable."""

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
    from hpo.summary import sync_sweep

    sent, left = sync_sweep(Storage.parse(storage), name)
    print(f"{name}: {sent} MLflow writes sent, {left} waiting", flush=True)
    if left:
        raise HpoError(f"{left} MLflow writes of '{name}' could not be sent; rerun 'hpo sync {name}'")
