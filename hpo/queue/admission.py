"""Which queued sweep starts next, and when: the dispatcher's admission rule, on plain data (no Ray).

Priority first, then submission order (:func:`hpo.queue.entry.in_order`). A sweep is admitted only while
fewer than ``max_running`` sweeps run and every running one is *saturated*: its live progress says it
runs and has no trial left waiting to start (every planned trial has started). The next sweep's trials
then wait for the slots the running sweeps' last trials free, so a sweep's tail leaves no slot idle,
and the queue never holds more than one sweep whose trials wait for resources.

The admitted sweep runs in the queue's standby runner when one waits (:mod:`hpo.queue.standby`);
:func:`start_standby` says when the dispatcher starts the next one.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Literal

from hpo.progress.live import Snapshot
from hpo.queue.entry import EntryState, QueueEntry, QueueSettings, StandbyRecord, in_order

#: Seconds the dispatcher waits after starting a standby runner that ended without a sweep before it starts
#: another (one that cannot start is not restarted every second).
STANDBY_RETRY_S = 60.0
#: Seconds a standby runner has to claim a sweep handed to it (it looks every 0.2 s) before the dispatcher
#: stops it and queues the sweep again.
CLAIM_S = 60.0

#: What the dispatcher does about a sweep it handed to a standby runner (:func:`handover_step`).
HandoverStep = Literal["claimed", "wait", "stop", "requeue"]


def saturated(entry: QueueEntry, live: Snapshot | None) -> bool:
    """True if running sweep ``entry`` has started every trial it plans (its progress says so).

    Args:
        entry: A running entry.
        live: Its sweep's latest ``progress.json`` snapshot (None: none yet).
    """
    if live is None or live.state != "running":
        return False
    if entry.started_at is not None and live.time < entry.started_at:
        return False  # the snapshot of an earlier run of a resumed sweep
    return live.pending == 0


def next_to_admit(
    entries: list[QueueEntry], settings: QueueSettings, live: Mapping[str, Snapshot | None]
) -> QueueEntry | None:
    """The queued entry to start now, or None.

    Args:
        entries: Every entry of the queue.
        settings: The queue's settings (``max_running``).
        live: The latest snapshot of each running sweep, by name (missing: none yet).
    """
    running = [e for e in entries if e.state == EntryState.RUNNING]
    if len(running) >= settings.max_running:
        return None
    if not all(saturated(e, live.get(e.name)) for e in running):
        return None
    waiting = [e for e in in_order(entries) if not e.cancel_requested]
    return waiting[0] if waiting else None


def awaited(
    entries: list[QueueEntry], settings: QueueSettings, live: Mapping[str, Snapshot | None]
) -> list[str]:
    """The running sweeps whose last trial's start admission waits for, by name (none: nothing waits on them).

    The dispatcher watches their progress between its passes, so that the next sweep starts the moment the
    last of them has started every trial, not on its next pass.

    Args:
        entries: Every entry of the queue.
        settings: The queue's settings (``max_running``).
        live: The latest snapshot of each running sweep, by name (missing: none yet).
    """
    running = [e for e in entries if e.state == EntryState.RUNNING]
    if len(running) >= settings.max_running or not any(not e.cancel_requested for e in in_order(entries)):
        return []
    return [e.name for e in running if not saturated(e, live.get(e.name))]


def handover_step(
    *, claimed: bool, alive: bool, assigned_at: float, now: float, claim_s: float = CLAIM_S
) -> HandoverStep:
    """What the dispatcher does about a sweep it handed to a standby runner, on one pass.

    The runner claims a sweep (``STORAGE/_queue/standby/JOB_ID.claim.json``, written by the runner alone)
    before it runs anything of it, and the dispatcher gives a sweep up only once the runner's job has ended
    without that claim: a runner that ended (its idle time ran out, it crashed, the head restarted) just
    as it was handed the sweep cannot run it any more, so the sweep goes back to the queue and never runs
    twice. No rename is needed, so the same files work on object storage, where a rename is a copy.

    Args:
        claimed: The runner's claim exists.
        alive: The runner's job is pending or running.
        assigned_at: When the sweep was handed over (Unix seconds).
        now: The time now (Unix seconds).
        claim_s: How long a live runner has to claim it.

    Returns:
        ``claimed``: the runner runs it (it is followed as any sweep's job); ``wait``: not claimed yet;
        ``stop``: not claimed in ``claim_s``: stop the runner's job (a later pass finds it ended);
        ``requeue``: the job ended without claiming it: queue the sweep again, in its old place.
    """
    if claimed:
        return "claimed"
    if not alive:
        return "requeue"
    return "stop" if now - assigned_at >= claim_s else "wait"


def positions(entries: list[QueueEntry]) -> dict[str, int]:
    """1-based place of every queued entry in the admission order, by name."""
    return {e.name: i for i, e in enumerate(in_order(entries), 1)}


def starting(entry: QueueEntry, live: Snapshot | None) -> bool:
    """True while running sweep ``entry`` has no trial running or ended yet in its latest start."""
    if live is None or (entry.started_at is not None and live.time < entry.started_at):
        return True
    ended = live.completed + live.stopped_early + live.failed + live.diverged + live.interrupted
    return live.state == "starting" or live.running + ended == 0


def start_standby(record: StandbyRecord | None, *, taken: bool, alive: bool, busy_starting: bool, now: float,
                  retry_s: float = STANDBY_RETRY_S) -> bool:
    """True if the dispatcher should start a new standby runner now (there is only ever one waiting).

    Args:
        record: The standby runner it started last (None: none yet).
        taken: That runner was handed a sweep.
        alive: Its job is pending or running.
        busy_starting: An admitted sweep is still starting: a new runner's start-up would take CPU from it,
            so it waits until the sweep's first trial runs.
        now: The time now (Unix seconds).
        retry_s: After a runner ended without a sweep, how long after its start the next one waits.
    """
    if busy_starting:
        return False
    if record is None or taken:
        return True
    if alive:
        return False  # it waits, ready
    return now - record.started_at >= retry_s  # ended or lost without a sweep
