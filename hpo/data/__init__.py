"""Parquet datasets read through Petastorm: convert, describe, and stream one shard per Horovod rank.

An hpo dataset is a directory of Parquet files with a ``list<float32>`` features column (the shape of
one example declared in the file metadata), a label column and an ``int64`` ``row_id`` column (used to
audit that every row is read exactly once). Fixed-size list columns are never written: Petastorm 0.13.1
silently drops them.

Modules: :mod:`~hpo.data.fs` (URLs, filesystems), :mod:`~hpo.data.write` (writing, row groups),
:mod:`~hpo.data.convert` (files and objects → datasets), :mod:`~hpo.data.info` (describe, inspect,
validation), :mod:`~hpo.data.stream` (sharded per-rank reader, cache), :mod:`~hpo.data.builtin`,
:mod:`~hpo.data.access` (the libraries' read failures as one-line errors), :mod:`~hpo.data.sources` (the
kinds of ``data:`` value: local files, object storage, built-in datasets; :func:`register_source` adds one).

Only :mod:`~hpo.data.sources` is imported with the package (the sweep-file schema uses it); every other
name is imported from its module when first used, so that reading a sweep file loads no pyarrow or numpy.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from hpo.data.sources import (
    DATA_SOURCES,
    DataSource,
    Materialised,
    MaterialiseRequest,
    RemoteFilesystem,
    data_source,
    register_source,
)

if TYPE_CHECKING:
    from hpo.data.builtin import builtin_digits
    from hpo.data.convert import convert, load_source
    from hpo.data.fs import arrow_filesystem, as_url, filesystem, parquet_files, path_to_url, url_to_path
    from hpo.data.info import DatasetInfo, describe, inspect_dataset
    from hpo.data.stream import ReaderCache, RowLossError, ShardStream, epoch_seed
    from hpo.data.write import (
        MAX_ROWS_PER_GROUP,
        PART,
        ROW_ID,
        SHARD_FRIENDLY_GROUPS,
        declared_shapes,
        row_group_sizes,
        split_dataset,
        write_dataset,
    )

#: Public name → the module that defines it (imported on first use).
_LAZY = {
    "builtin_digits": "builtin",
    **dict.fromkeys(("convert", "load_source"), "convert"),
    **dict.fromkeys(("arrow_filesystem", "as_url", "filesystem", "parquet_files", "path_to_url", "url_to_path"), "fs"),
    **dict.fromkeys(("DatasetInfo", "describe", "inspect_dataset"), "info"),
    **dict.fromkeys(("ReaderCache", "RowLossError", "ShardStream", "epoch_seed"), "stream"),
    **dict.fromkeys(("MAX_ROWS_PER_GROUP", "PART", "ROW_ID", "SHARD_FRIENDLY_GROUPS", "declared_shapes",
                     "row_group_sizes", "split_dataset", "write_dataset"), "write"),
}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'hpo.data' has no attribute '{name}'")
    loaded = importlib.import_module(f"hpo.data.{module}")
    for other, where in _LAZY.items():  # all of the module's names: over ``convert``, the submodule its import bound
        if where == module:
            globals()[other] = getattr(loaded, other)
    return globals()[name]


__all__ = [
    "DATA_SOURCES",
    "MAX_ROWS_PER_GROUP",
    "PART",
    "ROW_ID",
    "SHARD_FRIENDLY_GROUPS",
    "DataSource",
    "DatasetInfo",
    "MaterialiseRequest",
    "Materialised",
    "ReaderCache",
    "RemoteFilesystem",
    "RowLossError",
    "ShardStream",
    "arrow_filesystem",
    "as_url",
    "builtin_digits",
    "convert",
    "data_source",
    "declared_shapes",
    "describe",
    "epoch_seed",
    "filesystem",
    "inspect_dataset",
    "load_source",
    "parquet_files",
    "path_to_url",
    "register_source",
    "row_group_sizes",
    "split_dataset",
    "url_to_path",
    "write_dataset",
]
