"""The event loop of a replayed sweep for schedulers that continue or stop trials (ASHA, the median rule, FIFO).

It stands in for Ray Tune's controller: it calls the sweep's searcher and scheduler as
:meth:`ray.tune.execution.tune_controller.TuneController._process_trial_result` and ``stop_trial`` do.
Each epoch's result goes to the scheduler, then (unless it stopped the trial) to the searcher; a trial that
ends is completed with both. A slot that frees up starts the next suggestion at that moment of simulated
time. Schedulers that pause trials (HyperBand) need more of the controller: :mod:`hpo.replay.pausing`.
"""

from __future__ import annotations

import heapq
from typing import Any

import numpy as np
from ray.tune.experiment import Trial

from hpo.config import SweepConfig
from hpo.progress.stopping import Rules, State, advance, higher_is_better
from hpo.replay.result import ReplayedTrial, ReplayResult
from hpo.replay.surrogate import Surrogate
from hpo.replay.table import CurveTable
from hpo.results import FINISHED_KEY

#: Tune's ``time_attr`` for hpo's schedulers: the epoch.
ITERATION = "training_iteration"


class TuneTrial:
    """What Tune's schedulers read of a trial: its id (hashable), its status, whether a save is under way."""

    def __init__(self, trial_id: str) -> None:
        self.trial_id = trial_id
        self.status = Trial.PENDING
        self.is_saving = False  # a pause here is instantaneous: no save is ever under way

    def __repr__(self) -> str:
        return self.trial_id


class Controller:
    """What Tune's schedulers ask the controller: the live trials waiting to run (none: trials start at once)."""

    def get_live_trials(self) -> list[Any]:
        """No trial ever waits to run here."""
        return []


