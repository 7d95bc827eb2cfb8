"""A sweep run to a deadline: the probability of ending by it, read from the forecast's draws, and its warning.

The sweep forecast (:func:`~hpo.progress.sweep.estimate_sweep`) simulates many futures of the sweep; the share
of them that end by the deadline is ``p_meet`` (:func:`p_meet`), so no simulation is added for it. When
``p_meet`` first falls below :data:`WARN_BELOW`, :class:`DeadlineWatch` says so once, with what a plan of the
sweep would change (its ``advise``). Nothing here stops or cuts a trial. Pure Python and NumPy: no Ray.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np

#: ``p_meet`` below this is warned about (once per run of the sweep).
WARN_BELOW = 0.5


def p_meet(remaining_s_draws: np.ndarray | None, now: float, deadline_at: float, tail_s: float = 0.0) -> float | None:
    """The share of the forecast's futures that end by the deadline.

    Args:
        remaining_s_draws: Seconds left in each simulated future (None: no timings yet; empty: nothing left).
        now: When the draws were made (Unix time on the sweep's clock).
        deadline_at: The deadline (Unix time).
        tail_s: Seconds the command takes after its last trial (the best model logged, the summary, Ray's
            stop), added to every future.

    Returns:
        The probability, or None without draws.
    """
    if remaining_s_draws is None:
        return None
    draws = np.asarray(remaining_s_draws, dtype=float)
    if draws.size == 0:  # no trial left: the sweep ends after its tail
        return 1.0 if now + tail_s <= deadline_at else 0.0
    return float(np.mean(now + draws + tail_s <= deadline_at))


def clock_time(when: float) -> str:
    """``HH:MM`` of a Unix time (local), with the date where it is not today."""
    today = time.strftime("%Y-%m-%d")
    day = time.strftime("%Y-%m-%d", time.localtime(when))
    return time.strftime("%H:%M" if day == today else "%Y-%m-%d %H:%M", time.localtime(when))


@dataclass
class DeadlineWatch:
    """Says once that a sweep is unlikely to end by its deadline.

    Attributes:
        deadline_at: The deadline (Unix time).
        advise: Called with ``p_meet`` when the warning is given; returns what a plan would change (one
            clause, e.g. ``4 trials at once × 2 workers on 2 nodes would give 0.86``), or "" where it cannot
            tell. None: no advice.
        warned: The warning's line once given (None before).
        last: The last ``p_meet`` the forecast gave while trials were left (None: none yet).
        started_at: The command's start (Unix time), from which a forecast's wall time counts.
        prediction: The wall time predicted at the start, as journalled (``source``, ``wall_s_median``,
            ``wall_s_low``, ``wall_s_high``): a plan's, or where there was none the first Monte-Carlo forecast's
            (the monitor journals it). None: none yet.
    """

    deadline_at: float
    advise: Callable[[float], str] | None = None
    warned: str | None = None
    last: float | None = None
    started_at: float | None = None
    prediction: dict[str, Any] | None = None

    def check(self, p: float | None, done: bool = False) -> str | None:
        """The warning's line the first time ``p`` is below :data:`WARN_BELOW`; None otherwise.

        Args:
            p: ``p_meet`` now (None: not known yet).
            done: Nothing is left of the sweep (``p`` says only whether it ended in time).
        """
        if p is not None and not done:
            self.last = p
        if self.warned is not None or p is None or done or p >= WARN_BELOW:
            return None
        advice = ""
        if self.advise is not None:
            try:
                advice = self.advise(p)
            except Exception as exc:  # noqa: BLE001 - the advice is extra; the warning is what counts
                advice = f"no plan ({exc})"
        line = f"p_meet {p:.2f} < {WARN_BELOW} for the deadline {clock_time(self.deadline_at)}"
        self.warned = f"{line}: {advice}" if advice else line
        return self.warned
