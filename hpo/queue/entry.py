"""One queued sweep as a typed record (:class:`QueueEntry`), the queue's settings, and order/idleness rules.

An entry is the contract between ``hpo submit`` (writes it ``queued``), the dispatcher on the head (moves it
through ``running`` to an ended state and fills in progress), ``hpo queue``/``hpo cancel`` (read it, ask
for a cancel) and the cluster's autostop (reads whether anything is queued or running, and since when
nothing is). Its serialisation is ``STORAGE/_queue/entries/NAME.json`` (see :mod:`hpo.queue.store`).
"""

from __future__ import annotations

from enum import StrEnum
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

#: The ``version`` this hpo writes (and the newest it reads).
ENTRY_VERSION = 1


class EntryState(StrEnum):
    """Where a queued sweep is: waiting, running, or ended one of four ways."""

    QUEUED = "queued"
    RUNNING = "running"
    SUCCEEDED = "succeeded"
    FAILED = "failed"
    INTERRUPTED = "interrupted"
    CANCELLED = "cancelled"


#: States that keep the cluster busy (autostop waits; ``hpo cluster down`` refuses without ``--force``).
ACTIVE_STATES = frozenset({EntryState.QUEUED, EntryState.RUNNING})
#: States a sweep ends in. ``interrupted`` is resumable: the dispatcher puts it back in the queue when the
#: interruption was not asked for (a head that restarted), never when the user cancelled it.
ENDED_STATES = frozenset({EntryState.SUCCEEDED, EntryState.FAILED, EntryState.INTERRUPTED, EntryState.CANCELLED})


class QueueEntry(BaseModel):
    """One sweep on the queue.

    Attributes:
        name: The sweep's name (unique in the storage; ``--changed-since`` appends the short commit id).
        state: Where it is.
        priority: Higher runs first; equal priorities run in submission order.
        submitted_at: When ``hpo submit`` queued it (Unix seconds).
        started_at: When its Ray job started (the latest start, for a resumed sweep).
        ended_at: When it ended (None while queued or running).
        trials_ended: Trials ended so far (from the sweep's progress).
        trials_total: Trials the sweep will run (None when unknown).
        forecast_remaining_s: The progress estimator's median time left (None when unknown).
        job_id: The Ray job's submission id running it (the latest one).
        sweep_file: The sweep file's path inside the packaged code.
        package: Where the packaged code lies in the storage (a URL).
        args: Extra ``hpo tune`` arguments (``--set KEY=VALUE`` …) the job runs with.
        commit: The short commit id it was submitted from, when known.
        cancel_requested: Set by ``hpo cancel`` on a running sweep; the dispatcher stops its job.
        resumes: How many times the dispatcher resumed it after an interruption it did not ask for.
        message: A one-line reason for a failed, interrupted or cancelled sweep.
        data: ``data.<key>`` → the path of a dataset packed with the code (the job reads its unpacked copy).
        requeue: Set by the dispatcher on a sweep interrupted without being asked (its job was lost): the
            next pass queues it again to resume.
        stop_sent: The dispatcher has sent a cancelled running sweep's driver its stop.
        handover: Handed to the queue's standby runner (job ``job_id``), whose claim the dispatcher has not
            seen yet (:func:`hpo.queue.admission.handover_step`).
    """

    model_config = ConfigDict(extra="allow")

    version: int = ENTRY_VERSION
    name: str
    state: EntryState = EntryState.QUEUED
    priority: int = 0
    submitted_at: float
    started_at: float | None = None
    ended_at: float | None = None
    trials_ended: int = 0
    trials_total: int | None = None
    forecast_remaining_s: float | None = None
    job_id: str | None = None
    sweep_file: str = ""
    package: str | None = None
    args: list[str] = Field(default_factory=list)
    commit: str | None = None
    cancel_requested: bool = False
    resumes: int = 0
    message: str | None = None
    data: dict[str, str] = Field(default_factory=dict)
    requeue: bool = False
    stop_sent: bool = False
    handover: bool = False

    def row(self, position: int | None) -> dict[str, Any]:
        """The entry as ``hpo queue --json`` prints it (``position``: 1-based place among queued entries)."""
        keys = ("name", "state", "priority", "submitted_at", "started_at", "ended_at", "trials_ended",
                "trials_total", "forecast_remaining_s", "job_id")
        data = self.model_dump(mode="json", include=set(keys))
        return {"name": data["name"], "state": data["state"], "position": position,
                **{k: data[k] for k in keys[2:]}}


