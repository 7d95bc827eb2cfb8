"""Typed sweep configuration: the only place that reads a sweep YAML file.

Every model is frozen and forbids unknown keys. Validation errors become one-line
:class:`~hpo.errors.ConfigError` messages of the form ``file: key: problem; fix``.
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from hpo.errors import ConfigError

_MODEL_REF = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")
_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
_URL_SCHEMES = ("file://", "s3://", "gs://", "gcs://", "hdfs://", "builtin:")


class _Model(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class CacheConfig(_Model):
    """Petastorm's local-disk cache on each node, kept across the trials of a sweep (opt-in)."""

    enabled: bool = False
    size_limit_mb: int = Field(default=2048, ge=1)
    dir: str | None = None


def _check_url(value: str | None) -> str | None:
    if value is not None and not value.startswith(_URL_SCHEMES):
        raise ValueError(f"'{value}' is not a dataset URL; use file:///abs/path, s3://bucket/path or builtin:digits")
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
    if not label or not _NAME.match(label):
        raise ValueError(f"cannot derive a partition name from '{url}'; name it: partitions: {{NAME: {url}}}")
    return label


class PartitionData(_Model):
    """One partition of a partitioned sweep (``data.partitions``): its training and validation data."""

    train: str
    validation: str | None = None

    @field_validator("train", "validation")
    @classmethod
    def _url(cls, value: str | None) -> str | None:
        return _check_url(value)


class DataConfig(_Model):
    """Where the training data is and how to read it.

    Either ``train`` (one sweep) or ``partitions`` (one sweep per partition: name → URL, or a list of URLs
    named after their last path component, or name → ``{train, validation}``); every other key applies to
    each partition.
    """

    train: str | None = None
    validation: str | None = None
    validation_fraction: float = Field(default=0.2, gt=0, lt=1)
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
                if not isinstance(label, str) or not _NAME.match(label):
                    raise ValueError(
                        f"'{label}' is not a valid partition name; use letters, digits, '-', '_' or '.'"
                    )
            return {k: {"train": v} if isinstance(v, str) else v for k, v in value.items()}
        return value

    @model_validator(mode="after")
    def _train_or_partitions(self) -> DataConfig:
        if self.partitions is None:
            if self.train is None:
                raise _KeyedError("data.train", "required key is missing; add it (or list data.partitions)")
            return self
        if not self.partitions:
            raise _KeyedError("data.partitions", "must not be empty; map at least one name to a data URL")
        if self.train is not None:
            raise _KeyedError(
                "data.partitions",
                "set either data.train (one sweep) or data.partitions (one sweep per partition), not both; "
                "remove one",
            )
        if self.validation is not None:
            raise _KeyedError(
                "data.validation",
                "one validation set for all partitions is not supported; give each its own "
                "(partitions: {NAME: {train: URL, validation: URL}}) or remove it to split validation_fraction off",
            )
        return self


class ObjectiveConfig(_Model):
    """The metric the sweep optimises."""

    metric: str = "val_accuracy"
    mode: Literal["max", "min"] = "max"
    #: Stop the whole sweep as soon as one epoch of a trial reaches this value (at least it for ``max``, at
    #: most it for ``min``), like Katib's objective goal; None: run the whole budget.
    goal: float | None = None


class SearchConfig(_Model):
    """The search algorithm and its budget."""

    algorithm: Literal["optuna-tpe", "optuna-gp", "random", "grid"] = "optuna-tpe"
    num_samples: int = Field(default=8, ge=1)
    max_concurrent: int = Field(default=2, ge=1)
    seed: int | None = None
    repeats: int = Field(default=1, ge=1)
    time_budget_s: float | None = Field(default=None, gt=0)
    #: The most trials the sweep runs (each repeat and warm-start re-evaluation is a trial); None: no cap.
    max_trials: int | None = Field(default=None, ge=1)
    #: Random trials before TPE / GP start modelling (Optuna's ``n_startup_trials``); None: Optuna's 10.
    startup_trials: int | None = Field(default=None, ge=1)


