"""Parquet datasets read through Petastorm: convert, describe, and stream one shard per Horovod rank.

An hpo dataset is a directory of Parquet files with a ``list<float32>`` features column (the shape of
one example declared in the file metadata), a label column and an ``int64`` ``row_id`` column (used to
audit that every row is read exactly once). Fixed-size list columns are never written: Petastorm 0.13.1
silently drops them.

Modules: :mod:`~hpo.data.fs` (URLs, filesystems), :mod:`~hpo.data.write` (writing, row groups),
:mod:`~hpo.data.convert` (files and objects → datasets), :mod:`~hpo.data.info` (describe, inspect,
validation), :mod:`~hpo.data.stream` (sharded per-rank reader, cache), :mod:`~hpo.data.builtin`,
:mod:`~hpo.data.access` (the libraries' read failures as one-line errors).
"""

from __future__ import annotations

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

__all__ = [
    "MAX_ROWS_PER_GROUP",
    "PART",
    "ROW_ID",
    "SHARD_FRIENDLY_GROUPS",
    "DatasetInfo",
    "ReaderCache",
    "RowLossError",
    "ShardStream",
    "arrow_filesystem",
    "as_url",
    "builtin_digits",
    "convert",
    "declared_shapes",
    "describe",
    "epoch_seed",
    "filesystem",
    "inspect_dataset",
    "load_source",
    "parquet_files",
    "path_to_url",
    "row_group_sizes",
    "split_dataset",
    "url_to_path",
    "write_dataset",
]
