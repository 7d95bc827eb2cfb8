"""Putting written datasets in place without touching anything hpo did not write.

``hpo data convert`` writes every dataset into a staging directory beside the destination and renames
it into place at the end, so a failure leaves the destination as it was. A destination is replaced only
when it is an hpo dataset tree (every file in it is one hpo wrote: a Parquet file carrying hpo's shape
metadata, or the ``_hpo_dataset.json`` marker) and ``overwrite`` was asked for; anything else that is
not empty is refused, as is a destination that is the source file or holds it.
"""

from __future__ import annotations

import json
import os
import shutil
import time
import uuid
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from hpo.data.write import is_hpo_parquet
from hpo.errors import ConfigError

#: File that marks a directory tree written by ``hpo data convert``.
MARKER = "_hpo_dataset.json"


def written_by_hpo(path: Path) -> bool:
    """True if ``path`` is a file hpo writes into datasets: the marker or a Parquet file with hpo's metadata."""
    return path.name == MARKER or (path.suffix == ".parquet" and is_hpo_parquet(path))


def foreign_files(root: Path) -> list[Path]:
    """Files under ``root`` that hpo did not write (sorted; empty for a missing directory)."""
    if root.is_file():
        return [root]
    return sorted(p for p in root.rglob("*") if p.is_file() and not written_by_hpo(p))


def check_destination(dest: Path, sources: list[Path], overwrite: bool, where: str) -> None:
    """Refuses a destination that would destroy or mix with files hpo did not write.

    Args:
        dest: The destination directory.
        sources: Local files read by the conversion (must not be at or under ``dest``).
        overwrite: Replace an existing hpo dataset tree.
        where: What to name in error messages.

    Raises:
        ConfigError: DEST is a source or holds one; DEST is a file; DEST holds files hpo did not write;
            DEST is an hpo dataset and ``overwrite`` is off.
    """
    dest = dest.resolve()
    for src in sources:
        src = src.resolve()
        if src == dest or dest in src.parents:
            raise ConfigError(
                f"{where}: DEST: {dest} is the source or holds it; write the dataset to a new directory"
            )
    if dest.is_file():
        raise ConfigError(f"{where}: DEST: {dest} is a file; name a new or empty directory")
    if not dest.exists() or not any(dest.iterdir()):
        return
    foreign = foreign_files(dest)
    if foreign:
        shown = ", ".join(str(p.relative_to(dest)) for p in foreign[:3]) + (" …" if len(foreign) > 3 else "")
        raise ConfigError(
            f"{where}: DEST: {dest} holds {len(foreign)} file(s) hpo did not write ({shown}); "
            "name a new or empty directory (hpo never replaces files it did not write)"
        )
    if not overwrite:
        raise ConfigError(f"{where}: DEST: {dest} already holds an hpo dataset; pass --overwrite to replace it")


@contextmanager
def staged(dest: Path, source: str, facts: dict[str, Any] | None = None) -> Iterator[Path]:
    """A staging directory beside ``dest``, renamed into place when the block succeeds.

    Call :func:`check_destination` first. On an exception the staging directory (hpo's own) is removed
    and ``dest`` is untouched. An existing ``dest`` (empty, or an hpo dataset tree) is swapped out and
    then removed only after the new one is in place.

    Args:
        dest: The destination directory.
        source: What the dataset was made from (kept in the marker file).
        facts: More to keep in the marker file (e.g. the task and the label classes).

    Yields:
        The staging directory to write into.
    """
    dest = dest.resolve()
    dest.parent.mkdir(parents=True, exist_ok=True)
    stage = dest.parent / f".{dest.name}.hpo-staging-{uuid.uuid4().hex[:8]}"
    stage.mkdir()
    try:
        yield stage
        marker = {"written_by": "hpo data convert", "source": source, "time": time.time(), **(facts or {})}
        (stage / MARKER).write_text(json.dumps(marker, indent=2))
        old = None
        if dest.exists():
            old = dest.parent / f".{dest.name}.hpo-replaced-{uuid.uuid4().hex[:8]}"
            os.replace(dest, old)
        os.replace(stage, dest)
        if old is not None:
            shutil.rmtree(old)  # checked: empty, or only files hpo wrote
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