class SchedulerConfig(_Model):
    """The early-stopping scheduler (ASHA by default)."""

    type: Literal["asha", "hyperband", "median", "fifo"] = "asha"
    grace_period: int = Field(default=1, ge=1)
    reduction_factor: float = Field(default=2.0, gt=1)
    #: ASHA only: a trial reaching a rung below ``max_epochs`` stops there while fewer than this many trials
    #: reached that rung before it (Optuna's ``bootstrap_count``). 0: Tune's ASHA, where the first trial at a
    #: rung has nothing to be compared with and always continues.
    bootstrap_count: int = Field(default=0, ge=0)


class EarlyStoppingConfig(_Model):
    """Keras EarlyStopping inside each trial (best weights are restored)."""

    patience: int = Field(default=3, ge=0)
    min_delta: float = Field(default=0.0, ge=0)


class TrialConfig(_Model):
    """How one trial runs: workers, resources, epochs, batch and learning-rate rules."""

    workers: int = Field(default=2, ge=1)
    cpus_per_worker: float = Field(default=1.0, gt=0)
    gpus_per_worker: float = Field(default=0.0, ge=0)
    max_epochs: int = Field(default=10, ge=1)
    batch_size_per_worker: int = Field(default=32, ge=1)
    lr_scaling: Literal["linear", "sqrt", "none"] = "linear"
    early_stopping: EarlyStoppingConfig = EarlyStoppingConfig()
    loss: str | None = None
    metrics: list[str] | None = None
    optimizer: str = "adam"
    learning_rate: float = Field(default=1e-3, gt=0)
    reference_batch_size: int | None = Field(default=None, ge=1)
    max_failures: int = Field(default=1, ge=0)
    #: CPU workers with whole CPUs claim that many free cores of their node and run only on them.
    pin_cpus: bool = True

    @field_validator("gpus_per_worker")
    @classmethod
    def _gpu_fraction(cls, value: float) -> float:
        if value > 1 and value != int(value):
            raise ValueError(f"{value} GPUs per worker is neither a fraction nor a whole number; use e.g. 0.5 or 2")
        return value


class TrackingConfig(_Model):
    """Where results are logged."""

    mlflow_uri: str = "sqlite:///mlflow.db"
    experiment: str | None = None


class ParamSpec(_Model):
    """One searched parameter."""

    type: Literal["float", "int", "categorical", "grid"]
    low: float | None = None
    high: float | None = None
    log: bool = False
    step: float | None = Field(default=None, gt=0)
    choices: list[Any] | None = None
    values: list[Any] | None = None
    when: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _check(self) -> ParamSpec:
        if self.type in ("float", "int"):
            if self.low is None or self.high is None:
                raise ValueError(f"a {self.type} parameter needs low and high; add both")
            if not self.low < self.high:
                raise ValueError(f"low ({self.low:g}) must be < high ({self.high:g}); swap them")
            if self.log and self.low <= 0:
                raise ValueError(f"log scale needs low > 0 (got {self.low:g}); raise low or set log: false")
            if self.log and self.step is not None:
                raise ValueError("step and log cannot be combined; drop one of them")
            if self.type == "int" and (self.low != int(self.low) or self.high != int(self.high)):
                raise ValueError("an int parameter needs whole-number low and high; round them")
            if self.choices is not None or self.values is not None:
                raise ValueError(f"a {self.type} parameter takes low/high, not choices/values; remove them")
        elif self.type == "categorical":
            if not self.choices:
                raise ValueError("a categorical parameter needs a non-empty list under choices; add it")
        elif not self.values:
            raise ValueError("a grid parameter needs a non-empty list under values; add it")
        return self


