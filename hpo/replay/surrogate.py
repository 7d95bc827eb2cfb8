"""A surrogate of a :class:`~hpo.replay.table.CurveTable`: a whole learning curve for any configuration.

Answering a proposal with its nearest recorded configuration penalises a searcher that concentrates its
proposals (every refinement around a good point collapses onto the same recorded curve, so it re-trains
what it has seen). Surrogate benchmarks (YAHPO Gym, HPOBench's surrogates) answer with a model fitted on
the recorded curves instead; this one is a k-nearest-neighbour, inverse-distance-weighted regression in the
table's normalised space (the coordinates of :meth:`CurveTable.nearest`: log scale where the space says,
categoricals and inactive parameters one-hot): the curve of a proposal is the weighted mean of the mean
curves (over their recorded seeds) of its ``k`` nearest recorded configurations, weights
``1 / distance²``, per epoch, for the objective and the epoch's seconds. So it

- is exact on a recorded configuration (distance 0) when noise is off,
- interpolates between neighbours, smoothly, so that two near proposals get near, different curves,
- stays inside the recorded values (a weighted mean), and an epoch where most of the weight diverged
  (NaN) diverges.

Noise comes from the seed repeats: a trial's ``draw`` picks one of the ``noise_pool`` repeated
configurations whose best mean value is nearest to the proposal's (a good configuration's seeds differ
less than a poor one's) and a sign, and adds that configuration's seed-to-seed residual curve
(``(a − b) / √2``: the spread of one seed around the mean of two); so a curve's noise is shaped as recorded
noise is, per epoch and correlated across epochs, and is deterministic for a draw. The noisy curve is then
clipped, epoch by epoch, to the range the ``k`` neighbours' recorded seeds span at that epoch
(``clip="neighbours"``, the default): a residual comes with a random sign, and one seed's spike (an SGD step
that blew the loss up for an epoch) turned over is a dip that no seed of any configuration near the
proposal ever reached. Clipped to the range of the whole table instead (``clip="table"``, how answers were
clipped before), such dips reach the table's best recorded value: on most of the recorded tables the best
value of random search over a 50-epoch-per-trial budget was such a dip, better than every seed of the
configurations its curve was interpolated from.

Only numpy and :mod:`hpo.replay.table` are imported, so the benchmark's peers (in a venv of their own)
can use it.
"""

from __future__ import annotations

import math
from typing import Any, Literal

import numpy as np

from hpo.replay.table import Curve, CurveTable

#: Neighbours a proposal's curve is interpolated from.
DEFAULT_K = 8
#: Repeated configurations nearest to a proposal its noise is drawn from.
DEFAULT_NOISE_POOL = 5
#: What a noisy curve is clipped to: its neighbours' recorded range per epoch, or the whole table's range.
Clip = Literal["neighbours", "table"]
CLIPS: tuple[Clip, ...] = ("neighbours", "table")


