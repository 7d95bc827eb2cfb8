"""Whether the sweep's object storage answers: probed in the background, so the views can say it is down.

While an object store stalls, trials keep training and their checkpoint uploads wait (they are retried for
``HPO_STORAGE_RETRY_S``); nothing else would tell the user why no epoch arrives. :class:`StorageWatch` asks
the storage every few seconds, once and without retries, from a daemon thread of the driver, and calls
back when it stops or starts answering.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable

from hpo.object_store import one_line

logger = logging.getLogger(__name__)


class StorageWatch:
    """Probes a storage every ``every_s`` seconds; :attr:`down_since` is when it stopped answering (or None).

    Args:
        probe: Raises ``OSError`` when the storage does not answer (:meth:`hpo.storage.Storage.probe`).
        on_change: Called from the watch's thread with the new :attr:`down_since` when it changes.
        every_s: Seconds between probes.
    """

    def __init__(
        self, probe: Callable[[], None], on_change: Callable[[float | None], None] | None = None, every_s: float = 10.0
    ) -> None:
        self.probe = probe
        self.on_change = on_change
        self.every_s = every_s
        self.down_since: float | None = None
        self.last_error = ""
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> StorageWatch:
        """Probes once now, then every ``every_s`` in a daemon thread (it never keeps the driver alive)."""
        self.check()
        self._thread = threading.Thread(target=self._run, name="hpo-storage-watch", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stops probing (a probe under way ends on its own timeout)."""
        self._stop.set()

    def check(self) -> float | None:
        """Probes once; returns :attr:`down_since`."""
        started = time.time()
        try:
            self.probe()
            down = None
        except OSError as exc:
            self.last_error = one_line(exc)
            down = self.down_since or started
        if down != self.down_since:
            self.down_since = down
            logger.warning("storage %s", "answers again" if down is None else f"unreachable: {self.last_error}")
            if self.on_change is not None:
                try:
                    self.on_change(down)
                except Exception:  # the watch is a view; it must not die with one
                    logger.warning("storage state not shown", exc_info=True)
        return self.down_since

    def _run(self) -> None:
        while not self._stop.wait(self.every_s):
            self.check()
