"""Searcher and scheduler registries: sweep-file names → Ray Tune objects.

``optuna-tpe``, ``optuna-gp`` and ``random`` are Optuna samplers behind Ray's ``OptunaSearch``, with the
study persisted in ``STORAGE/NAME/optuna.db`` (readable by ``optuna-dashboard``); ``grid`` is Tune's grid
expansion. ``search.repeats`` wraps the searcher in Tune's ``Repeater``: each sampled configuration runs
``repeats`` times with different seeds and the searcher is told the mean.
"""

from __future__ import annotations

import logging
import math
import numbers
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

from ray.tune import Callback
from ray.tune.schedulers import (
    AsyncHyperBandScheduler,
    FIFOScheduler,
    HyperBandScheduler,
    MedianStoppingRule,
    TrialScheduler,
)
from ray.tune.schedulers.async_hyperband import _Bracket
from ray.tune.search import BasicVariantGenerator, Repeater
from ray.tune.search.optuna import OptunaSearch
from ray.tune.stopper import Stopper

from hpo.config import FINISHED_KEY, SweepConfig, configuration_key, reaches_goal, repeats_reach_goal
from hpo.space import define_by_run
from hpo.warmstart import Mode, seed_study

logger = logging.getLogger(__name__)

#: Tune's iteration counter; one iteration is one epoch of a trial.
TIME_ATTR = "training_iteration"


def _sampler(config: SweepConfig) -> Any:
    import optuna

    seed = config.search.seed
    algorithm = config.search.algorithm
    startup = {} if config.search.startup_trials is None else {"n_startup_trials": config.search.startup_trials}
    if algorithm == "optuna-tpe":
        return optuna.samplers.TPESampler(seed=seed, **startup)
    if algorithm == "optuna-gp":
        return optuna.samplers.GPSampler(seed=seed, **startup)
    return optuna.samplers.RandomSampler(seed=seed)


def study_url(sweep_dir: Path) -> str:
    """The Optuna RDB storage URL of a sweep's study."""
    return f"sqlite:///{sweep_dir / 'optuna.db'}"


def build_searcher(
    config: SweepConfig,
    sweep_dir: Path,
    resume: bool = False,
    warm_points: list[tuple[dict[str, Any], float]] | None = None,
    warm_mode: Mode = "prior",
) -> Any:
    """Returns the Tune search algorithm named by ``search.algorithm`` (wrapped for repeats).

    Args:
        config: The sweep.
        sweep_dir: ``STORAGE/NAME``; the Optuna study is kept there.
        resume: Continue the persisted study instead of starting a fresh one.
        warm_points: ``(params, metric)`` of a previous sweep to seed the study with.
        warm_mode: ``prior`` (told as finished trials) or ``reevaluate`` (queued to run first).
    """
    if config.search.algorithm == "grid":
        return CappedGrid(config.search.max_trials, random_state=config.search.seed)
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    sweep_dir.mkdir(parents=True, exist_ok=True)
    storage = optuna.storages.RDBStorage(study_url(sweep_dir))
    if not resume:
        try:
            optuna.delete_study(study_name=config.name, storage=storage)
        except KeyError:
            pass
        if warm_points:
            seed_study(study_url(sweep_dir), config, warm_points, warm_mode)
    searcher = DurableOptunaSearch(
        space=define_by_run(config),
        metric=config.objective.metric,
        mode=config.objective.mode,
        sampler=_sampler(config),
        storage=storage,
        study_name=config.name,
    )
    if config.search.repeats > 1:
        return Repeater(searcher, repeat=config.search.repeats, set_index=True)
    return searcher


