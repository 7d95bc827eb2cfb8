"""Describing and validating a dataset from its Parquet metadata (and label column) before any trial starts."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from hpo.data.access import reading
from hpo.data.fs import filesystem, fingerprint, parquet_files
from hpo.data.write import ROW_ID, declared_shapes
from hpo.errors import ConfigError


@dataclass(frozen=True)
class DatasetInfo:
    """What a trial needs to know about a dataset, read from Parquet metadata and the label column.

    Attributes:
        url: Dataset URL.
        num_rows: Rows in the dataset.
        row_group_rows: Rows of each row group, in Petastorm's order.
        feature_dim: Values per example (the product of ``input_shape``).
        num_classes: Classes (labels are 0..k-1), or None for regression.
        has_row_id: Whether a ``row_id`` column exists (for audits).
        feature_shape: Declared shape of one example; None means ``(feature_dim,)``.
        fingerprint: Hash of the files' names, sizes and stamps (cache key; changes when rewritten).
    """

    url: str
    num_rows: int
    row_group_rows: tuple[int, ...]
    feature_dim: int
    num_classes: int | None
    has_row_id: bool
    feature_shape: tuple[int, ...] | None = None
    fingerprint: str = field(default="", compare=False)

    @property
    def input_shape(self) -> tuple[int, ...]:
        """The shape of one example, as the model's ``input_shape``."""
        return self.feature_shape or (self.feature_dim,)

    def shard_rows(self, rank: int, size: int) -> int:
        """Rows in shard ``rank`` of ``size`` (Petastorm assigns row group i to shard i % size)."""
        return sum(n for i, n in enumerate(self.row_group_rows) if i % size == rank)

    def steps(self, batch_size: int, size: int) -> int:
        """Steps per epoch that every rank runs: enough for the largest shard at ``batch_size``."""
        return max(1, math.ceil(max(self.shard_rows(r, size) for r in range(size)) / batch_size))


def _check_features(where: str, features: str, ftype: pa.DataType) -> None:
    if pa.types.is_fixed_size_list(ftype):
        raise ConfigError(
            f"{where}: data.features: '{features}' is a fixed-size list, which Petastorm drops "
            "silently; rewrite it with 'hpo data convert'"
        )
    if not (pa.types.is_list(ftype) or pa.types.is_large_list(ftype)):
        raise ConfigError(
            f"{where}: data.features: '{features}' has type {ftype}, not list<float32>; "
            "rewrite it with 'hpo data convert'"
        )
    value = ftype.value_type
    if not (pa.types.is_floating(value) or pa.types.is_integer(value)):
        raise ConfigError(
            f"{where}: data.features: '{features}' holds non-numeric values ({ftype}); "
            "encode them as numbers and rewrite with 'hpo data convert'"
        )


def describe(
    url: str,
    *,
    features: str = "features",
    label: str = "label",
    task: str = "classification",
    source: str | None = None,
    key: str = "data",
) -> DatasetInfo:
    """Reads a dataset's metadata and checks it can be trained on.

    Args:
        url: ``file://``, ``s3://`` or ``gs://`` URL of the dataset directory (or a single Parquet file).
        features: Features column name.
        label: Label column name.
        task: ``classification`` (labels must be integers 0..k-1) or ``regression``.
        source: What to name in error messages (defaults to the URL).
        key: The sweep-file key the URL came from (for error messages).

    Returns:
        The dataset description.

    Raises:
        ConfigError: For a missing path, a missing, fixed-size or non-numeric column, a features shape that
            does not match the data, non-integer classification labels, or an empty dataset.
    """
    where = source or url
    with reading(url, key, where):
        return _describe(url, features, label, task, where, key)


