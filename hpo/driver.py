"""``driver.json``: which process drives a running sweep, so that ``hpo stop`` can reach it.

While a sweep runs, its driver keeps ``STATE/NAME/driver.json`` (:meth:`hpo.storage.Storage.state_dir`:
``STORAGE/NAME`` for a local storage) with its process id, host name and start time; it removes the file
when the sweep ends however it ends (hpo removes only the file it wrote: one whose process id is its own).
A driver killed outright (SIGKILL, a lost machine) leaves the file behind: :func:`running_driver` then
finds no such process and the sweep is not running.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import time
from collections.abc import Iterator
from dataclasses import asdict, dataclass
from pathlib import Path

from hpo.errors import ConfigError
from hpo.storage import write_text_atomic

#: The file, in the sweep's state directory.
DRIVER_FILE = "driver.json"


@dataclass(frozen=True)
class DriverRecord:
    """A sweep's driver process.

    Attributes:
        pid: Its process id.
        host: The host it runs on (``socket.gethostname()``).
        started: Unix time it started the sweep.
    """

    pid: int
    host: str
    started: float

    @property
    def local(self) -> bool:
        """True if the driver runs on this host."""
        return self.host == socket.gethostname()

    def alive(self) -> bool:
        """True if its process still runs (always True for a driver on another host).

        A process with its id that started after the record was written is another process (the id was
        reused after the driver was killed outright): not alive.
        """
        if not self.local:
            return True
        import psutil

        try:
            process = psutil.Process(self.pid)
            created, status = process.create_time(), process.status()
        except psutil.NoSuchProcess:
            return False
        except psutil.Error:
            return True  # another user's process: it exists
        return created <= self.started + 1.0 and status != psutil.STATUS_ZOMBIE


def read_driver(state_dir: Path) -> DriverRecord | None:
    """The driver recorded in ``state_dir`` (None if there is no record or it cannot be read)."""
    try:
        data = json.loads((state_dir / DRIVER_FILE).read_text())
        return DriverRecord(int(data["pid"]), str(data["host"]), float(data["started"]))
    except (OSError, ValueError, TypeError, KeyError):
        return None


def running_driver(state_dir: Path) -> DriverRecord | None:
    """The recorded driver if its process still runs (on another host: taken as running), else None."""
    record = read_driver(state_dir)
    return record if record is not None and record.alive() else None


@contextlib.contextmanager
def recorded_driver(state_dir: Path) -> Iterator[DriverRecord]:
    """Writes ``state_dir/driver.json`` for this process for the block, and removes it after.

    The file is removed only if it still names this process (a second driver of the same sweep, which
    the name check refuses, would not remove the first one's record).

    Yields:
        The record written.
    """
    record = DriverRecord(os.getpid(), socket.gethostname(), round(time.time(), 3))
    path = write_text_atomic(state_dir / DRIVER_FILE, json.dumps(asdict(record)))
    try:
        yield record
    finally:
        if read_driver(state_dir) == record:
            with contextlib.suppress(OSError):
                path.unlink()


def check_not_running(state_dir: Path, name: str, source: str) -> None:
    """Refuses to start a sweep whose name a live driver on this host is running.

    A second driver would resume, or with ``--overwrite`` drop, the study the first one is writing.

    Raises:
        ConfigError: The sweep runs (one line naming its process and ``hpo stop``).
    """
    record = running_driver(state_dir)
    if record is not None and record.local and record.pid != os.getpid():
        raise ConfigError(
            f"{source}: name: sweep '{name}' is running (pid {record.pid}); stop it first with "
            f"'hpo stop {name}', or pass --name to start another one"
        )
