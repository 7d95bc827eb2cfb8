"""The sections of a sweep file (``data``, ``objective``, ``search``, ``scheduler``, ``trial``, ``tracking``).

Every model is frozen and forbids unknown keys.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from hpo import kinds
from hpo.config.keras_names import LOSSES, METRICS, OPTIMIZERS, unknown
from hpo.config.tracking_uri import check_tracking_uri
from hpo.data.sources import data_source, url_problem

NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
#: The largest whole number any integer key (or an int parameter's range) takes.
INT_MAX = 2**31


class KeyedError(ValueError):
    """A cross-field error that knows which key it is about."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


class KeyedErrors(ValueError):
    """Several cross-field errors found together: each becomes its own line."""

    def __init__(self, errors: list[KeyedError]) -> None:
        super().__init__("; ".join(f"{e.key}: {e}" for e in errors))
        self.errors = errors


def registered(value: Any, registry: dict[str, Any]) -> str:
    """``value`` if it names a registered kind (:mod:`hpo.kinds`), else the error listing the kinds."""
    if not isinstance(value, str) or value not in registry:
        raise ValueError(f"{value!r} is not allowed; use one of {kinds.choices(registry)}")
    return value


def default_metrics(task: str) -> list[str]:
    """Returns the metrics a trial logs when the sweep file names none."""
    return ["accuracy"] if task == "classification" else ["mae"]


class FrozenModel(BaseModel):
    """Base of every sweep-file model: frozen, unknown keys are errors."""

    model_config = ConfigDict(extra="forbid", frozen=True, allow_inf_nan=False)


class CacheConfig(FrozenModel):
    """What each node keeps on its own disk: a copy of a remote dataset, and Petastorm's row-group cache.

    ``local_copy`` (default on): a remote (``s3://``, ``gs://``) dataset of at most ``size_limit_mb`` is
    copied once to each node and every epoch reads the copy (no object-storage read per epoch, so a
    stalled store delays no epoch). ``enabled`` (opt-in): Petastorm's row-group cache, kept across the
    trials of a sweep, for what is read from the storage.
    """

    enabled: bool = False
    local_copy: bool = True
    size_limit_mb: int = Field(default=2048, ge=1, le=INT_MAX, strict=True)
    dir: str | None = None


def _check_url(value: str | None) -> str | None:
    """A ``data:`` value some data source recognises (:mod:`hpo.data.sources`)."""
    problem = url_problem(value) if value is not None else None
    if problem:
        raise ValueError(problem)
    return value


def partition_label(url: str) -> str:
    """The partition name a bare data URL gets: its last path component, ``KEY=VALUE`` giving ``VALUE``.

    ``file:///data/eu`` → ``eu``; ``s3://b/sales/region=us/`` → ``us``; ``file:///d/fr.parquet`` → ``fr``.

    Raises:
        ValueError: If no usable name can be derived (the caller names the partition then).
    """
    last = url.rstrip("/").rsplit("/", 1)[-1].split(":")[-1]
    last = last.removesuffix(".parquet").rsplit("=", 1)[-1]
    label = re.sub(r"[^A-Za-z0-9_.-]+", "-", last).strip("-.")
    if not label or not NAME.match(label):
        raise ValueError(f"cannot derive a partition name from '{url}'; name it: partitions: {{NAME: {url}}}")
    return label


class PartitionData(FrozenModel):
    """One partition of a partitioned sweep (``data.partitions``): its training and validation data."""

    train: str
    validation: str | None = None

    @field_validator("train", "validation")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        return _check_url(value)


