"""Locks that keep two ``hpo cluster up`` from starting two clusters.

:class:`HostLock` serialises processes of one machine (an advisory ``flock`` on a file under hpo's state
directory, released by the kernel when its holder dies). :class:`StorageLease` serialises machines that
share only the sweeps' storage (two CI runners): a lease file ``STORAGE/_cluster/NAME.lease`` with an
owner and an expiry. On a local or mounted storage it is created exclusively (``O_EXCL``); object storage
has no exclusive create that pyarrow exposes, so there a runner writes its lease, waits ``settle_s`` and
reads it back: of two runners that wrote at about the same time only the last writer finds its own lease
(S3 and GCS read back what was last written), and the other waits. A lease whose holder died expires
after ``ttl_s``.
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import socket
import time
import uuid
from pathlib import Path
from typing import IO

from hpo.storage import Storage

#: Where hpo keeps its own state on a machine (``HPO_STATE_DIR`` overrides it).
DEFAULT_STATE_DIR = "~/.hpo"


def state_dir() -> Path:
    """The state directory of hpo on this machine (``HPO_STATE_DIR`` or ``~/.hpo``), created if needed."""
    path = Path(os.environ.get("HPO_STATE_DIR") or DEFAULT_STATE_DIR).expanduser()
    path.mkdir(parents=True, exist_ok=True)
    return path


class HostLock:
    """An exclusive lock among the processes of this machine, by name.

    Args:
        name: What it locks (a file name part).
    """

    def __init__(self, name: str) -> None:
        self.path = state_dir() / "locks" / f"{name}.lock"
        self.path.parent.mkdir(parents=True, exist_ok=True)
        self._file: IO[str] | None = None

    def acquire(self, wait_s: float, poll_s: float = 0.2) -> bool:
        """Takes the lock, waiting up to ``wait_s`` seconds; True when taken."""
        deadline = time.monotonic() + wait_s
        handle = self.path.open("a+")
        while True:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
                break
            except BlockingIOError:
                if time.monotonic() >= deadline:
                    handle.close()
                    return False
                time.sleep(poll_s)
        handle.seek(0)
        handle.truncate()
        handle.write(str(os.getpid()))
        handle.flush()
        self._file = handle
        return True

    def release(self) -> None:
        """Releases the lock (the file stays: removing it would race with the next holder)."""
        if self._file is not None:
            fcntl.flock(self._file, fcntl.LOCK_UN)
            self._file.close()
            self._file = None

    def held_by_other(self) -> bool:
        """True while another process holds the lock."""
        with self.path.open("a+") as handle:
            try:
                fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                return True
            fcntl.flock(handle, fcntl.LOCK_UN)
            return False

    def holder(self) -> int | None:
        """The PID the last holder wrote, when it is a number."""
        text = self.path.read_text().strip() if self.path.exists() else ""
        return int(text) if text.isdigit() else None


class StorageLease:
    """A lease in the sweeps' storage that one process of any machine holds at a time.

    Args:
        storage: The sweeps' storage.
        name: What it leases (``STORAGE/_cluster/NAME.lease``).
        ttl_s: A lease not released this long after it was taken is free again (its holder died).
        settle_s: On object storage, how long a writer waits before reading its lease back.
    """

    def __init__(self, storage: str | Storage, name: str, ttl_s: float = 1800.0, settle_s: float = 5.0) -> None:
        self.storage = Storage.parse(storage)
        fs, base = self.storage.filesystem()
        self.fs = fs
        self.path = f"{base}/_cluster/{name}.lease"
        self.ttl_s = ttl_s
        self.settle_s = settle_s
        self.owner = f"{socket.gethostname()}:{os.getpid()}:{uuid.uuid4().hex[:8]}"

    def read(self) -> dict[str, object] | None:
        """The lease as written, or None when there is none (or it is unreadable, e.g. half written)."""
        import pyarrow.fs as pafs

        if self.fs.get_file_info(self.path).type != pafs.FileType.File:
            return None
        try:
            with self.fs.open_input_stream(self.path) as src:
                return json.loads(src.read().decode())
        except (OSError, ValueError):
            return None

    def _mine(self) -> str:
        return json.dumps({"owner": self.owner, "host": socket.gethostname(), "pid": os.getpid(),
                           "taken_at": time.time(), "expires_at": time.time() + self.ttl_s})

    def _free(self, lease: dict[str, object] | None) -> bool:
        if lease is None:
            return True
        expires = lease.get("expires_at")
        return not isinstance(expires, (int, float)) or expires < time.time()

    def acquire(self, wait_s: float, poll_s: float = 1.0) -> bool:
        """Takes the lease, waiting up to ``wait_s`` seconds for its holder; True when taken."""
        deadline = time.monotonic() + wait_s
        self.fs.create_dir(self.path.rsplit("/", 1)[0], recursive=True)
        while True:
            lease = self.read()
            if self._free(lease) and self._take(lease):
                return True
            if time.monotonic() >= deadline:
                return False
            time.sleep(poll_s)

    def _take(self, stale: dict[str, object] | None) -> bool:
        if not self.storage.remote:
            path = Path(self.path)
            if stale is not None:
                with contextlib.suppress(FileNotFoundError):
                    path.unlink()  # expired (or unreadable): hpo wrote it
            try:
                fd = os.open(path, os.O_CREAT | os.O_EXCL | os.O_WRONLY, 0o644)
            except FileExistsError:
                return False
            with os.fdopen(fd, "w") as out:
                out.write(self._mine())
            return True
        with self.fs.open_output_stream(self.path) as out:
            out.write(self._mine().encode())
        time.sleep(self.settle_s)
        lease = self.read()
        return lease is not None and lease.get("owner") == self.owner

    def release(self) -> None:
        """Gives the lease back (only if this process still holds it)."""
        lease = self.read()
        if lease is not None and lease.get("owner") == self.owner:
            self.fs.delete_file(self.path)

    def holder(self) -> str:
        """Who holds the lease now, for a message."""
        lease = self.read() or {}
        return f"{lease.get('host', '?')} (pid {lease.get('pid', '?')})"
