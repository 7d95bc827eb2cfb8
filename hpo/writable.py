"""Whether hpo can write a local directory, found by writing there (permission bits do not tell root)."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

#: Name prefix of the probe file :func:`unwritable` creates and deletes again.
PROBE_PREFIX = ".hpo-write-probe-"


def unwritable(directory: str | Path) -> str | None:
    """Why ``directory`` (made when missing) cannot be written, or None when it can.

    The probe creates one empty file of its own in ``directory``, or in its nearest existing parent when
    it does not exist yet (that is where hpo would create it), and deletes that file again; nothing else
    is created, changed or deleted. ``os.access`` is not enough: it says yes to root everywhere, also on
    ``/proc`` or a read-only mount.

    Args:
        directory: A local directory path (``~`` is expanded).

    Returns:
        A short reason (``/proc is not writable: No such file or directory``), or None.
    """
    existing = Path(directory).expanduser().absolute()
    while not existing.exists() and existing != existing.parent:
        existing = existing.parent
    if not existing.is_dir():
        return f"{existing} is not a directory"
    try:
        fd, probe = tempfile.mkstemp(prefix=PROBE_PREFIX, dir=existing)
    except OSError as exc:
        return f"{existing} is not writable: {exc.strerror or type(exc).__name__}"
    os.close(fd)
    os.unlink(probe)
    return None
