"""The driver's memory: what its allocator holds free is handed back to the system during and after a sweep.

A sweep's driver allocates and frees a great deal: Tune's loop (each trial's results, its experiment-state
saves), hpo's callbacks (``progress.json``, MLflow writes), the write-up at the end (Tune's results of every
trial, the summary, the report). glibc's allocator keeps what is freed for later use, in one pool per thread
that allocated, and hands little of it back: the driver's resident memory then counts memory it holds free.
:func:`release_free_memory` (glibc's ``malloc_trim(0)``, which returns every free page of every pool) runs
every :data:`RELEASE_EVERY_S` seconds while trials run (:class:`ReleaseFreeMemory`, a Tune callback, within
:data:`RELEASE_SHARE` of the driver's time), once Tune's loop has returned, and after the report is drawn.
Where the C library is not glibc (macOS, musl) nothing is done.
"""

from __future__ import annotations

import ctypes
import time
from functools import cache
from typing import Any

from ray.tune import Callback

#: Seconds between releases while trials run, at least.
RELEASE_EVERY_S = 30.0
#: The most of the driver's time the releases may take (a large heap is walked more slowly: released less often).
RELEASE_SHARE = 0.01


@cache
def _libc() -> Any:
    """glibc, when this process runs on it (None elsewhere)."""
    try:
        libc = ctypes.CDLL("libc.so.6")
    except OSError:
        return None
    return libc if hasattr(libc, "malloc_trim") else None


def release_free_memory() -> bool:
    """Hands the memory the allocator holds free back to the system; False where that cannot be done."""
    libc = _libc()
    if libc is None:
        return False
    libc.malloc_trim(0)
    return True


class ReleaseFreeMemory(Callback):
    """Tune callback: :func:`release_free_memory` every ``every_s`` seconds while the sweep's trials run.

    Args:
        every_s: Seconds between releases, at least.
        share: The most of the driver's time they may take: where one release takes longer than
            ``share * every_s``, the next waits ``cost / share``.
    """

    def __init__(self, every_s: float = RELEASE_EVERY_S, share: float = RELEASE_SHARE) -> None:
        self.every_s = every_s
        self.share = share
        self.releases = 0
        self._last = time.monotonic()
        self._cost_s = 0.0

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        """Releases free memory when the interval has passed since the last release."""
        started = time.monotonic()
        if started - self._last < max(self.every_s, self._cost_s / self.share):
            return
        if release_free_memory():
            self.releases += 1
        self._last = time.monotonic()
        self._cost_s = self._last - started
