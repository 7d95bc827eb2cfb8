"""``hpo cluster``: Ray cluster file commands."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from hpo.cli.errors import one_line_errors
from hpo.cli.options import JsonOption

app = typer.Typer(help="Check Ray cluster files (ray up) for hpo.", no_args_is_help=True)
console = Console(soft_wrap=True)


@app.command()
@one_line_errors
def validate(
    file: Annotated[Path, typer.Argument(help="Cluster file (YAML), as given to 'ray up'.")],
    as_json: JsonOption = False,
    template: Annotated[
        bool, typer.Option("--template", help="The file is a template: its example placeholders are not errors.")
    ] = False,
) -> None:
    """Check a cluster file offline: Ray's schema plus hpo's rules (GPU types scale from 0, idle timeout, ...)."""
    from hpo.cluster import validate_cluster_file

    info = validate_cluster_file(file, template=template)
    if as_json:
        gpu_types = [{"name": t.name, "resources": t.resources, "max_workers": t.count} for t in info.gpu_types]
        print(json.dumps({"file": str(file), "ok": True, "name": info.name, "provider": info.provider,
                          "head_type": info.head_type, "gpu_types": gpu_types, "max_workers": info.max_workers,
                          "idle_timeout_minutes": info.idle_timeout_minutes}))
        return
    gpu = ", ".join(
        f"{t.name} ({t.resources.get('GPU', 0):g} GPU, up to {t.count})" for t in info.gpu_types
    )
    console.print(
        f"{file}: ok — cluster '{info.name}' on {info.provider}, head {info.head_type}, GPU node types: {gpu}; "
        f"max {info.max_workers} workers, idle nodes removed after {info.idle_timeout_minutes:g} min",
        highlight=False,
    )
