"""``hpo submit``, ``hpo queue``, ``hpo cancel``, ``hpo logs``: sweeps on a shared cluster's queue.

The queue lives in the sweeps' storage (:mod:`hpo.queue`); the cluster's dispatcher (one Ray job on the
head, :mod:`hpo.queue.dispatcher`) starts queued sweeps as Ray jobs. Each command that is given the cluster's
``--address`` (its dashboard, ``http://HOST:8265``) makes sure the dispatcher runs, so the first command after
a head restart brings the queue back.
"""

from __future__ import annotations

import asyncio
import json
import time
from datetime import datetime
from pathlib import Path
from typing import Annotated, Optional

import typer
from rich.console import Console
from rich.table import Table

from hpo.cli.errors import one_line_errors
from hpo.cli.options import DeadlineOption, JsonOption, SetOption, StorageOption
from hpo.errors import ConfigError
from hpo.queue import EntryState, QueueEntry, QueueStore, in_order
from hpo.storage import DEFAULT_STORAGE, Storage

console = Console(soft_wrap=True)

ClusterOption = Annotated[
    Optional[str],
    typer.Option("--address", envvar="HPO_ADDRESS",
                 help="The cluster's job server: its dashboard, http://127.0.0.1:8265 through 'ray dashboard' "
                 "(auto on the head)."),
]


def _storage_arg(storage: str) -> str:
    """The ``--storage`` the cluster gets: a local path made absolute; a URI as written (with its options)."""
    parsed = Storage.parse(storage)
    return str(storage) if parsed.remote else parsed.root


def _jobs(address: str | None, storage: str, *, required: bool = False, start: bool = True):
    """The cluster's job server (with the dispatcher running, if ``start``), or None without an address."""
    if address is None:
        if required:
            raise ConfigError("--address: required; pass the cluster's dashboard, e.g. http://127.0.0.1:8265 "
                              "(or set HPO_ADDRESS)")
        return None
    from hpo.queue.jobs import Jobs

    jobs = Jobs(address)
    if start:
        jobs.ensure_dispatcher(_storage_arg(storage))
    return jobs


@one_line_errors
def submit(
    files: Annotated[list[Path], typer.Argument(help="Sweep files (YAML); every one is checked before any is queued.")],
    address: ClusterOption = None,
    storage: StorageOption = DEFAULT_STORAGE,
    name: Annotated[Optional[str], typer.Option(help="The sweep's name (one file only; default: its name:).")]
    = None,
    priority: Annotated[int, typer.Option(help="Higher runs first; equal priorities run in submission order.")] = 0,
    sets: SetOption = None,
    changed_since: Annotated[
        Optional[str],
        typer.Option("--changed-since", help="Queue only the sweeps whose file, model or local data changed "
                     "between this git commit and HEAD; names get HEAD's short commit id."),
    ] = None,
    as_json: Annotated[bool, typer.Option("--json", help="Print a JSON list of {name, state, position}.")] = False,
    deadline: DeadlineOption = None,
) -> None:
    """Queue sweeps on a cluster: checked, packaged with their code, run in priority order by its dispatcher."""
    from hpo.cli.main import set_overrides
    from hpo.config import load_sweep
    from hpo.queue.changed import changed_paths, select, short_commit
    from hpo.queue.package import build, store_package, sweep_inputs

    if name is not None and len(files) != 1:
        raise ConfigError(f"{files[0]}: --name: names one sweep; submit one file with --name, or drop it")
    deadline_arg = []
    if deadline is not None:  # a time of the user's clock now: the job gets it as a date and time
        from hpo.cli.plan import deadline_at, iso

        deadline_arg = [f"--deadline={iso(deadline_at(files[0], deadline))}"]
    root = Path.cwd()
    store = QueueStore(storage)
    parsed = store.storage
    problems: list[str] = []
    checked = []
    for file in files:  # every file first: one bad file queues nothing
        try:
            config = load_sweep(file, set_overrides(file, sets))
            checked.append((file, config, sweep_inputs(file, config, root)))
        except ConfigError as exc:
            problems.extend(str(exc).splitlines())
    if problems:
        raise ConfigError("\n".join(problems))
    commit = None
    if changed_since is not None:
        commit = short_commit(root)
        choices = select([(str(f), inputs) for f, _, inputs in checked], changed_paths(root, changed_since),
                         changed_since)
        for choice in choices:
            if not choice.submit:
                print(f"skipped {choice.file}: {choice.reason}", flush=True)
        keep = {c.file for c in choices if c.submit}
        checked = [c for c in checked if str(c[0]) in keep]
    names = []
    for file, config, _ in checked:
        sweep = (name or config.name) + (f"-{commit}" if commit else "")
        if store.get(sweep) is not None or sweep in names:
            raise ConfigError(f"{file}: name: sweep '{sweep}' is on the queue of {parsed} already; "
                              "pass --name, or see 'hpo queue'")
        if parsed.sweep_exists(sweep):
            raise ConfigError(f"{file}: name: sweep '{sweep}' exists in {parsed}; pass --name to queue another one")
        names.append(sweep)
    jobs = _jobs(address, storage, required=True, start=False) if checked else None
    extra = [f"--set={pair}" for pair in sets or []] + deadline_arg
    entries = store.entries()
    for (_, _, inputs), sweep in zip(checked, names, strict=True):
        package = store_package(parsed, build(inputs))
        entry = QueueEntry(name=sweep, submitted_at=time.time(), priority=priority, sweep_file=inputs.sweep_file,
                           package=package, args=extra, commit=commit, data=inputs.data)
        store.put(entry)
        entries.append(entry)
    if jobs is not None:
        jobs.ensure_dispatcher(_storage_arg(storage))
    places = {e.name: i for i, e in enumerate(in_order(entries), 1)}  # as submitted (the dispatcher may start one)
    rows = [{"name": n, "state": EntryState.QUEUED.value, "position": places.get(n)} for n in names]
    if as_json:
        print(json.dumps(rows))
        return
    for row in rows:
        print(f"queued {row['name']} (position {row['position']})", flush=True)