class DurableOptunaSearch(OptunaSearch):
    """Tune's ``OptunaSearch``, telling scheduler stops as Optuna prunes, for a study that outlives Tune's state.

    A trial the scheduler stopped is told as PRUNED, with every epoch's value as an intermediate value (the
    last one becomes the trial's value, as Optuna does for its own pruners). Ray's ``OptunaSearch`` tells
    it COMPLETE, so TPE ranked an epoch-1 accuracy of a trial ASHA cut against the final accuracy of trials
    that trained to ``max_epochs``; as PRUNED, TPE ranks finished trials first, then stopped ones by how far
    they got and their last value. Trials that finished (or repeats' means) are told COMPLETE as before.

    Tune saves its experiment state (searcher included) every few seconds; the Optuna study is written at
    once. A sweep killed in between resumes with trials that Tune re-runs from their last checkpoint but
    that the study has already finished. Their repeated results and completions are logged and ignored
    (the study keeps the value it was told first) instead of stopping the sweep with Optuna's
    ``UpdateFinishedTrialError``.
    """

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        """Reports an intermediate value, unless the study already finished this trial."""
        from optuna.exceptions import UpdateFinishedTrialError

        try:
            super().on_trial_result(trial_id, result)
        except UpdateFinishedTrialError:
            logger.info("trial %s finished in the study before the sweep was resumed; result not re-told", trial_id)
            self._completed_trials.add(trial_id)

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False) -> None:
        """Tells the study how the trial ended: PRUNED if the scheduler stopped it, else as Ray does."""
        stopped = bool(result) and not error and result.get(FINISHED_KEY) is False
        value = (result or {}).get(self.metric)
        step = (result or {}).get(TIME_ATTR)
        if not stopped or value is None or step is None or trial_id in self._completed_trials:
            super().on_trial_complete(trial_id, result=result, error=error)
            return
        import optuna

        trial = self._ot_trials[trial_id]
        try:
            with warnings.catch_warnings():  # Optuna warns (and ignores it) if the step was reported already
                warnings.simplefilter("ignore")
                trial.report(value, step)  # the result that made the scheduler stop it is not reported yet
            self._ot_study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        except (optuna.exceptions.UpdateFinishedTrialError, ValueError, RuntimeError) as exc:
            logger.info("trial %s not told as pruned: %s", trial_id, exc)  # e.g. finished before a resume
        self._completed_trials.add(trial_id)


