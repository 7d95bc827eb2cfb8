"""Parquet datasets read through Petastorm: convert, describe, and stream one shard per Horovod rank.

An hpo dataset is a directory of Parquet files with a ``list<float32>`` features column, a label
column and an ``int64`` ``row_id`` column (used to audit that every row is read exactly once).
Fixed-size list columns are never written: Petastorm 0.13.1 silently drops them.
"""

from __future__ import annotations

import math
import os
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq

from hpo.errors import ConfigError

ROW_ID = "row_id"
#: Row-group counts are multiples of this, so shards are even for 1, 2, 3, 4, 6, 8, 12 and 24 workers.
SHARD_FRIENDLY_GROUPS = 24
#: Upper bound on rows per row group for large datasets.
MAX_ROWS_PER_GROUP = 65_536


def url_to_path(url: str) -> Path:
    """Returns the local path of a ``file://`` URL."""
    if not url.startswith("file://"):
        raise ConfigError(f"{url}: (url): only file:// URLs are read locally; copy the data or use a file:// URL")
    return Path(url[len("file://") :])


def path_to_url(path: str | Path) -> str:
    """Returns the ``file://`` URL of a local path (made absolute)."""
    return "file://" + str(Path(path).resolve())


def row_group_sizes(num_rows: int) -> list[int]:
    """Row-group sizes for ``num_rows`` rows, chosen so shards come out even.

    A multiple of 24 groups (fewer only for tiny data) whose sizes differ by at most one row, so
    Petastorm's round-robin sharding gives 1, 2, 3, 4, 6, 8, 12 or 24 workers the same rows, ±1 per group.
    """
    groups = SHARD_FRIENDLY_GROUPS * max(1, math.ceil(num_rows / (SHARD_FRIENDLY_GROUPS * MAX_ROWS_PER_GROUP)))
    groups = min(groups, num_rows)
    base, extra = divmod(num_rows, groups)
    return [base + 1] * extra + [base] * (groups - extra)


def write_dataset(
    features: np.ndarray,
    labels: np.ndarray,
    url: str,
    *,
    features_column: str = "features",
    label_column: str = "label",
    row_ids: np.ndarray | None = None,
) -> str:
    """Writes arrays as an hpo Parquet dataset (one file, shard-friendly row groups).

    Args:
        features: ``(rows, dim)`` numeric array; stored as ``list<float32>``.
        labels: ``(rows,)`` label array.
        url: Destination ``file://`` URL (a directory; replaced if it exists).
        features_column: Name of the features column.
        label_column: Name of the label column.
        row_ids: Row identifiers; defaults to ``0..rows-1``.

    Returns:
        The dataset URL.
    """
    features = np.asarray(features, dtype=np.float32).reshape(len(features), -1)
    labels = np.asarray(labels)
    if len(features) == 0:
        raise ConfigError(f"{url}: (data): no rows to write; check the source")
    ids = np.arange(len(features), dtype=np.int64) if row_ids is None else np.asarray(row_ids, dtype=np.int64)
    dim = features.shape[1]
    flat = pa.array(features.reshape(-1), type=pa.float32())
    offsets = pa.array(np.arange(0, (len(features) + 1) * dim, dim, dtype=np.int32))
    table = pa.table(
        {
            ROW_ID: pa.array(ids),
            features_column: pa.ListArray.from_arrays(offsets, flat),
            label_column: pa.array(labels),
        }
    )
    dest = url_to_path(url)
    dest.mkdir(parents=True, exist_ok=True)
    for old in dest.glob("*.parquet"):
        old.unlink()
    tmp = dest / ".part-00000.parquet.tmp"
    with pq.ParquetWriter(tmp, table.schema) as writer:
        start = 0
        for size in row_group_sizes(len(table)):
            writer.write_table(table.slice(start, size), row_group_size=size)
            start += size
    os.replace(tmp, dest / "part-00000.parquet")
    return url


def convert(src: str | Path, dest_url: str, label: str, *, features_column: str = "features") -> DatasetInfo:
    """Converts a CSV or plain Parquet table into an hpo dataset.

    Every numeric column other than ``label`` becomes part of the features vector.

    Args:
        src: Path of a ``.csv`` or ``.parquet`` file.
        dest_url: Destination ``file://`` URL.
        label: Name of the label column.
        features_column: Name of the features column to write.

    Returns:
        The description of the written dataset.
    """
    src = Path(src)
    if not src.exists():
        raise ConfigError(f"{src}: (file): no such file; check the path")
    suffix = src.suffix.lower()
    if suffix == ".csv":
        frame = pd.read_csv(src)
    elif suffix in (".parquet", ".pq"):
        frame = pd.read_parquet(src)
    else:
        raise ConfigError(f"{src}: (file): unsupported format '{suffix}'; convert a .csv or .parquet file")
    if label not in frame.columns:
        raise ConfigError(
            f"{src}: {label}: label column not found (columns: {', '.join(map(str, frame.columns))}); "
            "pass --label with one of them"
        )
    numeric = [c for c in frame.columns if c != label and pd.api.types.is_numeric_dtype(frame[c])]
    if not numeric:
        raise ConfigError(f"{src}: (columns): no numeric feature columns besides '{label}'; add some")
    labels = frame[label].to_numpy()
    write_dataset(
        frame[numeric].to_numpy(dtype=np.float32),
        labels,
        dest_url,
        features_column=features_column,
        label_column=label,
    )
    task = "classification" if np.issubdtype(labels.dtype, np.integer) and labels.min() >= 0 else "regression"
    return describe(dest_url, features=features_column, label=label, task=task, source=str(src))


