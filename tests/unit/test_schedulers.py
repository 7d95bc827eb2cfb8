"""HyperBand with trials that report a checkpoint every epoch: no trial is left paused at max_t."""

from __future__ import annotations

from ray.tune.experiment import Trial
from ray.tune.schedulers import HyperBandScheduler, TrialScheduler

from hpo.config import parse_sweep
from hpo.search import FinishingHyperBand, build_scheduler
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


def test_stock_hyperband_can_leave_a_trial_at_max_t_paused_forever():
    """The race FinishingHyperBand closes: the bracket ends while the first trial's pause still saves."""
    scheduler = HyperBandScheduler(time_attr="training_iteration", max_t=3, reduction_factor=3,
                                   metric="val_accuracy", mode="max")
    controller, first, second = top_rung_pair(scheduler)
    assert scheduler.on_trial_result(controller, first, result(3, 0.9)) == TrialScheduler.PAUSE
    # first is still RUNNING (saving its checkpoint before the pause) when second ends the bracket:
    assert scheduler.on_trial_result(controller, second, result(3, 0.8)) == TrialScheduler.STOP
    assert controller.stopped == []  # first is paused next, and no one will ever stop or resume it


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
