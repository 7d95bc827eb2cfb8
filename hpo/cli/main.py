"""``hpo``: the commands, in the order a user needs them.

tune, validate, status, plan, report, list, stop, repeat, then ui, sync, init and the ``data`` and ``cluster`` groups.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer
from rich.console import Console
from rich.table import Table

from hpo.cli.cluster import app as cluster_app
from hpo.cli.data import app as data_app
from hpo.cli.errors import one_line_errors
from hpo.cli.init import init
from hpo.cli.install_stack import install_stack
from hpo.cli.listing import list_sweeps
from hpo.cli.options import (
    AddressOption,
    DeadlineOption,
    JsonOption,
    MlflowUriOption,
    QuietOption,
    SetOption,
    StorageOption,
)
from hpo.cli.plan import plan
from hpo.cli.queue import cancel, logs, queue, submit
from hpo.cli.status import status
from hpo.cli.stop import stop
from hpo.cli.sync import sync
from hpo.cli.ui import ui
from hpo.config.tracking_uri import masked
from hpo.errors import ConfigError
from hpo.storage import DEFAULT_STORAGE, Storage
from hpo.sweep_summary import Statistics, SweepSummary

if TYPE_CHECKING:
    from hpo.options import RunOptions

#: ``-h`` as well as ``--help``, on every command (sub-commands inherit it).
CONTEXT = {"help_option_names": ["-h", "--help"]}
#: The help's two panels: the sweep's life, then the tools around it.
SWEEPS, TOOLS = "Sweeps", "Tools"

app = typer.Typer(
    help="Hyperparameter sweeps of Keras models: Ray Tune + Horovod + Petastorm + MLflow.",
    no_args_is_help=True,
    add_completion=True,
    pretty_exceptions_enable=False,
    context_settings=CONTEXT,
)
console = Console(soft_wrap=True)


def _version(value: bool) -> None:
    if value:
        import hpo

        print(f"hpo {hpo.__version__}")
        raise typer.Exit()


@app.callback()
def _main(
    version: Annotated[
        bool,
        typer.Option("--version", "-V", callback=_version, is_eager=True, help="Print hpo's version and exit."),
    ] = False,
    verbose: Annotated[
        bool,
        typer.Option("--verbose", "-v", envvar="HPO_VERBOSE",
                     help="Also show TensorFlow's start-up lines (absl, CUDA) on stderr."),
    ] = False,
) -> None:
    """Hyperparameter sweeps of Keras models: Ray Tune + Horovod + Petastorm + MLflow."""
    if not verbose:
        from hpo.cli.native_logs import quiet_tensorflow_startup

        quiet_tensorflow_startup()


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


@one_line_errors
def tune(
    file: Annotated[Path, typer.Argument(help="Sweep file (YAML).")],
    name: Annotated[Optional[str], typer.Option(help="Override the sweep name.")] = None,
    num_samples: Annotated[Optional[int], typer.Option(help="Override search.num_samples.")] = None,
    address: AddressOption = None,
    storage: StorageOption = DEFAULT_STORAGE,
    mlflow_uri: MlflowUriOption = None,
    resume: Annotated[bool, typer.Option("--resume", help="Continue an interrupted sweep of this name.")] = False,
    overwrite: Annotated[
        bool,
        typer.Option(
            "--overwrite", help="Start a sweep again under a name that already ran (drops its Optuna study)."
        ),
    ] = False,
    quiet: QuietOption = False,
    json_progress: Annotated[
        bool, typer.Option("--json-progress", help="Progress as one JSON object per update on stdout (no table).")
    ] = False,
    warm_start: Annotated[
        Optional[str], typer.Option(help="Seed the study with a previous sweep's best configs (name or summary.json).")
    ] = None,
    warm_start_k: Annotated[int, typer.Option(help="How many of the previous best configs.")] = 5,
    warm_start_mode: Annotated[
        Optional[str], typer.Option(help="prior: tell the model their results; reevaluate: train them again first "
                                         "(default: prior for optuna-tpe/-gp, reevaluate for random).")
    ] = None,
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
    deadline: DeadlineOption = None,
) -> None:
    """Run a sweep; print the best trial and where the results are.

    With --partition-by, --partition or data.partitions in the file: one sweep per partition.
    """
    from hpo.api import run
    from hpo.config import option_overrides
    from hpo.options import RunOptions, WarmStart

    if partition_by and partition:
        raise ConfigError(f"{file}: --partition-by: cannot be combined with --partition; use one of them")
    if quiet and json_progress:
        raise ConfigError(f"{file}: --quiet: cannot be combined with --json-progress; pass one of them")
    warm = WarmStart.from_flags(warm_start, warm_start_k, warm_start_mode)
    mode = "json" if json_progress else "off" if quiet else "auto"
    at = None
    if deadline is not None:
        from hpo.cli.plan import deadline_at

        at = deadline_at(file, deadline, passed_ok=True)
    options = RunOptions(storage, address, resume, None if quiet else console, warm, overwrite=overwrite,
                         progress=mode, deadline_at=at)
    overrides = set_overrides(file, sets) | option_overrides(num_samples, name, mlflow_uri)
    if partition_by or partition or _lists_partitions(file):
        _tune_partitions(file, options, overrides, partition_by, partition)
        return
    from hpo.progress.journal import EVENTS_FILE, record_exit

    ended = record_exit()  # the command's end in the sweep's journal, for hpo plan
    result = run(file, options, overrides)
    ended(options.sweep_dir(result.sweep_summary.name) / EVENTS_FILE)
    if json_progress:
        print(json.dumps({"event": "summary", "path": str(result.summary_path), "best": result.summary["best"]}))
    else:
        _print_summary(result.sweep_summary)
        console.print(f"summary: {result.summary_path}", highlight=False)
    _exit_without_best([result.sweep_summary])


def _tune_partitions(
    file: Path, options: RunOptions, overrides: dict[str, object], partition_by: str | None, partition: list[str] | None
) -> None:
    """``hpo tune`` of a partitioned sweep: one sweep per partition, a summary each."""
    from hpo.api import run_partitioned

    results = run_partitioned(file, options, partitions=partition or None, partition_by=partition_by,
                              overrides=overrides, partitions_option="--partition")
    for part in results.values():
        _print_summary(part.sweep_summary)
        console.print(f"summary: {part.summary_path}", highlight=False)
    _exit_without_best([part.sweep_summary for part in results.values()])


@one_line_errors
def repeat(
    name: Annotated[str, typer.Argument(help="A finished sweep.")],
    top: Annotated[int, typer.Option(help="How many of its best configurations.")] = 3,
    repeats: Annotated[int, typer.Option(help="Runs of each, with new seeds (2 or more).")] = 3,
    new_name: Annotated[Optional[str], typer.Option("--name", help="The new sweep's name (default NAME-repeat).")]
    = None,
    storage: StorageOption = DEFAULT_STORAGE,
    mlflow_uri: MlflowUriOption = None,
    address: AddressOption = None,
    quiet: QuietOption = False,
    as_json: Annotated[
        bool, typer.Option("--json", help="No progress; print one JSON object: the new sweep's summary and verdict.")
    ] = False,
) -> None:
    """Re-run the best configurations of a finished sweep with new seeds; say if the winner beats noise."""
    from hpo.api import repeat as run_repeat

    result = run_repeat(name, top=top, repeats=repeats, new_name=new_name, storage=storage, mlflow_uri=mlflow_uri,
                        address=address, console=None if quiet or as_json else console)
    if as_json:
        print(json.dumps(repeat_json(result.sweep_summary, str(result.summary_path)), default=str))
        _exit_without_best([result.sweep_summary])
        return
    _print_summary(result.sweep_summary)
    console.print(f"summary: {result.summary_path}", highlight=False)
    _exit_without_best([result.sweep_summary])


def _lists_partitions(file: Path) -> bool:
    """True if the sweep file sets data.partitions (read without validating; validation comes later)."""
    from hpo.config import read_yaml

    data = read_yaml(file)
    return isinstance(data, dict) and isinstance(data.get("data"), dict) and data["data"].get("partitions") is not None


@one_line_errors
def validate(
    file: Annotated[Path, typer.Argument(help="Sweep file (YAML).")],
    storage: StorageOption = DEFAULT_STORAGE,
    sets: SetOption = None,
    mlflow_uri: MlflowUriOption = None,
    offline: Annotated[
        bool, typer.Option("--offline", help="Check the file, data and model only: no MLflow server is contacted.")
    ] = False,
    as_json: JsonOption = False,
) -> None:
    """Check a sweep file, its data and its model reference without running anything.

    A sweep with data.partitions is checked partition by partition (one line each).
    """
    from hpo.config import load_sweep, option_overrides
    from hpo.partition import by_urls
    from hpo.preflight import preflight
    from hpo.search.budget import planned_trials

    config = load_sweep(file, set_overrides(file, sets) | option_overrides(mlflow_uri=mlflow_uri))
    parts = by_urls(config) if config.data.partitions else [(None, config)]
    checked = []
    for label, part in parts:
        where = f"{file}" if label is None else f"{file} (partition {label})"
        spec = preflight(part, Storage.parse(storage), where, check_tracking=not offline)
        row = {"partition": label, "name": part.name, "parameters": len(part.space),
               "algorithm": part.search.algorithm, "scheduler": part.scheduler.type, "trials": planned_trials(part),
               "workers": part.trial.workers, "train_rows": spec.train.num_rows,
               "validation_rows": spec.validation.num_rows, "features": spec.train.feature_dim}
        checked.append(row)
        if not as_json:
            console.print(
                f"{where}: ok — sweep '{row['name']}', {row['parameters']} parameters, {row['algorithm']} + "
                f"{row['scheduler']}, {row['trials']} trials × {row['workers']} workers; train {row['train_rows']} "
                f"rows, validation {row['validation_rows']} rows, {row['features']} features",
                highlight=False,
            )
    if as_json:
        print(json.dumps({"file": str(file), "ok": True, "offline": offline, "sweeps": checked}))


def repeat_json(summary: SweepSummary, path: str) -> dict[str, Any]:
    """``hpo repeat --json``: the repeat sweep's name, summary path, best trial and verdict (docs/cli.md)."""
    document = summary.to_json()
    statistics = document.get("statistics") or {}
    return {"name": summary.name, "repeat_of": summary.repeat_of, "status": summary.status,
            "summary": path, "best": document.get("best"), "verdict": statistics.get("verdict"),
            "configurations": statistics.get("configurations", [])}


