"""``hpo data convert``: CSV, Parquet, ``.npz`` files or in-memory objects → hpo datasets.

Layout of what is written under ``DEST``:

- plain: ``DEST`` is the dataset;
- ``validation_fraction``: ``DEST/train`` and ``DEST/validation``;
- ``split_by=COL``: ``DEST/COL=VALUE`` per value (each with ``train``/``validation`` when splitting).
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np

from hpo.data.fs import url_to_path
from hpo.data.info import DatasetInfo, describe
from hpo.data.write import ROW_ID, write_dataset
from hpo.errors import ConfigError

_UNSAFE = re.compile(r"[^A-Za-z0-9_.-]+")


def load_source(src: str | Path) -> Any:
    """Reads a ``.csv``, ``.parquet`` or ``.npz`` file into a DataFrame (or a mapping of arrays for npz)."""
    import pandas as pd

    src = Path(src)
    if not src.exists():
        raise ConfigError(f"{src}: (file): no such file; check the path")
    suffix = src.suffix.lower()
    if suffix == ".csv":
        return pd.read_csv(src)
    if suffix in (".parquet", ".pq"):
        return pd.read_parquet(src)
    if suffix == ".npz":
        with np.load(src, allow_pickle=False) as npz:
            return {k: npz[k] for k in npz.files}
    raise ConfigError(f"{src}: (file): unsupported format '{suffix}'; convert a .csv, .parquet or .npz file")


def _rows(data: Any, index: np.ndarray) -> Any:
    """The rows ``index`` of a DataFrame or of every array of a mapping."""
    if isinstance(data, dict):
        return {k: np.asarray(v)[index] for k, v in data.items()}
    return data.iloc[index].reset_index(drop=True)


def _num_rows(data: Any, label: str, where: str) -> int:
    """Rows of a DataFrame or mapping of arrays, after checking that it has the label."""
    names = [str(k) for k in (data if isinstance(data, dict) else data.columns)]
    if label not in names:
        kind = "array" if isinstance(data, dict) else "column"
        raise ConfigError(
            f"{where}: {label}: label {kind} not found ({kind}s: {', '.join(names)}); pass --label with one of them"
        )
    return len(data[label])


def _with_row_ids(data: Any, n: int) -> Any:
    """Adds ``row_id`` = original row number (kept through splits, so audits refer to the source rows)."""
    if isinstance(data, dict):
        return data if ROW_ID in data else {**data, ROW_ID: np.arange(n, dtype=np.int64)}
    return data if ROW_ID in data.columns else data.assign(**{ROW_ID: np.arange(n, dtype=np.int64)})


def convert(
    src: Any,
    dest_url: str,
    label: str,
    *,
    features_column: str = "features",
    validation_fraction: float | None = None,
    split_by: str | None = None,
    seed: int = 0,
) -> list[DatasetInfo]:
    """Converts a table or arrays into one or more hpo datasets.

    Args:
        src: Path of a ``.csv``, ``.parquet`` or ``.npz`` file, or an object :func:`write_dataset` takes
            (DataFrame or mapping of arrays). In a table every numeric column other than ``label`` (and
            ``split_by``) becomes part of the features vector; an npz keeps its features array's shape.
        dest_url: Destination ``file://`` URL.
        label: Name of the label column.
        features_column: Name of the features column to write (and to look for in an npz).
        validation_fraction: Write ``train``/``validation`` datasets, this share of rows (seeded) in validation.
        split_by: Write one dataset per value of this column (``DEST/COL=VALUE``).
        seed: Seed of the train/validation split.

    Returns:
        The descriptions of the written datasets.

    Raises:
        ConfigError: For a missing file or column, an unsupported format, or a bad fraction.
    """
    where = str(src) if isinstance(src, (str, Path)) else dest_url
    data = load_source(src) if isinstance(src, (str, Path)) else src
    if validation_fraction is not None and not 0 < validation_fraction < 1:
        raise ConfigError(f"{where}: --validation-fraction: {validation_fraction} is not between 0 and 1; use e.g. 0.2")
    n = _num_rows(data, label, where)
    data = _with_row_ids(data, n)
    groups = _split_groups(data, split_by, label, where) if split_by is not None else [("", data)]
    root = url_to_path(dest_url)
    written = []
    for name, part in groups:
        base = root / name if name else root
        if validation_fraction is None:
            written.append(_write(part, base, label, features_column, where))
        else:
            written += _write_train_validation(part, base, name, label, features_column, validation_fraction, seed,
                                               where)
    return written


def _split_groups(data: Any, split_by: str, label: str, where: str) -> list[tuple[str, Any]]:
    """``(COL=VALUE, rows without COL)`` per value of column ``split_by``."""
    columns = list(data) if isinstance(data, dict) else list(data.columns)
    if split_by not in columns or split_by == label:
        raise ConfigError(
            f"{where}: --split-by: column '{split_by}' not found (columns: {', '.join(map(str, columns))}); "
            "pick one other than the label"
        )
    values = np.asarray(data[split_by])
    groups = []
    for value in np.unique(values):
        part = _rows(data, np.flatnonzero(values == value))
        if isinstance(part, dict):
            part = {k: v for k, v in part.items() if k != split_by}
        else:
            part = part.drop(columns=[split_by])
        groups.append((f"{_UNSAFE.sub('_', split_by)}={_UNSAFE.sub('_', str(value))}", part))
    return groups


def _write_train_validation(
    part: Any, base: Path, name: str, label: str, features_column: str, fraction: float, seed: int, where: str
) -> list[DatasetInfo]:
    """Writes ``base/train`` and ``base/validation``, ``fraction`` of the rows (seeded) in validation."""
    rows = _num_rows(part, label, where)
    order = np.random.default_rng(seed).permutation(rows)
    n_val = round(rows * fraction)
    if n_val < 1 or n_val >= rows:
        raise ConfigError(
            f"{where}: --validation-fraction: {fraction} of {rows} rows leaves an empty "
            f"{'validation' if n_val < 1 else 'training'} set{f' in {name}' if name else ''}; change it"
        )
    return [
        _write(_rows(part, np.sort(order[n_val:])), base / "train", label, features_column, where),
        _write(_rows(part, np.sort(order[:n_val])), base / "validation", label, features_column, where),
    ]


def _write(data: Any, dest: Path, label: str, features_column: str, where: str) -> DatasetInfo:
    url = "file://" + str(dest)
    write_dataset(data, url, label=label, features_column=features_column, source=where)
    y = np.asarray(data[label])
    task = "classification" if np.issubdtype(y.dtype, np.integer) and y.min() >= 0 else "regression"
    return describe(url, features=features_column, label=label, task=task)
