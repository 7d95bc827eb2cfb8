"""What a replayed sweep gives back: every trial and every epoch, on the simulated clock."""

from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any


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
            ``time_budget`` (the sweep's end cut it), ``stalled`` (paused, with nothing left that would
            resume or stop it: Tune's controller would wait for ever).
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


__all__ = ["ReplayResult", "ReplayedTrial"]