class CappedGrid(BasicVariantGenerator):
    """Tune's grid expansion that hands out at most ``max_trials`` trials (None: the whole grid).

    Args:
        max_trials: The cap (``search.max_trials``).
        **kwargs: Passed to ``BasicVariantGenerator``.
    """

    def __init__(self, max_trials: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._max_trials = max_trials
        self._handed_out = 0

    def next_trial(self) -> Any:
        """The next grid point's trial, or None once ``max_trials`` were handed out (or the grid is done)."""
        if self._max_trials is not None and self._handed_out >= self._max_trials:
            self.set_finished()
            return None
        trial = super().next_trial()
        if trial is not None:
            self._handed_out += 1
        return trial


class _BootstrapBracket(_Bracket):
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
        for milestone, recorded in self._rungs:
            if cur_iter < milestone or trial.trial_id in recorded:
                continue
            if milestone < self._max_t and len(recorded) < self._bootstrap and cur_rew is not None:
                recorded[trial.trial_id] = cur_rew
                return TrialScheduler.STOP
            break
        return super().on_result(trial, cur_iter, cur_rew)


class BootstrapASHA(AsyncHyperBandScheduler):
    """Tune's ASHA with Optuna's ``bootstrap_count`` (see :class:`_BootstrapBracket`).

    Args:
        bootstrap_count: Trials that must have reached a rung before a trial may continue past it.
        **kwargs: Passed to ``AsyncHyperBandScheduler`` (one bracket).
    """

    def __init__(self, bootstrap_count: int, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._brackets = [
            _BootstrapBracket(
                min_t=kwargs["grace_period"],
                max_t=kwargs["max_t"],
                reduction_factor=kwargs["reduction_factor"],
                s=0,
                stop_last_trials=self._stop_last_trials,
                bootstrap=bootstrap_count,
            )
        ]


def _asha(config: SweepConfig) -> TrialScheduler:
    arguments = {
        "time_attr": TIME_ATTR,
        "max_t": config.trial.max_epochs,
        "grace_period": min(config.scheduler.grace_period, config.trial.max_epochs),
        "reduction_factor": config.scheduler.reduction_factor,
    }
    if config.scheduler.bootstrap_count:
        return BootstrapASHA(config.scheduler.bootstrap_count, **arguments)
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
        if action == TrialScheduler.PAUSE and result.get(self._time_attr, 0) >= self._max_t_attr:
            bracket, _ = self._trial_info[trial]
            bracket.cleanup_trial(trial)
            return TrialScheduler.STOP
        return action


def _hyperband(config: SweepConfig) -> TrialScheduler:
    return FinishingHyperBand(
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


def build_scheduler(config: SweepConfig) -> TrialScheduler:
    """Returns the Tune scheduler named by ``scheduler.type``."""
    return SCHEDULERS[config.scheduler.type](config)


def planned_trials(config: SweepConfig) -> int:
    """How many trials the sweep runs: configurations × repeats, capped by ``search.max_trials``."""
    planned = config.search.num_samples * config.search.repeats
    return planned if config.search.max_trials is None else min(planned, config.search.max_trials)


def tune_num_samples(config: SweepConfig) -> int:
    """Tune's ``num_samples``: the planned trials, or repetitions of the grid for ``grid`` (capped there)."""
    if config.search.algorithm == "grid":
        return config.search.num_samples // config.grid_size
    return planned_trials(config)


class GoalStopper(Stopper, Callback):
    """Ends the sweep once a trial reaches ``objective.goal`` (with ``repeats``, once a configuration's mean does).

    One trial per configuration: the sweep ends at the first epoch of any trial that reaches the goal. The
    trial that reached it ends itself at that epoch as finished (the worker's goal check), so its final
    checkpoint holds its model. The sweep is stopped only once that trial has ended: Tune's stop of the
    whole experiment would cut it while its last checkpoint is still being saved, and lose it.

    With ``repeats`` > 1 one lucky seed is not enough (that is what repeats are for): a configuration
    reaches the goal when the mean of its repeats' best epochs does, judged once all its repeats have
    ended, and its trials run to their own end (no worker goal check). The first trial of that
    configuration is ``reached_by``.

    Also a Tune callback, to hear of trial ends; pass the same object as ``RunConfig(stop=...)`` and in its
    callbacks.

    Args:
        metric: The objective metric.
        mode: ``max`` (reached at ``>= goal``) or ``min`` (at ``<= goal``).
        goal: The value to reach.
        repeats: ``search.repeats``: trials per configuration.
    """

    def __init__(self, metric: str, mode: str, goal: float, repeats: int = 1) -> None:
        self.metric, self.mode, self.goal, self.repeats = metric, mode, goal, repeats
        self.reached_by: str | None = None
        self.settled = False  # the trial (configuration) that reached the goal has ended
        self._best: dict[str, float] = {}  # repeats: each trial's best value so far
        self._groups: dict[str, list[tuple[str, float | None]]] = {}  # repeats: ended trials per configuration

    def reached(self, value: Any) -> bool:
        """Whether ``value`` reaches the goal."""
        return reaches_goal(value, self.goal, self.mode)

    def __call__(self, trial_id: str, result: dict[str, Any]) -> bool:
        """Notes the first trial whose result reaches the goal; single trials are not stopped here."""
        value = result.get(self.metric)
        if self.repeats > 1:
            if isinstance(value, numbers.Real) and not math.isnan(value):
                best = self._best.get(trial_id)
                better = best is None or (value > best if self.mode == "max" else value < best)
                self._best[trial_id] = float(value) if better else best
        elif self.reached_by is None and self.reached(value):
            self.reached_by = trial_id
            logger.info("trial %s reached the goal %s %s: stopping the sweep", trial_id, self.metric, self.goal)
        return False

    def stop_all(self) -> bool:
        """True once the goal was reached and the trial (all repeats of the configuration) that reached it ended."""
        return self.settled

    def _settle(self, trial: Any) -> None:
        if self.repeats > 1:
            self._end_repeat(trial)
        elif self.reached_by is not None and trial.trial_id == self.reached_by:
            self.settled = True

    def _end_repeat(self, trial: Any) -> None:
        group = self._groups.setdefault(configuration_key(trial.config or {}), [])
        group.append((trial.trial_id, self._best.get(trial.trial_id)))
        if len(group) < self.repeats:
            return
        done = group[: self.repeats]
        del group[: self.repeats]  # the same configuration drawn again is a new group
        if self.reached_by is None and repeats_reach_goal([v for _, v in done], self.goal, self.mode):
            self.reached_by = min(t for t, _ in done)
            self.settled = True
            logger.info("configuration of trial %s reached the goal %s %s over %d repeats: stopping the sweep",
                        self.reached_by, self.metric, self.goal, self.repeats)

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        """A trial ended: the reaching one, or (repeats) one of a configuration's."""
        self._settle(trial)

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        """A trial failed: the reaching one after reaching the goal, or (repeats) one of a configuration's."""
        self._settle(trial)


def build_stopper(config: SweepConfig) -> GoalStopper | None:
    """The sweep's stopper: a :class:`GoalStopper` if ``objective.goal`` is set, else None."""
    objective = config.objective
    if objective.goal is None:
        return None
    return GoalStopper(objective.metric, objective.mode, objective.goal, config.search.repeats)
