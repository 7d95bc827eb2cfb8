"""What a sweep's trials not started yet are drawn from: the started ones, and how little they tell.

A sweep has learnt the lengths and epoch costs of a handful of trials when it is forecast, and the trials
not started yet are drawn from those. Drawing each of them independently from the same few values averages
the draws out: the more trials are pending, the narrower the forecast, as if the handful were the whole
population. Instead each Monte-Carlo sample first draws *which population* the started trials came from,
then the pending trials from it, so that the uncertainty about the population stays in the forecast:

- lengths: a Dirichlet-process posterior (the Bayesian bootstrap with a prior): each sample weighs the
  started trials' lengths by Dirichlet(1, …, 1) weights and a prior, uniform over ``1 … max_epochs``, by
  :data:`PRIOR_WEIGHT` (the concentration); a few short trials that ended first do not rule out long ones;
- epoch costs (and start-up overheads): the Bayesian bootstrap with Dirichlet(:data:`COST_CONCENTRATION`, …)
  weights over the measured ones, no prior (a cost is not bounded as a length is). A cost is measured once a
  trial has timed two epochs, and the trials that have are a selected sample: of those started last, the
  cheap ones get there first (in the benchmark's replays the measured costs ran 3-6 % below those of all
  started trials at 25 % of trials ended). Each measured cost therefore counts as half a draw, which keeps
  that doubt in the interval.

Pending trials are drawn with the lengths the started ones would have if they started now (the
scheduler's :meth:`hpo.kinds.ForecastRule.replayed`), and a trial's epoch cost is the *mean* of its
epochs after the first (:func:`mean_cost`).
"""

from __future__ import annotations

import numpy as np

from hpo.progress.trial import epoch_times

#: Concentration of the Dirichlet process: the prior counts as this many started trials.
PRIOR_WEIGHT = 1.0

#: Dirichlet concentration of each measured epoch cost or overhead (1: the plain Bayesian bootstrap).
COST_CONCENTRATION = 0.5


def _picks(weights: np.ndarray, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` indices per row, drawn with that row's weights (rows of ``weights`` sum to 1).

    The index of a draw is the number of the row's cumulative weights at or below it, found by one sorted
    search per row: O(rows × (columns + count)), where comparing every draw with every cumulative weight at
    once took rows × count × columns in time and memory (gigabytes for a sweep of thousands of trials).
    """
    cumulative = np.cumsum(weights, axis=1)
    u = rng.random((weights.shape[0], count)) * cumulative[:, -1:]
    found = np.empty(u.shape, dtype=np.intp)
    for row in range(weights.shape[0]):
        found[row] = np.searchsorted(cumulative[row], u[row], side="right")
    return np.minimum(found, weights.shape[1] - 1)


def _dirichlet(count: int, concentration: float, samples: int, rng: np.random.Generator) -> np.ndarray:
    """``samples`` rows of symmetric Dirichlet weights (unnormalised; :func:`_picks` normalises).

    Gamma(1/2) is half a squared normal, drawn ten times faster than numpy's gamma for shapes below one.
    """
    if concentration == 0.5:
        return rng.standard_normal((samples, count)) ** 2 + 1e-300
    return rng.standard_gamma(concentration, (samples, count)) + 1e-300


def draw_lengths(pool: np.ndarray, count: int, max_epochs: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` trial lengths per sample, from the Dirichlet-process posterior of the module docstring.

    Args:
        pool: The started trials' lengths, one row per sample (shape ``(samples, m)``: a running trial's
            length is its simulated one in that sample).
        count: Lengths to draw per sample.
        max_epochs: The most epochs a trial trains (the prior's upper end).
        rng: Random source.

    Returns:
        Array ``(samples, count)``.
    """
    samples, known = pool.shape
    concentration = np.append(np.ones(known), PRIOR_WEIGHT) if PRIOR_WEIGHT > 0 else np.ones(known)
    picks = _picks(rng.dirichlet(concentration, size=samples), count, rng)
    lengths = np.take_along_axis(pool, np.minimum(picks, known - 1), axis=1)
    fresh = rng.integers(1, max(1, max_epochs) + 1, size=lengths.shape)
    return np.where(picks >= known, fresh, lengths)


def draw_costs(known: np.ndarray, count: int, samples: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` epoch costs per sample by the Bayesian bootstrap of the measured ``known`` costs (see above).

    Returns:
        Array ``(samples, count)``; NaN where no cost is known.
    """
    if not len(known):
        return np.full((samples, count), np.nan)
    picks = _picks(_dirichlet(len(known), COST_CONCENTRATION, samples, rng), count, rng)
    return known[picks]


def mean_cost(epoch_seconds: object) -> float | None:
    """Seconds of an epoch after the first, as a sweep pays them: their mean (None with fewer than two).

    A trial's total time is the sum of its epochs, and epoch times are skewed to the right (a loaded machine
    makes a few epochs much slower), so a sweep's forecast takes the mean where
    :func:`hpo.progress.trial.steady_cost` takes the median of the recent epochs.
    """
    times = epoch_times(epoch_seconds)
    return float(times[1:].mean()) if len(times) >= 2 else None


def pick(known: np.ndarray, samples: int, rng: np.random.Generator) -> np.ndarray:
    """One of the ``known`` values per sample, uniformly; NaN where none is known."""
    return rng.choice(known, size=samples) if len(known) else np.full(samples, np.nan)


def stack(columns: list[np.ndarray], samples: int) -> np.ndarray:
    """Per-sample columns as one ``(samples, len(columns))`` float array."""
    return np.column_stack(columns).astype(float) if columns else np.zeros((samples, 0))
