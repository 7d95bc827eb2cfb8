"""How many epochs a trial will train, and how long that takes: a Monte-Carlo estimate from its curve so far.

The validation curve is fitted as a trend plus noise (:mod:`hpo.progress.curves`); ``samples`` noisy
continuations of it (:mod:`hpo.progress.draws`) are run through the trial's own stopping rules
(:mod:`hpo.progress.stopping`), starting from the EarlyStopping state the observed epochs left (best so
far, wait counter). The stopping epochs' median and 10th/90th percentiles are the estimate; remaining
seconds are the epochs still to train times the trial's epoch cost (the median of its last five epoch
times after the first: the first epoch compiles the model and warms caches; it counts only while it is the
one epoch measured). The ``method`` says where an estimate comes from:

- a family name (``flat``, ``log``, ``pow``, ``exp``): the trend family with the highest Akaike weight;
- ``stopped``: the observed epochs already ended the trial (patience run out, goal reached or max_epochs):
  the estimate is the current epoch;
- ``diverged``: the latest value is NaN/inf, or (from the fourth epoch on) worse than every earlier value by
  more than their whole range (an exploding loss, which no trend family describes); no later epoch is taken
  to improve, so the trial stops when its wait counter reaches patience (Keras' rule, exactly);
- ``prior``: fewer than two finite values, or no family could be fitted: the median is ``max_epochs`` and
  the interval runs from the earliest epoch EarlyStopping could stop the trial at to ``max_epochs``.

Nothing about the values raises: bad values are NaN, and NaN never improves (as in Keras).
"""

from __future__ import annotations

import numbers
from dataclasses import dataclass

import numpy as np

from hpo.progress.curves import fit_trend
from hpo.progress.draws import Draws, draw
from hpo.progress.stopping import Rules, State, advance, earliest_stop, higher_is_better

#: Percentiles of the 80 % interval and the median.
QUANTILES = (10, 50, 90)
#: The epoch cost is the median of this many most recent epoch times.
RECENT_EPOCHS = 5
#: Continuations are simulated this many epochs at a time, until all have stopped.
CHUNK = 10


@dataclass(frozen=True)
class TrialEstimate:
    """A trial's projected length (total epochs, those done included) and remaining time.

    Attributes:
        epochs_done: Epochs trained so far.
        epochs_median: Median projected total epochs.
        epochs_low: 10th percentile (low end of the 80 % interval).
        epochs_high: 90th percentile (high end of the 80 % interval).
        remaining_s_median: Median remaining seconds; None without epoch timings.
        remaining_s_low: Low end of the 80 % interval of remaining seconds; None without timings.
        remaining_s_high: High end of it; None without timings.
        epoch_seconds: The measured cost of one epoch; None without timings.
        method: Trend family (``flat``, ``log``, ``pow``, ``exp``), ``stopped``, ``diverged`` or ``prior``.
    """

    epochs_done: int
    epochs_median: int
    epochs_low: int
    epochs_high: int
    remaining_s_median: float | None
    remaining_s_low: float | None
    remaining_s_high: float | None
    epoch_seconds: float | None
    method: str


@dataclass(frozen=True)
class Simulation:
    """A trial's simulated futures, for :func:`estimate_trial` and the sweep estimate.

    Attributes:
        done: Epochs trained so far.
        method: As :attr:`TrialEstimate.method`.
        stops: Total epochs of each simulated future, shape ``(samples,)``.
        by_goal: Where the objective goal stopped it.
        paths: Simulated values of epochs ``done + 1 ...`` (higher is better; NaN where unknown).
        earliest: The epoch it stops at if no further epoch improves.
    """

    done: int
    method: str
    stops: np.ndarray
    by_goal: np.ndarray
    paths: np.ndarray
    earliest: int


def check_arguments(mode: str, patience: int, max_epochs: int, samples: int) -> None:
    """Raises ValueError for arguments no estimate can be made with (the values themselves never raise)."""
    if mode not in ("max", "min"):
        raise ValueError(f"mode must be 'max' or 'min', not {mode!r}")
    if patience < 0 or max_epochs < 1 or samples < 1:
        raise ValueError(f"need patience >= 0, max_epochs >= 1, samples >= 1; got {patience}, {max_epochs}, {samples}")


def _fixed(done: int, method: str, stop: int, samples: int, horizon: int, earliest: int) -> Simulation:
    return Simulation(
        done,
        method,
        np.full(samples, stop),
        np.zeros(samples, dtype=bool),
        np.full((samples, horizon), np.nan),
        earliest,
    )


def diverged(y: np.ndarray) -> bool:
    """Whether the latest value is NaN/inf or an explosion (see the module docstring); higher is better."""
    if len(y) and not np.isfinite(y[-1]):
        return True
    before = y[:-1][np.isfinite(y[:-1])]
    return len(before) >= 3 and bool(y[-1] < before.min() - np.ptp(before))


def simulate_trial(
    values: object,
    *,
    mode: str,
    patience: int,
    min_delta: float,
    max_epochs: int,
    goal: float | None,
    samples: int,
    seed: int,
) -> Simulation:
    """Simulates ``samples`` futures of a trial (arguments as :func:`estimate_trial`)."""
    check_arguments(mode, patience, max_epochs, samples)
    target = None if goal is None else (float(goal) if mode == "max" else -float(goal))
    rules = Rules(patience, abs(float(min_delta)), max_epochs, target)
    with np.errstate(all="ignore"):  # values near the float limits overflow; they are then inf, never raised
        return _simulate(higher_is_better(values, mode), rules, samples, seed)


