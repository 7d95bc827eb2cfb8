"""Schedulers: HyperBand leaves no trial paused at max_t; ASHA's bootstrap_count stops the first trials at a rung."""

from __future__ import annotations

import pytest
from ray.tune.experiment import Trial
from ray.tune.schedulers import AsyncHyperBandScheduler, HyperBandScheduler, TrialScheduler

from hpo.config import parse_sweep
from hpo.errors import ConfigError
from hpo.search import BootstrapASHA, FinishingHyperBand, build_scheduler
from tests.conftest import base_sweep


class Controller:
    """Records the trials a scheduler asks to stop (the only controller call HyperBand makes here)."""

    def __init__(self) -> None:
        self.stopped: list[str] = []

    def stop_trial(self, trial: Trial) -> None:
        self.stopped.append(trial.trial_id)


def top_rung_pair(scheduler: HyperBandScheduler) -> tuple[Controller, Trial, Trial]:
    """Two running trials in the bracket that trains every trial straight to max_t (3 epochs)."""
    controller = Controller()
    first, second = (Trial("t", trial_id=f"t{i}", stub=True) for i in range(2))
    for trial in (first, second):
        trial.set_status(Trial.RUNNING)
        scheduler.on_trial_add(controller, trial)
    bracket, _ = scheduler._trial_info[first]
    assert bracket._r0 == 3 and bracket._halves == 0 and scheduler._trial_info[second][0] is bracket
    return controller, first, second


def result(epoch: int, accuracy: float) -> dict:
    return {"training_iteration": epoch, "val_accuracy": accuracy}


@pytest.mark.xfail(strict=True, reason="Ray 2.60's HyperBand pauses a trial at max_t and misses it when its bracket "
                   "ends during the pause (why hpo has FinishingHyperBand); an XPASS means Ray fixed it")
def test_stock_hyperband_does_not_leave_a_trial_at_max_t_paused_forever():
    """The race FinishingHyperBand closes: the bracket ends while the first trial's pause still saves."""
    scheduler = HyperBandScheduler(time_attr="training_iteration", max_t=3, reduction_factor=3,
                                   metric="val_accuracy", mode="max")
    controller, first, second = top_rung_pair(scheduler)
    action = scheduler.on_trial_result(controller, first, result(3, 0.9))
    # first is still RUNNING (saving its checkpoint before the pause) when second ends the bracket:
    assert scheduler.on_trial_result(controller, second, result(3, 0.8)) == TrialScheduler.STOP
    assert action == TrialScheduler.STOP or first in controller.stopped  # else no one will stop or resume it


def test_finishing_hyperband_stops_trials_at_max_t_instead_of_pausing():
    scheduler = build_scheduler(parse_sweep(base_sweep(
        scheduler={"type": "hyperband", "reduction_factor": 3}, trial={"max_epochs": 3},
        objective={"metric": "val_accuracy", "mode": "max"},
    ), "s.yaml"))
    assert isinstance(scheduler, FinishingHyperBand)
    scheduler.set_search_properties("val_accuracy", "max")
    controller, first, second = top_rung_pair(scheduler)
    assert scheduler.on_trial_result(controller, first, result(2, 0.7)) == TrialScheduler.CONTINUE
    assert scheduler.on_trial_result(controller, first, result(3, 0.9)) == TrialScheduler.STOP
    bracket, _ = scheduler._trial_info[second]
    assert bracket.current_trials() == [second]
    assert scheduler.on_trial_result(controller, second, result(3, 0.8)) == TrialScheduler.STOP
    assert controller.stopped == []


def asha(bootstrap: int, mode: str = "max") -> AsyncHyperBandScheduler:
    """ASHA as a sweep builds it: rungs at 1, 3 and 9 epochs (grace 1, reduction 3, max 9)."""
    scheduler = build_scheduler(parse_sweep(base_sweep(
        scheduler={"type": "asha", "grace_period": 1, "reduction_factor": 3, "bootstrap_count": bootstrap},
        trial={"max_epochs": 9}, objective={"metric": "val_accuracy", "mode": mode},
    ), "s.yaml"))
    scheduler.set_search_properties("val_accuracy", mode)
    return scheduler


def decisions(scheduler: AsyncHyperBandScheduler, runs: dict[str, list[float]]) -> dict[str, int]:
    """Feeds each trial's epochs in turn until the scheduler stops it; returns the epochs each trained."""
    controller, trained = Controller(), {}
    for trial_id, values in runs.items():
        trial = Trial("t", trial_id=trial_id, stub=True)
        scheduler.on_trial_add(controller, trial)
        for epoch, value in enumerate(values, start=1):
            trained[trial_id] = epoch
            if scheduler.on_trial_result(controller, trial, result(epoch, value)) == TrialScheduler.STOP:
                break
    return trained


# A poor first trial, then a worse one, then two good ones.
RUNS = {"poor": [0.2] * 9, "worse": [0.1] * 9, "good": [0.9] * 9, "best": [0.95] * 9}


def test_tunes_asha_lets_the_first_trial_at_each_rung_train_to_the_end():
    scheduler = asha(0)
    assert type(scheduler) is AsyncHyperBandScheduler
    assert decisions(scheduler, RUNS) == {"poor": 9, "worse": 1, "good": 9, "best": 9}


def test_bootstrap_count_stops_the_first_trials_at_each_rung():
    scheduler = asha(1)
    assert isinstance(scheduler, BootstrapASHA)
    # poor: first at rung 1, stops; worse: below poor, stops; good: passes rung 1 but is the first at
    # rung 3, stops there; best: passes both and trains to max_t (the last rung is not bootstrapped).
    assert decisions(scheduler, RUNS) == {"poor": 1, "worse": 1, "good": 3, "best": 9}
    two = decisions(asha(2), {**RUNS, "last": [0.97] * 9})
    assert two == {"poor": 1, "worse": 1, "good": 3, "best": 3, "last": 9}


def test_bootstrap_count_for_a_minimised_metric():
    runs = {"a": [0.5] * 9, "b": [0.3] * 9, "c": [0.1] * 9}
    assert decisions(asha(1, "min"), runs) == {"a": 1, "b": 3, "c": 9}


def test_bootstrap_count_is_asha_only():
    with pytest.raises(ConfigError, match=r"scheduler\.bootstrap_count"):
        parse_sweep(base_sweep(scheduler={"type": "median", "bootstrap_count": 1}), "s.yaml")
