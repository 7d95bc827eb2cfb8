"""Writing hpo datasets: ``list<float32>`` features with a declared shape, label, ``row_id``; even row groups.

An hpo dataset is a directory with one Parquet file whose row groups come in a multiple of 24 (so
Petastorm's round-robin sharding is even for 1, 2, 3, 4, 6 or 8 workers). Features of any shape are
stored flat as ``list<float32>`` (Petastorm 0.13.1 silently drops fixed-size list columns) and the shape
of one example is declared in the file's key-value metadata under ``hpo.shape.<column>``.
"""

from __future__ import annotations

import json
import math
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq

from hpo.data.fs import url_to_path
from hpo.errors import ConfigError

ROW_ID = "row_id"
#: Row-group counts are multiples of this, so shards are even for 1, 2, 3, 4, 6, 8, 12 and 24 workers.
SHARD_FRIENDLY_GROUPS = 24
#: Upper bound on rows per row group for large datasets.
MAX_ROWS_PER_GROUP = 65_536
#: Key-value metadata key (prefix) that declares the shape of one example of a features column.
SHAPE_KEY = "hpo.shape."
PART = "part-00000.parquet"


def row_group_sizes(num_rows: int) -> list[int]:
    """Row-group sizes for ``num_rows`` rows, chosen so shards come out even.

    A multiple of 24 groups (fewer only for tiny data) whose sizes differ by at most one row, so
    Petastorm's round-robin sharding gives 1, 2, 3, 4, 6, 8, 12 or 24 workers the same rows, ±1 per group.
    """
    groups = SHARD_FRIENDLY_GROUPS * max(1, math.ceil(num_rows / (SHARD_FRIENDLY_GROUPS * MAX_ROWS_PER_GROUP)))
    groups = min(groups, num_rows)
    base, extra = divmod(num_rows, groups)
    return [base + 1] * extra + [base] * (groups - extra)


def _features_and_labels(
    data: Any, labels: Any, label: str, features_column: str, where: str
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None]:
    """Splits the accepted input kinds into ``(features, labels, row_ids or None)``."""
    import pandas as pd

    if isinstance(data, pd.DataFrame):
        if label not in data.columns:
            raise ConfigError(
                f"{where}: {label}: label column not found (columns: {', '.join(map(str, data.columns))}); "
                "pass --label with one of them"
            )
        ids = data[ROW_ID].to_numpy() if ROW_ID in data.columns else None
        if features_column in data.columns and data[features_column].dtype == object:
            x = np.stack([np.asarray(v, dtype=np.float32) for v in data[features_column]])
        else:
            numeric = [c for c in data.columns if c not in (label, ROW_ID) and pd.api.types.is_numeric_dtype(data[c])]
            if not numeric:
                raise ConfigError(f"{where}: (columns): no numeric feature columns besides '{label}'; add some")
            x = data[numeric].to_numpy(dtype=np.float32)
        return x, data[label].to_numpy(), ids
    if isinstance(data, Mapping):
        keys = [str(k) for k in data]
        if label not in data:
            raise ConfigError(
                f"{where}: {label}: label array not found (arrays: {', '.join(keys)}); pass --label with one of them"
            )
        candidates = [k for k in keys if k not in (label, ROW_ID)]
        if features_column in data:
            fkey = features_column
        elif len(candidates) == 1:
            fkey = candidates[0]
        else:
            raise ConfigError(
                f"{where}: {features_column}: features array not found (arrays: {', '.join(keys)}); "
                "pass --features with its name"
            )
        ids = np.asarray(data[ROW_ID]) if ROW_ID in data else None
        return np.asarray(data[fkey]), np.asarray(data[label]), ids
    if isinstance(data, tuple) and len(data) == 2 and labels is None:
        return np.asarray(data[0]), np.asarray(data[1]), None
    if labels is None:
        raise ConfigError(f"{where}: (data): an array of features needs labels=…; pass (features, labels)")
    return np.asarray(data), np.asarray(labels), None


def write_dataset(
    data: Any,
    url: str,
    *,
    labels: Any = None,
    label: str = "label",
    features_column: str = "features",
    row_ids: np.ndarray | None = None,
    source: str | None = None,
) -> str:
    """Writes data as an hpo Parquet dataset (one file, shard-friendly row groups).

    Args:
        data: One of: a pandas DataFrame (the ``label`` column, plus either a ``features_column`` holding
            arrays or numeric columns that are concatenated into the features; a ``row_id`` column is
            kept); a mapping of arrays such as ``np.load("x.npz")`` (``label`` and ``features_column`` or
            a single other array); a ``(features, labels)`` tuple; or a features array with ``labels``.
            Features of shape ``(rows, *shape)`` keep ``shape`` (declared in the dataset's metadata).
        url: Destination ``file://`` URL (a directory; Parquet files hpo wrote there before are replaced, any
            other Parquet file there is an error).
        labels: Labels, when ``data`` is a bare features array.
        label: Name of the label column (and of the label in a DataFrame or mapping).
        features_column: Name of the features column.
        row_ids: Row identifiers; defaults to the data's ``row_id`` or ``0..rows-1``.
        source: What to name in error messages (defaults to ``url``).

    Returns:
        The dataset URL.

    Raises:
        ConfigError: For missing columns, mismatched lengths or no rows.
    """
    where = source or url
    x, y, ids = _features_and_labels(data, labels, label, features_column, where)
    if row_ids is not None:
        ids = np.asarray(row_ids)
    if len(x) == 0:
        raise ConfigError(f"{where}: (data): no rows to write; check the source")
    if len(y) != len(x) or (ids is not None and len(ids) != len(x)):
        raise ConfigError(f"{where}: (data): {len(x)} feature rows but {len(y)} labels; pass arrays of equal length")
    if not (np.issubdtype(x.dtype, np.number) or x.dtype == np.bool_):
        raise ConfigError(f"{where}: {features_column}: features are {x.dtype}, not numeric; encode them as numbers")
    shape = tuple(int(d) for d in x.shape[1:]) or (1,)
    flat = np.ascontiguousarray(x, dtype=np.float32).reshape(len(x), -1)
    ids = np.arange(len(x), dtype=np.int64) if ids is None else ids.astype(np.int64)
    write_table(
        pa.table({ROW_ID: pa.array(ids), features_column: list_column(flat), label: pa.array(y)}),
        url,
        {features_column: shape},
    )
    return url