def _simulate(y: np.ndarray, rules: Rules, samples: int, seed: int) -> Simulation:
    """The fallbacks of the module docstring, else the Monte-Carlo continuations of the fitted trend."""
    max_epochs = rules.max_epochs
    observed = advance(State.start(1), y[None, :], rules)
    done = len(y)
    if observed.stop[0] or done >= max_epochs:
        return _fixed(done, "stopped", done, samples, 0, done)
    earliest, horizon = earliest_stop(observed, rules), max_epochs - done
    if diverged(y):
        return _fixed(done, "diverged", earliest, samples, horizon, earliest)
    finite = np.isfinite(y)
    trend = fit_trend(np.arange(1.0, done + 1)[finite], y[finite]) if finite.sum() >= 2 else None
    if trend is None:
        return _fixed(done, "prior", max_epochs, samples, horizon, earliest)
    rng = np.random.default_rng(seed)
    state, paths = _continue(draw(trend, samples, rng), observed.copy(samples), rules, rng)
    return Simulation(done, trend.family, state.stop, state.by_goal, paths, earliest)


def _continue(draws: Draws, state: State, rules: Rules, rng: np.random.Generator) -> tuple[State, np.ndarray]:
    """Runs the rules over simulated epochs, :data:`CHUNK` at a time, until every continuation has stopped.

    Returns:
        The final state and the simulated values (NaN after the last chunk that was needed).
    """
    done = state.epoch
    paths = np.full((len(state.stop), rules.max_epochs - done), np.nan)
    for first in range(done, rules.max_epochs, CHUNK):
        epochs = np.arange(first + 1.0, min(first + CHUNK, rules.max_epochs) + 1)
        chunk = draws.values(epochs, rng)
        paths[:, first - done : first - done + len(epochs)] = chunk
        state = advance(state, chunk, rules)
        if state.stop.all():
            break
    return state, paths


def epoch_times(epoch_seconds: object) -> np.ndarray:
    """The positive finite epoch times of a sequence (or of one number); anything else is left out."""
    if epoch_seconds is None:
        return np.zeros(0)
    raw = [epoch_seconds] if isinstance(epoch_seconds, numbers.Real) else epoch_seconds
    times = higher_is_better(raw, "max")
    return times[np.isfinite(times) & (times > 0)]


def steady_cost(epoch_seconds: object) -> float | None:
    """Seconds of an epoch after the first: the median of the last five of them (None with fewer than two)."""
    times = epoch_times(epoch_seconds)
    return float(np.median(times[1:][-RECENT_EPOCHS:])) if len(times) >= 2 else None


def epoch_cost(epoch_seconds: object) -> float | None:
    """One epoch's cost in seconds: :func:`steady_cost`, or the first epoch's time while it is the only one."""
    times = epoch_times(epoch_seconds)
    if not len(times):
        return None
    steady = steady_cost(times)
    return float(times[0]) if steady is None else steady


def first_epoch_extra(epoch_seconds: object) -> float | None:
    """What the first epoch took beyond a steady one (compiling, warming caches); None with fewer than two."""
    times = epoch_times(epoch_seconds)
    steady = steady_cost(times)
    return None if steady is None else max(0.0, float(times[0]) - steady)


def quantiles(values: np.ndarray) -> tuple[float, float, float]:
    """The 10th, 50th and 90th percentiles (sample values, not interpolated)."""
    low, median, high = np.percentile(values, QUANTILES, method="inverted_cdf")
    return float(low), float(median), float(high)


def estimate_trial(
    values: object,
    *,
    mode: str,
    patience: int,
    min_delta: float,
    max_epochs: int,
    epoch_seconds: object = None,
    goal: float | None = None,
    samples: int = 1000,
    seed: int = 0,
) -> TrialEstimate:
    """Estimates a trial's total epochs and remaining seconds from its validation curve so far.

    Args:
        values: The objective's value after each epoch so far (any length; NaN, inf or None allowed).
        mode: ``max`` or ``min`` (the objective's direction).
        patience: EarlyStopping's patience.
        min_delta: EarlyStopping's smallest improvement.
        max_epochs: The most epochs the trial trains.
        epoch_seconds: Seconds each epoch took so far (or one number); None: no time estimates.
        goal: The objective goal, or None.
        samples: Number of simulated futures.
        seed: Seed of the simulation (the same inputs give the same estimate).

    Returns:
        The estimate (see :class:`TrialEstimate`; the module docstring explains ``method``).

    Raises:
        ValueError: If ``mode`` is not max/min or ``patience``, ``max_epochs`` or ``samples`` is out of range.
    """
    sim = simulate_trial(
        values,
        mode=mode,
        patience=patience,
        min_delta=min_delta,
        max_epochs=max_epochs,
        goal=goal,
        samples=samples,
        seed=seed,
    )
    if sim.method == "prior":
        low, median, high = sim.earliest, max_epochs, max_epochs
    else:
        low, median, high = (int(q) for q in quantiles(sim.stops))
    cost = epoch_cost(epoch_seconds)
    seconds = [None if cost is None else (e - sim.done) * cost for e in (median, low, high)]
    return TrialEstimate(sim.done, median, low, high, *seconds, epoch_seconds=cost, method=sim.method)
