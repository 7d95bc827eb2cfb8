"""``hpo`` commands: tune, validate, status, report, ui, sync, and the ``data`` group."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from hpo.cli.cluster import app as cluster_app
from hpo.cli.data import app as data_app
from hpo.cli.errors import one_line_errors
from hpo.cli.sync import sync
from hpo.cli.ui import ui
from hpo.errors import ConfigError

app = typer.Typer(
    help="Hyperparameter sweeps of Keras models: Ray Tune + Horovod + Petastorm + MLflow.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(data_app, name="data")
app.command()(ui)
app.command()(sync)
app.add_typer(cluster_app, name="cluster")
console = Console(soft_wrap=True)

Storage = Annotated[Path, typer.Option("--storage", help="Directory holding sweeps.")]


@app.command()
@one_line_errors
def tune(
    file: Annotated[Path, typer.Argument(help="Sweep file (YAML).")],
    name: Annotated[Optional[str], typer.Option(help="Override the sweep name.")] = None,
    num_samples: Annotated[Optional[int], typer.Option(help="Override search.num_samples.")] = None,
    address: Annotated[Optional[str], typer.Option(help="Ray address (auto, ray://host:10001).")] = None,
    storage: Storage = Path("hpo_runs"),
    mlflow_uri: Annotated[Optional[str], typer.Option(help="Override tracking.mlflow_uri.")] = None,
    resume: Annotated[bool, typer.Option(help="Continue an interrupted sweep of this name.")] = False,
    warm_start: Annotated[
        Optional[str], typer.Option(help="Seed the study with a previous sweep's best configs (name or summary.json).")
    ] = None,
    warm_start_k: Annotated[int, typer.Option(help="How many of the previous best configs.")] = 5,
    warm_start_mode: Annotated[
        str, typer.Option(help="prior: use their results; reevaluate: train them again first.")
    ] = "prior",
    partition_by: Annotated[
        Optional[str], typer.Option(help="Run one sweep per value of this data column (e.g. region).")
    ] = None,
) -> None:
    """Run a sweep; print the best trial and where the results are."""
    from hpo.api import tune as run

    if warm_start_mode not in ("prior", "reevaluate"):
        raise ConfigError(f"--warm-start-mode: '{warm_start_mode}' is not allowed; use prior or reevaluate")
    if partition_by:
        from hpo.config import load_sweep
        from hpo.sweep import partition

        overrides = {"search.num_samples": num_samples} if num_samples else {}
        parts = partition(load_sweep(file, overrides), partition_by, storage.resolve(), str(file))
        for value, config in parts:
            console.print(f"== partition {partition_by}={value}: sweep {config.name}", highlight=False)
            part = run(config, storage=storage, mlflow_uri=mlflow_uri, address=address, resume=resume, console=console)
            _print_summary(part.summary)
            console.print(f"summary: {part.summary_path}", highlight=False)
        return
    result = run(
        file,
        warm_start=warm_start,
        warm_start_k=warm_start_k,
        warm_start_mode=warm_start_mode,
        num_samples=num_samples,
        name=name,
        storage=storage,
        mlflow_uri=mlflow_uri,
        address=address,
        resume=resume,
        console=console,
    )
    _print_summary(result.summary)
    console.print(f"summary: {result.summary_path}", highlight=False)
    if result.best_metric is None:
        raise typer.Exit(1)


@app.command()
@one_line_errors
def validate(
    file: Annotated[Path, typer.Argument(help="Sweep file (YAML).")],
    storage: Storage = Path("hpo_runs"),
) -> None:
    """Check a sweep file, its data and its model reference without running anything."""
    from hpo.config import load_sweep
    from hpo.sweep import preflight

    config = load_sweep(file)
    spec = preflight(config, storage.resolve(), str(file))
    console.print(
        f"{file}: ok — sweep '{config.name}', {len(config.space)} parameters, "
        f"{config.search.algorithm} + {config.scheduler.type}, {config.search.num_samples} trials × "
        f"{config.trial.workers} workers; train {spec.train.num_rows} rows, validation "
        f"{spec.validation.num_rows} rows, {spec.train.feature_dim} features",
        highlight=False,
    )


def _load_summary(name: str, storage: Path) -> dict:
    path = storage / name / "summary.json"
    if not path.is_file():
        raise ConfigError(f"{path}: (file): no summary for sweep '{name}'; run 'hpo tune' first or pass --storage")
    return json.loads(path.read_text())


def _print_summary(summary: dict) -> None:
    metric = summary["objective"]["metric"]
    table = Table(title=f"sweep {summary['name']}")
    for column in ("trial", "status", "epochs", metric, "params"):
        table.add_column(column)
    best_id = (summary.get("best") or {}).get("trial_id")
    for row in summary["trials"]:
        value = row["metric"]
        params = ", ".join(f"{k}={v:.4g}" if isinstance(v, float) else f"{k}={v}" for k, v in row["params"].items())
        mark = " *" if row["trial_id"] == best_id else ""
        table.add_row(
            row["trial_id"] + mark, row["status"], str(row["epochs"]), "-" if value is None else f"{value:.4f}", params
        )
    console.print(table)
    best = summary.get("best")
    if best:
        console.print(
            f"best: {best['trial_id']} {metric}={best['metric']:.4f} params={best['params']}", highlight=False
        )
    else:
        console.print("best: none (no trial reported the objective)", highlight=False)
    mlflow = summary["mlflow"]
    console.print(
        f"mlflow: {mlflow['uri']} experiment {mlflow['experiment_id']} parent run {mlflow['parent_run_id']}",
        highlight=False,
    )


@app.command()
@one_line_errors
def status(name: Annotated[str, typer.Argument(help="Sweep name.")], storage: Storage = Path("hpo_runs")) -> None:
    """One line per trial of a finished sweep, from its summary.json."""
    summary = _load_summary(name, storage)
    counts: dict[str, int] = {}
    for row in summary["trials"]:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    console.print(
        f"{name}: {len(summary['trials'])} trials (" + ", ".join(f"{v} {k}" for k, v in sorted(counts.items())) + ")",
        highlight=False,
    )


@app.command()
@one_line_errors
def report(name: Annotated[str, typer.Argument(help="Sweep name.")], storage: Storage = Path("hpo_runs")) -> None:
    """The results table of a finished sweep, from its summary.json."""
    _print_summary(_load_summary(name, storage))


def main() -> None:
    """Console-script entry point."""
    app()


if __name__ == "__main__":
    main()
