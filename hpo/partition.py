"""Partitioned sweeps: one sweep per partition of the data (per region, per dataset), in one command.

Two ways to partition a sweep ``NAME``:

- by URL: ``data.partitions`` in the sweep file (name → URL, a list of URLs, or name →
  ``{train, validation}``), ``hpo tune FILE --partition [NAME=]URL`` (repeated), or
  ``hpo.tune_partitions(..., partitions=...)``; each partition's data is used as given;
- by column: ``hpo tune FILE --partition-by COL`` (or ``partition_by=``) splits ``data.train`` by the
  values of a column and writes each part under ``STORAGE/_data/NAME/COL=VALUE``.

Partition ``P`` becomes the sweep ``NAME-P``, with its own Optuna study, MLflow parent run and
``STORAGE/NAME-P/summary.json``. Every partition is checked (data, model, tracking server) before the
first trial of the first partition starts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import replace
from pathlib import Path

from hpo.config import SweepConfig, partition_label
from hpo.data import data_source, declared_shapes, path_to_url, url_to_path, write_dataset
from hpo.errors import ConfigError
from hpo.options import RunOptions
from hpo.preflight import DATA_DIR, preflight, publish
from hpo.ray_session import start_ray, stop_ray
from hpo.rerun import check_rerun
from hpo.storage import Storage
from hpo.summary import TuneResult
from hpo.sweep import run_sweep

_NAMED = re.compile(r"^([A-Za-z0-9][A-Za-z0-9_.-]*)=(.+)$")


def by_urls(config: SweepConfig) -> list[tuple[str, SweepConfig]]:
    """One sweep per entry of ``data.partitions``, named ``NAME-PARTITION``, in the order listed.

    Returns:
        ``(partition name, config)`` per partition.
    """
    out = []
    for label, part in (config.data.partitions or {}).items():
        data = config.model_dump()
        data["name"] = f"{config.name}-{label}"
        data["data"].update(train=part.train, validation=part.validation, partitions=None)
        out.append((label, SweepConfig.model_validate(data)))
    return out


def by_column(
    config: SweepConfig, column: str, storage: Storage | Path | str, source: str
) -> list[tuple[str, SweepConfig]]:
    """Splits a sweep's data by the values of ``column`` into one sweep per value.

    Each partition gets its own dataset (written under ``STORAGE/_data/NAME/COLUMN=VALUE``), its own name
    (``NAME-VALUE``), and so its own Optuna study, MLflow parent run and ``summary.json``.

    Returns:
        ``(value, config)`` per partition, in value order.

    Raises:
        ConfigError: For built-in data, data.partitions, or a column the dataset does not have.
    """
    import numpy as np
    import pyarrow.parquet as pq

    d = config.data
    storage = Storage.parse(storage)
    if d.partitions or d.train is None:
        raise ConfigError(
            f"{source}: data.partitions: the sweep already lists its partitions; "
            "drop --partition-by (partition_by) or data.partitions"
        )
    kind = data_source(d.train)
    if kind is not None and kind.writes_its_own:
        raise ConfigError(f"{source}: data.train: --partition-by needs a file:// dataset, not {d.train}")
    path = url_to_path(d.train)
    names = pq.read_schema(next(iter(sorted(path.rglob("*.parquet")))) if path.is_dir() else path).names
    if column not in names:
        raise ConfigError(
            f"{source}: data.train: column '{column}' not found (columns: {', '.join(names)}); "
            "pass --partition-by with one of them"
        )
    table = pq.read_table(path, columns=[d.features, d.label, column])
    keys = table.column(column).to_numpy(zero_copy_only=False)
    shape = declared_shapes(table.schema).get(d.features)
    x = np.asarray(table.column(d.features).to_pylist(), dtype=np.float32)
    x = x.reshape(len(x), *shape) if shape else x
    y = table.column(d.label).to_numpy()
    out = []
    for value in sorted(set(keys.tolist()), key=str):
        rows = np.flatnonzero(keys == value)
        url = path_to_url(storage.state_root / DATA_DIR / config.name / f"{column}={value}")
        write_dataset((x[rows], y[rows]), url, features_column=d.features, label=d.label, row_ids=rows)
        url = publish(storage, url)  # a shared storage: every node reads the part from there
        data = config.model_dump()
        data["name"] = f"{config.name}-{value}"
        data["data"].update(train=url, validation=None)
        out.append((str(value), SweepConfig.model_validate(data)))
    return out


def named_urls(values: Sequence[str] | Mapping[str, str], source: str, key: str = "--partition") -> dict[str, str]:
    """Partition name → URL from ``NAME=URL`` or bare ``URL`` strings (named after the last path component).

    ``file:///data/region=eu`` is a bare URL (named ``eu``): a name never holds ``:`` or ``/``. URLs are
    checked later, with the rest of the sweep.

    Args:
        values: What the user passed (a mapping is taken as it is).
        source: The sweep file (for error messages).
        key: The option to name in error messages.

    Raises:
        ConfigError: If a name cannot be derived or two partitions get the same name.
    """
    if isinstance(values, Mapping):
        return {str(k): v for k, v in values.items()}
    out: dict[str, str] = {}
    for value in values:
        match = _NAMED.match(str(value))
        if match:
            label, url = match.groups()
        else:
            url = str(value)
            try:
                label = partition_label(url)
            except ValueError:
                raise ConfigError(
                    f"{source}: {key}: cannot derive a partition name from '{url}'; pass it as NAME=URL"
                ) from None
        if label in out:
            raise ConfigError(
                f"{source}: {key}: '{out[label]}' and '{url}' are both named '{label}'; pass them as NAME=URL"
            )
        out[label] = url
    return out


def split(
    config: SweepConfig, *, partition_by: str | None, storage: Storage, source: str
) -> list[tuple[str, SweepConfig]]:
    """The sweeps of a partitioned sweep: by ``partition_by`` column, else by ``data.partitions``.

    Raises:
        ConfigError: If both or neither are given, or a partition is unusable.
    """
    if partition_by:
        return by_column(config, partition_by, storage, source)
    if not config.data.partitions:
        raise ConfigError(
            f"{source}: data.partitions: nothing to partition; list data.partitions (name: URL), "
            "or pass --partition URL / --partition-by COL"
        )
    return by_urls(config)


def run_partitions(parts: list[tuple[str, SweepConfig]], options: RunOptions, *, source: str) -> dict[str, TuneResult]:
    """Checks every partition, then runs them one after another on one Ray session.

    A warm start from a previous sweep's name seeds partition ``P`` from ``NAME-P`` (a partition of the
    same name); a ``summary.json`` path seeds every partition.

    Args:
        parts: ``(partition name, config)`` pairs, from :func:`split`.
        options: How to run them (one local Ray is shared by all partitions unless ``address`` is set).
        source: The sweep file (for error messages; each names its partition).

    Returns:
        Partition name → its result, in the order run.

    Raises:
        ConfigError: If any partition fails its checks, its name included (before anything runs).
    """
    from hpo.search import previous_best

    checked = []
    for label, config in parts:
        where = f"{source} (partition {label})"
        check_rerun(config.name, options, where)
        warm = options.warm_start.for_partition(label) if options.warm_start else None
        if warm:
            previous_best(warm.summary_path(options.storage), config, warm.k)  # raises if unusable
        checked.append((label, config, where, replace(options, warm_start=warm),
                        preflight(config, options.storage, where)))
    started_ray = start_ray(options.address)
    results: dict[str, TuneResult] = {}
    try:
        for label, config, where, part_options, spec in checked:
            if options.console is not None:
                options.console.print(f"== partition {label}: sweep {config.name}", highlight=False)
            results[label] = run_sweep(config, part_options, source=where, spec=spec)
    finally:
        stop_ray(started_ray)
    return results
