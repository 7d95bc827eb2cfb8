"""The sweep scheduler's decisions, applied to a running trial's simulated futures.

Values are in "higher is better" space. The cut-offs come from the results recorded so far (every trial's
observed epochs); results other trials record later are not foreseen.

- ``asha`` (Tune's ``AsyncHyperBandScheduler``): rungs at ``grace_period·reduction_factor^k`` epochs below
  ``max_epochs``; a trial reaching a rung continues only if its value there is at least the
  ``1 - 1/reduction_factor`` quantile of the values recorded at that rung (none recorded: it continues).
  With several brackets (``scheduler.brackets``) bracket ``s`` starts at ``grace_period·reduction_factor^s``;
  which bracket a running trial is in is not known outside the scheduler, so its futures are split among the
  brackets in Tune's proportions (:func:`bracket_shares`), and the cut-offs are every trial's values.
- ``hyperband``: taken as the same rule with ``grace_period`` 1 (Tune's synchronous brackets, and the pauses
  they make, are not modelled); with fewer trials at once than its first bracket holds it stops nothing
  (:func:`hyperband_halves`).
- ``median`` (Tune's ``MedianStoppingRule``): from ``grace_period`` on, a trial stops at an epoch where its
  best value so far is below the median of the other trials' mean values from ``grace_period`` to that
  epoch, once at least three others have reached it.
- ``fifo``: no decisions.

The scheduler kinds' forecast rules (:class:`hpo.kinds.ForecastRule`) are made of these functions:
``*_stops`` for a running trial's simulated futures, ``*_replay`` for the started trials' observed curves as
if each started now, for the trials not started yet to be drawn from.
"""

from __future__ import annotations

import math

import numpy as np

#: Tune's MedianStoppingRule compares a trial with at least this many others.
MEDIAN_MIN_SAMPLES = 3


def rungs(grace_period: int, reduction_factor: float, max_epochs: int) -> list[int]:
    """The epochs (below ``max_epochs``) at which ASHA compares trials, as Tune computes its milestones."""
    if max_epochs < 1:
        return []
    grace = max(1, min(grace_period, max_epochs))
    count = int(math.log(max_epochs / grace) / math.log(reduction_factor) + 1)
    milestones = {math.ceil(grace * reduction_factor**k) for k in range(count)}
    return sorted(epoch for epoch in milestones if epoch < max_epochs)


def bracket_shares(grace_period: int, reduction_factor: float, max_epochs: int, brackets: int) -> np.ndarray:
    """The share of new trials Tune's ASHA puts in each bracket: a softmax over the brackets' rung counts."""
    if brackets <= 1 or max_epochs < 1:
        return np.ones(1)
    grace = max(1, min(grace_period, max_epochs))
    top = math.log(max_epochs / grace) / math.log(reduction_factor)
    sizes = np.array([int(top - s + 1) for s in range(brackets)], dtype=float)
    weights = np.exp(sizes - sizes.max())
    return weights / weights.sum()


def bracket_rungs(grace_period: int, reduction_factor: float, max_epochs: int, bracket: int) -> list[int]:
    """The rungs of ASHA's bracket ``bracket`` (0: the first, from ``grace_period``)."""
    return rungs(grace_period * reduction_factor**bracket, reduction_factor, max_epochs)


def split_by_share(count: int, shares: np.ndarray) -> np.ndarray:
    """Bracket of each of ``count`` items, in order, so that the brackets hold ``shares`` of them."""
    edges = np.cumsum(shares)
    return np.minimum(np.searchsorted(edges, (np.arange(count) + 0.5) / max(count, 1)), len(shares) - 1)


def asha_stops(
    stops: np.ndarray, paths: np.ndarray, done: int, others: list[np.ndarray], epochs: list[int], quantile: float
) -> np.ndarray:
    """Stops each simulated future at the first rung whose cut-off its value there falls below.

    Args:
        stops: Total epochs of each future by the trial's own rules, shape ``(samples,)``.
        paths: Simulated values of epochs ``done + 1 ...``, shape ``(samples, H)``.
        done: Epochs the trial has trained.
        others: The other trials' observed values.
        epochs: The rungs.
        quantile: The cut-off quantile, ``1 - 1/reduction_factor``.

    Returns:
        The total epochs of each future after the scheduler's decisions.
    """
    stops = stops.copy()
    for rung in epochs:
        if rung <= done or rung - done > paths.shape[1]:
            continue
        recorded = [float(y[rung - 1]) for y in others if len(y) >= rung and np.isfinite(y[rung - 1])]
        if not recorded:
            continue
        cutoff = np.percentile(recorded, quantile * 100)
        with np.errstate(invalid="ignore"):
            cut = (stops > rung) & (paths[:, rung - done - 1] < cutoff)
        stops[cut] = rung
    return stops


