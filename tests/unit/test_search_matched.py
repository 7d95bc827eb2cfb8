"""Trials compared at one budget (:mod:`hpo.search.matched`): the budget, the view, and TPE behind it."""

from __future__ import annotations

import math

import optuna
import pytest
from optuna.distributions import FloatDistribution
from optuna.trial import FrozenTrial, TrialState, create_trial

from hpo.search.matched import BudgetMatched, matched_budget, matched_trials

X = {"x": FloatDistribution(0.0, 1.0)}


def _trial(number: int, curve: list[float], state: TrialState, value: float | None = None) -> FrozenTrial:
    trial = create_trial(params={"x": number / 20}, distributions=X, state=state,
                         value=value if state == TrialState.COMPLETE else None,
                         intermediate_values=dict(enumerate(curve, start=1)))
    trial.number = number
    return trial


def test_the_budget_is_the_furthest_epoch_enough_trials_reported() -> None:
    trials = [
        _trial(0, [0.5] * 6, TrialState.COMPLETE, 0.5),  # finished by itself at epoch 6
        _trial(1, [0.6] * 16, TrialState.PRUNED),
        _trial(2, [0.6] * 8, TrialState.PRUNED),
        _trial(3, [0.6] * 8, TrialState.PRUNED),
        _trial(4, [0.6] * 4, TrialState.PRUNED),
        _trial(5, [0.6], TrialState.PRUNED),
        _trial(6, [0.6] * 20, TrialState.RUNNING),  # not counted
    ]
    assert [matched_budget(trials, n) for n in range(8)] == [0, 16, 8, 8, 6, 4, 1, 0]  # 7: fewer trials than that


def test_trials_that_reached_the_budget_are_shown_complete_with_their_best_up_to_it() -> None:
    trials = [
        _trial(0, [0.50, 0.52, 0.52, 0.52, 0.51], TrialState.COMPLETE, 0.52),  # EarlyStopping at epoch 5
        _trial(1, [0.40, 0.60, 0.70, 0.80, 0.85, 0.90, 0.91, 0.93], TrialState.PRUNED),
        _trial(2, [0.45, 0.55, 0.65, 0.66, 0.60, 0.61, 0.62, 0.62], TrialState.PRUNED),
        _trial(3, [0.30, 0.35], TrialState.PRUNED),
        _trial(4, [0.2], TrialState.RUNNING),
    ]
    shown = {t.number: t for t in matched_trials(trials, 2, maximize=True)}  # budget: epoch 8
    assert [shown[n].state for n in range(5)] == [TrialState.COMPLETE] * 3 + [TrialState.PRUNED, TrialState.RUNNING]
    assert shown[0].value == 0.52  # finished sooner by itself: its best stands
    assert shown[1].value == 0.93 and shown[2].value == 0.66  # best up to epoch 8
    assert shown[3] is trials[3] and shown[4] is trials[4]  # below the budget, or running: as they are
    assert [shown[n].params for n in range(5)] == [t.params for t in trials]
    # Minimising, the best is the lowest; a budget between epochs takes what was reported up to it.
    shown = {t.number: t for t in matched_trials(trials, 4, maximize=False)}  # budget: epoch 2
    assert shown[0].value == 0.50
    assert shown[1].value == 0.40 and shown[2].value == 0.45 and shown[3].value == 0.30


def test_nothing_changes_below_a_full_good_set_or_for_a_diverged_trial() -> None:
    trials = [_trial(0, [0.5], TrialState.PRUNED), _trial(1, [math.nan, math.nan], TrialState.PRUNED)]
    assert matched_trials(trials, 3, maximize=True) == trials
    shown = matched_trials(trials, 2, maximize=True)  # budget: epoch 1; trial 1 has no value up to it
    assert shown[0].state == TrialState.COMPLETE and shown[0].value == 0.5
    assert shown[1] is trials[1]


def _sampled(sampler: optuna.samplers.BaseSampler, trials: list[FrozenTrial], n: int = 5) -> list[float]:
    study = optuna.create_study(direction="maximize", sampler=sampler)
    study.add_trials(trials)
    return [study.ask(X).params["x"] for _ in range(n)]


