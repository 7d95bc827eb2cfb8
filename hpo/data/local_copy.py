"""A node-local copy of a remote dataset, so that training reads no object storage after the first copy.

With ``data.cache.enabled`` and a remote (``s3://``, ``gs://``) dataset no larger than
``data.cache.size_limit_mb``, the first reader on a node copies the dataset's files once into the cache
directory and every later epoch, trial and rank on that node reads the copy: an object store that stalls
or throttles then delays no epoch, and no request is paid for per epoch. The copy is keyed by the
dataset's URL and fingerprint (a rewritten dataset gets a new copy), made under a file lock by one process
of the node while the others wait, and moved into place only when complete. A dataset too large for the
limit is read from the storage as before (Petastorm's row-group cache still applies).
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
import shutil
from pathlib import Path

from hpo.data.fs import arrow_filesystem, path_to_url
from hpo.data.info import DatasetInfo

log = logging.getLogger(__name__)

#: Sub-directory of the cache root that holds whole-dataset copies (shared by every sweep of the node).
COPIES = "copies"
#: The longest a reader waits for another process of its node to finish the copy; then it reads the storage.
COPY_WAIT_S = 1800.0


def copy_dir(root: str | Path, info: DatasetInfo) -> Path:
    """Where the copy of one dataset version lives under the cache ``root``."""
    key = hashlib.sha1(json.dumps([info.url, info.fingerprint]).encode()).hexdigest()[:16]
    return Path(root).expanduser() / COPIES / key


def local_copy(info: DatasetInfo, root: str | Path, size_limit_mb: int) -> str:
    """The ``file://`` URL of this node's copy of a remote dataset, made on first use; else ``info.url``.

    Args:
        info: The dataset (its URL and fingerprint).
        root: The node's cache root (``data.cache.dir`` without the sweep name; ``~`` is expanded).
        size_limit_mb: The largest dataset copied; a larger one is read from the storage.

    Returns:
        The copy's URL, or ``info.url`` when the dataset is local, too large, or has no fingerprint.

    Raises:
        OSError: The copy could not be made, or another process did not finish it in :data:`COPY_WAIT_S`
            (the caller reads the storage instead).
    """
    if info.url.startswith("file://") or not info.fingerprint:
        return info.url
    target = copy_dir(root, info)
    if (target / ".complete").is_file():
        return path_to_url(target)
    import pyarrow.fs as pafs
    from filelock import FileLock

    fs, path = arrow_filesystem(info.url)
    files = [f for f in fs.get_file_info(pafs.FileSelector(path.rstrip("/"), recursive=True))
             if f.type == pafs.FileType.File]
    if sum(f.size or 0 for f in files) > size_limit_mb * 2**20:
        return info.url
    target.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(str(target) + ".lock", timeout=COPY_WAIT_S):  # filelock.Timeout is an OSError
        if not (target / ".complete").is_file():
            partial = target.with_name(f"{target.name}.partial-{os.getpid()}")
            shutil.rmtree(partial, ignore_errors=True)  # only ever a directory this function made
            partial.mkdir(parents=True)
            pafs.copy_files(path.rstrip("/"), str(partial), source_filesystem=fs,
                            destination_filesystem=pafs.LocalFileSystem())
            (partial / ".complete").write_text(json.dumps({"url": info.url, "fingerprint": info.fingerprint}))
            partial.rename(target)  # the copy appears complete or not at all
            log.info("copied %s (%d files) to %s", info.url, len(files), target)
    return path_to_url(target)