class SweepConfig(_Model):
    """A whole sweep, as written in a sweep file (see the README and docs/)."""

    name: str
    model: str
    data: DataConfig
    objective: ObjectiveConfig = ObjectiveConfig()
    search: SearchConfig = SearchConfig()
    scheduler: SchedulerConfig = SchedulerConfig()
    trial: TrialConfig = TrialConfig()
    tracking: TrackingConfig = TrackingConfig()
    space: dict[str, ParamSpec] = Field(min_length=1)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not _NAME.match(value):
            raise ValueError(f"'{value}' is not a valid sweep name; use letters, digits, '-', '_' or '.'")
        return value

    @field_validator("model")
    @classmethod
    def _model_ref(cls, value: str) -> str:
        if not _MODEL_REF.match(value):
            raise ValueError(f"'{value}' is not 'package.module:function'; write e.g. hpo.models.mlp:build")
        return value

    @model_validator(mode="after")
    def _cross_checks(self) -> SweepConfig:
        algorithm = self.search.algorithm
        grid = [k for k, p in self.space.items() if p.type == "grid"]
        if grid and algorithm != "grid":
            raise _KeyedError(
                f"space.{grid[0]}",
                f"grid parameters need search.algorithm: grid (not {algorithm}); "
                "set it, or make the parameter categorical",
            )
        if algorithm == "grid":
            points = self.grid_size
            if self.search.num_samples % points:
                raise _KeyedError(
                    "search.num_samples",
                    f"{self.search.num_samples} is not a multiple of the grid's {points} points; "
                    f"use {points} (each point once) or a multiple of it",
                )
            if self.search.repeats != 1:
                raise _KeyedError(
                    "search.repeats",
                    "repeats are not supported with grid search; "
                    "list the point several times via num_samples, or use random",
                )
        search = self.search
        if search.max_trials is not None and search.max_trials % search.repeats:
            raise _KeyedError(
                "search.max_trials",
                f"{search.max_trials} is not a multiple of search.repeats ({search.repeats}): a configuration "
                f"would run fewer repeats than asked; use a multiple of {search.repeats}",
            )
        if search.startup_trials is not None and algorithm not in ("optuna-tpe", "optuna-gp"):
            raise _KeyedError(
                "search.startup_trials",
                f"only optuna-tpe and optuna-gp have random start-up trials (not {algorithm}); remove it",
            )
        if self.scheduler.bootstrap_count and self.scheduler.type != "asha":
            raise _KeyedError(
                "scheduler.bootstrap_count",
                f"only the asha scheduler has it (not {self.scheduler.type}); remove it or use type: asha",
            )
        for name, spec in self.space.items():
            for parent, value in (spec.when or {}).items():
                other = self.space.get(parent)
                if other is None or other.type not in ("categorical", "grid"):
                    raise _KeyedError(
                        f"space.{name}.when",
                        f"'{parent}' is not a categorical parameter of the space; condition on a categorical parameter",
                    )
                allowed = other.choices or other.values or []
                wanted = value if isinstance(value, list) else [value]
                if not set(map(str, wanted)) <= set(map(str, allowed)):
                    raise _KeyedError(
                        f"space.{name}.when", f"{value!r} is not a choice of '{parent}' ({allowed}); use one of them"
                    )
                if algorithm == "grid":
                    raise _KeyedError(
                        f"space.{name}.when",
                        "conditional parameters are not supported with grid search; use optuna-tpe or random",
                    )
        metric = self.objective.metric
        known = {"loss", *(self.trial.metrics or default_metrics(self.data.task))}
        base = metric[4:] if metric.startswith("val_") else metric
        if base not in known:
            raise _KeyedError(
                "objective.metric",
                f"'{metric}' is not logged by the trial (known: "
                f"{', '.join(sorted('val_' + k for k in known))}); pick one or add it to trial.metrics",
            )
        return self

    @property
    def grid_size(self) -> int:
        """Points in the grid (grid parameters, and categoricals under ``algorithm: grid``) crossed."""
        size = 1
        for spec in self.space.values():
            if spec.type == "grid" or (self.search.algorithm == "grid" and spec.type == "categorical"):
                size *= len(spec.values or spec.choices or [])
        return size

    @property
    def loss(self) -> str:
        """The Keras loss name, defaulted by task."""
        if self.trial.loss:
            return self.trial.loss
        return "sparse_categorical_crossentropy" if self.data.task == "classification" else "mse"

    @property
    def metrics(self) -> list[str]:
        """The Keras metric names, defaulted by task."""
        return list(self.trial.metrics or default_metrics(self.data.task))


