"""A trial's own stopping rules, applied to many curves at once: EarlyStopping, the objective goal, max_epochs.

Values are in "higher is better" space (a ``min`` objective negated, its goal too), so that one comparison
serves both modes. The rule is Keras' ``EarlyStopping`` (tf-keras, which trials run): an epoch improves when
``value - min_delta > best`` (a NaN never does), an improvement sets ``best`` and resets the wait counter,
any other epoch adds one to it, and training stops after an epoch that did not improve once the counter has
reached ``patience`` (never after the first epoch). The goal stops a trial at the first epoch whose value
reaches it (:func:`hpo.objective.reaches_goal`: at least the goal for ``max``, at most it for ``min``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Rules:
    """A trial's stopping rules, in "higher is better" space.

    Attributes:
        patience: EarlyStopping's patience (epochs without improvement).
        min_delta: EarlyStopping's smallest improvement.
        max_epochs: The most epochs a trial trains.
        goal: The objective goal (negated for ``min``), or None.
    """

    patience: int
    min_delta: float
    max_epochs: int
    goal: float | None = None


@dataclass
class State:
    """EarlyStopping's state after some epochs: one entry per simulated curve.

    Attributes:
        epoch: Epochs trained so far.
        best: Best value so far (-inf before the first epoch).
        wait: Epochs since the last improvement.
        stop: The epoch training stopped at, 0 while it goes on.
        by_goal: True where the goal stopped it.
    """

    epoch: int
    best: np.ndarray
    wait: np.ndarray
    stop: np.ndarray
    by_goal: np.ndarray

    @classmethod
    def start(cls, count: int) -> State:
        """The state before the first epoch."""
        zeros = np.zeros(count, dtype=np.int64)
        return cls(0, np.full(count, -np.inf), zeros.copy(), zeros.copy(), np.zeros(count, dtype=bool))

    def copy(self, count: int) -> State:
        """This (single-curve) state repeated ``count`` times."""
        take = np.zeros(count, dtype=np.int64)
        return State(self.epoch, self.best[take], self.wait[take], self.stop[take], self.by_goal[take])


def advance(state: State, values: np.ndarray, rules: Rules) -> State:
    """Runs the rules over further epochs, stopping each curve at its first stop.

    Args:
        state: The state before these epochs (changed in place).
        values: Array ``(curves, epochs)`` of the next epochs' values.
        rules: The stopping rules.

    Returns:
        The state after them; curves still going at ``max_epochs`` stop there.
    """
    with np.errstate(invalid="ignore"):
        for column in values.T:
            if state.epoch >= rules.max_epochs or state.stop.all():
                break
            state.epoch += 1
            going = state.stop == 0
            improved = column - rules.min_delta > state.best
            state.best = np.where(going & improved, column, state.best)
            state.wait = np.where(going, np.where(improved, 0, state.wait + 1), state.wait)
            patience = going & ~improved & (state.wait >= rules.patience) & (state.epoch > 1)
            goal = going & (column >= rules.goal) if rules.goal is not None else np.zeros_like(going)
            state.by_goal |= goal
            state.stop[patience | goal] = state.epoch
    if state.epoch >= rules.max_epochs:
        state.stop[state.stop == 0] = state.epoch
    return state


def earliest_stop(state: State, rules: Rules) -> int:
    """The epoch a (single-curve, still going) trial stops at if no further epoch improves.

    Before the first epoch that is the epoch after ``patience`` more (the first epoch improves on nothing).
    """
    if state.epoch == 0:
        return min(1 + max(rules.patience, 1), rules.max_epochs)
    epoch = state.epoch + max(rules.patience - int(state.wait[0]), 1)
    return int(min(max(epoch, 2), rules.max_epochs))


def higher_is_better(values: object, mode: str) -> np.ndarray:
    """The values as floats (anything not a number: NaN; one number: a curve of one), negated for ``min``."""
    if values is None:
        values = ()
    elif isinstance(values, (str, bytes)) or not hasattr(values, "__iter__"):
        values = (values,)
    out = []
    for value in values:  # type: ignore[attr-defined]
        try:
            out.append(float(value))
        except (TypeError, ValueError):
            out.append(math.nan)
    array = np.asarray(out, dtype=float)
    return -array if mode == "min" else array
