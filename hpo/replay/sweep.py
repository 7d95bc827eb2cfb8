"""A sweep replayed from a :class:`~hpo.replay.table.CurveTable`, on a simulated clock, in this process.

The searcher and the scheduler are hpo's own, built from the sweep file as a real sweep builds them
(:func:`hpo.search.build_searcher`, :func:`hpo.search.build_scheduler`: Tune's searcher and scheduler
objects, Optuna's study and all). What replaces Ray Tune's controller is an event loop that calls them as
Tune's controller does (:meth:`ray.tune.execution.tune_controller.TuneController._process_trial_result`
and ``stop_trial``): each epoch's result goes to the scheduler, then (unless it stopped the trial) to the
searcher; a trial that ends is completed with both (the searcher's Optuna study is kept in memory).
Trials run ``search.max_concurrent`` at once, asynchronously: a slot that frees up starts the next
suggestion at that moment of simulated time, each epoch taking the seconds the table recorded for it.
Nothing sleeps: a 200-trial sweep replays in about a second.

A trial stops by itself as a real one does (Keras ``EarlyStopping`` with the sweep's ``patience`` and
``min_delta``, ``max_epochs``, the objective goal, which also ends the sweep); the scheduler may stop it
earlier. Supported: the searchers whose Tune object is a ``Searcher`` (``optuna-tpe``, ``optuna-gp``,
``random``) and the schedulers that continue or stop (``asha``, ``median``, ``fifo``); HyperBand pauses
trials and a grid expands Tune's variants, which this loop does not do (a clear error says so). Repeats are
not replayed.
"""

from __future__ import annotations

import heapq
import math
from dataclasses import dataclass
from typing import Any

import numpy as np

from hpo.config import SweepConfig
from hpo.progress.stopping import Rules, State, advance, higher_is_better
from hpo.replay.surrogate import Surrogate
from hpo.replay.table import CurveTable
from hpo.results import FINISHED_KEY

#: Tune's ``time_attr`` for hpo's schedulers: the epoch.
ITERATION = "training_iteration"


@dataclass(frozen=True)
class ReplayedTrial:
    """One replayed trial.

    Attributes:
        trial_id: Its id (``replay_00000``, in the order trials started).
        params: What the searcher proposed.
        config_id: The table's configuration that answered it (with a surrogate: the nearest one).
        values: The objective after each epoch it trained.
        started_s: When it started, on the simulated clock.
        ended_s: When its last epoch ended.
        stopped_by: ``scheduler``, ``patience``, ``max_epochs``, ``goal`` (its own rules), ``budget`` or
            ``time_budget`` (the sweep's end cut it).
    """

    trial_id: str
    params: dict[str, Any]
    config_id: int
    values: tuple[float, ...]
    started_s: float
    ended_s: float
    stopped_by: str


@dataclass(frozen=True)
class ReplayResult:
    """A replayed sweep.

    Attributes:
        trials: Every trial, in the order they started.
        mode: The objective's mode.
        events: ``(simulated seconds, epochs trained so far, trial index, value)`` of every epoch, in time order.
    """

    trials: tuple[ReplayedTrial, ...]
    mode: str
    events: tuple[tuple[float, int, int, float], ...]

    @property
    def epochs(self) -> int:
        """Epochs trained by every trial together."""
        return sum(len(t.values) for t in self.trials)

    @property
    def wall_s(self) -> float:
        """Simulated seconds from the first start to the last epoch."""
        return max((t.ended_s for t in self.trials), default=0.0)

    def best(self) -> float:
        """The best value any epoch reported (NaN with none)."""
        return self.best_after(math.inf)

    def best_after(self, epochs: float) -> float:
        """The best value reported within the first ``epochs`` epochs trained (in time order; NaN: none)."""
        values = [v for _, done, _, v in self.events if done <= epochs and not math.isnan(v)]
        if not values:
            return math.nan
        return max(values) if self.mode == "max" else min(values)

    def epochs_to_reach(self, target: float) -> int | None:
        """Epochs trained (in time order) until a reported value first reached ``target``; None if never."""
        for _, done, _, value in self.events:
            if not math.isnan(value) and (value >= target if self.mode == "max" else value <= target):
                return done
        return None


class _Trial:
    """What Tune's schedulers read of a trial: its id, hashable."""

    def __init__(self, trial_id: str) -> None:
        self.trial_id = trial_id

    def __repr__(self) -> str:
        return self.trial_id


class _Controller:
    """What Tune's schedulers ask the controller: the live trials waiting to run (none: trials start at once)."""

    def get_live_trials(self) -> list[Any]:
        return []


