"""Searcher and scheduler registries: sweep-file names → Ray Tune objects."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ray.tune.schedulers import (
    AsyncHyperBandScheduler,
    FIFOScheduler,
    HyperBandScheduler,
    MedianStoppingRule,
    TrialScheduler,
)
from ray.tune.search import BasicVariantGenerator, Searcher

from hpo.config import SweepConfig

#: Tune's iteration counter; one iteration is one epoch of a trial.
TIME_ATTR = "training_iteration"


def _optuna(sampler_name: str) -> Callable[[SweepConfig], Searcher]:
    def build(config: SweepConfig) -> Searcher:
        import optuna
        from ray.tune.search.optuna import OptunaSearch

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        seed = config.search.seed
        if sampler_name == "tpe":
            sampler = optuna.samplers.TPESampler(seed=seed)
        else:
            sampler = optuna.samplers.GPSampler(seed=seed)
        return OptunaSearch(sampler=sampler)

    return build


def _basic(config: SweepConfig) -> BasicVariantGenerator:
    return BasicVariantGenerator(random_state=config.search.seed)


SEARCHERS: dict[str, Callable[[SweepConfig], Searcher | BasicVariantGenerator]] = {
    "optuna-tpe": _optuna("tpe"),
    "optuna-gp": _optuna("gp"),
    "random": _basic,
    "grid": _basic,
}


def _asha(config: SweepConfig) -> TrialScheduler:
    return AsyncHyperBandScheduler(
        time_attr=TIME_ATTR,
        max_t=config.trial.max_epochs,
        grace_period=min(config.scheduler.grace_period, config.trial.max_epochs),
        reduction_factor=config.scheduler.reduction_factor,
    )


def _hyperband(config: SweepConfig) -> TrialScheduler:
    return HyperBandScheduler(
        time_attr=TIME_ATTR,
        max_t=config.trial.max_epochs,
        reduction_factor=config.scheduler.reduction_factor,
    )


def _median(config: SweepConfig) -> TrialScheduler:
    return MedianStoppingRule(time_attr=TIME_ATTR, grace_period=config.scheduler.grace_period)


SCHEDULERS: dict[str, Callable[[SweepConfig], TrialScheduler]] = {
    "asha": _asha,
    "hyperband": _hyperband,
    "median": _median,
    "fifo": lambda config: FIFOScheduler(),
}


def build_searcher(config: SweepConfig) -> Any:
    """Returns the Tune search algorithm named by ``search.algorithm``."""
    return SEARCHERS[config.search.algorithm](config)


def build_scheduler(config: SweepConfig) -> TrialScheduler:
    """Returns the Tune scheduler named by ``scheduler.type``."""
    return SCHEDULERS[config.scheduler.type](config)
