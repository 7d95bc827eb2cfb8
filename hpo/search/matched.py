"""Trials compared at one budget before a model learns from them (``search.compare_at: budget``).

Under early stopping a sweep's trials end after different numbers of epochs. Optuna's TPE ranks every
finished trial (told COMPLETE: trained to ``max_epochs``, or stopped by its own EarlyStopping) above every
trial the scheduler stopped (PRUNED), and the pruned ones by how far they got: a finished trial with a
mediocre best counts as better than one ASHA stopped at epoch 16 with a far better value. BOHB instead fits
its model on the values every trial had at one budget, the largest with enough trials to fit it
(Falkner et al., 2018). :class:`BudgetMatched` shows the model the study that way:

- the budget ``b`` is the largest epoch that at least ``n_good`` trials reported, ``n_good`` being the size
  of the model's good set (for TPE its ``gamma`` of the number of trials; for a sampler without one, a tenth);
- each trial that reported epoch ``b``, and each trial that finished by itself sooner (its best value stands
  for any later budget: it was not cut short), is shown COMPLETE with its best value up to epoch ``b``; the
  others are shown PRUNED as they are, so they rank below, by how far they got.

The study itself is not changed (what it stores, ``optuna-dashboard`` and warm starts read as before);
only the model's view of it is.
"""

from __future__ import annotations

import math
from collections.abc import Container, Sequence
from typing import Any

from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler
from optuna.study import Study, StudyDirection
from optuna.trial import FrozenTrial, TrialState

from hpo.search.wrapper import SamplerWrapper

_FINISHED = (TrialState.COMPLETE, TrialState.PRUNED)


def _last(trial: FrozenTrial) -> int:
    """The last epoch ``trial`` reported (0 if none)."""
    return max(trial.intermediate_values, default=0)


def _value_at(trial: FrozenTrial, budget: int, maximize: bool) -> float | None:
    """``trial``'s best value up to epoch ``budget``, if it is compared there (else None).

    A trial is compared if it reported epoch ``budget`` or finished by itself (COMPLETE) before it; one
    finished without epoch values (a warm start's point) is compared with its own value.
    """
    if trial.state not in _FINISHED or (_last(trial) < budget and trial.state != TrialState.COMPLETE):
        return None
    values = [v for step, v in trial.intermediate_values.items() if step <= budget and not math.isnan(v)]
    if not values:
        return trial.value if trial.state == TrialState.COMPLETE and not trial.intermediate_values else None
    return max(values) if maximize else min(values)


def matched_budget(trials: Sequence[FrozenTrial], n_good: int) -> int:
    """The largest epoch that at least ``n_good`` of ``trials`` (finished or stopped) reported (0 if none)."""
    lasts = sorted((_last(t) for t in trials if t.state in _FINISHED), reverse=True)
    if n_good <= 0 or len(lasts) < n_good:
        return 0
    return lasts[n_good - 1]


def matched_trials(trials: Sequence[FrozenTrial], n_good: int, maximize: bool) -> list[FrozenTrial]:
    """``trials`` as the model sees them: those compared at the matched budget COMPLETE, with their value there.

    Args:
        trials: The study's trials (any state; only COMPLETE and PRUNED ones are changed).
        n_good: How many trials the model counts as good.
        maximize: The study's direction.
    """
    budget = matched_budget(trials, n_good)
    if budget == 0:
        return list(trials)
    shown = []
    for trial in trials:
        value = _value_at(trial, budget, maximize)
        if value is None or math.isnan(value):
            shown.append(trial)
            continue
        shown.append(FrozenTrial(
            number=trial.number, state=TrialState.COMPLETE, value=value, values=None,
            datetime_start=trial.datetime_start, datetime_complete=trial.datetime_complete, params=trial.params,
            distributions=trial.distributions, user_attrs=trial.user_attrs, system_attrs=trial.system_attrs,
            intermediate_values=trial.intermediate_values, trial_id=trial._trial_id,
        ))
    return shown


class _MatchedStudy:
    """A read-only view of ``study`` whose trials are :func:`matched_trials`; everything else is the study's.

    A finished trial never changes, so the matched trials are worked out again only when more trials have
    finished (kept in ``memo``: TPE reads the trials several times for one proposal).
    """

    def __init__(self, study: Study, n_good: Any, memo: dict[str, Any]) -> None:
        self._study, self._n_good, self._memo = study, n_good, memo

    def __getattr__(self, name: str) -> Any:
        return getattr(self._study, name)

    def _get_trials(self, deepcopy: bool = True, states: Container[TrialState] | None = None,
                    use_cache: bool = False) -> list[FrozenTrial]:
        everything = self._study._get_trials(deepcopy=False, states=None, use_cache=use_cache)
        finished = [t for t in everything if t.state in _FINISHED]
        key = (self._study._study_id, len(finished))
        if self._memo.get("key") != key:
            maximize = self._study.direction == StudyDirection.MAXIMIZE
            shown = matched_trials(finished, self._n_good(len(finished)), maximize)
            self._memo.update(key=key, shown={t.number: t for t in shown})
        by_number = self._memo["shown"]
        shown = [by_number.get(t.number, t) if t.state in _FINISHED else t for t in everything]
        return shown if states is None else [t for t in shown if t.state in states]

    def get_trials(self, deepcopy: bool = True, states: Container[TrialState] | None = None) -> list[FrozenTrial]:
        return self._get_trials(deepcopy=deepcopy, states=states)


def _tenth(n: int) -> int:
    return min(math.ceil(0.1 * n), 25)


class BudgetMatched(SamplerWrapper):
    """A model-based sampler that learns from the trials compared at one budget (see the module).

    Args:
        model: The sampler (TPE, GP) shown the matched view of the study.
    """

    def __init__(self, model: BaseSampler) -> None:
        super().__init__(model)
        gamma = getattr(model, "_gamma", None)  # TPE's good-set size; Optuna sets it on first use if None
        self._n_good = gamma if callable(gamma) else _tenth
        self._memo: dict[str, Any] = {}

    def _view(self, study: Study) -> Any:
        return study if study._is_multi_objective() else _MatchedStudy(study, self._n_good, self._memo)

    def infer_relative_search_space(self, study: Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        """The model's joint search space, inferred from the study as it is."""
        return self.model.infer_relative_search_space(study, trial)

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        """The model's joint proposal, made from the matched view."""
        return self.model.sample_relative(self._view(study), trial, search_space)

    def sample_independent(
        self, study: Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> Any:
        """One parameter as the model draws parameters on their own, from the matched view."""
        return self.model.sample_independent(self._view(study), trial, param_name, param_distribution)


__all__ = ["BudgetMatched", "matched_budget", "matched_trials"]
