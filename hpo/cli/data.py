"""``hpo data``: dataset commands."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.console import Console

from hpo.cli.errors import one_line_errors

app = typer.Typer(help="Write and check Parquet datasets for hpo.", no_args_is_help=True)
console = Console(soft_wrap=True)


@app.command()
@one_line_errors
def convert(
    src: Annotated[Path, typer.Argument(help="A .csv or .parquet table.")],
    dest_url: Annotated[str, typer.Argument(help="Destination, e.g. file:///data/mine (a directory).")],
    label: Annotated[str, typer.Option(help="Label column; every other numeric column becomes a feature.")],
    features: Annotated[str, typer.Option(help="Name of the features column to write.")] = "features",
) -> None:
    """Write a table as an hpo dataset (list<float32> features, label, row_id; shard-friendly row groups)."""
    from hpo.data import convert as run

    if "://" not in dest_url:
        from hpo.data import path_to_url

        dest_url = path_to_url(dest_url)
    info = run(src, dest_url, label, features_column=features)
    console.print(
        f"{info.url}: {info.num_rows} rows, {info.feature_dim} features, "
        f"{len(info.row_group_rows)} row groups" + (f", {info.num_classes} classes" if info.num_classes else ""),
        highlight=False,
    )
