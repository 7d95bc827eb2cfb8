"""``hpo cluster``: Ray cluster file commands."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from hpo.cli.errors import one_line_errors

app = typer.Typer(help="Check Ray cluster files (ray up) for hpo.", no_args_is_help=True)
console = Console(soft_wrap=True)


@app.command()
@one_line_errors
def validate(file: Annotated[Path, typer.Argument(help="Cluster file (YAML), as given to 'ray up'.")]) -> None:
    """Check a cluster file offline: Ray's schema plus hpo's rules (GPU types scale from 0, idle timeout, ...)."""
    from hpo.cluster import validate_cluster_file

    info = validate_cluster_file(file)
    gpu = ", ".join(
        f"{t.name} ({t.resources.get('GPU', 0):g} GPU, up to {t.count})" for t in info.gpu_types
    )
    console.print(
        f"{file}: ok — cluster '{info.name}' on {info.provider}, head {info.head_type}, GPU node types: {gpu}; "
        f"max {info.max_workers} workers, idle nodes removed after {info.idle_timeout_minutes:g} min",
        highlight=False,
    )