class DataConfig(FrozenModel):
    """Where the training data is and how to read it.

    Either ``train`` (one sweep) or ``partitions`` (one sweep per partition: name → URL, or a list of URLs
    named after their last path component, or name → ``{train, validation}``); every other key applies to
    each partition.
    """

    train: str | None = None
    validation: str | None = None
    validation_fraction: float = Field(default=0.2, gt=0, lt=1, strict=True)
    features: str = "features"
    label: str = "label"
    task: Literal["classification", "regression"] = "classification"
    cache: CacheConfig = CacheConfig()
    partitions: dict[str, PartitionData] | None = None

    @field_validator("train", "validation")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        return _check_url(value)

    @field_validator("partitions", mode="before")
    @classmethod
    def _named_partitions(cls, value: Any) -> Any:
        if isinstance(value, (list, tuple)):
            named: dict[str, Any] = {}
            for url in value:
                if not isinstance(url, str):
                    raise ValueError(f"{url!r} is not a dataset URL; list URLs, or map names to URLs")
                label = partition_label(_check_url(url) or "")
                if label in named:
                    raise ValueError(
                        f"'{named[label]}' and '{url}' both give the partition name '{label}'; "
                        "name them: partitions: {NAME: URL, ...}"
                    )
                named[label] = url
            value = named
        if isinstance(value, dict):
            for label in value:
                if not isinstance(label, str) or not NAME.match(label):
                    raise ValueError(
                        f"'{label}' is not a valid partition name; use letters, digits, '-', '_' or '.'"
                    )
            return {k: {"train": v} if isinstance(v, str) else v for k, v in value.items()}
        return value

    @model_validator(mode="after")
    def _train_or_partitions(self) -> DataConfig:
        if self.partitions is None:
            if self.train is None:
                raise KeyedError("data.train", "required key is missing; add it (or list data.partitions)")
            kind = data_source(self.train)
            if kind is not None and kind.writes_its_own and self.validation is not None:
                raise KeyedError("data.validation", f"{self.train} makes its own validation split "
                                 "(validation_fraction); remove data.validation")
            return self
        if not self.partitions:
            raise KeyedError("data.partitions", "must not be empty; map at least one name to a data URL")
        if self.train is not None:
            raise KeyedError(
                "data.partitions",
                "set either data.train (one sweep) or data.partitions (one sweep per partition), not both; "
                "remove one",
            )
        if self.validation is not None:
            raise KeyedError(
                "data.validation",
                "one validation set for all partitions is not supported; give each its own "
                "(partitions: {NAME: {train: URL, validation: URL}}) or remove it to split validation_fraction off",
            )
        return self


class ObjectiveConfig(FrozenModel):
    """The metric the sweep optimises."""

    metric: str = "val_accuracy"
    mode: Literal["max", "min"] = "max"
    #: Stop the whole sweep as soon as one epoch of a trial reaches this value (at least it for ``max``, at
    #: most it for ``min``), like Katib's objective goal; None: run the whole budget.
    goal: float | None = Field(default=None, ge=-1e12, le=1e12, strict=True)


