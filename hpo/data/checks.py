"""Checks of a table or arrays before ``hpo data convert`` writes them: what hpo cannot train on is an error.

Every problem is one :class:`~hpo.errors.ConfigError` line naming the source, the column and the fix:
NaN/inf features, NaN or text labels (``encode_labels`` maps text labels to 0..k-1), negative or
fractional labels for classification (``encode_labels`` numbers any labels 0..k-1), a ``row_id`` column
with repeated or non-integer values, and text feature columns (``drop_nonnumeric`` leaves them out, each
named in a warning, instead of failing).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

import numpy as np

from hpo.data.write import ROW_ID
from hpo.errors import ConfigError

Task = Literal["auto", "classification", "regression"]


@dataclass
class Checked:
    """The data to write, and what the checks did to it.

    Attributes:
        data: The table or mapping, label encoded and text columns dropped if asked.
        task: ``classification`` or ``regression``.
        classes: The original labels in code order, when ``encode_labels`` encoded text labels.
        dropped: Text columns left out (``drop_nonnumeric``).
    """

    data: Any
    task: str
    classes: list[str] | None = None
    dropped: list[str] = field(default_factory=list)


def check_table(
    data: Any,
    label: str,
    where: str,
    *,
    task: Task = "auto",
    drop_nonnumeric: bool = False,
    encode_labels: bool = False,
    skip: tuple[str, ...] = (),
    warn: Callable[[str], None] | None = None,
) -> Checked:
    """Checks a DataFrame or a mapping of arrays for what hpo cannot train on.

    Args:
        data: A DataFrame (numeric columns become the features) or a mapping of arrays (npz).
        label: The label column or array.
        where: The source, for error messages.
        task: ``classification``, ``regression`` or ``auto`` (non-negative integer labels: classification).
        drop_nonnumeric: Leave text feature columns out (a warning names each) instead of failing.
        encode_labels: Number the distinct labels (text or numbers, sorted) 0..k-1: a classification task.
        skip: Columns that are neither features nor label (e.g. the ``--split-by`` column).
        warn: Where warnings go (each dropped column is also listed in ``dropped``).

    Returns:
        The checked data and what was done to it.

    Raises:
        ConfigError: One line per the module docstring.
    """
    data, dropped = _drop_text_columns(data, label, where, drop_nonnumeric, skip)
    for name in dropped:
        if warn is not None:
            warn(f"{where}: {name}: text column left out of the features (--drop-nonnumeric)")
    _check_row_ids(data, where)
    _check_features(data, label, where, skip)
    labels, classes = _labels(np.asarray(data[label]), label, where, encode_labels)
    kind = "classification" if classes is not None else _task(labels, label, where, task)
    if classes is not None:
        data = _with_column(data, label, labels)
    return Checked(data, kind, classes, dropped)


def _columns(data: Any) -> list[str]:
    return [str(c) for c in (data if isinstance(data, Mapping) else data.columns)]


def _with_column(data: Any, name: str, values: np.ndarray) -> Any:
    if isinstance(data, Mapping):
        return {**data, name: values}
    return data.assign(**{name: values})


def _is_text(values: np.ndarray) -> bool:
    """A column of strings (a column of arrays, such as a features column, is not text)."""
    if values.dtype.kind in "US":
        return True
    return values.dtype.kind == "O" and any(isinstance(v, str) for v in values[:1000])


def _drop_text_columns(data: Any, label: str, where: str, drop: bool, skip: tuple[str, ...]) -> tuple[Any, list[str]]:
    """Text feature columns of a table: an error, or left out with ``drop`` (mappings keep their arrays)."""
    if isinstance(data, Mapping):
        return data, []
    text = [c for c in data.columns if c not in (label, ROW_ID, *skip) and _is_text(np.asarray(data[c]))]
    if text and not drop:
        sample = data[text[0]].dropna()
        example = f" (e.g. {sample.iloc[0]!r})" if len(sample) else ""
        raise ConfigError(
            f"{where}: {text[0]}: text column{example} cannot be a feature; encode it as numbers, or pass "
            "--drop-nonnumeric to leave it out"
        )
    return (data.drop(columns=text) if text else data), [str(c) for c in text]


def _check_row_ids(data: Any, where: str) -> None:
    if ROW_ID not in _columns(data):
        return
    ids = np.asarray(data[ROW_ID])
    if ids.dtype.kind not in "iu":
        raise ConfigError(f"{where}: {ROW_ID}: values are {ids.dtype}, not integers; remove the column (hpo numbers "
                          "rows itself) or make it integers")
    repeated = len(ids) - len(np.unique(ids))
    if repeated:
        raise ConfigError(f"{where}: {ROW_ID}: {repeated} repeated value(s); remove the column (hpo numbers rows "
                          "itself) or make every value unique")


def _check_features(data: Any, label: str, where: str, skip: tuple[str, ...]) -> None:
    """No NaN or infinite feature value (the first one is named by column and row)."""
    for name in _columns(data):
        if name in (label, ROW_ID, *skip):
            continue
        values = np.asarray(data[name])
        if values.dtype.kind == "O":  # a column of arrays (a features column)
            try:
                values = np.stack([np.asarray(v, dtype=np.float64) for v in values])
            except (TypeError, ValueError):
                continue  # not numbers: write_dataset says so
        if values.dtype.kind not in "fc":
            continue
        bad = ~np.isfinite(values.reshape(len(values), -1)).all(axis=1)
        if bad.any():
            row = int(np.flatnonzero(bad)[0])
            raise ConfigError(f"{where}: {name}: {int(bad.sum())} row(s) with NaN or infinite values (first: row "
                              f"{row}); fill or drop them before converting")


def _labels(y: np.ndarray, label: str, where: str, encode: bool) -> tuple[np.ndarray, list[str] | None]:
    """The labels as numbers: missing ones are an error; text is an error unless ``encode``.

    With ``encode`` the distinct labels (text or numbers), sorted, become classes 0..k-1.
    """
    import pandas as pd

    text = _is_text(y)
    missing = int(pd.isna(y).sum())
    if missing:
        raise ConfigError(f"{where}: {label}: {missing} missing or NaN label(s); drop those rows before converting")
    if y.dtype.kind == "f" and not np.isfinite(y).all():
        raise ConfigError(f"{where}: {label}: {int((~np.isfinite(y)).sum())} infinite label(s); drop those rows "
                          "before converting")
    if text and not encode:
        raise ConfigError(f"{where}: {label}: labels are text (e.g. {y[0]!r}); pass --encode-labels to number "
                          "them 0..k-1, or encode them yourself")
    if not encode:
        return y, None
    values = [str(v) for v in y] if text else list(y)
    classes = sorted(set(values))
    index = {c: i for i, c in enumerate(classes)}
    return np.array([index[v] for v in values], dtype=np.int64), [str(c) for c in classes]


def _task(y: np.ndarray, label: str, where: str, task: Task) -> str:
    """The dataset's task; classification labels must be integers 0..k-1 (integral floats are taken)."""
    integral = y.dtype.kind in "iub" or (y.dtype.kind == "f" and bool(np.all(np.mod(y, 1) == 0)))
    if task == "regression":
        return task
    if task == "auto":
        if y.dtype.kind in "iu" and y.min() < 0:
            raise ConfigError(f"{where}: {label}: integer labels below 0 (min {int(y.min())}); pass --encode-labels "
                              "to number the classes 0..k-1, or --task regression")
        return "classification" if y.dtype.kind in "iub" else "regression"
    if not integral:
        fraction = y[np.flatnonzero(np.mod(y, 1) != 0)[0]]
        raise ConfigError(f"{where}: {label}: classification labels must be whole numbers ({fraction:g} is not); "
                          "pass --encode-labels to number the classes 0..k-1, or --task regression")
    if y.min() < 0:
        raise ConfigError(f"{where}: {label}: classification labels must be 0 or more (min {y.min():g}); pass "
                          "--encode-labels to number the classes 0..k-1")
    return "classification"
