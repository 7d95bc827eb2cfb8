"""The cluster's autostop: the policy (:func:`decide`) and the watcher that runs it on the head.

The watcher is a plain background process on the head node (``python -m hpo.cluster.autostop``), started
by ``hpo cluster up`` through the provider's command runner (as ``ray exec`` does) and detached from it.
It is not a Ray process, so the ``ray stop`` of a teardown does not end it half way; one runs per head
(a lock file). Every ``poll`` seconds it reads the queue from the sweeps' storage (through the queue's
own contract, :mod:`hpo.queue.store`) and its settings: while anything is queued or running, nothing
happens; once nothing is, it counts down ``autostop_s`` from the later of the last sweep's end, the
watcher's start and the last ``hpo cluster up`` (``autostop_armed_at``); a sweep queued in the meantime
cancels the countdown, and the next end starts it again. When the countdown runs out it reads the queue
once more and tears the cluster down, head included, the way ``ray down`` does (see
:mod:`hpo.cluster.launch`). A storage it cannot read never counts as an empty queue.

What it sees and decides is in ``STORAGE/_cluster/autostop.json`` (``state``, ``idle_since``,
``fires_at``, ``teardown_started_at``).
"""

from __future__ import annotations

import argparse
import json
import logging
import os
import sys
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Literal

from hpo.queue.entry import QueueEntry, QueueSettings, busy, idle_since
from hpo.queue.store import QueueStore

log = logging.getLogger(__name__)

#: Seconds between two looks at the queue (``HPO_AUTOSTOP_POLL_S`` overrides it).
POLL_S = 30.0
#: The watcher's status file under the storage.
STATUS_PATH = ("_cluster", "autostop.json")
#: The settings field ``hpo cluster up`` sets to now: a fresh ``up`` restarts the countdown.
ARMED_AT = "autostop_armed_at"

State = Literal["off", "busy", "counting", "teardown"]


@dataclass(frozen=True)
class AutostopDecision:
    """What the autostop does at one moment.

    Attributes:
        state: ``off`` (no autostop set), ``busy`` (a sweep is queued or running), ``counting`` (idle, the
            countdown runs) or ``teardown`` (idle for ``autostop_s``: tear the cluster down now).
        idle_since: Since when nothing is queued or running (None unless counting or teardown).
        fires_at: When the countdown runs out (None unless counting or teardown).
    """

    state: State
    idle_since: float | None = None
    fires_at: float | None = None


def armed_at(settings: QueueSettings) -> float | None:
    """When ``hpo cluster up`` last set the autostop (None when the settings do not say)."""
    value = (settings.model_extra or {}).get(ARMED_AT)
    return float(value) if isinstance(value, (int, float)) else None


def decide(entries: list[QueueEntry], settings: QueueSettings, now: float, floor: float) -> AutostopDecision:
    """The autostop's decision for the queue ``entries`` at ``now``.

    Args:
        entries: Every queue entry.
        settings: The queue's settings (``autostop_s``; ``autostop_armed_at`` if ``hpo cluster up`` set it).
        now: The time to decide for (Unix seconds).
        floor: The countdown never starts before this (the watcher's start): a cluster just started, with
            an empty queue, gets the whole ``autostop_s`` for its first submission.

    Returns:
        The decision.
    """
    if settings.autostop_s is None:
        return AutostopDecision("off")
    if busy(entries):
        return AutostopDecision("busy")
    since = max(t for t in (idle_since(entries), floor, armed_at(settings)) if t is not None)
    fires = since + settings.autostop_s
    return AutostopDecision("teardown" if now >= fires else "counting", since, fires)