class SearchConfig(FrozenModel):
    """The search algorithm and its budget."""

    #: A searcher kind of :data:`hpo.kinds.SEARCHERS`.
    algorithm: str = kinds.DEFAULT_SEARCHER
    num_samples: int = Field(default=8, ge=1, le=INT_MAX, strict=True)
    max_concurrent: int = Field(default=2, ge=1, le=INT_MAX, strict=True)
    seed: int | None = Field(default=None, ge=0, le=2**32 - 1, strict=True)
    repeats: int = Field(default=1, ge=1, le=INT_MAX, strict=True)
    time_budget_s: float | None = Field(default=None, gt=0, le=366 * 86400, strict=True)
    #: The most trials the sweep runs (each repeat and warm-start re-evaluation is a trial); None: no cap.
    max_trials: int | None = Field(default=None, ge=1, le=INT_MAX, strict=True)
    #: Random trials before TPE / GP start modelling (Optuna's ``n_startup_trials``); None: Optuna's 10.
    startup_trials: int | None = Field(default=None, ge=1, le=INT_MAX, strict=True)
    #: TPE / GP only: the share of trials proposed at random instead of by the model (BOHB's
    #: ``random_fraction``, SMAC's random interleaving); 0: every trial after the start-up ones is modelled;
    #: None: the searcher's default (:attr:`hpo.kinds.SearcherKind.random_fraction`; :attr:`random_share`).
    random_fraction: float | None = Field(default=None, ge=0, lt=1, strict=True)
    #: TPE / GP only: the first this many trials are never proposed at random (``random_fraction`` applies
    #: from trial number ``random_after`` on), so a short sweep is the model's alone; 0: from the first trial;
    #: None: the searcher's default (:attr:`hpo.kinds.SearcherKind.random_after`; :attr:`random_start`).
    random_after: int | None = Field(default=None, ge=0, le=INT_MAX, strict=True)
    #: TPE / GP only: the model learns from the trials compared at one budget, the largest epoch enough trials
    #: reached (as BOHB), not from finished trials ranked above stopped ones (:mod:`hpo.search.matched`);
    #: None: on for TPE and GP (chosen on the search benchmark, docs/search-benchmark.md), false: Optuna's own ranking.
    match_budget: bool | None = Field(default=None, strict=True)
    #: The sweep whose best configurations this one re-runs with new seeds (set by ``hpo repeat``).
    repeat_of: str | None = Field(default=None, min_length=1, max_length=200)

    @field_validator("algorithm", mode="before")
    @classmethod
    def _algorithm(cls, value: Any) -> str:
        return registered(value, kinds.SEARCHERS)

    @property
    def kind(self) -> kinds.SearcherKind:
        """What the algorithm is (:class:`hpo.kinds.SearcherKind`)."""
        return kinds.searcher(self.algorithm)

    @property
    def random_share(self) -> float:
        """The share of trials proposed at random: ``random_fraction``, else the searcher's default."""
        return self.kind.random_fraction if self.random_fraction is None else self.random_fraction

    @property
    def random_start(self) -> int:
        """The first trial number that may be random: ``random_after``, else the searcher's default."""
        return self.kind.random_after if self.random_after is None else self.random_after

    @property
    def budget_matched(self) -> bool:
        """True where the model learns from trials compared at one budget (``match_budget``, on where unset).

        False for a searcher that does not model its proposals (random, grid).
        """
        return self.kind.startup_trials and self.match_budget is not False

    def resolved(self) -> dict[str, Any]:
        """The keys a sweep file may leave to the searcher, as this sweep runs them (what MLflow logs).

        ``random_fraction``, ``random_after`` and ``match_budget`` of a searcher that models its proposals, with
        the searcher's defaults filled in; a searcher that does not keeps them as the file has them (unset).
        """
        if not self.kind.startup_trials:
            return {}
        return {"random_fraction": self.random_share, "random_after": self.random_start,
                "match_budget": self.budget_matched}


class SchedulerConfig(FrozenModel):
    """The early-stopping scheduler (ASHA by default)."""

    #: A scheduler kind of :data:`hpo.kinds.SCHEDULERS`.
    type: str = kinds.DEFAULT_SCHEDULER
    grace_period: int = Field(default=1, ge=1, le=INT_MAX, strict=True)
    reduction_factor: float = Field(default=2.0, gt=1, le=100, strict=True)
    #: ASHA only: a trial reaching a rung below ``max_epochs`` stops there while fewer than this many trials
    #: reached that rung before it (Optuna's ``bootstrap_count``). 0: Tune's ASHA, where the first trial at a
    #: rung has nothing to be compared with and always continues.
    bootstrap_count: int = Field(default=0, ge=0, le=INT_MAX, strict=True)
    #: ASHA only: brackets of Tune's ASHA, bracket ``s`` comparing trials from epoch
    #: ``grace_period * reduction_factor**s`` (each trial joins one, drawn from the sweep's seed).
    brackets: int = Field(default=1, ge=1, le=16, strict=True)

    @field_validator("type", mode="before")
    @classmethod
    def _type(cls, value: Any) -> str:
        return registered(value, kinds.SCHEDULERS)

    @property
    def kind(self) -> kinds.SchedulerKind:
        """What the scheduler is (:class:`hpo.kinds.SchedulerKind`)."""
        return kinds.scheduler(self.type)


class EarlyStoppingConfig(FrozenModel):
    """Keras EarlyStopping inside each trial (best weights are restored)."""

    patience: int = Field(default=3, ge=0, le=INT_MAX, strict=True)
    min_delta: float = Field(default=0.0, ge=0, le=1e6, strict=True)


