"""The whole sweep file: :class:`SweepConfig` and the checks that span its sections."""

from __future__ import annotations

import re
from collections.abc import Callable

from pydantic import Field, field_validator, model_validator

from hpo import kinds
from hpo.config.keras_names import MOMENTUM_OPTIMIZERS, OPTIMIZERS, unknown
from hpo.config.sections import (
    NAME,
    CostConfig,
    DataConfig,
    FrozenModel,
    KeyedError,
    KeyedErrors,
    ObjectiveConfig,
    SchedulerConfig,
    SearchConfig,
    TrackingConfig,
    TrialConfig,
    default_metrics,
)
from hpo.config.space import ParamSpec, check_conditions, check_trainer_params

_MODEL_REF = re.compile(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$")


class SweepConfig(FrozenModel):
    """A whole sweep, as written in a sweep file (every key: docs/sweep-file.md)."""

    name: str = Field(max_length=100)
    model: str
    data: DataConfig
    objective: ObjectiveConfig = ObjectiveConfig()
    search: SearchConfig = SearchConfig()
    scheduler: SchedulerConfig = SchedulerConfig()
    trial: TrialConfig = TrialConfig()
    tracking: TrackingConfig = TrackingConfig()
    cost: CostConfig = CostConfig()
    space: dict[str, ParamSpec] = Field(min_length=1)

    @field_validator("name")
    @classmethod
    def _name(cls, value: str) -> str:
        if not NAME.match(value):
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
        """Checks that span sections; every one runs, and every problem found is reported (one line each)."""
        errors = check_trainer_params(self.space)
        for check in (_check_grid, _check_search, _check_scheduler_keys, _check_conditions, _check_metric,
                      _check_epochs_and_optimizers, _check_gpus):
            try:
                check(self)
            except KeyedError as exc:
                errors.append(exc)
        if len(errors) == 1:
            raise errors[0]
        if errors:
            raise KeyedErrors(errors)
        return self

    @property
    def grid_size(self) -> int:
        """Points in the grid (grid parameters, and categoricals under a grid searcher) crossed."""
        size = 1
        for spec in self.space.values():
            if spec.is_grid or (self.search.kind.grid and spec.type == "categorical"):
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


def _check_grid(config: SweepConfig) -> None:
    algorithm = config.search.algorithm
    grid = [k for k, p in config.space.items() if p.is_grid]
    if grid and not config.search.kind.grid:
        searchers = kinds.listed((name for name, kind in kinds.SEARCHERS.items() if kind.grid), "or")
        raise KeyedError(
            f"space.{grid[0]}",
            f"grid parameters need search.algorithm: {searchers} (not {algorithm}); set it, or make the parameter "
            "categorical",
        )
    if not config.search.kind.grid:
        return
    if not any(p.is_grid or p.type == "categorical" for p in config.space.values()):
        raise KeyedError(
            "search.algorithm",
            "grid search needs points, but every parameter of space is a range; list values (type: grid) or "
            f"choices for at least one, or use {config.search.kind.instead}",
        )
    points = config.grid_size
    if "num_samples" not in config.search.model_fields_set:  # unset: each point once, whatever the grid's size
        object.__setattr__(config, "search", config.search.model_copy(update={"num_samples": points}))
    if config.search.num_samples % points:
        raise KeyedError(
            "search.num_samples",
            f"{config.search.num_samples} is not a multiple of the grid's {points} points; "
            f"use {points} (each point once) or a multiple of it",
        )
    if config.search.repeats != 1:
        raise KeyedError(
            "search.repeats",
            "repeats are not supported with grid search; list the point several times via num_samples, or use random",
        )


def _check_scheduler_keys(config: SweepConfig) -> None:
    scheduler = config.scheduler
    checks: tuple[tuple[str, bool, Callable[[kinds.SchedulerKind], bool]], ...] = (
        ("bootstrap_count", scheduler.bootstrap_count != 0, lambda kind: kind.bootstrap),
        ("brackets", scheduler.brackets != 1, lambda kind: kind.brackets),
    )
    for key, used, takes in checks:
        if used and not takes(scheduler.kind):
            having = [name for name, kind in kinds.SCHEDULERS.items() if takes(kind)]
            schedulers = f"the {kinds.listed(having)} scheduler{' has' if len(having) == 1 else 's have'}"
            raise KeyedError(
                f"scheduler.{key}",
                f"only {schedulers} it (not {scheduler.type}); remove it or use type: {kinds.listed(having, 'or')}",
            )


def _check_conditions(config: SweepConfig) -> None:
    check_conditions(config.space, config.search.kind)


def _check_search(config: SweepConfig) -> None:
    search = config.search
    if search.max_trials is not None and search.max_trials % search.repeats:
        raise KeyedError(
            "search.max_trials",
            f"{search.max_trials} is not a multiple of search.repeats ({search.repeats}): a configuration "
            f"would run fewer repeats than asked; use a multiple of {search.repeats}",
        )
    if search.kind.startup_trials:
        if search.random_after and not search.random_share:
            raise KeyedError("search.random_after", "has no effect with search.random_fraction 0 (no trial is random); "
                                                    "set search.random_fraction, or remove it")
        return
    modelled = [name for name, kind in kinds.SEARCHERS.items() if kind.startup_trials]
    having = kinds.listed(modelled)
    for key, is_set, what in (("startup_trials", search.startup_trials is not None, "have random start-up trials"),
                              ("random_fraction", bool(search.random_fraction), "model their proposals"),
                              ("random_after", bool(search.random_after), "model their proposals"),
                              ("match_budget", search.match_budget, "model their proposals")):
        if is_set:
            raise KeyedError(f"search.{key}", f"only {having} {what} (not {search.algorithm}); set search.algorithm: "
                                              f"{modelled[0]}, or remove it")


def _check_metric(config: SweepConfig) -> None:
    metric = config.objective.metric
    known = {"loss", *(config.trial.metrics or default_metrics(config.data.task))}
    base = metric[4:] if metric.startswith("val_") else metric
    if base not in known:
        raise KeyedError(
            "objective.metric",
            f"'{metric}' is not logged by the trial (known: "
            f"{', '.join(sorted('val_' + k for k in known))}); pick one or add it to trial.metrics",
        )


def _check_gpus(config: SweepConfig) -> None:
    """A fraction of a GPU only for a trial of one worker (several trials then share a device).

    The ranks of a trial of several workers each need a GPU of their own: Ray would pack two fractional ranks
    of one trial onto one device, and NCCL refuses two ranks on one GPU.
    """
    trial = config.trial
    if 0 < trial.gpus_per_worker < 1 and trial.workers > 1:
        raise KeyedError(
            "trial.gpus_per_worker",
            f"{trial.gpus_per_worker:g} of a GPU for each of {trial.workers} workers: two ranks of one trial "
            "could land on one GPU, which NCCL refuses; use gpus_per_worker: 1 (a GPU per rank), or workers: 1 "
            "to let trials share GPUs",
        )


def _check_epochs_and_optimizers(config: SweepConfig) -> None:
    if config.scheduler.kind.rungs and config.scheduler.grace_period > config.trial.max_epochs:
        raise KeyedError(
            "scheduler.grace_period",
            f"{config.scheduler.grace_period} is more than trial.max_epochs ({config.trial.max_epochs}): no trial "
            "could be stopped early; lower it",
        )
    spec = config.space.get("optimizer")
    if spec is not None:
        bad = unknown([str(v) for v in (spec.choices or spec.values or [])], OPTIMIZERS)
        if bad is not None:
            raise KeyedError(
                "space.optimizer", f"'{bad}' is not a Keras optimizer; use some of {', '.join(sorted(OPTIMIZERS))}"
            )
    if "momentum" in config.space:
        choices = (spec.choices or spec.values or []) if spec else [config.trial.optimizer]
        used = [str(v).lower() for v in choices]
        if not MOMENTUM_OPTIMIZERS.intersection(used):
            raise KeyedError(
                "space.momentum",
                f"no trial would use it: only {' and '.join(sorted(MOMENTUM_OPTIMIZERS))} take momentum and the "
                f"optimizer is {' or '.join(used)}; search space.optimizer with sgd, or remove momentum",
            )
