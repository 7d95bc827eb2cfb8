"""Where a sweep's data can come from: one :class:`DataSource` record per kind of ``data:`` value.

A record says how a value is recognised (its prefixes), whether hpo writes the dataset itself
(``materialise``: the built-in datasets) or reads it where it is, how a node checks that it can read it
(``probe``, run on every node of a connected cluster by :mod:`hpo.cluster.visibility`), and which
filesystem reads it. The sweep-file check (:mod:`hpo.config.sections`), the filesystems
(:mod:`hpo.data.fs`) and the checks before a sweep (:mod:`hpo.preflight`) all ask :func:`data_source`;
adding a source is one :func:`register_source`.

This module is a contract (the sweep-file schema imports it): it imports nothing heavy. A built-in
source names the functions that do the work as ``"module:function"``, loaded when first used, the way a
sweep file names its model.
"""

from __future__ import annotations

import importlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

#: A function, or where to find it: ``"package.module:function"`` (imported when first used).
Hook = Callable[..., Any] | str


@dataclass(frozen=True)
class MaterialiseRequest:
    """What a source that writes its own dataset is asked for (``data.train`` of a sweep).

    Attributes:
        value: The ``data.train`` value (``builtin:digits``).
        root: Where hpo keeps the datasets it writes on the driver (``STATE/_data``).
        validation_fraction: Share of the rows to split off for validation.
        seed: Seed of the split.
        source: The sweep file, for error messages.
    """

    value: str
    root: Path
    validation_fraction: float
    seed: int
    source: str


@dataclass(frozen=True)
class Materialised:
    """The datasets a source wrote: ``file://`` URLs on the driver (copied to a shared storage after)."""

    train: str
    validation: str


@dataclass(frozen=True)
class RemoteFilesystem:
    """How the filesystem layer reads a remote URL scheme.

    Attributes:
        schemes: URL schemes it reads (``s3``, ``s3a``), lower case.
        protocol: The fsspec protocol (``s3``, ``gs``, ``hdfs``).
        package: The package that provides it (named in the error when it is missing).
    """

    schemes: tuple[str, ...]
    protocol: str
    package: str


@dataclass(frozen=True)
class DataSource:
    """A kind of ``data:`` value.

    Attributes:
        name: Its name (the registry key).
        prefixes: What a value of this kind starts with (``s3://``, ``builtin:``).
        example: A value shown in the sweep-file error's fix, or None to show none.
        materialise: ``(MaterialiseRequest) -> Materialised`` for a source whose datasets hpo writes itself,
            with its own validation split (``data.validation`` is refused then); None: the value is a
            dataset URL read where it is.
        probe: ``(url, key) -> problem or None``: why this node cannot read a dataset URL of this kind; run on
            each node of a connected cluster before any trial.
        remote: The filesystem of a remote scheme; None for local files and written datasets.
    """

    name: str
    prefixes: tuple[str, ...]
    example: str | None = None
    materialise: Hook | None = None
    probe: Hook = "hpo.data.fs:unreadable"
    remote: RemoteFilesystem | None = None

    def recognises(self, value: str) -> bool:
        """True if ``value`` is of this kind."""
        return value.startswith(self.prefixes)

    @property
    def writes_its_own(self) -> bool:
        """True if hpo writes this source's datasets (and their validation split) itself."""
        return self.materialise is not None

    def materialiser(self) -> Callable[[MaterialiseRequest], Materialised]:
        """The ``materialise`` function (imported if named).

        Raises:
            ValueError: The source reads its data where it is.
        """
        if self.materialise is None:
            raise ValueError(f"data source '{self.name}' reads its data where it is; it writes none")
        return _load(self.materialise)

    def prober(self) -> Callable[[str, str], str | None]:
        """The ``probe`` function (imported if named)."""
        return _load(self.probe)


def _load(hook: Hook) -> Callable[..., Any]:
    if callable(hook):
        return hook
    module, _, name = hook.partition(":")
    return getattr(importlib.import_module(module), name)


#: Source name → its record, in the order values are matched.
DATA_SOURCES: dict[str, DataSource] = {}


def register_source(source: DataSource) -> DataSource:
    """Adds a source (a name registered already is replaced).

    Raises:
        ValueError: It has no prefix, or a prefix another source has.
    """
    if not source.prefixes:
        raise ValueError(f"data source '{source.name}' has no prefix; give it one, e.g. '{source.name}://'")
    for other in DATA_SOURCES.values():
        shared = set(source.prefixes) & set(other.prefixes)
        if other.name != source.name and shared:
            raise ValueError(f"data source '{source.name}': prefix {sorted(shared)[0]} belongs to data source "
                             f"'{other.name}'; pick another")
    DATA_SOURCES[source.name] = source
    return source


def data_source(value: str) -> DataSource | None:
    """The source a ``data:`` value is of, or None if no registered source recognises it."""
    return next((s for s in DATA_SOURCES.values() if s.recognises(value)), None)


def url_problem(value: str) -> str | None:
    """What is wrong with a ``data:`` value (a message with its fix), or None if a source recognises it."""
    if data_source(value) is not None:
        return None
    examples = [s.example for s in DATA_SOURCES.values() if s.example]
    fix = " or ".join([", ".join(examples[:-1]), examples[-1]]) if len(examples) > 1 else "".join(examples)
    return f"'{value}' is not a dataset URL; use {fix}"


def remote_schemes() -> dict[str, tuple[str, str]]:
    """URL scheme → (fsspec protocol, the package that provides it), for every remote source."""
    return {scheme: (s.remote.protocol, s.remote.package)
            for s in DATA_SOURCES.values() if s.remote is not None for scheme in s.remote.schemes}


for _source in (
    DataSource("file", ("file://",), example="file:///abs/path"),
    DataSource("s3", ("s3://",), example="s3://bucket/path", remote=RemoteFilesystem(("s3", "s3a"), "s3", "s3fs")),
    DataSource("gs", ("gs://", "gcs://"), remote=RemoteFilesystem(("gs", "gcs"), "gs", "gcsfs")),
    DataSource("hdfs", ("hdfs://",), remote=RemoteFilesystem(("hdfs",), "hdfs", "pyarrow")),
    DataSource("builtin", ("builtin:",), example="builtin:digits", materialise="hpo.data.builtin:materialise"),
):
    register_source(_source)