class Surrogate:
    """Curves for any configuration of a table's space, interpolated from its recorded curves.

    Args:
        table: The recorded curves.
        k: Neighbours each answer interpolates (1: the nearest recorded configuration's mean curve).
        noise: Add seed-to-seed noise drawn from the table's repeated configurations (False: mean curves).
        noise_pool: How many repeated configurations, those nearest in best mean value to a proposal's,
            its noise is drawn from.
        exclude: Configurations left out of the fit (to validate the surrogate on them).
        clip: What a noisy curve is clipped to, epoch by epoch: ``"neighbours"``, the lowest and highest
            value any recorded seed of its ``k`` neighbours had at that epoch; ``"table"``, the lowest and
            highest value the whole table recorded (the answers of earlier benchmark runs).
    """

    def __init__(self, table: CurveTable, *, k: int = DEFAULT_K, noise: bool = True,
                 noise_pool: int = DEFAULT_NOISE_POOL, exclude: frozenset[int] = frozenset(),
                 clip: Clip = "neighbours") -> None:
        if k < 1:
            raise ValueError(f"k: {k} must be at least 1")
        if clip not in CLIPS:
            raise ValueError(f"clip: {clip!r} is not one of {', '.join(CLIPS)}")
        self.table, self.k, self.noise, self.noise_pool, self.clip = table, k, noise, noise_pool, clip
        self.ids = np.array([i for i in range(len(table.params)) if i not in exclude], dtype=int)
        if len(self.ids) == 0:
            raise ValueError("exclude: leaves no configuration to fit")
        self.coords = np.array([table._point(table.params[i]) for i in self.ids])
        self.mean_values = np.array([_mean(table, i, "values") for i in self.ids])
        self.mean_seconds = np.array([_mean(table, i, "epoch_s") for i in self.ids])
        self.seed_low = np.array([_envelope(table, i, np.fmin) for i in self.ids])
        self.seed_high = np.array([_envelope(table, i, np.fmax) for i in self.ids])
        residuals, repeated = [], []
        for row, config_id in enumerate(self.ids):
            seeds = table.seeds(int(config_id))
            if len(seeds) >= 2:
                a, b = table.curves[(int(config_id), seeds[0])].values, table.curves[(int(config_id), seeds[1])].values
                residuals.append(np.nan_to_num((a - b) / math.sqrt(2.0), nan=0.0, posinf=0.0, neginf=0.0))
                repeated.append(row)
        self.residuals = np.array(residuals) if residuals else np.zeros((0, table.task.max_epochs))
        self.repeated = np.array(repeated, dtype=int)
        self.levels = np.array([self._level(self.mean_values[row]) for row in repeated])
        finite = np.concatenate([c.values[~np.isnan(c.values)] for c in table.curves.values()])
        self.low, self.high = float(finite.min()), float(finite.max())

    def mean_curve(self, params: dict[str, Any]) -> Curve:
        """The noise-free curve of ``params``: its neighbours' mean curves, weighted by 1 / distance²."""
        return self._interpolated(*self._neighbours(params))

    def _interpolated(self, rows: np.ndarray, weights: np.ndarray) -> Curve:
        """The mean curves of the fitted ``rows``, weighted by ``weights``, epoch by epoch."""
        values = self.mean_values[rows]
        finite = ~np.isnan(values)
        share = (weights[:, None] * finite).sum(axis=0)
        mean = np.where(finite, values, 0.0).T @ weights / np.where(share > 0, share, 1.0)
        mean = np.where(share > 0.5, mean, np.nan)  # most of the weight diverged there: diverged
        seconds = self.mean_seconds[rows].T @ weights
        return Curve(mean, seconds)

    def curve(self, params: dict[str, Any], draw: int) -> Curve:
        """A trial's curve of ``params``: :meth:`mean_curve` plus noise chosen by ``draw`` (deterministic)."""
        rows, weights = self._neighbours(params)
        curve = self._interpolated(rows, weights)
        if not self.noise or len(self.repeated) == 0:
            return curve
        rng = np.random.default_rng(draw)
        distance = np.abs(np.nan_to_num(self.levels - self._level(curve.values), nan=np.inf))
        pool = np.argsort(distance, kind="stable")[: self.noise_pool]
        residual = self.residuals[int(rng.choice(pool))] * (1.0 if rng.random() < 0.5 else -1.0)
        low, high = self._range(rows)
        return Curve(np.clip(curve.values + residual, low, high), curve.epoch_s)

    def _range(self, rows: np.ndarray) -> tuple[np.ndarray | float, np.ndarray | float]:
        """The per-epoch bounds of a noisy curve interpolated from the fitted ``rows`` (see ``clip``)."""
        if self.clip == "table":
            return self.low, self.high
        low = np.fmin.reduce(self.seed_low[rows], axis=0)
        high = np.fmax.reduce(self.seed_high[rows], axis=0)
        # an epoch where every neighbour diverged: the table's range (the mean curve is NaN there anyway)
        return np.where(np.isnan(low), self.low, low), np.where(np.isnan(high), self.high, high)

    def _level(self, values: np.ndarray) -> float:
        """A curve's best value (NaN: it diverged throughout)."""
        if np.isnan(values).all():
            return math.nan
        return float(np.nanmax(values) if self.table.task.mode == "max" else np.nanmin(values))

    def nearest(self, params: dict[str, Any]) -> int:
        """The recorded configuration nearest to ``params`` among those fitted."""
        rows, _ = self._neighbours(params, k=1)
        return int(self.ids[rows[0]])

    def _neighbours(self, params: dict[str, Any], k: int | None = None) -> tuple[np.ndarray, np.ndarray]:
        """The rows of the ``k`` nearest fitted configurations and their normalised weights."""
        point = np.array(self.table._point(params))
        distance = np.sum((self.coords - point) ** 2, axis=1)  # squared
        k = min(k or self.k, len(distance))
        rows = np.argsort(distance, kind="stable")[:k]
        exact = distance[rows] <= 1e-18
        weights = exact.astype(float) if exact.any() else 1.0 / distance[rows]
        return rows, weights / weights.sum()


def _mean(table: CurveTable, config_id: int, field: str) -> np.ndarray:
    """The mean over its seeds of ``config_id``'s ``values`` or ``epoch_s`` (NaN where any seed diverged)."""
    return np.mean([getattr(table.curves[(config_id, s)], field) for s in table.seeds(config_id)], axis=0)


def _envelope(table: CurveTable, config_id: int, reduce: Any) -> np.ndarray:
    """Per epoch, the lowest (``np.fmin``) or highest (``np.fmax``) value of ``config_id``'s seeds (NaN: none)."""
    return reduce.reduce([table.curves[(config_id, s)].values for s in table.seeds(config_id)], axis=0)
