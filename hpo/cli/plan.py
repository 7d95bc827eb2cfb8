"""``hpo plan SWEEP.yaml --deadline 6h``: which shape ends a sweep by a deadline, and what it costs."""

from __future__ import annotations

import json
from dataclasses import asdict
from datetime import datetime
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, Optional

import typer
from rich.console import Console
from rich.table import Table

from hpo.cli.errors import one_line_errors
from hpo.cli.options import JsonOption, StorageOption
from hpo.errors import ConfigError
from hpo.storage import DEFAULT_STORAGE, Storage

if TYPE_CHECKING:
    from hpo.plan import Plan, PlanOption

console = Console(soft_wrap=True)


@one_line_errors
def plan(
    file: Annotated[Path, typer.Argument(help="Sweep file (YAML).")],
    deadline: Annotated[
        Optional[str],
        typer.Option(help="When it must end: a duration from now (6h, 90m, 1h30m) or a time (2026-11-30T06:00)."),
    ] = None,
    cluster: Annotated[
        Optional[Path], typer.Option(help="Ray cluster file whose node types the options use (default: this machine).")
    ] = None,
    from_: Annotated[
        Optional[list[str]],
        typer.Option("--from", help="Plan from this finished sweep of the same model too (repeat it)."),
    ] = None,
    pilot: Annotated[
        Optional[int], typer.Option(help="Run N trials for a few epochs at one or two shapes, and plan from them.")
    ] = None,
    confidence: Annotated[float, typer.Option(help="Least probability of meeting the deadline to recommend.")] = 0.8,
    storage: StorageOption = DEFAULT_STORAGE,
    as_json: JsonOption = False,
) -> None:
    """Which shape (workers per trial, trials at once, nodes) ends a sweep by a deadline, and at what cost."""
    from hpo.config import load_sweep

    config = load_sweep(file)
    deadline_s = None if deadline is None else deadline_seconds(file, deadline)
    if pilot is not None and pilot < 1:
        raise ConfigError(f"{file}: --pilot: {pilot} is no trial; give the pilot's trials, e.g. --pilot 4")
    store = Storage.parse(storage)
    history: list[Path] = []
    source = None
    own = store.state_dir(config.name)
    if (own / "progress_events.jsonl").is_file():
        history.append(own)
    for name in from_ or []:
        directory = store.state_dir(name)
        if not (directory / "progress_events.jsonl").is_file():
            store.pull_state(name)
        if not (directory / "progress_events.jsonl").is_file():
            raise ConfigError(f"{file}: --from: no sweep '{name}' with a progress journal in {store}; "
                              "name a sweep that ran there (hpo list) or pass --storage")
        history.append(directory)
    if pilot is not None:
        from hpo.api import pilot as run_pilot

        history = list(run_pilot(file, pilot, storage=store, console=None if as_json else console))
        source = "pilot"
    if not history:
        raise ConfigError(f"{file}: (history): no earlier round of sweep '{config.name}' in {store}; name sweeps "
                          "of the same model with --from NAME, or run a pilot with --pilot N")
    from hpo.plan import plan as make_plan

    result = make_plan(config, deadline_s=deadline_s, history=history, confidence=confidence, cluster=cluster,
                       source=source)
    if as_json:
        print(json.dumps(plan_json(result), default=str))
        return
    show(result)


def deadline_seconds(file: Path, text: str) -> float:
    """Seconds from now to ``--deadline`` (a duration, or a date and time in ISO form, local time).

    Raises:
        ConfigError: Neither, or a time already past.
    """
    import time

    now = time.time()
    return deadline_at(file, text, now=now) - now


def deadline_at(file: Path, text: str, *, passed_ok: bool = False, now: float | None = None) -> float:
    """The Unix time of ``--deadline`` on ``hpo tune``/``submit``: a duration from now, or a date and time.

    Args:
        file: The sweep file (for error messages).
        text: The flag's value.
        passed_ok: Accept a time already passed (``hpo tune`` of a queued sweep that waited past it).
        now: Now (Unix time; default: the clock's).

    Raises:
        ConfigError: Neither a duration nor a time, or (unless ``passed_ok``) a time already passed.
    """
    import time

    from hpo.cluster.duration import parse_duration

    now = time.time() if now is None else now
    try:
        return now + parse_duration(text, key="--deadline")
    except ConfigError:
        pass
    try:
        when = datetime.fromisoformat(text.strip())
    except ValueError:
        raise ConfigError(f"{file}: --deadline: {text!r} is neither a duration nor a time; write e.g. 6h, 1h30m "
                          "or 2026-11-30T06:00") from None
    at = when.timestamp()  # a time without an offset is local time
    if at <= now and not passed_ok:
        raise ConfigError(f"{file}: --deadline: {text} has passed; give a time to come or a duration")
    return at