def median_thresholds(others: list[np.ndarray], grace_period: int, max_epochs: int) -> np.ndarray:
    """Per epoch ``1..max_epochs``: the median of the others' mean values from ``grace_period`` to it (or NaN)."""
    out = np.full(max_epochs, np.nan)
    for epoch in range(max(grace_period, 1), max_epochs + 1):
        with np.errstate(invalid="ignore"):
            means = [float(np.mean(y[grace_period - 1 : epoch])) for y in others if len(y) >= epoch]
        means = [m for m in means if np.isfinite(m)]
        if len(means) >= MEDIAN_MIN_SAMPLES:
            out[epoch - 1] = np.median(means)
    return out


def median_stops(stops: np.ndarray, paths: np.ndarray, observed: np.ndarray, thresholds: np.ndarray) -> np.ndarray:
    """Stops each simulated future at the first epoch its best value so far is below that epoch's threshold.

    Args:
        stops: Total epochs of each future by the trial's own rules.
        paths: Simulated values of the epochs after the observed ones.
        observed: The trial's observed values.
        thresholds: :func:`median_thresholds` of the other trials.

    Returns:
        The total epochs of each future after the scheduler's decisions.
    """
    done = len(observed)
    if not paths.shape[1]:
        return stops
    finite = observed[np.isfinite(observed)]
    start = np.full((len(stops), 1), finite.max() if len(finite) else -np.inf)
    best = np.fmax.accumulate(np.concatenate([start, paths], axis=1), axis=1)[:, 1:]
    limit = thresholds[done : done + paths.shape[1]]
    epochs = np.arange(done + 1, done + 1 + len(limit))
    with np.errstate(invalid="ignore"):
        cut = (best[:, : len(limit)] < limit[None, :]) & (epochs[None, :] < stops[:, None])
    first = np.argmax(cut, axis=1)
    return np.where(cut.any(axis=1), epochs[first], stops)


def asha_replay(ys: list[np.ndarray], epochs: list[int], quantile: float) -> np.ndarray:
    """Per trial: the first rung its observed curve falls below the others' cut-off at (inf: none).

    Each trial's cut-off is the quantile of the *other* trials' values at the rung, computed for every trial
    at once from one sort (:func:`_leave_one_out_quantiles`): a sweep of thousands of trials is replayed in
    milliseconds, not in a loop that copies every other trial's value for each trial.
    """
    out = np.full(len(ys), np.inf)
    if not ys:
        return out
    for rung in epochs:
        at = np.array([float(y[rung - 1]) if len(y) >= rung else np.nan for y in ys])
        open_ = np.isfinite(at) & ~np.isfinite(out)
        if not open_.any():
            continue
        cutoffs = _leave_one_out_quantiles(at, quantile)
        with np.errstate(invalid="ignore"):
            out[open_ & (at < cutoffs)] = rung
    return out


def _leave_one_out_quantiles(values: np.ndarray, quantile: float) -> np.ndarray:
    """For each finite entry, ``np.percentile`` (linear) of the other finite entries; NaN where there are none.

    With the finite values sorted, leaving out the one at sorted position ``k`` shifts every position at or
    after ``k`` by one; the quantile of the ``n - 1`` others is interpolated between two of them.
    """
    out = np.full(len(values), np.nan)
    finite = np.flatnonzero(np.isfinite(values))
    n = len(finite)
    if n < 2:
        return out
    order = finite[np.argsort(values[finite], kind="stable")]
    ordered = values[order]
    rank = np.empty(n, dtype=np.intp)
    rank[np.argsort(values[finite], kind="stable")] = np.arange(n)
    position = quantile * (n - 2)
    low = math.floor(position)
    high = min(low + 1, n - 2)
    fraction = position - low
    # index j of the others is index j of the sorted values below the left-out rank, j + 1 from it on
    below = ordered[np.where(low < rank, low, low + 1)]
    above = ordered[np.where(high < rank, high, high + 1)]
    out[finite] = _lerp(below, above, fraction)
    return out