def test_with_every_trial_finished_tpe_proposes_what_it_would_alone() -> None:
    trials = [_trial(n, [n / 20, n / 10], TrialState.COMPLETE, n / 10) for n in range(12)]
    alone = _sampled(optuna.samplers.TPESampler(seed=3, n_startup_trials=5), trials)
    matched = _sampled(BudgetMatched(optuna.samplers.TPESampler(seed=3, n_startup_trials=5)), trials)
    assert matched == alone


def test_tpe_learns_from_the_stopped_trials_best_at_the_budget_not_from_finished_mediocre_ones() -> None:
    # Ten trials finished early by themselves at 0.50 near x = 0.9; ten the scheduler stopped at epoch 8 near
    # x = 0.1, far better (0.9). Alone, TPE counts every finished trial above every stopped one.
    finished = [create_trial(params={"x": 0.85 + 0.01 * i}, distributions=X, state=TrialState.COMPLETE, value=0.5,
                             intermediate_values={1: 0.5, 2: 0.5, 3: 0.5, 4: 0.5}) for i in range(10)]
    stopped = [create_trial(params={"x": 0.05 + 0.01 * i}, distributions=X, state=TrialState.PRUNED,
                            intermediate_values={e: 0.9 for e in range(1, 9)}) for i in range(10)]
    trials = finished + stopped
    alone = _sampled(optuna.samplers.TPESampler(seed=0, n_startup_trials=5), trials, n=20)
    matched = _sampled(BudgetMatched(optuna.samplers.TPESampler(seed=0, n_startup_trials=5)), trials, n=20)
    assert sum(x > 0.5 for x in alone) >= 14
    assert sum(x < 0.5 for x in matched) >= 14


def test_a_study_runs_with_a_pruner_and_its_stored_trials_are_not_changed() -> None:
    sampler = BudgetMatched(optuna.samplers.TPESampler(seed=1, n_startup_trials=4, multivariate=True))
    study = optuna.create_study(direction="minimize", sampler=sampler,
                                pruner=optuna.pruners.SuccessiveHalvingPruner(min_resource=1, reduction_factor=2))

    ended: dict[int, tuple[TrialState, float]] = {}

    def objective(trial: optuna.Trial) -> float:
        x = trial.suggest_float("x", -2, 2)
        for epoch in range(1, 9):
            value = (x - 0.5) ** 2 + 1 / epoch
            trial.report(value, epoch)
            if trial.should_prune():
                ended[trial.number] = (TrialState.PRUNED, value)
                raise optuna.TrialPruned()
        ended[trial.number] = (TrialState.COMPLETE, value)
        return value

    study.optimize(objective, n_trials=40)
    assert {s for s, _ in ended.values()} == {TrialState.PRUNED, TrialState.COMPLETE}
    assert {t.number: (t.state, t.value) for t in study.trials} == ended  # the view did not change the study
    assert abs(study.best_params["x"] - 0.5) < 0.3


def test_a_multi_objective_study_is_shown_as_it_is() -> None:
    sampler = BudgetMatched(optuna.samplers.TPESampler(seed=0))
    study = optuna.create_study(directions=["minimize", "minimize"], sampler=sampler)
    study.optimize(lambda t: (t.suggest_float("x", 0, 1), 1 - t.suggest_float("y", 0, 1)), n_trials=15)
    assert len(study.trials) == 15 and sampler._view(study) is study


@pytest.mark.parametrize("gamma", [None, lambda n: 3])
def test_the_good_set_is_the_models(gamma) -> None:
    model = optuna.samplers.TPESampler(seed=0, **({} if gamma is None else {"gamma": gamma}))
    sampler = BudgetMatched(model)
    assert sampler._n_good(100) == (10 if gamma is None else 3)
    assert sampler._n_good(1000) == (25 if gamma is None else 3)


def test_a_warm_start_point_without_epochs_is_compared_with_its_own_value() -> None:
    point = create_trial(params={"x": 0.3}, distributions=X, state=TrialState.COMPLETE, value=0.8)
    trials = [point, _trial(1, [0.6, 0.7], TrialState.PRUNED), _trial(2, [0.5], TrialState.PRUNED)]
    shown = matched_trials(trials, 1, maximize=True)  # budget: epoch 2
    assert [(t.state, t.value) for t in shown] == [(TrialState.COMPLETE, 0.8), (TrialState.COMPLETE, 0.7),
                                                  (TrialState.PRUNED, None)]
