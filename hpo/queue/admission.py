"""Which queued sweep starts next, and when: the dispatcher's admission rule, on plain data (no Ray).

Priority first, then submission order (:func:`hpo.queue.entry.in_order`). A sweep is admitted only while
fewer than ``max_running`` sweeps run and every running one is *saturated*: its live progress says it
runs and has no trial left waiting to start (every planned trial has started). The next sweep's trials
then wait for the slots the running sweeps' last trials free, so a sweep's tail leaves no slot idle,
and the queue never holds more than one sweep whose trials wait for resources.
"""

from __future__ import annotations

from collections.abc import Mapping

from hpo.progress.live import Snapshot
from hpo.queue.entry import EntryState, QueueEntry, QueueSettings, in_order


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


def positions(entries: list[QueueEntry]) -> dict[str, int]:
    """1-based place of every queued entry in the admission order, by name."""
    return {e.name: i for i, e in enumerate(in_order(entries), 1)}