def _no_best(summary: SweepSummary) -> str:
    """Why a sweep has no best trial, e.g. ``every trial diverged or failed (3 diverged, 1 failed)``."""
    counts = summary.status_counts()
    listed = ", ".join(f"{n} {status}" for status, n in sorted(counts.items()))
    if summary.trials and set(counts) <= {"diverged", "failed"}:
        return f"every trial diverged or failed: {listed}"
    return f"no trial reported the objective: {listed or 'no trials'}"


def _exit_without_best(summaries: list[SweepSummary]) -> None:
    """Exits 1 with one line on stderr if a sweep has no best trial."""
    for summary in summaries:
        if summary.best is None:
            print(f"error: sweep '{summary.name}': {_no_best(summary)}", file=sys.stderr)
            raise typer.Exit(1)


def _print_summary(summary: SweepSummary) -> None:
    metric = summary.objective.metric
    table = Table(title=f"sweep {summary.name}")
    for column in ("trial", "status", "epochs", metric, "params"):
        table.add_column(column)
    best = summary.best
    for row in summary.trials:
        value = row.metric
        params = ", ".join(f"{k}={_cell(v)}" for k, v in row.params.items())
        mark = " *" if best is not None and row.trial_id == best.trial_id else ""
        table.add_row(
            row.trial_id + mark, row.status, str(row.epochs), "-" if value is None else f"{value:.4f}", params
        )
    console.print(table)
    if best is not None:
        console.print(f"best: {best.trial_id} {metric}={best.metric:.4f} params={best.params}", highlight=False)
    else:
        console.print(f"best: none ({_no_best(summary)})", highlight=False)
    _print_statistics(summary.statistics)
    mlflow = summary.mlflow
    console.print(
        f"mlflow: {masked(mlflow.uri or '')} experiment {mlflow.experiment_id} parent run {mlflow.parent_run_id}",
        highlight=False,
    )


