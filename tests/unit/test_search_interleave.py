"""search.random_fraction: a share of trials proposed at random among a model's (hpo.search.interleave)."""

from __future__ import annotations

import optuna
import pytest

from hpo.search.interleave import RandomInterleaved, interleaved

optuna.logging.set_verbosity(optuna.logging.WARNING)


def run(fraction: float, seed: int, trials: int = 80, after: int = 0) -> tuple[optuna.Study, RandomInterleaved]:
    sampler = RandomInterleaved(optuna.samplers.TPESampler(seed=seed, n_startup_trials=10), fraction, seed, after)
    study = optuna.create_study(sampler=sampler)
    study.optimize(lambda trial: trial.suggest_float("x", 0.0, 1.0) ** 2, n_trials=trials)
    return study, sampler


def test_random_trials_ignore_the_model_and_the_others_follow_it():
    study, sampler = run(0.3, seed=0)
    late = study.trials[30:]  # TPE has narrowed in on x = 0 by then
    random = [t.params["x"] for t in late if sampler.is_random(t)]
    modelled = [t.params["x"] for t in late if not sampler.is_random(t)]
    assert 8 <= len(random) <= 24  # about 30 % of 50
    assert sum(modelled) / len(modelled) < 0.15
    assert sum(random) / len(random) > 0.3  # uniform on [0, 1]: mean 0.5


def frozen(number: int) -> optuna.trial.FrozenTrial:
    return optuna.trial.FrozenTrial(
        number=number, state=optuna.trial.TrialState.RUNNING, value=None, datetime_start=None,
        datetime_complete=None, params={}, distributions={}, user_attrs={}, system_attrs={},
        intermediate_values={}, trial_id=number,
    )


def test_the_share_of_random_trials_is_the_fraction():
    sampler = RandomInterleaved(optuna.samplers.TPESampler(seed=3), 0.25, seed=3)
    share = sum(sampler.is_random(frozen(n)) for n in range(2000)) / 2000
    assert 0.22 < share < 0.28


def test_a_seed_fixes_which_trials_are_random_and_what_they_propose():
    first, a = run(0.5, seed=7, trials=40)
    second, b = run(0.5, seed=7, trials=40)
    assert [t.params for t in first.trials] == [t.params for t in second.trials]
    assert [a.is_random(t) for t in first.trials] == [b.is_random(t) for t in second.trials]
    other, c = run(0.5, seed=8, trials=40)
    assert [a.is_random(t) for t in first.trials] != [c.is_random(t) for t in other.trials]


def test_zero_is_the_model_itself_and_a_fraction_of_one_is_refused():
    model = optuna.samplers.TPESampler(seed=0)
    assert interleaved(model, 0.0, 0) is model
    with pytest.raises(ValueError, match=r"fraction 1\.0 is not in \[0, 1\)"):
        RandomInterleaved(model, 1.0)


def test_the_largest_seed_a_sweep_file_takes_works():
    study, _ = run(0.5, seed=2**32 - 1, trials=12)
    assert len(study.trials) == 12


def test_no_trial_before_random_after_is_random_and_those_trials_are_the_models_own():
    sampler = RandomInterleaved(optuna.samplers.TPESampler(seed=3), 0.5, seed=3, after=30)
    assert not any(sampler.is_random(frozen(n)) for n in range(30))
    plain = RandomInterleaved(optuna.samplers.TPESampler(seed=3), 0.5, seed=3)
    later = range(30, 2030)
    assert [sampler.is_random(frozen(n)) for n in later] == [plain.is_random(frozen(n)) for n in later]
    assert 0.45 < sum(sampler.is_random(frozen(n)) for n in later) / 2000 < 0.55
    # Up to trial 30 the sweep is the model's: the same proposals as TPE alone with the same seed.
    delayed, _ = run(0.5, seed=5, trials=40, after=30)
    alone = optuna.create_study(sampler=optuna.samplers.TPESampler(seed=5, n_startup_trials=10))
    alone.optimize(lambda trial: trial.suggest_float("x", 0.0, 1.0) ** 2, n_trials=30)
    assert [t.params for t in delayed.trials[:30]] == [t.params for t in alone.trials]
    with pytest.raises(ValueError, match="after -1 is negative"):
        RandomInterleaved(optuna.samplers.TPESampler(seed=0), 0.5, after=-1)
