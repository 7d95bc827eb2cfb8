"""Searcher and scheduler kinds: what each ``search.algorithm`` and ``scheduler.type`` is, declared once.

A :class:`SearcherKind` says how Tune's searcher is built and what the rest of hpo derives from the
algorithm (an Optuna study or not, grid semantics, warm starts, an extra it needs); a :class:`SchedulerKind`
says how Tune's scheduler is built and how the progress forecast replays its decisions (its
:class:`ForecastRule`, made of the cut-off math in :mod:`hpo.cutoffs`). The sweep file is validated
against :data:`SEARCHERS` and :data:`SCHEDULERS`; nothing else in hpo tests a searcher's or a scheduler's
name.

Adding one is one call, :func:`register_searcher` or :func:`register_scheduler`; the built-in kinds are
registered at the end of this module. Their Tune factories live in :mod:`hpo.search`, which imports Ray:
they are named by :class:`Ref` and imported at the first call, so that validating a sweep file imports no
Ray and no Optuna (nor NumPy: the forecast rules import :mod:`hpo.cutoffs` when they first forecast). A
kind registered from elsewhere may pass any callable.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Protocol, runtime_checkable

if TYPE_CHECKING:
    import numpy as np

#: ``(params, metric)`` of a previous sweep's best trials, to seed a searcher with (None: no warm start).
WarmPoints = list[tuple[dict[str, Any], float]] | None
#: ``(config: SweepConfig, sweep_dir: Path, resume: bool, warm_points: WarmPoints, warm_mode: WarmStartMode)``
#: → a Tune search algorithm.
SearcherFactory = Callable[..., Any]
#: ``(config: SweepConfig)`` → a Tune trial scheduler.
SchedulerFactory = Callable[..., Any]

_NAME = re.compile(r"^[a-z0-9][a-z0-9_.-]*$")


@dataclass(frozen=True)
class Ref:
    """A function named ``module:attribute``, imported at its first call.

    Attributes:
        target: ``package.module:function``.
    """

    target: str

    def __post_init__(self) -> None:
        if not re.match(r"^[A-Za-z_][\w.]*:[A-Za-z_]\w*$", self.target):
            raise ValueError(f"{self.target!r} is not 'package.module:function'; name the factory so")

    def resolve(self) -> Callable[..., Any]:
        """The function itself (its module imported)."""
        module, _, name = self.target.partition(":")
        return getattr(importlib.import_module(module), name)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        """Calls the function."""
        return self.resolve()(*args, **kwargs)


@dataclass(frozen=True)
class Extra:
    """A package a kind needs that hpo does not install with itself (preflight checks it before a sweep).

    Attributes:
        module: The module that must import (``torch``).
        install: What to pip install (``torch==2.13.0``).
        instead: The kind to suggest in its place.
    """

    module: str
    install: str
    instead: str


class RuleSettings(Protocol):
    """The settings a forecast rule reads (:class:`hpo.progress.SweepPlan` has them)."""

    @property
    def max_concurrent(self) -> int:
        """Trials that run at once."""

    @property
    def max_epochs(self) -> int:
        """The most epochs a trial trains."""

    @property
    def grace_period(self) -> int:
        """``scheduler.grace_period``."""

    @property
    def reduction_factor(self) -> float:
        """``scheduler.reduction_factor``."""

    @property
    def brackets(self) -> int:
        """``scheduler.brackets`` (ASHA's brackets)."""


@runtime_checkable
class ForecastRule(Protocol):
    """Where a scheduler stops trials, as the progress forecast replays it (values: higher is better)."""

    def stops(
        self, stops: np.ndarray, paths: np.ndarray, observed: np.ndarray, others: list[np.ndarray],
        plan: RuleSettings,
    ) -> np.ndarray:
        """A running trial's simulated stops after the scheduler's decisions.

        Args:
            stops: Total epochs of each simulated future by the trial's own rules, shape ``(samples,)``.
            paths: Simulated values of the epochs after the observed ones, shape ``(samples, H)``.
            observed: The trial's observed values.
            others: The other started trials' observed values.
            plan: The sweep's settings.

        Returns:
            The total epochs of each future after the scheduler's decisions (at most ``stops``).
        """

    def replayed(self, ys: list[np.ndarray], plan: RuleSettings) -> np.ndarray:
        """Per started trial: the epoch the scheduler would stop its observed curve at if it started now (inf: none).

        The first trials of a sweep run unopposed (ASHA lets a trial through a rung no other has reached, the
        median rule waits for three others); a trial started now meets every result recorded since, so a trial
        not started yet is drawn from the started ones replayed against the others' values (its own left out).
        """


@dataclass(frozen=True)
class NoStops:
    """``fifo``'s rule: the scheduler stops no trial."""

    def stops(
        self, stops: np.ndarray, paths: np.ndarray, observed: np.ndarray, others: list[np.ndarray],
        plan: RuleSettings,
    ) -> np.ndarray:
        """``stops`` unchanged."""
        return stops

    def replayed(self, ys: list[np.ndarray], plan: RuleSettings) -> np.ndarray:
        """Infinity for every trial (none stopped)."""
        import numpy as np

        return np.full(len(ys), np.inf)


@dataclass(frozen=True)
class AshaRungs:
    """``asha``'s rule: rungs from ``grace_period``, a trial cut below the others' quantile there.

    Attributes:
        first_rung: The first rung whatever ``scheduler.grace_period`` says (None: the grace period).
    """

    first_rung: int | None = None

    def epochs(self, plan: RuleSettings, bracket: int = 0) -> list[int]:
        """The rungs under ``plan`` (of ASHA's bracket ``bracket``)."""
        from hpo import cutoffs

        return cutoffs.bracket_rungs(self._grace(plan), plan.reduction_factor, plan.max_epochs, bracket)

    def _grace(self, plan: RuleSettings) -> int:
        """The first rung of bracket 0."""
        return plan.grace_period if self.first_rung is None else self.first_rung

    def _brackets(self, plan: RuleSettings, count: int) -> np.ndarray:
        """The bracket of each of ``count`` futures or trials, in Tune's proportions."""
        from hpo import cutoffs

        brackets = plan.brackets if self.first_rung is None else 1
        shares = cutoffs.bracket_shares(self._grace(plan), plan.reduction_factor, plan.max_epochs, brackets)
        return cutoffs.split_by_share(count, shares)

    def stops(
        self, stops: np.ndarray, paths: np.ndarray, observed: np.ndarray, others: list[np.ndarray],
        plan: RuleSettings,
    ) -> np.ndarray:
        """:func:`hpo.cutoffs.asha_stops` at the rungs (of each future's bracket)."""
        import numpy as np

        from hpo import cutoffs

        quantile = 1 - 1 / plan.reduction_factor
        of = self._brackets(plan, len(stops))
        out = stops.copy()
        for bracket in np.unique(of):
            rows = of == bracket
            out[rows] = cutoffs.asha_stops(stops[rows], paths[rows], len(observed), others,
                                           self.epochs(plan, int(bracket)), quantile)
        return out

    def replayed(self, ys: list[np.ndarray], plan: RuleSettings) -> np.ndarray:
        """:func:`hpo.cutoffs.asha_replay` at the rungs (of each trial's bracket, in Tune's proportions)."""
        import numpy as np

        from hpo import cutoffs

        quantile = 1 - 1 / plan.reduction_factor
        of = self._brackets(plan, len(ys))
        out = np.full(len(ys), np.inf)
        for bracket in np.unique(of):
            rows = of == bracket
            out[rows] = cutoffs.asha_replay(ys, self.epochs(plan, int(bracket)), quantile)[rows]
        return out


@dataclass(frozen=True)
class HyperBandRungs:
    """``hyperband``'s rule: ASHA's from epoch 1, or no stops with fewer trials at once than its first bracket.

    Tune's synchronous brackets, and the pauses they make, are not modelled (:func:`hpo.cutoffs.hyperband_halves`).
    """

    def active(self, plan: RuleSettings) -> ForecastRule:
        """The rule HyperBand decides by under ``plan``."""
        from hpo import cutoffs

        halves = cutoffs.hyperband_halves(plan.max_concurrent, plan.max_epochs, plan.reduction_factor)
        return AshaRungs(first_rung=1) if halves else NoStops()

    def stops(
        self, stops: np.ndarray, paths: np.ndarray, observed: np.ndarray, others: list[np.ndarray],
        plan: RuleSettings,
    ) -> np.ndarray:
        """The active rule's stops."""
        return self.active(plan).stops(stops, paths, observed, others, plan)

    def replayed(self, ys: list[np.ndarray], plan: RuleSettings) -> np.ndarray:
        """The active rule's replay."""
        return self.active(plan).replayed(ys, plan)


@dataclass(frozen=True)
class MedianRule:
    """``median``'s rule: Tune's ``MedianStoppingRule`` from ``grace_period`` on."""

    def stops(
        self, stops: np.ndarray, paths: np.ndarray, observed: np.ndarray, others: list[np.ndarray],
        plan: RuleSettings,
    ) -> np.ndarray:
        """:func:`hpo.cutoffs.median_stops` against the others' thresholds."""
        from hpo import cutoffs

        thresholds = cutoffs.median_thresholds(others, plan.grace_period, plan.max_epochs)
        return cutoffs.median_stops(stops, paths, observed, thresholds)

    def replayed(self, ys: list[np.ndarray], plan: RuleSettings) -> np.ndarray:
        """:func:`hpo.cutoffs.median_replay` of every started trial."""
        from hpo import cutoffs

        return cutoffs.median_replay(ys, plan.grace_period, plan.max_epochs)


@dataclass(frozen=True)
class SearcherKind:
    """A ``search.algorithm``: its Tune searcher and what the rest of hpo derives from it.

    Attributes:
        name: The value of ``search.algorithm``.
        factory: ``(config, sweep_dir, resume, warm_points, warm_mode)`` → the Tune search algorithm.
        study: It keeps an Optuna study in ``STORAGE/NAME/optuna.db`` (optuna-dashboard, parameter importance
            in the report, trials a killed driver left RUNNING ended as FAIL).
        grid: Grid semantics: ``type: grid`` parameters are allowed and the sweep runs every combination of
            the listed points (categoricals are axes too); ``num_samples`` is a multiple of the grid's size,
            without repeats or conditional parameters.
        warm_start: It can be seeded with a previous sweep's best configurations (``--warm-start``) and
            queue configurations (``hpo repeat``).
        startup_trials: It models its proposals after random start-up trials (``search.startup_trials``;
            ``search.random_fraction`` interleaves random ones later).
        random_fraction: ``search.random_fraction`` where the sweep file leaves it out (0: none random).
        random_after: ``search.random_after`` where the sweep file leaves it out.
        needs: A package it needs that hpo does not install (None: nothing).
        instead: A searcher that can queue configurations, which ``hpo repeat`` runs in this one's place
            and sweep-file errors suggest where this one cannot run (None: none needed); required where
            ``warm_start`` is False.
    """

    name: str
    factory: SearcherFactory
    study: bool = False
    grid: bool = False
    warm_start: bool = False
    startup_trials: bool = False
    random_fraction: float = 0.0
    random_after: int = 0
    needs: Extra | None = None
    instead: str | None = None

    def __post_init__(self) -> None:
        _check_name("searcher", self.name)
        if not callable(self.factory):
            raise ValueError(f"searcher '{self.name}': factory {self.factory!r} is not callable; pass the function "
                             "(config, sweep_dir, resume, warm_points, warm_mode) -> Tune searcher")
        if not self.warm_start and self.instead is None:
            raise ValueError(f"searcher '{self.name}': it cannot queue configurations (warm_start=False), so "
                             "'hpo repeat' needs another searcher for its repeats; pass instead=NAME")


@dataclass(frozen=True)
class SchedulerKind:
    """A ``scheduler.type``: its Tune scheduler and the forecast's replay of its decisions.

    Attributes:
        name: The value of ``scheduler.type``.
        factory: ``config`` → the Tune trial scheduler.
        forecast: Where it stops trials, as the progress forecast replays it (required).
        rungs: It compares trials at rungs from ``scheduler.grace_period``, which must not exceed
            ``trial.max_epochs``.
        bootstrap: It takes ``scheduler.bootstrap_count``.
        brackets: It takes ``scheduler.brackets``.
    """

    name: str
    factory: SchedulerFactory
    forecast: ForecastRule | None = None
    rungs: bool = False
    bootstrap: bool = False
    brackets: bool = False

    def __post_init__(self) -> None:
        _check_name("scheduler", self.name)
        if not callable(self.factory):
            raise ValueError(f"scheduler '{self.name}': factory {self.factory!r} is not callable; pass the "
                             "function config -> Tune scheduler")
        if not isinstance(self.forecast, ForecastRule):
            raise ValueError(
                f"scheduler '{self.name}': no forecast rule (got {self.forecast!r}); pass forecast=, an object with "
                "stops() and replayed() (hpo.kinds.ForecastRule), or the progress forecast would not "
                "know where it stops trials"
            )


def _check_name(what: str, name: Any) -> None:
    if not isinstance(name, str) or not _NAME.match(name):
        raise ValueError(f"{what} name {name!r} is not lower-case letters, digits, '-', '_' or '.'; rename it")


#: ``search.algorithm`` → its kind, in registration order.
SEARCHERS: dict[str, SearcherKind] = {}
#: ``scheduler.type`` → its kind, in registration order.
SCHEDULERS: dict[str, SchedulerKind] = {}


def register_searcher(kind: SearcherKind) -> SearcherKind:
    """Makes ``kind.name`` a ``search.algorithm`` (sweep files naming it validate from now on).

    Raises:
        ValueError: The name is taken, or ``instead`` names no registered searcher that can queue configurations.
    """
    if kind.name in SEARCHERS:
        raise ValueError(f"searcher '{kind.name}' is registered already; pick another name")
    if kind.instead is not None and not getattr(SEARCHERS.get(kind.instead), "warm_start", False):
        queuing = choices(name for name, other in SEARCHERS.items() if other.warm_start)
        raise ValueError(f"searcher '{kind.name}': instead '{kind.instead}' is not a registered searcher that "
                         f"can queue configurations; use one of {queuing}")
    SEARCHERS[kind.name] = kind
    return kind


def register_scheduler(kind: SchedulerKind) -> SchedulerKind:
    """Makes ``kind.name`` a ``scheduler.type`` (sweep files naming it validate from now on).

    Raises:
        ValueError: The name is taken.
    """
    if kind.name in SCHEDULERS:
        raise ValueError(f"scheduler '{kind.name}' is registered already; pick another name")
    SCHEDULERS[kind.name] = kind
    return kind


def searcher(name: str) -> SearcherKind:
    """The kind of ``search.algorithm: name`` (KeyError: not registered)."""
    return SEARCHERS[name]


def scheduler(name: str) -> SchedulerKind:
    """The kind of ``scheduler.type: name`` (KeyError: not registered)."""
    return SCHEDULERS[name]


def choices(names: Any, last: str = "or") -> str:
    """``'a', 'b' or 'c'``: names as a sweep-file error lists the allowed values."""
    quoted = [repr(n) for n in names]
    return quoted[0] if len(quoted) == 1 else f"{', '.join(quoted[:-1])} {last} {quoted[-1]}"


def listed(names: Any, last: str = "and") -> str:
    """``a, b and c``: names in a sentence."""
    names = list(names)
    return names[0] if len(names) == 1 else f"{', '.join(names[:-1])} {last} {names[-1]}"


# -- the built-in kinds ---------------------------------------------------------------------------------------

#: The searcher a sweep file that names none runs.
DEFAULT_SEARCHER = "optuna-tpe"
#: The scheduler a sweep file that names none runs.
DEFAULT_SCHEDULER = "asha"
#: The scheduler that stops no trial early (a repeat sweep runs every repeat to its end).
NO_EARLY_STOPPING = "fifo"

# TPE's random share, half the trials from trial 60 on: chosen on the search benchmark (docs/search-benchmark.md,
# "A random share that starts later still"); GP's was never judged there, so it has none unless asked.
register_searcher(SearcherKind("optuna-tpe", Ref("hpo.search.searchers:tpe"), study=True, warm_start=True,
                               startup_trials=True, random_fraction=0.5, random_after=60))
register_searcher(SearcherKind("optuna-gp", Ref("hpo.search.searchers:gp"), study=True, warm_start=True,
                               startup_trials=True, needs=Extra("torch", "torch==2.13.0", instead="optuna-tpe")))
register_searcher(SearcherKind("random", Ref("hpo.search.searchers:random_search"), study=True, warm_start=True))
register_searcher(SearcherKind("grid", Ref("hpo.search.searchers:grid"), grid=True, instead="random"))

register_scheduler(SchedulerKind("asha", Ref("hpo.search.schedulers:asha"), AshaRungs(), rungs=True, bootstrap=True,
                                 brackets=True))
register_scheduler(SchedulerKind("hyperband", Ref("hpo.search.schedulers:hyperband"), HyperBandRungs(), rungs=True))
register_scheduler(SchedulerKind("median", Ref("hpo.search.schedulers:median"), MedianRule()))
register_scheduler(SchedulerKind("fifo", Ref("hpo.search.schedulers:fifo"), NoStops()))
