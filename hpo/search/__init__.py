"""Search and scheduling: the space, the Tune searchers and schedulers, the goal stopper, warm starts.

Modules: :mod:`~hpo.search.space` (every conversion of a parameter spec), :mod:`~hpo.search.searchers`
(Optuna TPE / GP / random, grid), the sampler wrappers (:mod:`~hpo.search.wrapper`, their base):
:mod:`~hpo.search.matched` (trials compared at one budget, ``search.match_budget``) and
:mod:`~hpo.search.interleave` (random trials among a model's, ``search.random_fraction``),
:mod:`~hpo.search.schedulers` (ASHA, HyperBand, median, FIFO),
:mod:`~hpo.search.goal` (``objective.goal``), :mod:`~hpo.search.warmstart`, :mod:`~hpo.search.budget`
(trial counts). Which searcher and scheduler a sweep runs, and what each is, is declared in
:mod:`hpo.kinds`; a searcher or scheduler is added there, with one registration.
"""

from __future__ import annotations

from hpo.search.budget import TIME_ATTR, planned_trials, tune_num_samples
from hpo.search.goal import GoalStopper, build_stopper
from hpo.search.schedulers import FinishingHyperBand, HedgedASHA, build_scheduler
from hpo.search.searchers import (
    CappedGrid,
    DurableOptunaSearch,
    build_searcher,
    close_study,
    study_url,
)
from hpo.search.space import SearchSpace
from hpo.search.warmstart import previous_best, seed_study

__all__ = [
    "TIME_ATTR",
    "CappedGrid",
    "DurableOptunaSearch",
    "FinishingHyperBand",
    "GoalStopper",
    "HedgedASHA",
    "SearchSpace",
    "build_scheduler",
    "build_searcher",
    "build_stopper",
    "close_study",
    "planned_trials",
    "previous_best",
    "seed_study",
    "study_url",
    "tune_num_samples",
]