class TrialConfig(FrozenModel):
    """How one trial runs: workers, resources, epochs, batch and learning-rate rules."""

    workers: int = Field(default=2, ge=1, le=INT_MAX, strict=True)
    cpus_per_worker: float = Field(default=1.0, gt=0, le=1024, strict=True)
    gpus_per_worker: float = Field(default=0.0, ge=0, le=64, strict=True)
    max_epochs: int = Field(default=10, ge=1, le=100_000, strict=True)
    batch_size_per_worker: int = Field(default=32, ge=1, le=2**20, strict=True)
    lr_scaling: Literal["linear", "sqrt", "none"] = "linear"
    early_stopping: EarlyStoppingConfig = EarlyStoppingConfig()
    loss: str | None = None
    metrics: list[str] | None = None
    optimizer: str = "adam"
    learning_rate: float = Field(default=1e-3, gt=0, le=10, strict=True)
    reference_batch_size: int | None = Field(default=None, ge=1, le=INT_MAX, strict=True)
    max_failures: int = Field(default=1, ge=0, le=INT_MAX, strict=True)
    #: CPU workers with whole CPUs claim that many free cores of their node and run only on them.
    pin_cpus: bool = True
    #: Checkpoint every epoch (a failed or paused trial resumes from its last one; while one is still being
    #: written, epochs go on without one). False: only the final checkpoint, with the model.
    checkpoint_every_epoch: bool = True
    #: ``horovod`` trains for real; ``simulated`` replays synthetic learning curves without TensorFlow or
    #: Horovod (tests of search and scheduling; no model is trained or registered).
    backend: Literal["horovod", "simulated"] = "horovod"
    #: Seconds one simulated epoch takes (``backend: simulated`` only).
    simulated_epoch_s: float = Field(default=0.1, gt=0, le=60, strict=True)
    #: ``backend: simulated`` only. True: simulated epochs take simulated time, on one clock the sweep's trials
    #: share (every time a report carries is on it; the sweep takes the real time Tune needs for the reports);
    #: False: each epoch sleeps ``simulated_epoch_s`` of real time.
    simulated_clock: bool = True

    @field_validator("optimizer")
    @classmethod
    def _optimizer(cls, value: str) -> str:
        if unknown([value], OPTIMIZERS) is not None:
            raise ValueError(f"'{value}' is not a Keras optimizer; use one of {', '.join(sorted(OPTIMIZERS))}")
        return value

    @field_validator("loss")
    @classmethod
    def _loss(cls, value: str | None) -> str | None:
        if value is not None and unknown([value], LOSSES) is not None:
            raise ValueError(f"'{value}' is not a Keras loss; use e.g. sparse_categorical_crossentropy or mse")
        return value

    @field_validator("metrics")
    @classmethod
    def _metrics(cls, value: list[str] | None) -> list[str] | None:
        bad = unknown(value or [], METRICS)
        if bad is not None:
            raise ValueError(f"'{bad}' is not a Keras metric; use e.g. accuracy, mae or sparse_categorical_accuracy")
        return value

    @field_validator("gpus_per_worker")
    @classmethod
    def _gpu_fraction(cls, value: float) -> float:
        if value > 1 and value != int(value):
            raise ValueError(f"{value} GPUs per worker is neither a fraction nor a whole number; use e.g. 0.5 or 2")
        return value


class CostConfig(FrozenModel):
    """Prices for the cost the progress view estimates (0 everywhere: no cost is shown)."""

    #: Price of one GPU for an hour (every GPU a trial's workers hold counts).
    per_gpu_hour: float = Field(default=0.0, ge=0, le=1e6, strict=True)
    #: Price of one CPU for an hour (every CPU a trial's workers hold counts).
    per_cpu_hour: float = Field(default=0.0, ge=0, le=1e6, strict=True)
    #: Shown before amounts.
    currency: str = Field(default="$", min_length=1, max_length=5)


class TrackingConfig(FrozenModel):
    """Where results are logged."""

    mlflow_uri: str = "sqlite:///mlflow.db"
    experiment: str | None = Field(default=None, min_length=1, max_length=200)

    @field_validator("mlflow_uri")
    @classmethod
    def _uri(cls, value: str) -> str:
        problem = check_tracking_uri(value)
        if problem:
            raise ValueError(problem)
        return value