def _listed(entries: list[QueueEntry]) -> list[tuple[QueueEntry, int | None]]:
    """Running first, then the queued ones in admission order, then the ended ones latest first."""
    queued = in_order(entries)
    running = sorted((e for e in entries if e.state == EntryState.RUNNING), key=lambda e: e.started_at or 0)
    ended = sorted((e for e in entries if e.state not in (EntryState.RUNNING, EntryState.QUEUED)),
                   key=lambda e: -(e.ended_at or e.submitted_at))
    return [(e, None) for e in running] + [(e, i) for i, e in enumerate(queued, 1)] + [(e, None) for e in ended]


def _when(value: float | None) -> str:
    return "-" if value is None else datetime.fromtimestamp(value).strftime("%m-%d %H:%M:%S")


@one_line_errors
def queue(
    address: ClusterOption = None,
    storage: StorageOption = DEFAULT_STORAGE,
    as_json: JsonOption = False,
) -> None:
    """The cluster's queue: every submitted sweep, its state, place and progress."""
    _jobs(address, storage)
    rows = [entry.row(place) for entry, place in _listed(QueueStore(storage).entries())]
    if as_json:
        print(json.dumps(rows))
        return
    table = Table(title=f"queue of {Storage.parse(storage)}")
    for column in ("name", "state", "#", "priority", "submitted", "started", "ended", "trials", "left", "job"):
        table.add_column(column)
    for row in rows:
        total = "?" if row["trials_total"] is None else str(row["trials_total"])
        left = row["forecast_remaining_s"]
        table.add_row(row["name"], row["state"], str(row["position"] or "-"), str(row["priority"]),
                      _when(row["submitted_at"]), _when(row["started_at"]), _when(row["ended_at"]),
                      f"{row['trials_ended']}/{total}", "-" if left is None else f"{left:.0f}s", row["job_id"] or "-")
    console.print(table)


def _entry(store: QueueStore, name: str) -> QueueEntry:
    entry = store.get(name)
    if entry is None:
        raise ConfigError(f"{name}: not on the queue of {store.storage}; see 'hpo queue' or pass --storage")
    return entry


@one_line_errors
def cancel(
    name: Annotated[str, typer.Argument(help="A queued or running sweep.")],
    address: ClusterOption = None,
    storage: StorageOption = DEFAULT_STORAGE,
) -> None:
    """Take a queued sweep off the queue, or stop a running one as Ctrl-C does (resumable, not resumed)."""
    store = QueueStore(storage)
    entry = _entry(store, name)
    if entry.state == EntryState.QUEUED:
        store.put(entry.model_copy(update={"state": EntryState.CANCELLED, "cancel_requested": True,
                                           "ended_at": time.time(), "message": "cancelled before it started"}))
        _jobs(address, storage)
        print(f"{name}: cancelled (it never started)", flush=True)
        return
    if entry.state != EntryState.RUNNING:
        raise ConfigError(f"{name}: {entry.state.value} already; nothing to cancel (see 'hpo queue')")
    store.put(entry.model_copy(update={"cancel_requested": True}))
    _jobs(address, storage)
    print(f"{name}: stopping as after Ctrl-C (running trials keep their last checkpoint; it ends interrupted, "
          "resumable, and the queue does not resume it)", flush=True)


@one_line_errors
def logs(
    name: Annotated[str, typer.Argument(help="A sweep on the queue.")],
    address: ClusterOption = None,
    storage: StorageOption = DEFAULT_STORAGE,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing until the sweep's job ends.")]
    = False,
) -> None:
    """A queued sweep's output (its Ray job's), from its latest start."""
    jobs = _jobs(address, storage, required=True)
    entry = _entry(QueueStore(storage), name)
    if entry.job_id is None:
        raise ConfigError(f"{name}: {entry.state.value}, not started yet; no output (see 'hpo queue')")
    if not follow:
        print(jobs.logs(entry.job_id), end="", flush=True)
        return

    async def tail() -> None:
        async for chunk in jobs.follow(entry.job_id):
            print(chunk, end="", flush=True)

    asyncio.run(tail())
