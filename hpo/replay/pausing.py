"""The replay's event loop for schedulers that pause trials: Tune's HyperBand, hpo's ``hyperband``, BOHB's.

HyperBand runs synchronous brackets: a trial that reaches its bracket's rung is paused (its slot freed)
until every trial of the bracket is there, then the bracket keeps the best and resumes them. That needs
more of Tune's controller than :class:`hpo.replay.loop.Replay` stands in for, and this loop does it as
:class:`ray.tune.execution.tune_controller.TuneController` does:

- trials have Tune's statuses (PENDING, RUNNING, PAUSED, TERMINATED), which the scheduler reads;
- new trials are asked of the searcher while fewer than ``max_pending`` are PENDING (Tune's
  ``_get_max_pending_trials``: the ``ConcurrencyLimiter``'s ``max_concurrent``, else 1), hpo's own searcher
  being wrapped in a ``ConcurrencyLimiter`` of ``search.max_concurrent`` as Tune wraps it for
  ``max_concurrent_trials`` (so a paused trial still counts against it);
- a free slot runs what the scheduler's ``choose_trial_to_run`` picks (a PENDING trial or a PAUSED one it
  marked to resume), else the first PENDING trial;
- ``stop_trial`` on a PENDING or PAUSED trial tells the scheduler ``on_trial_remove`` and the searcher
  ``on_trial_complete`` without a result; on the running one, both ``on_trial_complete`` with its last result;
- ``search_alg.searcher`` is the searcher (``HyperBandForBOHB`` tells it when it pauses and resumes trials).

A pause takes no simulated time and no save is ever under way (``is_saving`` is False), so the race that
:class:`hpo.search.schedulers.FinishingHyperBand` guards against does not arise here. When nothing runs and
nothing can start while trials stay paused, Tune's controller would wait for ever: the replay ends there and
marks those trials ``stalled``.
"""

from __future__ import annotations

from types import SimpleNamespace
from typing import Any

from ray.tune.experiment import Trial
from ray.tune.search import ConcurrencyLimiter

from hpo.replay.loop import Replay


class PausingController:
    """What Tune's pausing schedulers ask of the controller, answered from the replay's trials.

    Args:
        replay: The loop whose trials these are.
    """

    def __init__(self, replay: PausingReplay) -> None:
        self._replay = replay
        self.search_alg = SimpleNamespace(searcher=replay.searcher)

    def get_trials(self) -> list[Any]:
        """Every trial, in the order they were added."""
        return [t["tune"] for t in self._replay.trials]

    def get_live_trials(self) -> list[Any]:
        """The trials not terminated."""
        return [t["tune"] for t in self._replay.trials if t["tune"].status != Trial.TERMINATED]

    def stop_trial(self, tune_trial: Any) -> None:
        """Stops a trial as Tune's ``TuneController.stop_trial`` does (see the module)."""
        self._replay.stop(tune_trial)


class PausingReplay(Replay):
    """:class:`hpo.replay.loop.Replay` with trials that the scheduler may pause and resume (see the module)."""

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        if kwargs.get("searcher") is None:  # Tune wraps the sweep's searcher for ``max_concurrent_trials``
            self.searcher = ConcurrencyLimiter(self.searcher, max_concurrent=self.config.search.max_concurrent)
        limiter = self.searcher if isinstance(self.searcher, ConcurrencyLimiter) else None
        self.max_pending = limiter.max_concurrent if limiter is not None else 1
        self.controller = PausingController(self)
        self.cut_reason = ""

    def _status(self, status: str) -> list[int]:
        return [i for i, t in enumerate(self.trials) if t["tune"].status == status]

    def _begin(self) -> None:
        self._fill(0.0)

    def _epoch(self, index: int, now: float) -> None:
        """As :meth:`Replay._epoch`; then, as Tune's next step does, free slots run what is ready."""
        super()._epoch(index, now)
        if not self.over:
            self._fill(now)

    def _freed(self, now: float) -> None:
        """A trial ended: :meth:`_epoch` fills its slot once the result is handled."""

    def _pause(self, index: int, now: float) -> None:
        self.trials[index]["tune"].status = Trial.PAUSED

    def _fill(self, now: float) -> None:
        """Adds PENDING trials and runs what the scheduler picks while a slot is free, as Tune's step does."""
        while not self.over:
            while len(self._status(Trial.PENDING)) < self.max_pending:
                if self._add(now) is None:
                    break
            if len(self._status(Trial.RUNNING)) >= self.config.search.max_concurrent:
                return
            chosen = self.scheduler.choose_trial_to_run(self.controller)
            pending = self._status(Trial.PENDING)
            if chosen is not None:
                index = next(i for i, t in enumerate(self.trials) if t["tune"] is chosen)
            elif pending:
                index = pending[0]
            else:
                return
            self._run(index, now)

    def _run(self, index: int, now: float) -> None:
        """Starts or resumes trial ``index`` at ``now``."""
        trial = self.trials[index]
        if not trial["values"]:
            trial["started_s"] = now
        trial["tune"].status = Trial.RUNNING
        self._next(index, now + self.startup_s)

    def stop(self, tune_trial: Any) -> None:
        """Tune's ``stop_trial`` on ``tune_trial``, asked by the scheduler."""
        trial = next(t for t in self.trials if t["tune"] is tune_trial)
        status = tune_trial.status
        if status == Trial.TERMINATED:
            return
        trial["stopped_by"] = self.cut_reason or "scheduler"
        tune_trial.status = Trial.TERMINATED
        if status in (Trial.PENDING, Trial.PAUSED):
            self.scheduler.on_trial_remove(self.controller, tune_trial)
            self.searcher.on_trial_complete(trial["id"])
        else:
            result = trial.get("result") or {}
            self.scheduler.on_trial_complete(self.controller, tune_trial, result)
            self.searcher.on_trial_complete(trial["id"], result=result)

    def _cut_all(self, now: float, reason: str) -> None:
        self.cut_reason = reason  # a trial the scheduler stops while the sweep ends is marked with it
        super()._cut_all(now, reason)

    def _finish(self) -> None:
        """Trials left paused or pending with nothing running: Tune would wait for ever; they end ``stalled``."""
        if self.over:
            return
        self.over = True
        self.cut_reason = "stalled"
        for trial in self.trials:
            if not trial["stopped_by"]:
                self.stop(trial["tune"])
