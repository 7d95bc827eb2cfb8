"""``hpo cluster up`` and ``hpo cluster down``: one cluster per file, and no teardown under a sweep.

``up`` takes two locks (this machine's, then a lease in the sweeps' storage for other machines: two CI
runners), then: a head that is up is left alone (Ray is not restarted, nothing is synced: submissions
bring their own code); a head another ``up`` is starting is waited for; only a cluster without a head is
created. With ``--autostop`` it records ``autostop_s`` and ``cluster_file`` in the queue's settings
(``max_running`` as it was) and makes sure the watcher runs on the head (:mod:`hpo.cluster.autostop`);
every ``up`` restarts the countdown. ``down`` refuses while the queue has a sweep queued or running,
unless forced.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from hpo.cluster.autostop import ARMED_AT, read_status
from hpo.cluster.duration import format_duration
from hpo.cluster.files import validate_cluster_file
from hpo.cluster.launch import Launcher, launcher_for
from hpo.cluster.lock import HostLock, StorageLease
from hpo.errors import ConfigError, HpoError
from hpo.queue.entry import EntryState, QueueEntry, busy
from hpo.queue.store import QueueStore

#: How long ``up`` waits for another ``up`` of the same cluster (a new cloud head takes minutes).
LOCK_WAIT_S = 1800.0
#: How long ``up`` waits for a head that another ``up`` is setting up, or that the autostop tears down.
HEAD_WAIT_S = 1200.0
#: A teardown the watcher started this long ago and never finished is not waited for any more.
STALE_TEARDOWN_S = 900.0


class ClusterBusy(HpoError):
    """``hpo cluster down`` without ``--force`` while sweeps are queued or running."""


@dataclass(frozen=True)
class UpResult:
    """What ``hpo cluster up`` did.

    Attributes:
        name: The cluster's name.
        provider: Its provider type.
        created: True when this ``up`` started the cluster; False when it was already up.
        autostop_s: The autostop in force (None: none).
        watcher: What the autostop watcher said (None without an autostop).
    """

    name: str
    provider: str
    created: bool
    autostop_s: float | None
    watcher: str | None


def _record_autostop(store: QueueStore, autostop_s: float | bool | None, cluster_file: str) -> float | None:
    """Writes the autostop into the queue's settings; returns the autostop in force.

    ``autostop_s``: seconds to set, ``False`` to switch it off, ``None`` to keep what is there.
    """
    settings = store.settings()
    update: dict[str, object] = {"cluster_file": cluster_file}
    if autostop_s is False:
        update["autostop_s"] = None
    elif autostop_s is not None:
        update["autostop_s"] = float(autostop_s)
    if update.get("autostop_s", settings.autostop_s) is not None:
        update[ARMED_AT] = time.time()  # every up restarts the countdown: a submission is on its way
    data = {**settings.model_dump(), **update}
    new = type(settings).model_validate(data)
    store.put_settings(new)
    return new.autostop_s


def _tearing_down(store: QueueStore | None) -> bool:
    if store is None:
        return False
    try:
        status = read_status(store) or {}
    except Exception:  # noqa: BLE001 - no status: nothing known about a teardown
        return False
    started = status.get("teardown_started_at")
    # A teardown that has said nothing for STALE_TEARDOWN_S ended without its last word (its watcher died).
    return status.get("state") == "teardown" and isinstance(started, (int, float)) \
        and time.time() - started < STALE_TEARDOWN_S


def _wait_head(launcher: Launcher, until: Callable[[str], bool], wait_s: float, poll_s: float = 2.0) -> str:
    deadline = time.monotonic() + wait_s
    while True:
        status = launcher.head_status()
        if until(status) or time.monotonic() >= deadline:
            return status
        time.sleep(poll_s)


def cluster_up(
    path: str | Path,
    *,
    autostop_s: float | bool | None = None,
    storage: str | None = None,
    say: Callable[[str], None] = print,
    lock_wait_s: float = LOCK_WAIT_S,
) -> UpResult:
    """Starts the cluster of ``path`` unless it is up; never restarts a running one.

    Args:
        path: The cluster file.
        autostop_s: Seconds of an empty queue before the cluster is torn down; ``False`` switches the
            autostop off; None keeps the queue's setting.
        storage: The sweeps' storage (where the queue is); needed for the autostop.
        say: Where progress lines go.
        lock_wait_s: How long to wait for another ``up`` of this cluster.

    Returns:
        What it did.

    Raises:
        ConfigError: A bad cluster file or option (exit 2).
        HpoError: The cluster could not be started, or another ``up`` held the locks too long.
    """
    info = validate_cluster_file(path)
    launcher = launcher_for(path)
    if storage is None and autostop_s is not None:
        raise ConfigError("--autostop: the autostop reads the queue in the sweeps' storage; pass --storage URI "
                          "(or set HPO_STORAGE)")
    if storage is not None:
        launcher.check_storage(storage)
    store = QueueStore(storage) if storage is not None else None
    host_lock = HostLock(f"up-{launcher.key}")
    if not host_lock.acquire(0):
        say(f"cluster {info.name}: another 'hpo cluster up' of it runs on this machine (pid {host_lock.holder()}); "
            "waiting for it")
        if not host_lock.acquire(lock_wait_s):
            raise HpoError(f"cluster {info.name}: another 'hpo cluster up' held {host_lock.path} for "
                           f"{lock_wait_s:g}s; stop it or try again")
    lease = StorageLease(store.storage, f"up-{info.name}") if store is not None else None
    try:
        if lease is not None and not lease.acquire(0):
            say(f"cluster {info.name}: 'hpo cluster up' on {lease.holder()} is starting it; waiting for it")
            if not lease.acquire(lock_wait_s):
                raise HpoError(f"cluster {info.name}: {lease.holder()} held {lease.path} for {lock_wait_s:g}s; "
                               "if that runner died, delete the file or wait for it to expire")
        in_force = None
        if store is not None:
            in_force = _record_autostop(store, autostop_s, str(Path(path).resolve()))
        status = launcher.head_status()
        if status != "down" and _tearing_down(store):
            say(f"cluster {info.name}: the autostop is tearing it down; waiting, then starting it again")
            deadline = time.monotonic() + HEAD_WAIT_S
            while status != "down" and _tearing_down(store) and time.monotonic() < deadline:
                time.sleep(2.0)
                status = launcher.head_status()
        if status == "starting":
            say(f"cluster {info.name}: its head is being set up by another 'ray up'; waiting for it")
            status = _wait_head(launcher, lambda s: s != "starting", HEAD_WAIT_S)
        if status == "failed":
            raise HpoError(f"cluster {info.name}: its head failed its setup; see 'ray monitor {path}', then "
                           f"'hpo cluster down {path} --force' and 'hpo cluster up {path}'")
        created = status == "down"
        if created:
            say(f"cluster {info.name}: starting ({info.provider})")
            launcher.create()
            say(f"cluster {info.name}: up")
        elif status == "starting":
            raise HpoError(f"cluster {info.name}: its head is still being set up after {HEAD_WAIT_S:g}s; "
                           f"see 'ray monitor {path}'")
        else:
            say(f"cluster {info.name}: already up; Ray not restarted and nothing synced (running sweeps go on)")
        watcher = None
        if store is not None and in_force is not None:
            watcher = launcher.start_watcher(str(store.storage) if store.storage.remote else store.storage.root)
            say(f"autostop: the cluster is torn down {format_duration(in_force)} after the queue in "
                f"{store.storage} empties ({watcher})")
        return UpResult(info.name, info.provider, created, in_force, watcher)
    finally:
        if lease is not None:
            lease.release()
        host_lock.release()


def refusal(name: str, entries: list[QueueEntry]) -> str:
    """The one line ``hpo cluster down`` says when sweeps are queued or running."""
    running = sorted(e.name for e in entries if e.state == EntryState.RUNNING)
    queued = sorted(e.name for e in entries if e.state == EntryState.QUEUED)
    parts = []
    if running:
        parts.append(f"{len(running)} sweep{'s' if len(running) > 1 else ''} running ({', '.join(running)})")
    if queued:
        parts.append(f"{len(queued)} queued ({', '.join(queued)})")
    return (f"cluster {name}: {' and '.join(parts)}; not tearing it down: wait for them (hpo queue), "
            "cancel them (hpo cancel NAME) or pass --force")


def cluster_down(
    path: str | Path, *, storage: str | None = None, force: bool = False, say: Callable[[str], None] = print
) -> bool:
    """Tears the cluster of ``path`` down, head included, unless sweeps are queued or running.

    Args:
        path: The cluster file.
        storage: The sweeps' storage (the queue); needed unless ``force``.
        force: Tear down whatever the queue holds (running sweeps end; the queue keeps them).
        say: Where progress lines go.

    Returns:
        True when a cluster was torn down, False when it was not up.

    Raises:
        ConfigError: A bad cluster file, or no storage without ``force`` (exit 2).
        ClusterBusy: Sweeps are queued or running and ``force`` is not set.
    """
    info = validate_cluster_file(path)
    launcher = launcher_for(path)
    if not force:
        if storage is None:
            raise ConfigError("--storage: needed to check the queue before tearing the cluster down; pass "
                              "--storage URI (or set HPO_STORAGE), or --force to tear it down regardless")
        entries = QueueStore(storage).entries()
        if busy(entries):
            raise ClusterBusy(refusal(info.name, entries))
    status = launcher.head_status()
    if status == "down" and info.provider in ("fake_multinode",):
        say(f"cluster {info.name}: not up; nothing to tear down")
        return False
    say(f"cluster {info.name}: tearing down ({info.provider}), head included")
    launcher.teardown()
    say(f"cluster {info.name}: down")
    return True