def _describe(url: str, features: str, label: str, task: str, where: str, key: str) -> DatasetInfo:
    """:func:`describe` once the libraries' exceptions are taken care of."""
    fs, path = filesystem(url, key)
    files = parquet_files(fs, path)
    if not files:
        raise ConfigError(f"{where}: {key}: no Parquet files at {path}; check the URL or run 'hpo data convert'")
    with fs.open(files[0], "rb") as f:
        schema = pq.read_schema(f)
    names = schema.names
    for ckey, column in (("data.features", features), ("data.label", label)):
        if column not in names:
            raise ConfigError(
                f"{where}: {ckey}: column '{column}' not found (columns: {', '.join(names)}); set {ckey} to one of them"
            )
    _check_features(where, features, schema.field(features).type)
    group_rows, first_dim = _row_groups_and_width(fs, files, features, where)
    num_rows = sum(group_rows)
    if num_rows == 0 or first_dim is None:
        raise ConfigError(f"{where}: {key}: the dataset at {url} has no rows; check the source")
    shape = declared_shapes(schema).get(features)
    if shape is not None and math.prod(shape) != first_dim:
        raise ConfigError(
            f"{where}: data.features: declared shape {list(shape)} holds {math.prod(shape)} values but rows "
            f"have {first_dim}; rewrite the dataset with 'hpo data convert'"
        )
    num_classes = _num_classes(fs, files, label, where) if task == "classification" else None
    return DatasetInfo(
        url, num_rows, tuple(group_rows), first_dim, num_classes, ROW_ID in names, shape, fingerprint(fs, files)
    )


def _row_groups_and_width(fs: Any, files: list[str], features: str, where: str) -> tuple[list[int], int | None]:
    """Rows of every row group, and the number of values per row (checked equal in the first non-empty group)."""
    group_rows: list[int] = []
    first_dim = None
    for file in files:
        with fs.open(file, "rb") as f:
            pf = pq.ParquetFile(f)
            meta = pf.metadata
            group_rows.extend(meta.row_group(i).num_rows for i in range(meta.num_row_groups))
            if first_dim is None and meta.num_rows:
                group = next(i for i in range(meta.num_row_groups) if meta.row_group(i).num_rows)
                lengths = pc.list_value_length(pf.read_row_group(group, columns=[features]).column(0))
                low, high = pc.min(lengths).as_py(), pc.max(lengths).as_py()
                if low != high:
                    raise ConfigError(
                        f"{where}: data.features: rows of '{features}' hold {low} to {high} values; every row "
                        "needs the same number (pad or crop them)"
                    )
                first_dim = low
    return group_rows, first_dim


def _num_classes(fs: Any, files: list[str], label: str, where: str) -> int:
    """Classes of a classification label column (integers 0..k-1 required)."""
    labels = pq.read_table(files, columns=[label], filesystem=fs).column(0)
    values = labels.to_numpy()
    if not np.issubdtype(values.dtype, np.integer) or values.min() < 0:
        raise ConfigError(
            f"{where}: data.label: classification needs integer labels 0..k-1 "
            f"(got {labels.type}); encode the labels or set data.task: regression"
        )
    return int(values.max()) + 1


def inspect_dataset(url: str, *, features: str = "features", label: str = "label", task: str = "auto") -> dict:
    """Everything ``hpo data inspect`` shows: rows, row groups, schema, features shape, label classes.

    Args:
        url: Dataset URL.
        features: Features column.
        label: Label column.
        task: ``classification``, ``regression`` or ``auto`` (classification for integer labels ≥ 0).

    Returns:
        A JSON-able mapping.

    Raises:
        ConfigError: If the dataset cannot be trained on (see :func:`describe`).
    """
    fs, path = filesystem(url)
    files = parquet_files(fs, path)
    if task == "auto" and files:
        with fs.open(files[0], "rb") as f:
            schema = pq.read_schema(f)
        ltype = schema.field(label).type if label in schema.names else None
        task = "classification" if ltype is not None and pa.types.is_integer(ltype) else "regression"
    info = describe(url, features=features, label=label, task=task)
    with fs.open(files[0], "rb") as f:
        schema = pq.read_schema(f)
    values = pq.read_table(files, columns=[label], filesystem=fs).column(0).to_numpy()
    out: dict[str, Any] = {
        "url": url,
        "files": len(files),
        "rows": info.num_rows,
        "row_groups": len(info.row_group_rows),
        "row_group_rows": [min(info.row_group_rows), max(info.row_group_rows)],
        "schema": {f.name: str(f.type) for f in schema},
        "features": {"column": features, "shape": list(info.input_shape), "declared": info.feature_shape is not None},
        "label": {"column": label, "task": task},
        "shards": {
            str(w): [info.shard_rows(r, w) for r in range(w)] for w in (1, 2, 4, 8) if w <= len(info.row_group_rows)
        },
    }
    if task == "classification":
        classes, counts = np.unique(values, return_counts=True)
        out["label"]["classes"] = {str(c): int(n) for c, n in zip(classes, counts, strict=True)}
    else:
        out["label"]["range"] = [float(values.min()), float(values.max())]
    return out
