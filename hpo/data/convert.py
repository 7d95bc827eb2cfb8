"""``hpo data convert``: CSV, Parquet, ``.npz`` files or in-memory objects → hpo datasets.

Layout of what is written under ``DEST``:

- plain: ``DEST`` is the dataset;
- ``validation_fraction``: ``DEST/train`` and ``DEST/validation``;
- ``split_by=COL``: ``DEST/COL=VALUE`` per value (each with ``train``/``validation`` when splitting).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

from hpo.data.checks import Task, check_table
from hpo.data.fs import path_to_url, url_to_path
from hpo.data.info import DatasetInfo, describe
from hpo.data.place import check_destination, staged
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
    if suffix not in (".csv", ".parquet", ".pq", ".npz"):
        raise ConfigError(f"{src}: (file): unsupported format '{suffix}'; convert a .csv, .parquet or .npz file")
    if src.is_dir() or src.stat().st_size == 0:
        raise ConfigError(f"{src}: (file): {'a directory' if src.is_dir() else 'empty'}; pass a file with a header "
                          "and rows")
    try:
        if suffix == ".csv":
            return pd.read_csv(src)
        if suffix in (".parquet", ".pq"):
            return pd.read_parquet(src)
        loaded = np.load(src, allow_pickle=False)
        if not isinstance(loaded, np.lib.npyio.NpzFile):
            raise ValueError("a single .npy array, not an archive of named arrays")
        with loaded as npz:
            return {k: npz[k] for k in npz.files}
    except UnicodeDecodeError:
        raise ConfigError(f"{src}: (file): not UTF-8 text; save the CSV as UTF-8") from None
    except pd.errors.EmptyDataError:
        raise ConfigError(f"{src}: (file): no columns in the file; pass a CSV with a header and rows") from None
    except (ValueError, OSError, AttributeError, pd.errors.ParserError) as exc:
        kind = {".csv": "a CSV table", ".npz": "an .npz archive (numpy.savez)"}.get(suffix, "a Parquet file")
        reason = str(exc).strip().splitlines()[0][:200] if str(exc).strip() else type(exc).__name__
        raise ConfigError(f"{src}: (file): not readable as {kind} ({reason}); check the file and its extension") \
            from None


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
    overwrite: bool = False,
    task: Task = "auto",
    drop_nonnumeric: bool = False,
    encode_labels: bool = False,
    warn: Callable[[str], None] | None = None,
) -> list[DatasetInfo]:
    """Converts a table or arrays into one or more hpo datasets.

    The data is checked first (:mod:`hpo.data.checks`), then written beside ``DEST`` and renamed into place
    at the end (:mod:`hpo.data.place`: files hpo did not write are never replaced or removed).

    Args:
        src: A ``.csv``, ``.parquet`` or ``.npz`` path, or a DataFrame or mapping of arrays. A table's numeric
            columns other than ``label`` (and ``split_by``) become the features; an npz keeps its shape.
        dest_url: Destination ``file://`` URL.
        label: Name of the label column.
        features_column: Name of the features column to write (and to look for in an npz).
        validation_fraction: Write ``train``/``validation`` datasets, this share of rows (seeded) in validation.
        split_by: Write one dataset per value of this column (``DEST/COL=VALUE``).
        seed: Seed of the train/validation split (0 or more).
        overwrite: Replace ``DEST`` if it already holds an hpo dataset tree.
        task: ``classification``, ``regression`` or ``auto`` (non-negative integer labels: classification).
        drop_nonnumeric: Leave text feature columns out (each named through ``warn``) instead of failing.
        encode_labels: Number the distinct labels 0..k-1 (kept, in order, in ``DEST/_hpo_dataset.json``).
        warn: Receives one line per warning (None: warnings are not shown).

    Returns:
        The descriptions of the written datasets.

    Raises:
        ConfigError: Unreadable source, data hpo cannot train on, bad options, or a destination it may not use.
    """
    is_file = isinstance(src, (str, Path))
    where = str(src) if is_file else dest_url
    root = url_to_path(dest_url)
    check_destination(root, [Path(src)] if is_file else [], overwrite, where)
    _check_options(where, seed, validation_fraction)
    data = load_source(src) if is_file else src
    n = _num_rows(data, label, where)
    checked = check_table(data, label, where, task=task, drop_nonnumeric=drop_nonnumeric, encode_labels=encode_labels,
                          skip=(split_by,) if split_by else (), warn=warn)
    data = _with_row_ids(checked.data, n)
    groups = _split_groups(data, split_by, label, where) if split_by is not None else [("", data)]
    written: list[Path] = []
    with staged(root, where, {"task": checked.task, "label_classes": checked.classes}) as stage:
        for name, part in groups:
            if validation_fraction is None:
                written.append(_write(part, stage, Path(name), label, features_column, where))
            else:
                written += _write_train_validation(part, stage, Path(name), label, features_column,
                                                   validation_fraction, seed, where)
    return [describe(path_to_url(root / rel), features=features_column, label=label, task=checked.task)
            for rel in written]


def _check_options(where: str, seed: int, validation_fraction: float | None) -> None:
    if seed < 0:
        raise ConfigError(f"{where}: --seed: {seed} is negative; use 0 or more")
    if validation_fraction is not None and not 0 < validation_fraction < 1:
        raise ConfigError(f"{where}: --validation-fraction: {validation_fraction} is not between 0 and 1; use e.g. 0.2")


def _split_groups(data: Any, split_by: str, label: str, where: str) -> list[tuple[str, Any]]:
    """``(COL=VALUE, rows without COL)`` per value of column ``split_by``."""
    columns = list(data) if isinstance(data, dict) else list(data.columns)
    if split_by not in columns or split_by == label:
        raise ConfigError(
            f"{where}: --split-by: column '{split_by}' not found (columns: {', '.join(map(str, columns))}); "
            "pick one other than the label"
        )
    values = np.asarray(data[split_by])
    empty = [i for i, v in enumerate(values) if v is None or str(v).strip() in ("", "nan", "None")]
    if empty:
        raise ConfigError(
            f"{where}: --split-by: column '{split_by}' has {len(empty)} empty value(s) (first: row {empty[0]}); "
            "fill them or drop those rows"
        )
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
    part: Any, stage: Path, rel: Path, label: str, features_column: str, fraction: float, seed: int, where: str
) -> list[Path]:
    """Writes ``rel/train`` and ``rel/validation`` under ``stage``, ``fraction`` of the rows (seeded) in validation."""
    rows = _num_rows(part, label, where)
    order = np.random.default_rng(seed).permutation(rows)
    n_val = round(rows * fraction)
    if n_val < 1 or n_val >= rows:
        name = str(rel) if str(rel) != "." else ""
        raise ConfigError(
            f"{where}: --validation-fraction: {fraction} of {rows} rows leaves an empty "
            f"{'validation' if n_val < 1 else 'training'} set{f' in {name}' if name else ''}; change it"
        )
    return [
        _write(_rows(part, np.sort(order[n_val:])), stage, rel / "train", label, features_column, where),
        _write(_rows(part, np.sort(order[:n_val])), stage, rel / "validation", label, features_column, where),
    ]


def _write(data: Any, stage: Path, rel: Path, label: str, features_column: str, where: str) -> Path:
    """Writes one dataset at ``stage/rel``; returns ``rel``."""
    write_dataset(data, path_to_url(stage / rel), label=label, features_column=features_column, source=where)
    return rel