class Replay:
    """The event loop of one replayed sweep (see :func:`hpo.replay.replay_sweep`).

    Args:
        config: The sweep.
        table: Its task's recorded curves.
        budget_epochs: Ends the sweep once this many epochs have been trained (None: no such end).
        startup_s: Simulated seconds before a trial's first epoch.
        surrogate: Answers proposals (None: the nearest recorded configuration).
        searcher: A Tune ``Searcher`` to use instead of the sweep file's (None: the sweep file's).
        scheduler: A Tune ``TrialScheduler`` to use instead of the sweep file's (None: the sweep file's).
    """

    def __init__(self, config: SweepConfig, table: CurveTable, budget_epochs: int | None, startup_s: float,
                 surrogate: Surrogate | None, searcher: Any = None, scheduler: Any = None) -> None:
        from hpo import search

        self.config, self.table, self.budget, self.startup_s = config, table, budget_epochs, startup_s
        self.surrogate = surrogate
        self.searcher = search.build_searcher(config, None) if searcher is None else searcher  # study in memory
        self.scheduler = search.build_scheduler(config) if scheduler is None else scheduler
        self.scheduler.set_search_properties(config.objective.metric, config.objective.mode)
        self.controller: Any = Controller()
        goal = config.objective.goal
        self.rules = Rules(config.trial.early_stopping.patience, config.trial.early_stopping.min_delta,
                           config.trial.max_epochs,
                           None if goal is None else float(higher_is_better([goal], config.objective.mode)[0]))
        self.limit = config.search.max_trials or config.search.num_samples
        self.draws = np.random.default_rng(config.search.seed)
        self.trials: list[dict[str, Any]] = []
        self.events: list[tuple[float, int, int, float]] = []
        self.queue: list[tuple[float, int, int]] = []  # (time, sequence, trial index)
        self.sequence = 0
        self.trained = 0
        self.over = False

    def run(self) -> ReplayResult:
        """Starts ``max_concurrent`` trials, then handles epoch ends in time order until the sweep is over."""
        self._begin()
        budget_s = self.config.search.time_budget_s
        while self.queue:
            now, _, index = heapq.heappop(self.queue)
            if budget_s is not None and now > budget_s:
                self._cut_all(budget_s, "time_budget")  # Tune stops the experiment when its time is up
                break
            self._epoch(index, now)
        self._finish()
        return ReplayResult(
            tuple(ReplayedTrial(t["id"], t["params"], t["config_id"], tuple(t["values"]), t["started_s"],
                                t["ended_s"], t["stopped_by"]) for t in self.trials),
            self.config.objective.mode, tuple(self.events))

    def _begin(self) -> None:
        """Starts the first ``max_concurrent`` trials at time 0."""
        for _ in range(self.config.search.max_concurrent):
            self._start(0.0)

    def _finish(self) -> None:
        """Called once no epoch is left to run (nothing to do here: every trial has ended)."""

    def _can_add(self, now: float) -> bool:
        """Whether the sweep may still add a trial at ``now``."""
        budget_s = self.config.search.time_budget_s
        return not (self.over or len(self.trials) >= self.limit or (budget_s is not None and now >= budget_s))

    def _add(self, now: float) -> int | None:
        """Adds the searcher's next suggestion as a trial (told to the scheduler); its index, None if none."""
        if not self._can_add(now):
            return None
        trial_id = f"replay_{len(self.trials):05d}"
        params = self.searcher.suggest(trial_id)
        if not isinstance(params, dict):  # None (nothing now) or Searcher.FINISHED
            return None
        draw = int(self.draws.integers(1 << 30))
        if self.surrogate is None:
            config_id = self.table.nearest(params)
            curve = self.table.curve(config_id, draw)
        else:
            config_id = self.surrogate.nearest(params)
            curve = self.surrogate.curve(params, draw)
        values = curve.values[: self.config.trial.max_epochs]
        state = advance(State.start(1), higher_is_better(values, self.table.task.mode)[None, :], self.rules)
        own_stop = int(state.stop[0])
        if bool(state.by_goal[0]):
            reason = "goal"
        elif own_stop < self.config.trial.max_epochs:
            reason = "patience"
        else:
            reason = "max_epochs"
        trial = {"id": trial_id, "tune": TuneTrial(trial_id), "params": params, "config_id": config_id,
                 "curve": values, "epoch_s": curve.epoch_s, "own_stop": own_stop, "own_reason": reason,
                 "values": [], "started_s": now, "ended_s": now, "stopped_by": ""}
        self.trials.append(trial)
        self.scheduler.on_trial_add(self.controller, trial["tune"])
        return len(self.trials) - 1

    def _start(self, now: float) -> None:
        """Starts the searcher's next suggestion at ``now``, unless the sweep has nothing more to start."""
        index = self._add(now)
        if index is not None:
            self.trials[index]["tune"].status = Trial.RUNNING
            self._next(index, now + self.startup_s)

    def _next(self, index: int, now: float) -> None:
        """Schedules the end of trial ``index``'s next epoch."""
        trial = self.trials[index]
        epoch = len(trial["values"])
        heapq.heappush(self.queue, (now + float(trial["epoch_s"][epoch]), self.sequence, index))
        self.sequence += 1

    def _epoch(self, index: int, now: float) -> None:
        """Trial ``index`` ended an epoch at ``now``: tells the scheduler and the searcher, as Tune does."""
        trial = self.trials[index]
        if trial["stopped_by"]:
            return  # cut by the budget or the goal while this epoch ran
        epoch = len(trial["values"]) + 1
        value = float(trial["curve"][epoch - 1])
        trial["values"].append(value)
        trial["ended_s"] = now
        self.trained += 1
        self.events.append((now, self.trained, index, value))
        last = epoch >= trial["own_stop"]
        result = {self.config.objective.metric: value, ITERATION: epoch, FINISHED_KEY: last,
                  "trial_id": trial["id"]}
        trial["result"] = result
        decision = self.scheduler.on_trial_result(self.controller, trial["tune"], result)
        stopped = decision == "STOP" and not last
        if not stopped:
            self.searcher.on_trial_result(trial["id"], result)
        if self.budget is not None and self.trained >= self.budget:
            self._end(trial, result, "scheduler" if stopped else trial["own_reason"] if last else "budget")
            self._cut_all(now, "budget")
            return
        if last or stopped:
            self._end(trial, result, "scheduler" if stopped else trial["own_reason"])
            if trial["stopped_by"] == "goal":
                self._cut_all(now, "goal")
                return
            self._freed(now)
            return
        if decision == "PAUSE":
            self._pause(index, now)
            return
        self._next(index, now)

    def _freed(self, now: float) -> None:
        """A trial ended at ``now``: its slot starts the next suggestion."""
        self._start(now)

    def _pause(self, index: int, now: float) -> None:
        """The scheduler paused trial ``index``: only :class:`hpo.replay.pausing.PausingReplay` can."""
        raise RuntimeError(f"{type(self.scheduler).__name__} paused a trial; replay it with PausingReplay")

    def _end(self, trial: dict[str, Any], result: dict[str, Any], reason: str) -> None:
        """Completes ``trial`` with the scheduler and the searcher, as Tune's ``stop_trial`` does."""
        trial["stopped_by"] = reason
        self.scheduler.on_trial_complete(self.controller, trial["tune"], result)
        self.searcher.on_trial_complete(trial["id"], result=result)
        trial["tune"].status = Trial.TERMINATED

    def _cut_all(self, now: float, reason: str) -> None:
        """Ends the sweep at ``now``: running trials stop where they are, nothing more starts."""
        self.over = True
        for trial in self.trials:
            if trial["stopped_by"]:
                continue
            if not trial["values"]:  # started, no epoch yet: Tune removes it as a pending trial
                trial["stopped_by"] = reason
                trial["tune"].status = Trial.TERMINATED
                self.scheduler.on_trial_remove(self.controller, trial["tune"])
                self.searcher.on_trial_complete(trial["id"])
                continue
            self._end(trial, trial["result"], reason)  # its last epoch's result (not finished, or it had ended)
        self.queue.clear()