def iso(at: float) -> str:
    """A Unix time as an ISO date and time with its UTC offset (what ``hpo submit`` hands the queued job)."""
    return datetime.fromtimestamp(at).astimezone().isoformat(timespec="seconds")


def show_rounds(storage: Storage, name: str) -> None:
    """``hpo report``'s plan section: each round's predicted against its real wall time (nothing without one)."""
    from hpo.plan.rounds import read_rounds

    rounds = read_rounds(storage.state_dir(name))
    if not rounds:
        return
    table = Table(title="plan: predicted vs actual wall time (from the command's start)", box=None, pad_edge=False)
    for column in ("started", "by", "predicted [80%]", "actual", "error", "deadline", "met"):
        table.add_column(column, justify="left" if column in ("started", "by") else "right", no_wrap=True)
    for entry in rounds:
        started = datetime.fromtimestamp(entry.started_at).strftime("%m-%d %H:%M")
        interval = (f"{_duration(entry.wall_s_median)} [{_duration(entry.wall_s_low)}-"
                    f"{_duration(entry.wall_s_high)}]")
        deadline = datetime.fromtimestamp(entry.deadline_at).strftime("%m-%d %H:%M")
        actual = _duration(entry.wall_s) + ("" if entry.status == "finished" else f" ({entry.status})")
        table.add_row(started, entry.source, interval, actual, f"{entry.error:+.0%}", deadline,
                      "yes" if entry.met else "no")
    console.print(table)
    inside = sum(r.inside for r in rounds)
    console.print(f"{inside} of {len(rounds)} actual wall times inside the predicted 80% interval", highlight=False)


def plan_json(result: Plan) -> dict[str, Any]:
    """``hpo plan --json``: the plan as one JSON object (docs/cli.md)."""
    data = asdict(result)
    data["recommended_index"] = (None if result.recommended is None
                                 else result.options.index(result.recommended))
    data["source"]["line"] = result.source.line
    return data


def show(result: Plan) -> None:
    """The table of options, the recommended one marked, what more nodes would allow, and the data source."""
    deadline = "no deadline" if result.deadline_s is None else f"deadline in {_duration(result.deadline_s)}"
    where = result.cluster or "this machine"
    console.print(f"plan for {result.sweep}: {result.trials} trials, {deadline}, on {where}", highlight=False)
    table = Table(box=None, pad_edge=False)
    for column in ("", "trials at once", "workers", "nodes", "median", "80 % interval", "p_meet", "cost", "cost 90 %"):
        table.add_column(column)
    for option in result.options:
        mark = "→" if option is result.recommended else ""
        table.add_row(
            mark, str(option.max_concurrent), _workers(option), _nodes(option.nodes),
            _duration(option.wall_s_median), f"{_duration(option.wall_s_low)}–{_duration(option.wall_s_high)}",
            "-" if option.p_meet is None else f"{option.p_meet:.2f}",
            _money(option.cost_median, result.currency), _money(option.cost_high, result.currency),
        )
    console.print(table)
    console.print(f"recommended: {result.why}", highlight=False)
    if result.too_big:
        limit = f"the cluster's max_workers ({result.max_workers})" if result.max_workers is not None else (
            "this machine")
        shapes = ", ".join(f"{s.max_concurrent}×{s.workers_per_trial}w" for s in result.too_big[:4])
        console.print(f"needs more than {limit} allows: {shapes}", highlight=False)
    console.print(f"numbers {result.source.line}; predicted shapes (not run) marked *", highlight=False)


def _workers(option: PlanOption) -> str:
    text = f"{option.workers_per_trial}" + (f" × {option.gpus_per_worker:g} GPU" if option.gpus_per_worker else "")
    return text + ("" if option.measured else "*")


def _nodes(nodes: dict[str, int]) -> str:
    return ", ".join(f"{count}× {name}" for name, count in nodes.items())


def _money(value: float, currency: str) -> str:
    return f"{currency}{value:,.2f}" if value >= 0.1 or value == 0 else f"{currency}{value:.4f}"


def _duration(seconds: float) -> str:
    from hpo.plan.choose import duration

    return duration(seconds)

