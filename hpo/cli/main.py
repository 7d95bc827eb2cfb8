"""``hpo`` commands: tune, validate, status, report, ui, sync, and the ``data`` group."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from hpo.cli.cluster import app as cluster_app
from hpo.cli.data import app as data_app
from hpo.cli.errors import one_line_errors
from hpo.cli.status import status
from hpo.cli.sync import sync
from hpo.cli.ui import ui
from hpo.config.tracking_uri import masked
from hpo.errors import ConfigError
from hpo.storage import DEFAULT_STORAGE, Storage
from hpo.summary import read_summary

if TYPE_CHECKING:
    from hpo.options import RunOptions

app = typer.Typer(
    help="Hyperparameter sweeps of Keras models: Ray Tune + Horovod + Petastorm + MLflow.",
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
)
app.add_typer(data_app, name="data")
app.command()(ui)
app.command()(sync)
app.command()(status)
app.add_typer(cluster_app, name="cluster")
console = Console(soft_wrap=True)

StorageOption = Annotated[
    str, typer.Option("--storage", help="Where sweeps live: a directory, file:///shared/mount, s3://bucket/prefix, gs://…")
]
SetOption = Annotated[
    Optional[list[str]],
    typer.Option("--set", help="Replace a sweep-file key: KEY=VALUE, the value read as YAML (trial.max_epochs=3)."),
]


def set_overrides(file: Path, pairs: list[str] | None) -> dict[str, object]:
    """``--set a.b=VALUE`` flags as sweep-file overrides, each value read as YAML (``3`` → int, ``[1, 2]`` → list).

    Raises:
        ConfigError: For a flag without ``=`` or with an empty key, or a value that is not YAML.
    """
    import yaml

    from hpo.config import yaml_value

    overrides: dict[str, object] = {}
    for pair in pairs or []:
        key, sep, text = pair.partition("=")
        if not sep or not key.strip() or any(not part for part in key.strip().split(".")):
            raise ConfigError(f"{file}: --set: '{pair}' is not KEY=VALUE; write e.g. --set trial.max_epochs=3")
        try:
            overrides[key.strip()] = yaml_value(text)  # the sweep file's rules: 1e-3 is a number
        except yaml.YAMLError:
            raise ConfigError(f"{file}: --set {key.strip()}: '{text}' is not a YAML value; quote it") from None
    return overrides


@app.command()
@one_line_errors
def tune(
    file: Annotated[Path, typer.Argument(help="Sweep file (YAML).")],
    name: Annotated[Optional[str], typer.Option(help="Override the sweep name.")] = None,
    num_samples: Annotated[Optional[int], typer.Option(help="Override search.num_samples.")] = None,
    address: Annotated[Optional[str], typer.Option(help="Ray address (auto, ray://host:10001).")] = None,
    storage: StorageOption = DEFAULT_STORAGE,
    mlflow_uri: Annotated[Optional[str], typer.Option(help="Override tracking.mlflow_uri.")] = None,
    resume: Annotated[bool, typer.Option(help="Continue an interrupted sweep of this name.")] = False,
    overwrite: Annotated[
        bool, typer.Option(help="Start a sweep again under a name that already ran (drops its Optuna study).")
    ] = False,
    quiet: Annotated[bool, typer.Option(help="No progress lines; only the final table and where results are.")] = False,
    json_progress: Annotated[
        bool, typer.Option("--json-progress", help="Progress as one JSON object per update on stdout (no table).")
    ] = False,
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
    partition: Annotated[
        Optional[list[str]],
        typer.Option(
            help="Run one sweep per data URL: [NAME=]URL, repeat it (replaces data.train / data.partitions)."
        ),
    ] = None,
    sets: SetOption = None,
) -> None:
    """Run a sweep; print the best trial and where the results are.

    With --partition-by, --partition or data.partitions in the file: one sweep per partition.
    """
    from hpo.api import _overrides, run
    from hpo.options import RunOptions, WarmStart

    if partition_by and partition:
        raise ConfigError(f"{file}: --partition-by: cannot be combined with --partition; use one of them")
    warm = WarmStart.from_flags(warm_start, warm_start_k, warm_start_mode)
    mode = "json" if json_progress else "off" if quiet else "auto"
    options = RunOptions(storage, address, resume, None if quiet else console, warm, overwrite=overwrite, progress=mode)
    overrides = set_overrides(file, sets) | _overrides(num_samples, name, mlflow_uri)
    if partition_by or partition or _lists_partitions(file):
        _tune_partitions(file, options, overrides, partition_by, partition)
        return
    result = run(file, options, overrides)
    if json_progress:
        print(json.dumps({"event": "summary", "path": str(result.summary_path), "best": result.summary["best"]}))
    else:
        _print_summary(result.summary)
        console.print(f"summary: {result.summary_path}", highlight=False)
    _exit_without_best([result.summary])


def _tune_partitions(
    file: Path, options: RunOptions, overrides: dict[str, object], partition_by: str | None, partition: list[str] | None
) -> None:
    """``hpo tune`` of a partitioned sweep: one sweep per partition, a summary each."""
    from hpo.api import run_partitioned
    from hpo.partition import named_urls

    urls = named_urls(partition, str(file)) if partition else None
    results = run_partitioned(file, options, partitions=urls, partition_by=partition_by, overrides=overrides)
    for part in results.values():
        _print_summary(part.summary)
        console.print(f"summary: {part.summary_path}", highlight=False)
    _exit_without_best([part.summary for part in results.values()])


@app.command()
@one_line_errors
def repeat(
    name: Annotated[str, typer.Argument(help="A finished sweep.")],
    top: Annotated[int, typer.Option(help="How many of its best configurations.")] = 3,
    repeats: Annotated[int, typer.Option(help="Runs of each, with new seeds (2 or more).")] = 3,
    new_name: Annotated[Optional[str], typer.Option("--name", help="The new sweep's name (default NAME-repeat).")]
    = None,
    storage: StorageOption = DEFAULT_STORAGE,
    mlflow_uri: Annotated[Optional[str], typer.Option(help="Override tracking.mlflow_uri.")] = None,
    address: Annotated[Optional[str], typer.Option(help="Ray address (auto, ray://host:10001).")] = None,
    quiet: Annotated[bool, typer.Option(help="No progress lines; only the final table and where results are.")] = False,
) -> None:
    """Re-run the best configurations of a finished sweep with new seeds; say if the winner beats noise."""
    from hpo.api import repeat as run_repeat

    result = run_repeat(name, top=top, repeats=repeats, new_name=new_name, storage=storage, mlflow_uri=mlflow_uri,
                        address=address, console=None if quiet else console)
    _print_summary(result.summary)
    console.print(f"summary: {result.summary_path}", highlight=False)
    _exit_without_best([result.summary])


def _lists_partitions(file: Path) -> bool:
    """True if the sweep file sets data.partitions (read without validating; validation comes later)."""
    from hpo.config import read_yaml

    data = read_yaml(file)
    return isinstance(data, dict) and isinstance(data.get("data"), dict) and data["data"].get("partitions") is not None


@app.command()
@one_line_errors
def validate(
    file: Annotated[Path, typer.Argument(help="Sweep file (YAML).")],
    storage: StorageOption = DEFAULT_STORAGE,
    sets: SetOption = None,
) -> None:
    """Check a sweep file, its data and its model reference without running anything.

    A sweep with data.partitions is checked partition by partition (one line each).
    """
    from hpo.config import load_sweep
    from hpo.partition import by_urls
    from hpo.preflight import preflight
    from hpo.search.budget import planned_trials

    config = load_sweep(file, set_overrides(file, sets))
    parts = by_urls(config) if config.data.partitions else [(None, config)]
    for label, part in parts:
        where = f"{file}" if label is None else f"{file} (partition {label})"
        spec = preflight(part, Storage.parse(storage), where)
        console.print(
            f"{where}: ok — sweep '{part.name}', {len(part.space)} parameters, "
            f"{part.search.algorithm} + {part.scheduler.type}, {planned_trials(part)} trials × "
            f"{part.trial.workers} workers; train {spec.train.num_rows} rows, validation "
            f"{spec.validation.num_rows} rows, {spec.train.feature_dim} features",
            highlight=False,
        )


def _no_best(summary: dict) -> str:
    """Why a sweep has no best trial, e.g. ``every trial diverged or failed (3 diverged, 1 failed)``."""
    counts: dict[str, int] = {}
    for row in summary["trials"]:
        counts[row["status"]] = counts.get(row["status"], 0) + 1
    listed = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    if summary["trials"] and set(counts) <= {"diverged", "failed"}:
        return f"every trial diverged or failed: {listed}"
    return f"no trial reported the objective: {listed or 'no trials'}"


def _exit_without_best(summaries: list[dict]) -> None:
    """Exits 1 with one line on stderr if a sweep has no best trial."""
    for summary in summaries:
        if not summary.get("best"):
            print(f"error: sweep '{summary['name']}': {_no_best(summary)}", file=sys.stderr)
            raise typer.Exit(1)


def _print_summary(summary: dict) -> None:
    metric = summary["objective"]["metric"]
    table = Table(title=f"sweep {summary['name']}")
    for column in ("trial", "status", "epochs", metric, "params"):
        table.add_column(column)
    best_id = (summary.get("best") or {}).get("trial_id")
    for row in summary["trials"]:
        value = row["metric"]
        params = ", ".join(f"{k}={_cell(v)}" for k, v in row["params"].items())
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
        console.print(f"best: none ({_no_best(summary)})", highlight=False)
    _print_statistics(summary.get("statistics"))
    mlflow = summary["mlflow"]
    console.print(
        f"mlflow: {masked(mlflow['uri'])} experiment {mlflow['experiment_id']} parent run {mlflow['parent_run_id']}",
        highlight=False,
    )


def _print_statistics(statistics: dict | None) -> None:
    """The top configurations' means and intervals (with repeats) and the verdict on the winner."""
    if not statistics:
        return
    for row in statistics["configurations"][:3]:
        if row["n"] < 2:
            break
        p = "" if row["p_value"] is None else f", p vs best = {row['p_value']:.2g}"
        console.print(
            f"  #{row['rank']} mean {row['mean']:.4f} ± {row['std']:.4f} (95% CI {row['ci_low']:.4f}–"
            f"{row['ci_high']:.4f}, n={row['n']}{p}) {row['params']}",
            highlight=False,
        )
    console.print(f"verdict: {statistics['verdict']}", highlight=False)


