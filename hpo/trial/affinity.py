"""CPU-core pinning for CPU workers: on a full node, each worker runs only on cores of its own.

Ray reserves CPUs by count, not by core, so two ranks of a trial on one node float over all its cores.
Data-parallel ranks wait for each other at every step's allreduce, so whenever the scheduler puts a
rank's compute thread on the core the other rank (or a background thread) is using, both ranks lose the
step. Pinned, each rank keeps its compute on its own core: two 1-CPU ranks of a small CNN trial (batch 128)
ran 3.74-4.06 s per epoch floating, 3.48-3.62 s pinned. A worker alone on a node with idle cores, though, is
faster floating (its input pipeline and Horovod's thread borrow an idle core: 5.85-6.36 s vs 6.49-6.6 s).
So a worker claims its cores always, but pins itself only while every core of the node is claimed, and
checks again at each epoch (:meth:`CoreClaim.refresh`).

Cores are claimed node-wide with one ``flock`` per core (lock files in :func:`lock_dir`), held open for the
worker process's life: the kernel releases them when the process ends, however it ends, so a killed worker
never leaves a core claimed. A worker that finds too few free cores (more workers than cores) claims none
and floats, rather than doubling up on a claimed core.
"""

from __future__ import annotations

import fcntl
import os
import tempfile
from pathlib import Path


def lock_dir() -> Path:
    """Where the node's per-core lock files live (``HPO_CORE_LOCK_DIR``, else ``/dev/shm/hpo-cores``)."""
    base = os.environ.get("HPO_CORE_LOCK_DIR")
    if base:
        return Path(base)
    return Path("/dev/shm" if Path("/dev/shm").is_dir() else tempfile.gettempdir()) / "hpo-cores"


#: Lock file descriptors this process holds (core -> fd); closing one releases the core.
_HELD: dict[int, int] = {}


def cores_to_claim(cpus_per_worker: float, gpus_per_worker: float) -> int:
    """How many cores a worker pins itself to: its whole CPUs on CPU workers, else 0 (no pinning).

    GPU workers, fractional CPUs (workers meant to share a core) and non-Linux hosts are not pinned.
    """
    if not hasattr(os, "sched_setaffinity"):  # Linux only
        return 0
    if gpus_per_worker > 0 or cpus_per_worker < 1 or cpus_per_worker != int(cpus_per_worker):
        return 0
    return int(cpus_per_worker)


def _lock_path(core: int) -> Path:
    return lock_dir() / f"core-{core}.lock"


def _open_lock(core: int, create: bool) -> int | None:
    """A descriptor of ``core``'s lock file (None if it does not exist or cannot be opened)."""
    path = _lock_path(core)
    try:
        fd = os.open(path, os.O_RDWR | (os.O_CREAT if create else 0), 0o666)
    except OSError:  # not there yet, or another user's file we may not write
        return None
    if create:
        try:
            os.fchmod(fd, 0o666)  # other users' workers on the node share the lock files
        except OSError:
            pass
    return fd


def claim_cores(count: int) -> list[int]:
    """Claims ``count`` free cores among those this process may run on (all or none).

    Returns:
        The claimed cores, or ``[]`` if fewer than ``count`` are free. A process keeps what it claimed
        first: asking again returns the same cores.
    """
    if _HELD:
        return sorted(_HELD)
    if count <= 0:
        return []
    lock_dir().mkdir(parents=True, exist_ok=True)
    claimed: dict[int, int] = {}
    for core in sorted(os.sched_getaffinity(0)):
        fd = _open_lock(core, create=True)
        if fd is None:
            continue
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            os.close(fd)
            continue
        claimed[core] = fd
        if len(claimed) == count:
            _HELD.update(claimed)
            return sorted(claimed)
    for fd in claimed.values():
        os.close(fd)
    return []


def release_cores() -> None:
    """Gives back the cores this process claimed (the process's end does the same)."""
    for fd in _HELD.values():
        os.close(fd)
    _HELD.clear()


def free_cores(cores: list[int]) -> int:
    """How many of ``cores`` no hpo worker has claimed (probes each core's lock without keeping it)."""
    free = 0
    for core in cores:
        if core in _HELD:
            continue
        if not _lock_path(core).exists():
            free += 1  # never claimed
            continue
        fd = _open_lock(core, create=False)
        if fd is None:
            continue  # cannot tell: count it as claimed, so this worker stays as it is
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            fcntl.flock(fd, fcntl.LOCK_UN)
            free += 1
        except BlockingIOError:
            pass
        finally:
            os.close(fd)
    return free


def pin_process(cores: list[int]) -> None:
    """Restricts every thread of this process, and the threads it starts later, to ``cores``."""
    for tid in os.listdir("/proc/self/task"):
        try:
            os.sched_setaffinity(int(tid), cores)
        except (ProcessLookupError, PermissionError):  # a thread that just ended
            pass


class CoreClaim:
    """A worker's claimed cores, and whether it runs pinned to them right now.

    Args:
        cpus_per_worker: The worker's reserved CPUs.
        gpus_per_worker: The worker's GPUs (GPU workers claim nothing).
    """

    def __init__(self, cpus_per_worker: float, gpus_per_worker: float) -> None:
        count = cores_to_claim(cpus_per_worker, gpus_per_worker)
        self.everywhere = sorted(os.sched_getaffinity(0)) if count else []
        self.cores = claim_cores(count)
        self.pinned = False

    def refresh(self) -> bool:
        """Pins the process to its cores if the node has no free core left, else lets it float.

        Returns:
            True if the process is pinned now.
        """
        if not self.cores:
            return False
        pin = free_cores(self.everywhere) == 0
        if pin != self.pinned:
            pin_process(self.cores if pin else self.everywhere)
            self.pinned = pin
        return pin


#: This process's claim, made by its first trial and kept while the process lives (warm workers).
_CLAIM: CoreClaim | None = None


def worker_claim(cpus_per_worker: float, gpus_per_worker: float) -> CoreClaim:
    """The worker process's :class:`CoreClaim` (made on first use)."""
    global _CLAIM
    if _CLAIM is None:
        _CLAIM = CoreClaim(cpus_per_worker, gpus_per_worker)
    return _CLAIM
