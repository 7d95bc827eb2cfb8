"""The Tune schedulers of the scheduler kinds (:mod:`hpo.kinds`): ASHA, HyperBand, median, FIFO."""

from __future__ import annotations

from typing import Any

import numpy as np
from ray.tune.schedulers import (
    AsyncHyperBandScheduler,
    FIFOScheduler,
    HyperBandScheduler,
    MedianStoppingRule,
    TrialScheduler,
)

from hpo import compat, kinds
from hpo.config import SweepConfig
from hpo.search.budget import TIME_ATTR


class _BootstrapBracket(compat.asha_bracket_base()):  # type: ignore[misc]
    """Tune's ASHA bracket in which a trial stops at a rung that fewer than ``bootstrap`` trials reached before it.

    Tune's cutoff of an empty rung is None, so the first trial there continues whatever its value: the
    sweep's first (random) configuration always trains to ``max_t``, as does the first to reach each rung.
    Optuna's ``SuccessiveHalvingPruner(bootstrap_count=...)`` stops them instead. The last rung (``max_t``)
    is left alone: a trial there has finished.
    """

    def __init__(self, *args: Any, bootstrap: int, max_t: int, **kwargs: Any) -> None:
        super().__init__(*args, max_t=max_t, **kwargs)
        self._bootstrap = bootstrap
        self._max_t = max_t

    def on_result(self, trial: Any, cur_iter: int, cur_rew: float | None) -> str:
        """STOP at a rung below ``max_t`` that fewer than ``bootstrap`` trials reached; otherwise Tune's rule."""
        for milestone, recorded in compat.bracket_rungs(self):
            if cur_iter < milestone or trial.trial_id in recorded:
                continue
            if milestone < self._max_t and len(recorded) < self._bootstrap and cur_rew is not None:
                recorded[trial.trial_id] = cur_rew
                return TrialScheduler.STOP
            break
        return super().on_result(trial, cur_iter, cur_rew)


class HedgedASHA(AsyncHyperBandScheduler):
    """Tune's ASHA with ``bootstrap_count`` (see :class:`_BootstrapBracket`) and seeded brackets.

    With several brackets, bracket ``s`` compares trials from epoch ``grace_period * reduction_factor**s``,
    and each new trial joins one drawn as Tune draws it (a softmax over the brackets' rung counts), but from
    a generator seeded by the sweep's seed instead of NumPy's global one: a replayed sweep puts every
    trial in the same bracket.

    Args:
        bootstrap_count: Trials that must have reached a rung before a trial may continue past it.
        brackets: ASHA brackets (1: Tune's single bracket).
        seed: Seed of the bracket draws (None: fresh entropy).
        **kwargs: Passed to ``AsyncHyperBandScheduler``.
    """

    def __init__(self, bootstrap_count: int, brackets: int, seed: int | None, **kwargs: Any) -> None:
        super().__init__(brackets=brackets, **kwargs)
        self._draws = np.random.default_rng(seed)
        if bootstrap_count:
            compat.set_asha_brackets(self, [
                _BootstrapBracket(
                    min_t=kwargs["grace_period"],
                    max_t=kwargs["max_t"],
                    reduction_factor=kwargs["reduction_factor"],
                    s=s,
                    stop_last_trials=compat.asha_stop_last_trials(self),
                    bootstrap=bootstrap_count,
                )
                for s in range(brackets)
            ])

    def on_trial_add(self, tune_controller: Any, trial: Any) -> None:
        """Puts the new trial in a bracket drawn from the seeded generator (Tune's probabilities)."""
        if len(compat.asha_brackets(self)) == 1:
            super().on_trial_add(tune_controller, trial)
            return
        state = np.random.get_state()
        np.random.seed(int(self._draws.integers(2**32)))
        try:
            super().on_trial_add(tune_controller, trial)
        finally:
            np.random.set_state(state)


def asha_arguments(config: SweepConfig) -> dict[str, Any]:
    """The arguments of Tune's ``AsyncHyperBandScheduler`` under ``config`` (grace capped at ``max_epochs``)."""
    return {
        "time_attr": TIME_ATTR,
        "max_t": config.trial.max_epochs,
        "grace_period": min(config.scheduler.grace_period, config.trial.max_epochs),
        "reduction_factor": config.scheduler.reduction_factor,
    }


def asha(config: SweepConfig) -> TrialScheduler:
    """``asha``: Tune's ASHA (with Optuna's ``bootstrap_count`` and several brackets where set)."""
    arguments = asha_arguments(config)
    if config.scheduler.bootstrap_count or config.scheduler.brackets > 1:
        return HedgedASHA(config.scheduler.bootstrap_count, config.scheduler.brackets, config.search.seed,
                          **arguments)
    return AsyncHyperBandScheduler(**arguments)


class FinishingHyperBand(HyperBandScheduler):
    """Tune's ``HyperBandScheduler`` that stops a trial at ``max_t`` instead of pausing it.

    Stock HyperBand pauses a trial that reaches the top rung while another trial of its bracket is still
    training, and stops it when the bracket finishes. If the bracket finishes while that trial's pause is
    still saving its checkpoint (every epoch reports one here), the stop misses it (``cleanup_full`` only
    stops trials already PAUSED), it is paused afterwards, and nothing ever resumes or stops it: the sweep
    waits forever. A trial at ``max_t`` has no work left, so it is stopped and leaves the bracket at once.
    """

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> str:
        """HyperBand's decision, with PAUSE at ``max_t`` turned into STOP."""
        action = super().on_trial_result(tune_controller, trial, result)
        time_attr, max_t = compat.hyperband_time_attr_and_max_t(self)
        if action == TrialScheduler.PAUSE and result.get(time_attr, 0) >= max_t:
            compat.hyperband_bracket_of(self, trial).cleanup_trial(trial)
            return TrialScheduler.STOP
        return action


def hyperband(config: SweepConfig) -> TrialScheduler:
    """``hyperband``: Tune's HyperBand, stopping a trial at ``max_t`` (:class:`FinishingHyperBand`)."""
    return FinishingHyperBand(
        time_attr=TIME_ATTR,
        max_t=config.trial.max_epochs,
        reduction_factor=config.scheduler.reduction_factor,
    )


def median(config: SweepConfig) -> TrialScheduler:
    """``median``: Tune's median stopping rule."""
    return MedianStoppingRule(time_attr=TIME_ATTR, grace_period=config.scheduler.grace_period)


def fifo(config: SweepConfig) -> TrialScheduler:
    """``fifo``: no early stopping."""
    return FIFOScheduler()


def build_scheduler(config: SweepConfig) -> TrialScheduler:
    """Returns the Tune scheduler of the ``scheduler.type`` kind."""
    return kinds.scheduler(config.scheduler.type).factory(config)