@app.command()
@one_line_errors
def report(
    name: Annotated[str, typer.Argument(help="Sweep name.")],
    storage: StorageOption = DEFAULT_STORAGE,
    output: Annotated[
        Optional[Path], typer.Option("--output", "-o", help="Write one self-contained HTML page (plots) here.")
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print summary.json instead of the table.")] = False,
) -> None:
    """A sweep's results: the table sorted by the objective, its summary.json, or an HTML page of plots."""
    store = Storage.parse(storage)
    if output is not None:  # works while the sweep runs: read from its live state
        from hpo.report import write_report

        console.print(f"report: {write_report(store, name, output)}", highlight=False)
        return
    summary = read_summary(store, name)
    if as_json:
        print(json.dumps(summary, indent=2, default=str))
        return
    _print_ranked(summary)
    _print_statistics(summary.get("statistics"))


def _print_ranked(summary: dict) -> None:
    """The trials best first, one column per parameter."""
    metric, mode = summary["objective"]["metric"], summary["objective"]["mode"]
    names = sorted({k for row in summary["trials"] for k in row["params"]})
    table = Table(title=f"sweep {summary['name']} ({metric}, {mode})")
    for column in ("#", "trial", "status", "epochs", metric, *names):
        table.add_column(column)
    sign = -1 if mode == "max" else 1
    rows = sorted(summary["trials"], key=lambda r: (r["metric"] is None, sign * (r["metric"] or 0), r["trial_id"]))
    for rank, row in enumerate(rows, 1):
        value = "-" if row["metric"] is None else f"{row['metric']:.4f}"
        params = [_cell(row["params"].get(n)) for n in names]
        table.add_row(str(rank), row["trial_id"], row["status"], str(row["epochs"]), value, *params)
    console.print(table)


def _cell(value: object) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


def main() -> None:
    """Console-script entry point: sets this process up as hpo's own (environment, warnings, log levels)."""
    from hpo import _env

    _env.apply()
    app()


if __name__ == "__main__":
    main()