def list_column(flat: np.ndarray) -> pa.ListArray:
    """A ``(rows, dim)`` float32 array as a ``list<float32>`` column (no Python objects on the way)."""
    rows, dim = flat.shape
    offsets = pa.array(np.arange(0, (rows + 1) * dim, dim, dtype=np.int32))
    return pa.ListArray.from_arrays(offsets, pa.array(flat.reshape(-1), type=pa.float32()))


def write_table(table: pa.Table, url: str, shapes: Mapping[str, tuple[int, ...]]) -> None:
    """Writes a table to a dataset directory with shard-friendly row groups and declared feature shapes."""
    meta = dict(table.schema.metadata or {})
    meta.update({(SHAPE_KEY + column).encode(): json.dumps(list(shape)).encode() for column, shape in shapes.items()})
    table = table.replace_schema_metadata(meta)
    dest = url_to_path(url)
    dest.mkdir(parents=True, exist_ok=True)
    old_files = sorted(dest.glob("*.parquet"))
    foreign = [p.name for p in old_files if not is_hpo_parquet(p)]
    if foreign:
        raise ConfigError(
            f"{url}: (destination): holds Parquet files hpo did not write ({', '.join(foreign[:3])}); "
            "write the dataset to a new or empty directory"
        )
    for old in old_files:  # an earlier version of this dataset, written by hpo
        old.unlink()
    tmp = dest / f".{PART}.tmp"
    with pq.ParquetWriter(tmp, table.schema) as writer:
        start = 0
        for size in row_group_sizes(len(table)):
            writer.write_table(table.slice(start, size), row_group_size=size)
            start += size
    os.replace(tmp, dest / PART)


def is_hpo_parquet(path: Path) -> bool:
    """True if ``path`` is a Parquet file hpo wrote (its metadata declares a feature shape)."""
    try:
        metadata = pq.read_schema(path).metadata or {}
    except (OSError, ValueError):  # unreadable, or not Parquet (pyarrow's ArrowInvalid is a ValueError)
        return False
    return any(key.startswith(SHAPE_KEY.encode()) for key in metadata)


def declared_shapes(schema: pa.Schema) -> dict[str, tuple[int, ...]]:
    """The feature shapes declared in a schema's key-value metadata (column → shape)."""
    out = {}
    for key, value in (schema.metadata or {}).items():
        name = key.decode(errors="replace")
        if name.startswith(SHAPE_KEY):
            out[name[len(SHAPE_KEY) :]] = tuple(int(d) for d in json.loads(value))
    return out


def validation_rows(rows: int, fraction: float, source: str) -> int:
    """Rows split off for validation: ``round(rows × fraction)``, at least 1, leaving at least 1 for training.

    Raises:
        ConfigError: If ``fraction`` leaves no row for training (``data.validation_fraction`` names the fix).
    """
    wanted = round(rows * fraction)
    if wanted >= rows:
        raise ConfigError(
            f"{source}: data.validation_fraction: {fraction:g} of {rows} rows leaves none for training; "
            f"lower it (e.g. 0.2)"
        )
    return max(1, wanted)


def split_dataset(
    url: str, train_url: str, validation_url: str, fraction: float, seed: int, source: str | None = None
) -> tuple[str, str]:
    """Splits a dataset into seeded train/validation datasets, keeping columns, row ids and feature shapes.

    Args:
        url: Source dataset (``file://``, ``s3://``, ``gs://``).
        train_url: Destination of the training part.
        validation_url: Destination of the validation part (``round(rows × fraction)`` rows, at least 1).
        fraction: Share of rows that go to validation.
        seed: Seed of the random permutation.
        source: The sweep file, for error messages (defaults to ``url``).

    Returns:
        ``(train_url, validation_url)``.

    Raises:
        ConfigError: If the data cannot be read, or ``fraction`` leaves no row for training.
    """
    from hpo.data.access import reading
    from hpo.data.fs import filesystem, parquet_files

    with reading(url, "data.train", source or url):
        fs, path = filesystem(url, "data.train")
        table = pq.read_table(parquet_files(fs, path), filesystem=fs)
    shapes = declared_shapes(table.schema)
    if ROW_ID not in table.column_names:
        table = table.append_column(ROW_ID, pa.array(np.arange(len(table), dtype=np.int64)))
    order = np.random.default_rng(seed).permutation(len(table))
    n_val = validation_rows(len(table), fraction, source or url)
    write_table(table.take(pa.array(order[n_val:])), train_url, shapes)
    write_table(table.take(pa.array(order[:n_val])), validation_url, shapes)
    return train_url, validation_url
