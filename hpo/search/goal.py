"""The goal stopper: ends the sweep once a trial (or a configuration's repeats) reaches ``objective.goal``."""

from __future__ import annotations

import logging
import math
import numbers
from typing import Any

from ray.tune import Callback
from ray.tune.stopper import Stopper

from hpo.config import SweepConfig
from hpo.objective import configuration_key, reaches_goal, repeats_reach_goal

logger = logging.getLogger(__name__)


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
