"""Every check that can fail on user input, before any trial starts: tracking store, data, model, resources."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from hpo.config import SweepConfig
from hpo.data import (
    PART,
    DatasetInfo,
    MaterialiseRequest,
    data_source,
    describe,
    path_to_url,
    split_dataset,
    url_to_path,
)
from hpo.errors import ConfigError
from hpo.storage import Storage
from hpo.trial.spec import TrialSpec, resolve_model
from hpo.writable import unwritable

#: Sub-directory of the storage (and of the driver's state root) holding the datasets hpo writes.
DATA_DIR = "_data"


def preflight(
    config: SweepConfig, storage: Storage | Path | str, source: str, *, check_tracking: bool = True
) -> TrialSpec:
    """Checks the tracking server, the searcher's needs, the data and the model; returns the trials' spec.

    Args:
        config: The validated sweep.
        storage: Where sweeps live (data hpo writes goes to ``STORAGE/_data``, so every node can read it).
        source: The sweep file, for error messages.
        check_tracking: Check that the MLflow tracking store is reachable (False: ``hpo validate --offline``).

    Raises:
        ConfigError: On the first problem found (one line), or for a config with ``data.partitions``
            (each partition is checked on its own; see :mod:`hpo.partition`).
    """
    from hpo.tracking import check_reachable, normalize_uri

    importlib.import_module("hpo.stack_check").check_stack(source)  # Horovod/Petastorm as the trials need them
    if config.data.partitions:
        raise ConfigError(
            f"{source}: data.partitions: this sweep runs one sweep per partition ({len(config.data.partitions)}); "
            "run it with hpo.tune_partitions() or 'hpo tune', which give one result per partition"
        )
    if check_tracking:
        check_reachable(normalize_uri(config.tracking.mlflow_uri), source)
    _check_writable(config, source)
    extra = config.search.kind.needs
    if extra is not None and importlib.util.find_spec(extra.module) is None:
        raise ConfigError(
            f"{source}: search.algorithm: {config.search.algorithm} needs {extra.module}, which is not installed; "
            f"run '.venv/bin/pip install {extra.install}' or use {extra.instead}"
        )
    train, validation = resolve_data(config, Storage.parse(storage), source)
    _check_batch_and_cache(config, train, source)
    resolve_model(config.model, source)
    return TrialSpec.from_config(config, train, validation)


def _check_batch_and_cache(config: SweepConfig, train: DatasetInfo, source: str) -> None:
    """A step's rows fit in the training set."""
    trial = config.trial
    batch = config.space.get("batch_size_per_worker")
    largest = int(batch.high if batch is not None and batch.high is not None else trial.batch_size_per_worker)
    if largest * trial.workers > train.num_rows:
        key = "space.batch_size_per_worker" if batch is not None else "trial.batch_size_per_worker"
        raise ConfigError(
            f"{source}: {key}: {largest} rows × {trial.workers} workers a step is more than the "
            f"{train.num_rows} training rows; lower it"
        )


def _check_writable(config: SweepConfig, source: str) -> None:
    """The local MLflow store and the reader cache (when enabled) can be written, probed by writing there.

    Each probe creates one file of its own and deletes it again (:func:`hpo.writable.unwritable`).
    """
    from hpo.config.tracking_uri import masked
    from hpo.tracking.uri import local_store_dir, normalize_uri
    from hpo.trial.spec import DEFAULT_CACHE_DIR

    uri = config.tracking.mlflow_uri
    store = local_store_dir(normalize_uri(uri))
    problem = unwritable(store) if store is not None else None
    if problem:
        raise ConfigError(
            f"{source}: tracking.mlflow_uri: {masked(uri)} cannot be written ({problem}); use a writable "
            "directory, e.g. sqlite:///mlflow.db"
        )
    cache = config.data.cache
    if cache.enabled:
        problem = unwritable(cache.dir or DEFAULT_CACHE_DIR)
        if problem and cache.dir:
            raise ConfigError(f"{source}: data.cache.dir: {cache.dir} cannot be written ({problem}); pick a "
                              "writable directory or remove dir")
        if problem:
            raise ConfigError(f"{source}: data.cache.enabled: the default cache directory {DEFAULT_CACHE_DIR} "
                              f"cannot be written ({problem}); set data.cache.dir to a writable directory")