class QueueSettings(BaseModel):
    """``STORAGE/_queue/settings.json``: the queue's settings.

    Attributes:
        max_running: Sweeps that may run at once.
        standby: Keep one sweep job started ahead for the next admitted sweep (the standby runner): the
            sweep's start-up then skips the job's own start and imports; off: every sweep starts a job.
        autostop_s: With a value, the cluster is torn down once nothing is queued or running for this long.
        cluster_file: The cluster file the cluster was started from (``hpo cluster up``), when known.
    """

    model_config = ConfigDict(extra="allow")

    max_running: int = Field(default=2, ge=1)
    standby: bool = True
    autostop_s: float | None = Field(default=None, gt=0)
    cluster_file: str | None = None


class Assignment(BaseModel):
    """A sweep the dispatcher hands the queue's standby runner (``STORAGE/_queue/standby/JOB_ID.json``).

    Attributes:
        name: The entry's sweep.
        args: ``hpo`` arguments that run it (``tune FILE --name NAME …``), as the sweep's own job would.
        package: Where its packaged code lies in the storage (a URL; None: nothing packaged).
        working_dir: The package as the ``runtime_env`` ``working_dir`` of the sweep's Ray workers.
        data: ``data.<key>`` → a dataset packed with the code (read from the runner's unpacked copy).
        assigned_at: When the dispatcher handed it over (Unix seconds).
    """

    model_config = ConfigDict(extra="allow")

    name: str
    args: list[str]
    package: str | None = None
    working_dir: str | None = None
    data: dict[str, str] = Field(default_factory=dict)
    assigned_at: float


class Claim(BaseModel):
    """``STORAGE/_queue/standby/JOB_ID.claim.json``: a standby runner took the sweep handed to it.

    Written by the runner alone, before it runs anything of the sweep; the dispatcher gives a handed-over
    sweep up only once the runner's job ended without it (:func:`hpo.queue.admission.handover_step`).

    Attributes:
        job_id: The runner's Ray job.
        name: The sweep it took.
        claimed_at: When (Unix seconds).
    """

    model_config = ConfigDict(extra="allow")

    job_id: str
    name: str
    claimed_at: float


class StandbyRecord(BaseModel):
    """``STORAGE/_queue/standby.json``: the queue's standby runner, a sweep job started before its sweep is known.

    Attributes:
        job_id: Its Ray job's submission id.
        started_at: When the dispatcher submitted it (Unix seconds).
    """

    model_config = ConfigDict(extra="allow")

    job_id: str
    started_at: float


def in_order(entries: list[QueueEntry]) -> list[QueueEntry]:
    """Queued entries in the order they are admitted: priority first (higher first), then submission order."""
    queued = [e for e in entries if e.state == EntryState.QUEUED]
    return sorted(queued, key=lambda e: (-e.priority, e.submitted_at, e.name))


def busy(entries: list[QueueEntry]) -> bool:
    """True while any entry is queued or running."""
    return any(e.state in ACTIVE_STATES for e in entries)


def idle_since(entries: list[QueueEntry]) -> float | None:
    """Since when nothing has been queued or running: the latest end (None while busy or with no entries)."""
    if busy(entries):
        return None
    ends = [e.ended_at for e in entries if e.ended_at is not None]
    return max(ends) if ends else None