def _print_statistics(statistics: Statistics | None) -> None:
    """The top configurations' means and intervals (with repeats) and the verdict on the winner."""
    if statistics is None:
        return
    for row in statistics.configurations[:3]:
        if row.n < 2:
            break
        p = "" if row.p_value is None else f", p vs best = {row.p_value:.2g}"
        console.print(
            f"  #{row.rank} mean {row.mean:.4f} ± {_figure(row.std)} (95% CI {_figure(row.ci_low)}–"
            f"{_figure(row.ci_high)}, n={row.n}{p}) {row.params}",
            highlight=False,
        )
    console.print(f"verdict: {statistics.verdict}", highlight=False)


def _figure(value: float | None) -> str:
    """A statistic with four decimals (``-`` where it is unknown)."""
    return "-" if value is None else f"{value:.4f}"


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
    summary = SweepSummary.load(store, name)
    if as_json:
        print(json.dumps(summary.to_json(), indent=2, default=str))
        return
    _print_ranked(summary)
    _print_statistics(summary.statistics)
    from hpo.cli.plan import show_rounds

    show_rounds(store, name)


def _print_ranked(summary: SweepSummary) -> None:
    """The trials best first, one column per parameter."""
    metric, mode = summary.objective.metric, summary.objective.mode
    names = sorted({k for row in summary.trials for k in row.params})
    table = Table(title=f"sweep {summary.name} ({metric}, {mode})")
    for column in ("#", "trial", "status", "epochs", metric, *names):
        table.add_column(column)
    sign = -1 if mode == "max" else 1
    rows = sorted(summary.trials, key=lambda r: (r.metric is None, sign * (r.metric or 0), r.trial_id))
    for rank, row in enumerate(rows, 1):
        value = "-" if row.metric is None else f"{row.metric:.4f}"
        params = [_cell(row.params.get(n)) for n in names]
        table.add_row(str(rank), row.trial_id, row.status, str(row.epochs), value, *params)
    console.print(table)


