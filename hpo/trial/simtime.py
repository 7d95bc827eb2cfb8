"""A simulated sweep's clock, seen from the sweep's driver: Tune's loop tells it which trials run.

The clock itself (:class:`~hpo.trial.simclock.SimClock`) lives in the simulator host, beside the replays
that sleep on it. :class:`SweepClock` opens it at the sweep's start, and as a Tune callback tells it after
each step of Tune's loop which trials Tune runs or is starting (they hold the clock until their replay
sleeps; a trial that waits for a free slot, e.g. a paused one, does not) and which just ended (they hold it
one more step, so Tune can start the next trial in their place at the simulated time the slot came free).
:meth:`SweepClock.now` is the sweep's time for everything the driver stamps (the progress record, its
journal and forecast).
"""

from __future__ import annotations

import dataclasses
import time
import uuid
from typing import Any

from ray.tune import Callback

from hpo.trial.spec import TrialSpec

#: Real seconds a trial Tune has not started yet (its actor is starting) holds the clock at most; longer, it
#: waits for resources another trial holds, and simulated time goes on without it.
START_HOLD_S = 10.0


class SweepClock(Callback):
    """The simulated clock of one sweep (see the module docstring).

    Args:
        key: The clock's key in the simulator host.
        start: Its reading at the start (the sweep's Unix start time).
        max_concurrent: The most trials Tune runs at once (``search.max_concurrent``): a trial Tune has not
            started holds the clock only while fewer run (a paused trial that waits for a free slot does not).
    """

    def __init__(self, key: str, start: float, max_concurrent: int | None = None) -> None:
        self.key, self.start, self.max_concurrent = key, start, max_concurrent
        self._host: Any = None
        self._number = 0
        self._sent: tuple[frozenset[str], frozenset[str]] | None = None
        self._running: set[str] = set()
        self._pending_since: dict[str, float] = {}
        self._last, self._closed = start, False
        self._hint: float | None = None

    @classmethod
    def open(
        cls, spec: TrialSpec, started: float, max_concurrent: int | None = None
    ) -> tuple[TrialSpec, SweepClock | None]:
        """The sweep's clock, if its trials run on one, and the spec that sends them to it.

        Args:
            spec: The sweep's trial spec.
            started: The sweep's Unix start time (the clock's first reading).
            max_concurrent: The most trials Tune runs at once.

        Returns:
            ``(spec, None)`` unless ``backend: simulated`` with ``simulated_clock``; else the spec with the
            clock's key and the opened clock.
        """
        if spec.backend != "simulated" or not spec.simulated_clock:
            return spec, None
        clock = cls(uuid.uuid4().hex, started, max_concurrent)
        clock.host().open_clock.remote(clock.key, started)
        return dataclasses.replace(spec, clock_key=clock.key), clock

    def host(self) -> Any:
        """The simulator host's actor handle."""
        if self._host is None:
            from hpo.trial.simhost import simulator_host

            self._host = simulator_host()
        return self._host

    def now(self) -> float:
        """The sweep's simulated time (Unix seconds; once the sweep ended, its last reading).

        While Tune hands out a result, the time is that result's epoch end (the trial that reported holds the
        clock there until Tune answers), read without asking the host.
        """
        if self._hint is not None:
            return self._hint
        if not self._closed:
            import ray

            now = self.host().now.remote(self.key)
            now = ray.get(now) if isinstance(now, ray.ObjectRef) else now
            self._last = self._last if now is None else now
        return self._last

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        """The time until this step ends is the result's epoch end (callbacks after this one read it)."""
        hint = result.get("epoch_end_time")
        self._hint = float(hint) if isinstance(hint, int | float) else None

    def on_step_begin(self, iteration: int, trials: list, **info: Any) -> None:
        """A new step: the time is read from the host again."""
        self._hint = None

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        """Tells the clock which trials Tune runs or starts, and which just ended (when that changed)."""
        self._hint = None
        running: set[str] = set()
        pending: dict[str, float] = {}
        moment = time.monotonic()
        for trial in trials:
            if trial.status == "RUNNING":
                running.add(trial.trial_id)
            elif trial.status == "PENDING":
                pending[trial.trial_id] = self._pending_since.get(trial.trial_id, moment)
        slots = len(pending) if self.max_concurrent is None else self.max_concurrent - len(running)
        for trial_id, since in pending.items():  # in Tune's order: the first ones start first
            if slots <= 0:
                break
            if moment - since < START_HOLD_S:
                running.add(trial_id)
                slots -= 1
        settling = self._running - running
        self._running, self._pending_since = running, pending
        state = (frozenset(running), frozenset(settling))
        if state == self._sent:
            return
        self._sent = state
        self._number += 1
        self.host().expect.remote(self.key, self._number, sorted(running), sorted(settling))

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        """The sweep ended: its last reading is kept, and the host forgets its clock."""
        self.now()
        self._closed = True
        self.host().close_clock.remote(self.key)

    def __getstate__(self) -> dict[str, Any]:
        # Tune pickles its callbacks with the Tuner; an actor handle is not kept (a resumed sweep opens anew).
        return {**self.__dict__, "_host": None}