class _KeyedError(ValueError):
    """A cross-field error that knows which key it is about."""

    def __init__(self, key: str, message: str) -> None:
        super().__init__(message)
        self.key = key


def default_metrics(task: str) -> list[str]:
    """Returns the metrics a trial logs when the sweep file names none."""
    return ["accuracy"] if task == "classification" else ["mae"]


def _key(loc: tuple[Any, ...]) -> str:
    return ".".join(str(part) for part in loc) or "(top level)"


def _format(source: str, err: dict[str, Any]) -> str:
    loc = tuple(p for p in err["loc"] if not (isinstance(p, str) and p.startswith(("function-", "list["))))
    key = _key(loc)
    kind = err["type"]
    ctx_error = (err.get("ctx") or {}).get("error")
    if isinstance(ctx_error, _KeyedError):
        return f"{source}: {ctx_error.key}: {ctx_error}"
    if kind == "extra_forbidden":
        return f"{source}: {key}: unknown key; remove it or check its spelling"
    if kind == "missing":
        return f"{source}: {key}: required key is missing; add it"
    if kind == "literal_error":
        expected = err["ctx"]["expected"]
        return f"{source}: {key}: {err['input']!r} is not allowed; use one of {expected}"
    if kind == "value_error":
        return f"{source}: {key}: {err['msg'].removeprefix('Value error, ')}"
    if kind in ("greater_than", "greater_than_equal", "less_than", "less_than_equal"):
        return f"{source}: {key}: {err['input']!r} is out of range ({err['msg'].lower()}); change it"
    if kind == "too_short":
        return f"{source}: {key}: must not be empty; add at least one entry"
    return f"{source}: {key}: {err['msg'].lower()} (got {err.get('input')!r}); fix the value"


def parse_sweep(data: Any, source: str = "<sweep>") -> SweepConfig:
    """Validates a sweep given as a mapping.

    Args:
        data: The parsed YAML document.
        source: The file name to put in error messages.

    Returns:
        The validated configuration.

    Raises:
        ConfigError: On any problem, with a one-line message.
    """
    if not isinstance(data, dict):
        raise ConfigError(
            f"{source}: (top level): expected a mapping of keys, got {type(data).__name__}; "
            "start from search_spaces/digits_mlp.yaml"
        )
    try:
        return SweepConfig.model_validate(data)
    except ValidationError as exc:
        raise ConfigError(_format(source, exc.errors()[0])) from None


def read_yaml(path: str | Path) -> Any:
    """Reads a YAML file (sweep or cluster file): the one place hpo parses YAML.

    Raises:
        ConfigError: If the file is missing or is not valid YAML (one line, with the line number).
    """
    path = Path(path)
    source = str(path)
    if not path.is_file():
        raise ConfigError(f"{source}: (file): no such file; check the path")
    try:
        return yaml.safe_load(path.read_text())
    except yaml.YAMLError as exc:
        mark = getattr(exc, "problem_mark", None)
        where = f"line {mark.line + 1}" if mark else "(file)"
        problem = getattr(exc, "problem", exc)
        raise ConfigError(f"{source}: {where}: not valid YAML ({problem}); fix the syntax") from None


def load_sweep(path: str | Path, overrides: dict[str, Any] | None = None) -> SweepConfig:
    """Reads and validates a sweep file.

    Args:
        path: Path of the YAML sweep file.
        overrides: Dotted keys to replace before validation, e.g. ``{"search.num_samples": 4}``.

    Returns:
        The validated configuration.

    Raises:
        ConfigError: If the file is missing, is not YAML, or does not validate.
    """
    data = read_yaml(path)
    source = str(path)
    if isinstance(data, dict):
        for dotted, value in (overrides or {}).items():
            apply_override(data, dotted, value)
    return parse_sweep(data, source)


def apply_override(data: dict[str, Any], dotted: str, value: Any) -> None:
    """Sets ``data[a][b] = value`` for ``dotted == "a.b"``, creating mappings on the way."""
    *parents, last = dotted.split(".")
    node = data
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