def _cell(value: object) -> str:
    if value is None:
        return "-"
    return f"{value:.4g}" if isinstance(value, float) else str(value)


# The order of the help: a sweep's life first, then the tools around it.
app.command(rich_help_panel=SWEEPS)(tune)
app.command(rich_help_panel=SWEEPS)(validate)
app.command(rich_help_panel=SWEEPS)(status)
app.command(rich_help_panel=SWEEPS)(plan)
app.command(rich_help_panel=SWEEPS)(report)
app.command("list", rich_help_panel=SWEEPS)(list_sweeps)
app.command(rich_help_panel=SWEEPS)(stop)
app.command(rich_help_panel=SWEEPS)(repeat)
app.command(rich_help_panel=SWEEPS)(submit)
app.command(rich_help_panel=SWEEPS)(queue)
app.command(rich_help_panel=SWEEPS)(cancel)
app.command(rich_help_panel=SWEEPS)(logs)
app.command(rich_help_panel=TOOLS)(ui)
app.command(rich_help_panel=TOOLS)(sync)
app.command(rich_help_panel=TOOLS)(init)
app.command("install-stack", rich_help_panel=TOOLS)(install_stack)
app.add_typer(data_app, name="data", rich_help_panel=TOOLS)
app.add_typer(cluster_app, name="cluster", rich_help_panel=TOOLS)


def main() -> None:
    """Console-script entry point: sets this process up as hpo's own (environment, warnings, log levels).

    The command ends through :func:`hpo.cli.process_end.end`: Python's exit steps without the interpreter's
    teardown (about 2 s after a sweep).
    """
    from hpo import _env
    from hpo.cli.process_end import end

    _env.apply()
    try:
        app()
    except SystemExit as done:
        end(done.code)
    end(0)


if __name__ == "__main__":
    main()