def builtin_digits(root: Path, validation_fraction: float, seed: int = 0) -> tuple[str, str]:
    """Writes scikit-learn's bundled digits (8×8 images, 10 classes) once under ``root``.

    Returns:
        The ``file://`` URLs of the train and validation datasets.
    """
    tag = f"digits-v1-{validation_fraction:g}-{seed}"
    train_url, val_url = path_to_url(root / tag / "train"), path_to_url(root / tag / "validation")
    if (url_to_path(val_url) / "part-00000.parquet").exists():
        return train_url, val_url
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    n_val = round(len(x) * validation_fraction)
    val, train = order[:n_val], order[n_val:]
    write_dataset(x[train], y[train], train_url, row_ids=train)
    write_dataset(x[val], y[val], val_url, row_ids=val)
    return train_url, val_url


@dataclass(frozen=True)
class DatasetInfo:
    """What a trial needs to know about a dataset, read from Parquet metadata and the label column."""

    url: str
    num_rows: int
    row_group_rows: tuple[int, ...]
    feature_dim: int
    num_classes: int | None
    has_row_id: bool

    def shard_rows(self, rank: int, size: int) -> int:
        """Rows in shard ``rank`` of ``size`` (Petastorm assigns row group i to shard i % size)."""
        return sum(n for i, n in enumerate(self.row_group_rows) if i % size == rank)

    def steps(self, batch_size: int, size: int) -> int:
        """Steps per epoch that every rank runs: enough for the largest shard at ``batch_size``."""
        return max(1, math.ceil(max(self.shard_rows(r, size) for r in range(size)) / batch_size))


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
        url: ``file://`` URL of the dataset directory (or a single Parquet file).
        features: Features column name.
        label: Label column name.
        task: ``classification`` (labels must be integers 0..k-1) or ``regression``.
        source: What to name in error messages (defaults to the URL).
        key: The sweep-file key the URL came from (for error messages).

    Returns:
        The dataset description.

    Raises:
        ConfigError: For a missing path, a missing or wrongly typed column, or an empty dataset.
    """
    where = source or url
    path = url_to_path(url)
    files = sorted(path.rglob("*.parquet")) if path.is_dir() else [path]
    if not path.exists() or not files:
        raise ConfigError(f"{where}: {key}: no Parquet files at {path}; check the URL or run 'hpo data convert'")
    schema = pq.read_schema(files[0])
    names = schema.names
    for key, column in (("data.features", features), ("data.label", label)):
        if column not in names:
            raise ConfigError(
                f"{where}: {key}: column '{column}' not found (columns: {', '.join(names)}); set {key} to one of them"
            )
    ftype = schema.field(features).type
    if pa.types.is_fixed_size_list(ftype):
        raise ConfigError(
            f"{where}: data.features: '{features}' is a fixed-size list, which Petastorm drops "
            "silently; rewrite it with 'hpo data convert'"
        )
    if not (pa.types.is_list(ftype) or pa.types.is_large_list(ftype)) or not pa.types.is_floating(ftype.value_type):
        raise ConfigError(
            f"{where}: data.features: '{features}' has type {ftype}, not list<float32>; "
            "rewrite it with 'hpo data convert'"
        )
    group_rows: list[int] = []
    for file in files:
        meta = pq.ParquetFile(file).metadata
        group_rows.extend(meta.row_group(i).num_rows for i in range(meta.num_row_groups))
    num_rows = sum(group_rows)
    if num_rows == 0:
        raise ConfigError(f"{where}: {key}: the dataset at {url} has no rows; check the source")
    first = pq.ParquetFile(files[0]).read_row_group(0, columns=[features]).column(0)
    dim = len(first[0].as_py())
    labels = pq.read_table(files if len(files) > 1 else files[0], columns=[label]).column(0).to_numpy()
    num_classes = None
    if task == "classification":
        if not np.issubdtype(labels.dtype, np.integer) or labels.min() < 0:
            raise ConfigError(
                f"{where}: data.label: classification needs integer labels 0..k-1 "
                f"(got {labels.dtype}); encode the labels or set data.task: regression"
            )
        num_classes = int(labels.max()) + 1
    return DatasetInfo(url, num_rows, tuple(group_rows), dim, num_classes, ROW_ID in names)


class RowLossError(RuntimeError):
    """A reader returned a different number of rows than the shard holds."""


class ShardStream:
    """One rank's shard as exactly ``steps`` batches per epoch, each row exactly once.

    Batches are re-cut from Petastorm's row groups so that every rank runs the same number of steps
    (Horovod hangs otherwise) while no row is repeated or skipped: a shard with fewer rows gets
    slightly smaller batches. Petastorm's ``dummy`` pool is used, since the default thread pool of
    Petastorm 0.13.1 loses row groups at epoch ends; the row count of every epoch is checked anyway.

    Args:
        info: Dataset description.
        features: Features column.
        label: Label column.
        rank: This worker's shard index.
        size: Number of shards (workers).
        steps: Batches to produce per epoch (the same on every rank).
        seed: Base seed; epoch ``e`` shuffles row groups and rows with ``seed + e``.
        shuffle: Shuffle row-group order and rows within each epoch.
        record_ids: Keep the row ids read in each epoch (for audits and tests).
    """

    def __init__(
        self,
        info: DatasetInfo,
        *,
        features: str,
        label: str,
        rank: int,
        size: int,
        steps: int,
        seed: int = 0,
        shuffle: bool = True,
        record_ids: bool = False,
    ) -> None:
        self.info = info
        self.features = features
        self.label = label
        self.rank = rank
        self.size = size
        self.steps = steps
        self.seed = seed
        self.shuffle = shuffle
        self.record_ids = record_ids and info.has_row_id
        self.expected_rows = info.shard_rows(rank, size)
        if self.expected_rows < steps:
            raise ConfigError(
                f"{info.url}: trial.batch_size_per_worker: shard {rank} has {self.expected_rows} rows, fewer "
                f"than the {steps} steps per epoch; use fewer workers or a bigger dataset"
            )
        self.epoch = 0
        self.epoch_rows: list[int] = []
        self.epoch_ids: list[np.ndarray] = []

    def batch_sizes(self) -> list[int]:
        """Sizes of this rank's ``steps`` batches: as equal as possible, summing to the shard's rows."""
        base, extra = divmod(self.expected_rows, self.steps)
        return [base + 1] * extra + [base] * (self.steps - extra)

    def _row_groups(self, epoch: int) -> Iterator[tuple[np.ndarray, np.ndarray, np.ndarray | None]]:
        from petastorm import make_batch_reader

        fields = [self.features, self.label] + ([ROW_ID] if self.record_ids else [])
        with make_batch_reader(
            self.info.url,
            schema_fields=fields,
            reader_pool_type="dummy",
            num_epochs=1,
            cur_shard=self.rank,
            shard_count=self.size,
            shuffle_row_groups=self.shuffle,
            seed=self.seed + epoch,
        ) as reader:
            for group in reader:
                x = np.asarray(getattr(group, self.features), dtype=np.float32)
                y = np.asarray(getattr(group, self.label))
                ids = np.asarray(getattr(group, ROW_ID)) if self.record_ids else None
                if self.shuffle:
                    order = np.random.default_rng((self.seed, epoch, len(y))).permutation(len(y))
                    x, y = x[order], y[order]
                    ids = ids[order] if ids is not None else None
                yield x, y, ids

    def epoch_batches(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Yields one epoch: exactly ``steps`` batches covering the shard once.

        Raises:
            RowLossError: If the reader returned more or fewer rows than the shard holds.
        """
        epoch = self.epoch
        self.epoch += 1
        sizes = self.batch_sizes()
        xs: list[np.ndarray] = []
        ys: list[np.ndarray] = []
        seen_ids: list[np.ndarray] = []
        buffered = 0
        produced = 0
        read = 0
        for x, y, ids in self._row_groups(epoch):
            read += len(y)
            xs.append(x)
            ys.append(y)
            if ids is not None:
                seen_ids.append(ids)
            buffered += len(y)
            while produced < len(sizes) and buffered >= sizes[produced]:
                bx, by = np.concatenate(xs), np.concatenate(ys)
                n = sizes[produced]
                yield bx[:n], by[:n]
                xs, ys = [bx[n:]], [by[n:]]
                buffered -= n
                produced += 1
        if read != self.expected_rows or produced != len(sizes):
            raise RowLossError(
                f"shard {self.rank}/{self.size} of {self.info.url}: epoch {epoch} read {read} rows, "
                f"expected {self.expected_rows}"
            )
        self.epoch_rows.append(read)
        if seen_ids:
            self.epoch_ids.append(np.sort(np.concatenate(seen_ids)))

    def dataset(self):  # -> tf.data.Dataset
        """The shard as a repeating ``tf.data.Dataset`` of ``(features, label)`` batches, prefetched."""
        import tensorflow as tf

        label_dtype = tf.int64 if self.info.num_classes is not None else tf.float32
        signature = (
            tf.TensorSpec(shape=(None, self.info.feature_dim), dtype=tf.float32),
            tf.TensorSpec(shape=(None,), dtype=label_dtype),
        )

        def cast() -> Iterator[tuple[np.ndarray, np.ndarray]]:
            for x, y in self.epoch_batches():
                yield x, y.astype(label_dtype.as_numpy_dtype)

        return tf.data.Dataset.from_generator(cast, output_signature=signature).repeat().prefetch(2)
