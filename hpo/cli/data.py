"""``hpo data``: dataset commands."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
from rich.console import Console

from hpo.cli.errors import one_line_errors
from hpo.errors import ConfigError

app = typer.Typer(help="Write and check Parquet datasets for hpo.", no_args_is_help=True)
console = Console(soft_wrap=True)


@app.command()
@one_line_errors
def convert(
    src: Annotated[Path, typer.Argument(help="A .csv, .parquet or .npz file.")],
    dest_url: Annotated[str, typer.Argument(help="Destination, e.g. file:///data/mine (a directory).")],
    label: Annotated[str, typer.Option(help="Label column (or npz array); other numeric columns become features.")],
    features: Annotated[str, typer.Option(help="Features column to write (and npz array to read).")] = "features",
    validation_fraction: Annotated[
        Optional[float], typer.Option(help="Also split: DEST/train and DEST/validation (this share, seeded).")
    ] = None,
    split_by: Annotated[
        Optional[str], typer.Option(help="One dataset per value of this column: DEST/COL=VALUE.")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the train/validation split.")] = 0,
    overwrite: Annotated[
        bool,
        typer.Option(
            "--overwrite", help="Replace DEST if it holds an hpo dataset (never files hpo did not write)."
        ),
    ] = False,
    task: Annotated[
        str, typer.Option(help="classification, regression or auto (non-negative integer labels: classes).")
    ] = "auto",
    drop_nonnumeric: Annotated[
        bool,
        typer.Option(
            "--drop-nonnumeric", help="Leave text columns out of the features (each is named) instead of failing."
        ),
    ] = False,
    encode_labels: Annotated[
        bool,
        typer.Option(
            "--encode-labels",
            help="Number the distinct labels 0..k-1 (text or numbers; kept in DEST/_hpo_dataset.json).",
        ),
    ] = False,
) -> None:
    """Write a table or arrays as hpo datasets (list<float32> features + shape, label, row_id; even row groups).

    DEST must be new or empty; it is written beside DEST and renamed into place at the end.
    """
    from hpo.data import as_url
    from hpo.data import convert as run

    infos = run(
        src,
        as_url(dest_url),
        label,
        features_column=features,
        validation_fraction=validation_fraction,
        split_by=split_by,
        seed=seed,
        overwrite=overwrite,
        task=_task(task, src),
        drop_nonnumeric=drop_nonnumeric,
        encode_labels=encode_labels,
        warn=lambda line: print(f"warning: {line}", file=sys.stderr),
    )
    for info in infos:
        console.print(
            f"{info.url}: {info.num_rows} rows, {info.feature_dim} features"
            + (f" of shape {list(info.input_shape)}" if len(info.input_shape) > 1 else "")
            + f", {len(info.row_group_rows)} row groups"
            + (f", {info.num_classes} classes" if info.num_classes else ""),
            highlight=False,
        )


def _task(task: str, src: Path) -> Any:
    """``--task``, checked."""
    if task not in ("auto", "classification", "regression"):
        raise ConfigError(f"{src}: --task: '{task}' is not one of auto, classification, regression; pick one")
    return task


@app.command()
@one_line_errors
def inspect(
    url: Annotated[str, typer.Argument(help="Dataset URL (file://, s3://, gs://) or a local path.")],
    features: Annotated[str, typer.Option(help="Features column.")] = "features",
    label: Annotated[str, typer.Option(help="Label column.")] = "label",
    task: Annotated[str, typer.Option(help="classification, regression or auto (integer labels → classes).")] = "auto",
    as_json: Annotated[bool, typer.Option("--json", help="Print JSON.")] = False,
) -> None:
    """Show rows, row groups, schema, features shape and label classes; fail if hpo cannot train on it."""
    from hpo.data import as_url, inspect_dataset

    report = inspect_dataset(as_url(url), features=features, label=label, task=task)
    if as_json:
        print(json.dumps(report, indent=2))
        return
    lo, hi = report["row_group_rows"]
    lines = [
        f"{report['url']}",
        f"  rows: {report['rows']} in {report['files']} file(s), {report['row_groups']} row groups of {lo}–{hi} rows",
        "  schema: " + ", ".join(f"{k}: {v}" for k, v in report["schema"].items()),
        f"  features: '{features}' shape {report['features']['shape']}"
        + ("" if report["features"]["declared"] else " (no declared shape: flat)"),
    ]
    lab = report["label"]
    if "classes" in lab:
        lines.append(
            f"  label: '{label}' {len(lab['classes'])} classes: "
            + ", ".join(f"{k}: {v}" for k, v in lab["classes"].items())
        )
    else:
        lines.append(f"  label: '{label}' regression, range {lab['range'][0]:g} to {lab['range'][1]:g}")
    lines.append(
        "  rows per shard: " + "; ".join(f"{w} workers {'/'.join(map(str, s))}" for w, s in report["shards"].items())
    )
    console.print("\n".join(lines), highlight=False)