def _check(config: SweepConfig, table: CurveTable) -> None:
    """Raises ValueError for what this loop does not replay or a table that does not fit the sweep."""
    from hpo import kinds

    if kinds.searcher(config.search.algorithm).grid:
        raise ValueError(f"search.algorithm: '{config.search.algorithm}' is not replayed (grid expansion); "
                         "use optuna-tpe, optuna-gp or random")
    if config.scheduler.type == "hyperband":
        raise ValueError("scheduler.type: 'hyperband' pauses trials, which the replay does not do; use asha, "
                         "median or fifo")
    if config.search.repeats > 1:
        raise ValueError("search.repeats: repeats are not replayed; set it to 1")
    if config.objective.metric != table.task.metric or config.objective.mode != table.task.mode:
        raise ValueError(f"objective: the table records {table.task.metric} ({table.task.mode}); the sweep "
                         f"asks for {config.objective.metric} ({config.objective.mode})")
    if config.trial.max_epochs > table.task.max_epochs:
        raise ValueError(f"trial.max_epochs: {config.trial.max_epochs} is more than the table's "
                         f"{table.task.max_epochs} recorded epochs")


def replay_sweep(
    config: SweepConfig,
    table: CurveTable,
    *,
    budget_epochs: int | None = None,
    startup_s: float = 0.0,
    surrogate: Surrogate | None = None,
) -> ReplayResult:
    """Replays ``config`` on ``table``.

    Args:
        config: The sweep (its searcher, scheduler, seed, ``search.num_samples``/``max_trials``,
            ``max_concurrent``, ``time_budget_s`` on the simulated clock, stopping rules, goal).
        table: The recorded curves of its task.
        budget_epochs: Ends the sweep once this many epochs have been trained (running trials are cut
            there, ``stopped_by="budget"``); None: the sweep's own trial count and time budget only.
        startup_s: Simulated seconds a trial takes before its first epoch.
        surrogate: Answers each proposal with this surrogate's curve (fitted on ``table``); None: with the
            nearest recorded configuration's curve, as recorded.

    Returns:
        Every trial and every epoch, on the simulated clock.

    Raises:
        ValueError: A searcher, scheduler or setting the replay does not support, or a table that does
            not record the sweep's objective.
    """
    _check(config, table)
    return _Replay(config, table, budget_epochs, startup_s, surrogate).run()


class _Replay:
    """The event loop of one replayed sweep (see :func:`replay_sweep`)."""

    def __init__(self, config: SweepConfig, table: CurveTable, budget_epochs: int | None, startup_s: float,
                 surrogate: Surrogate | None) -> None:
        from hpo import search

        self.config, self.table, self.budget, self.startup_s = config, table, budget_epochs, startup_s
        self.surrogate = surrogate
        self.searcher = search.build_searcher(config, None)  # the study in memory
        self.scheduler = search.build_scheduler(config)
        self.scheduler.set_search_properties(config.objective.metric, config.objective.mode)
        self.controller = _Controller()
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
        for _ in range(self.config.search.max_concurrent):
            self._start(0.0)
        budget_s = self.config.search.time_budget_s
        while self.queue:
            now, _, index = heapq.heappop(self.queue)
            if budget_s is not None and now > budget_s:
                self._cut_all(budget_s, "time_budget")  # Tune stops the experiment when its time is up
                break
            self._epoch(index, now)
        return ReplayResult(
            tuple(ReplayedTrial(t["id"], t["params"], t["config_id"], tuple(t["values"]), t["started_s"],
                                t["ended_s"], t["stopped_by"]) for t in self.trials),
            self.config.objective.mode, tuple(self.events))

    def _start(self, now: float) -> None:
        """Starts the searcher's next suggestion at ``now``, unless the sweep has nothing more to start."""
        budget_s = self.config.search.time_budget_s
        if self.over or len(self.trials) >= self.limit or (budget_s is not None and now >= budget_s):
            return
        trial_id = f"replay_{len(self.trials):05d}"
        params = self.searcher.suggest(trial_id)
        if not isinstance(params, dict):  # None (nothing now) or Searcher.FINISHED
            return
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
        trial = {"id": trial_id, "tune": _Trial(trial_id), "params": params, "config_id": config_id,
                 "curve": values, "epoch_s": curve.epoch_s, "own_stop": own_stop, "own_reason": reason,
                 "values": [], "started_s": now, "ended_s": now, "stopped_by": ""}
        self.trials.append(trial)
        self.scheduler.on_trial_add(self.controller, trial["tune"])
        self._next(len(self.trials) - 1, now + self.startup_s)

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
            self._start(now)
            return
        self._next(index, now)

    def _end(self, trial: dict[str, Any], result: dict[str, Any], reason: str) -> None:
        """Completes ``trial`` with the scheduler and the searcher, as Tune's ``stop_trial`` does."""
        trial["stopped_by"] = reason
        self.scheduler.on_trial_complete(self.controller, trial["tune"], result)
        self.searcher.on_trial_complete(trial["id"], result=result)

    def _cut_all(self, now: float, reason: str) -> None:
        """Ends the sweep at ``now``: running trials stop where they are, nothing more starts."""
        self.over = True
        for trial in self.trials:
            if trial["stopped_by"]:
                continue
            if not trial["values"]:  # started, no epoch yet: Tune removes it as a pending trial
                trial["stopped_by"] = reason
                self.scheduler.on_trial_remove(self.controller, trial["tune"])
                self.searcher.on_trial_complete(trial["id"])
                continue
            last = {self.config.objective.metric: trial["values"][-1], ITERATION: len(trial["values"]),
                    FINISHED_KEY: False, "trial_id": trial["id"]}
            self._end(trial, last, reason)
        self.queue.clear()