def publish(storage: Storage, url: str, *, keep: bool = False) -> str:
    """A dataset hpo wrote under ``STATE/_data``, copied to the same place in a shared storage.

    Args:
        storage: The sweep storage (a local one is returned as it is).
        url: The ``file://`` URL of the dataset on the driver.
        keep: The dataset never changes once written (a built-in one): skip the copy if the storage has it.

    Returns:
        The URL every node reads it from.
    """
    if not storage.shared:
        return url
    rel = url_to_path(url).relative_to(storage.state_root).parts
    if keep and storage.holds(*rel, PART):
        return storage.url(*rel)
    return storage.upload_dir(url_to_path(url), *rel)


def check_fits_cluster(spec: TrialSpec, source: str, local: bool, storage: Storage | None = None) -> None:
    """Checks, once Ray is up, that a trial fits the cluster and that every node sees the storage and data.

    The fit counts the nodes there are and those the autoscaler can launch; the storage and data are
    probed only on a cluster hpo connected to (``--address``) that has several nodes.

    Raises:
        ConfigError: If the trial can never be scheduled, or a node cannot see the storage or data.
    """
    from hpo.cluster import check_storage_shared, check_trial_fits_cluster
    from hpo.trial.driver import worker_bundle

    check_trial_fits_cluster(worker_bundle(spec), spec.workers, source=source, local=local)
    if not local and storage is not None:
        data = [("data.train", spec.train.url), ("data.validation", spec.validation.url)]
        check_storage_shared(storage, data, source)


def resolve_data(config: SweepConfig, storage: Storage | Path | str, source: str) -> tuple[DatasetInfo, DatasetInfo]:
    """Materialises data hpo writes itself (built-in data), splits off validation if needed, checks both datasets.

    Data hpo writes itself is written on the driver (``STATE/_data``) and, for a shared storage, copied to
    ``STORAGE/_data`` so that the workers of every node read the same files. Which source a ``data.train``
    value is of, and what it writes, is its :class:`~hpo.data.DataSource`.

    Raises:
        ConfigError: For a missing path, missing columns or an unusable dataset.
    """
    d = config.data
    storage = Storage.parse(storage)
    data_root = storage.state_root / DATA_DIR
    kind = data_source(d.train)
    if kind is not None and kind.writes_its_own:
        request = MaterialiseRequest(d.train, data_root, d.validation_fraction, config.search.seed or 0, source)
        made = kind.materialiser()(request)
        train_url, val_url = (publish(storage, url, keep=True) for url in (made.train, made.validation))
    elif d.validation:
        train_url, val_url = d.train, d.validation
    else:
        describe(d.train, features=d.features, label=d.label, task=d.task, source=source, key="data.train")
        dest = data_root / config.name
        train_url, val_url = split_dataset(
            d.train,
            path_to_url(dest / "train"),
            path_to_url(dest / "validation"),
            d.validation_fraction,
            config.search.seed or 0,
            source,
        )
        train_url, val_url = (publish(storage, url) for url in (train_url, val_url))
    kw = {"features": d.features, "label": d.label, "task": d.task, "source": source}
    train = describe(train_url, key="data.train", **kw)
    validation = describe(val_url, key="data.validation", **kw)
    if train.input_shape != validation.input_shape:
        raise ConfigError(
            f"{source}: data.validation: features of shape {list(validation.input_shape)}, but train has "
            f"{list(train.input_shape)}; use datasets written with the same columns"
        )
    if train.num_classes is not None and validation.num_classes is not None:
        classes = max(train.num_classes, validation.num_classes)
        train = DatasetInfo(**{**train.__dict__, "num_classes": classes})
    workers = config.trial.workers
    for info, key in ((train, "data.train"), (validation, "data.validation")):
        if len(info.row_group_rows) < workers:
            raise ConfigError(
                f"{source}: {key}: {len(info.row_group_rows)} row groups cannot be sharded over "
                f"{workers} workers; rewrite it with 'hpo data convert' or use fewer workers"
            )
    return train, validation
