"""``hpo cluster``: check a Ray cluster file, start the cluster (``up``), tear it down (``down``)."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console

from hpo.cli.errors import one_line_errors
from hpo.cli.options import JsonOption

app = typer.Typer(help="Ray clusters: check a cluster file, start a cluster, tear it down.", no_args_is_help=True)
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


StorageOpt = Annotated[
    Optional[str],
    typer.Option("--storage", envvar="HPO_STORAGE",
                 help="The sweeps' storage, where the queue lives (s3://bucket/prefix, gs://…, file:///mount)."),
]


@app.command()
@one_line_errors
def up(
    file: Annotated[Path, typer.Argument(help="Cluster file (YAML), as given to 'ray up'.")],
    autostop: Annotated[
        Optional[str],
        typer.Option("--autostop", help="Tear the cluster down (head included) once the queue has been empty "
                     "this long: 90s, 15m, 1h; 'off' switches it off. Default: as the queue's settings say."),
    ] = None,
    storage: StorageOpt = None,
) -> None:
    """Start the cluster unless it is up; a running cluster is left alone (Ray is not restarted)."""
    from hpo.cluster.duration import parse_duration
    from hpo.cluster.lifecycle import cluster_up

    seconds: float | bool | None = None
    if autostop is not None:
        seconds = False if autostop.strip().lower() == "off" else parse_duration(autostop)
    cluster_up(file, autostop_s=seconds, storage=storage, say=lambda line: console.print(line, highlight=False))


@app.command()
@one_line_errors
def down(
    file: Annotated[Path, typer.Argument(help="Cluster file (YAML), as given to 'ray up'.")],
    force: Annotated[bool, typer.Option("--force", help="Tear down even while sweeps are queued or running.")] = False,
    storage: StorageOpt = None,
) -> None:
    """Tear the cluster down, head included (as 'ray down'); refused while sweeps are queued or running."""
    from hpo.cluster.lifecycle import ClusterBusy, cluster_down

    try:
        cluster_down(file, storage=storage, force=force, say=lambda line: console.print(line, highlight=False))
    except ClusterBusy as exc:
        print(f"error: {exc}", file=sys.stderr)
        raise typer.Exit(1) from None