@dataclass
class Watcher:
    """Runs :func:`decide` every ``poll_s`` seconds and calls ``teardown`` once it says so.

    Args:
        store: The queue of the sweeps' storage.
        teardown: Tears the cluster down (head included); the watcher ends after it.
        poll_s: Seconds between two looks.
        clock: The time source (``time.time``).
        sleep: How to wait (``time.sleep``).
    """

    store: QueueStore
    teardown: Callable[[], None]
    poll_s: float = POLL_S
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep

    def __post_init__(self) -> None:
        self.started_at = self.clock()

    def look(self) -> AutostopDecision | None:
        """One look at the queue: the decision, or None when the storage could not be read."""
        try:
            entries, settings = self.store.entries(), self.store.settings()
        except Exception as exc:  # noqa: BLE001 - an unreadable storage is never an empty queue
            log.warning("autostop: cannot read the queue (%s); trying again in %gs", exc, self.poll_s)
            return None
        return decide(entries, settings, self.clock(), self.started_at)

    def run(self) -> None:
        """Watches until the countdown runs out, then tears the cluster down and returns."""
        last: State | None = None
        while True:
            decision = self.look()
            if decision is not None and decision.state == "teardown":
                # Said first, then checked once more: an 'hpo cluster up' that arms the autostop in between
                # either sees the teardown coming (and waits for it) or is seen here (and cancels it).
                started = self.clock()
                self._write(decision, teardown_started_at=started)
                confirm = self.look()
                if confirm is not None and confirm.state == "teardown":
                    log.warning("autostop: nothing queued or running since %s: tearing the cluster down",
                                time.strftime("%Y-%m-%d %H:%M:%S", time.localtime(confirm.idle_since)))
                    self.teardown()
                    self._write(confirm, state="torn_down", teardown_started_at=started)
                    return
                decision = confirm or AutostopDecision("counting", decision.idle_since, decision.fires_at)
            if decision is not None:
                if decision.state != last:
                    log.info("autostop: %s", decision.state)
                    last = decision.state
                self._write(decision)
            self.sleep(self.poll_s)

    def _write(self, decision: AutostopDecision, **extra: object) -> None:
        data = {**asdict(decision), "pid": os.getpid(), "host": os.uname().nodename, "updated_at": self.clock(),
                **extra}
        try:
            write_status(self.store, data)
        except Exception as exc:  # noqa: BLE001 - the status file is for people; the watcher goes on
            log.warning("autostop: cannot write its status (%s)", exc)


def write_status(store: QueueStore, data: dict[str, object]) -> None:
    """Writes ``STORAGE/_cluster/autostop.json``, whole: a reader sees the last status or this one, never half.

    On a local storage it goes through a temporary file and a rename; an object store's put is whole already.
    """
    from hpo.storage import write_text_atomic

    text = json.dumps(data, indent=1)
    if not store.storage.remote:
        write_text_atomic(Path(store.storage.root, *STATUS_PATH), text)
        return
    fs, base = store.storage.filesystem()
    path = "/".join([base, *STATUS_PATH])
    fs.create_dir(path.rsplit("/", 1)[0], recursive=True)
    with fs.open_output_stream(path) as out:
        out.write(text.encode())


def read_status(store: QueueStore) -> dict[str, object] | None:
    """``STORAGE/_cluster/autostop.json``, or None when no watcher wrote one."""
    import pyarrow.fs as pafs

    fs, base = store.storage.filesystem()
    path = "/".join([base, *STATUS_PATH])
    if fs.get_file_info(path).type != pafs.FileType.File:
        return None
    with fs.open_input_stream(path) as src:
        return json.loads(src.read().decode())


def poll_s() -> float:
    """The watcher's poll interval: ``HPO_AUTOSTOP_POLL_S`` or :data:`POLL_S`."""
    return float(os.environ.get("HPO_AUTOSTOP_POLL_S", POLL_S))


def main(argv: list[str] | None = None) -> int:
    """``python -m hpo.cluster.autostop --storage URI --config CLUSTER.yaml [--detach]``: the watcher."""
    from hpo.cluster.launch import launcher_for, spawn_detached
    from hpo.cluster.lock import HostLock, state_dir

    parser = argparse.ArgumentParser(prog="python -m hpo.cluster.autostop")
    parser.add_argument("--storage", required=True)
    parser.add_argument("--config", required=True, help="the cluster file as the head has it")
    parser.add_argument("--detach", action="store_true", help="start the watcher in the background and return")
    args = parser.parse_args(argv)
    launcher = launcher_for(Path(args.config).expanduser(), on_head=True)
    lock = HostLock(f"autostop-{launcher.key}")
    if args.detach:
        if lock.held_by_other():
            print(f"autostop: already watching cluster {launcher.name} (pid {lock.holder()})")
            return 0
        pid = spawn_detached([sys.executable, "-m", "hpo.cluster.autostop", "--storage", args.storage,
                              "--config", str(Path(args.config).expanduser())],
                             state_dir() / "logs" / f"autostop-{launcher.key}.log")
        print(f"autostop: watching cluster {launcher.name} (pid {pid})")
        return 0
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    if not lock.acquire(wait_s=0):
        log.info("autostop: another watcher runs for cluster %s; this one ends", launcher.name)
        return 0
    try:
        Watcher(QueueStore(args.storage), launcher.teardown_from_head, poll_s()).run()
    finally:
        lock.release()
    return 0


if __name__ == "__main__":
    sys.exit(main())