def _lerp(a: np.ndarray, b: np.ndarray, t: float) -> np.ndarray:
    """NumPy's own linear interpolation of ``np.percentile`` (exact where ``a == b``, symmetric in ``t``)."""
    diff = b - a
    with np.errstate(invalid="ignore"):
        return a + diff * t if t < 0.5 else b - diff * (1 - t)


def median_replay(ys: list[np.ndarray], grace_period: int, max_epochs: int) -> np.ndarray:
    """Per trial: the first epoch its best value so far is below the others' median running mean (inf: none).

    The others' median of every epoch is taken for every trial at once (:func:`_leave_one_out_medians`).
    """
    if not ys or max_epochs < 1:
        return np.full(len(ys), np.inf)
    grace = max(min(grace_period, max_epochs), 1)
    values = np.full((len(ys), max_epochs), np.nan)
    for i, y in enumerate(ys):
        values[i, : min(len(y), max_epochs)] = y[:max_epochs]
    with np.errstate(all="ignore"):  # values near the float limits overflow to inf, never raise
        means = np.full_like(values, np.nan)
        means[:, grace - 1 :] = np.cumsum(values[:, grace - 1 :], axis=1) / np.arange(1, max_epochs - grace + 2)
        best = np.fmax.accumulate(np.where(np.isnan(values), -np.inf, values), axis=1)
    means[~np.isfinite(means)] = np.nan  # an infinite running mean is left out, as Tune leaves it out
    limits = _leave_one_out_medians(means)
    epochs = np.arange(1, max_epochs + 1)
    lengths = np.minimum(np.array([len(y) for y in ys]), max_epochs)
    with np.errstate(invalid="ignore"):
        cut = (best < limits) & (epochs[None, :] < lengths[:, None])
    return np.where(cut.any(axis=1), np.argmax(cut, axis=1) + 1.0, np.inf)


def _leave_one_out_medians(values: np.ndarray) -> np.ndarray:
    """Row ``i``: each column's median over the other rows' non-NaN values, for every row at once.

    As :func:`_column_medians` of ``values`` without row ``i`` (NaN with fewer than
    :data:`MEDIAN_MIN_SAMPLES` values).
    """
    rows = values.shape[0]
    if not rows:
        return np.empty_like(values)
    order = np.argsort(values, axis=0, kind="stable")  # NaN last
    ordered = np.take_along_axis(values, order, axis=0)
    rank = np.empty_like(order)
    np.put_along_axis(rank, order, np.arange(rows)[:, None].repeat(values.shape[1], axis=1), axis=0)
    count = (~np.isnan(values)).sum(axis=0)[None, :]
    present = ~np.isnan(values)
    others = count - present  # non-NaN values left once the row itself is out
    low_at = np.maximum(others - 1, 0) // 2
    high_at = others // 2

    def other(index: np.ndarray) -> np.ndarray:
        # index j among the others is j in the column's order below the row's own rank, j + 1 from it on
        shifted = np.where(present & (index >= rank), index + 1, index)
        return np.take_along_axis(ordered, np.minimum(shifted, rows - 1), axis=0)

    with np.errstate(invalid="ignore"):
        medians = other(low_at) / 2 + other(high_at) / 2
    return np.where(others >= MEDIAN_MIN_SAMPLES, medians, np.nan)


def hyperband_halves(max_concurrent: int, max_epochs: int, reduction_factor: float) -> bool:
    """Whether Tune's ``HyperBandScheduler`` stops any trial with this many trials at once.

    It adds trials to its current bracket until that bracket has as many *live* trials as it plans (an
    ended trial leaves it); the first bracket plans ``round(log(max_t) / log(reduction_factor)) + 1`` trials
    and runs each to ``max_t`` without a halving. With fewer trials at once it never fills, every trial
    joins it, and none is stopped.
    """
    first_bracket = round(math.log(max(max_epochs, 1)) / math.log(reduction_factor)) + 1
    return max_concurrent >= first_bracket
