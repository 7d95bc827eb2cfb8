"""The queue of sweeps on a shared cluster: entries kept in the sweeps' storage, read by every command.

Front door: :class:`QueueEntry` (one queued sweep), :class:`EntryState`, :class:`QueueSettings`,
:class:`Assignment`, :class:`Claim` and :class:`StandbyRecord` (the dispatcher's standby runner, the sweep handed
to it and the runner's claim of it),
:class:`QueueStore` (the entries and settings under ``STORAGE/_queue/``), and the questions every
reader asks of a list of entries: :func:`in_order`, :func:`busy`, :func:`idle_since`.

The queue's machinery is imported by module: :mod:`hpo.queue.admission` (which queued sweep starts, and
when), :mod:`hpo.queue.changed` (``--changed-since``), :mod:`hpo.queue.package` (a sweep's code as one zip in
the storage), :mod:`hpo.queue.jobs` (the cluster's Ray job server), :mod:`hpo.queue.dispatcher` (the one
job on the head that runs the queue) and :mod:`hpo.queue.standby` (the one sweep job it keeps started
ahead, warm, for the next admitted sweep).
"""

from hpo.queue.entry import (
    ACTIVE_STATES,
    ENDED_STATES,
    Assignment,
    Claim,
    EntryState,
    QueueEntry,
    QueueSettings,
    StandbyRecord,
    busy,
    idle_since,
    in_order,
)
from hpo.queue.store import QUEUE_DIR, QueueStore

__all__ = [
    "ACTIVE_STATES",
    "ENDED_STATES",
    "QUEUE_DIR",
    "Assignment",
    "Claim",
    "EntryState",
    "QueueEntry",
    "QueueSettings",
    "QueueStore",
    "StandbyRecord",
    "busy",
    "idle_since",
    "in_order",
]
