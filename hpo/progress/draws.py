"""Noisy continuations of a fitted learning-curve trend (:mod:`hpo.progress.curves`), many at once.

Each continuation is one sampled trend (a family drawn by its Akaike weight, its parameters from their
covariance, widened by :data:`COV_INFLATION`) plus noise. The noise is an AR(1) process: a validation curve
lying below its trend tends to stay below it for a few epochs (Adam's and SGD's wanderings, a model
overfitting for a while), so each epoch's deviation keeps :data:`NOISE_MEMORY` of the previous one, starting
from the last observed residual; its stationary spread is the measured noise. Values of a curve on a grid
(:func:`hpo.progress.curves.lattice`) are rounded to it.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from hpo.progress.curves import FAMILIES, Fit, Trend

#: Lag-one correlation of the simulated noise.
NOISE_MEMORY = 0.3
#: The fitted parameters' covariance is multiplied by this before parameters are drawn from it. The fit
#: computes it as if each epoch's deviation from the trend were independent of the others; they are not (a
#: curve wanders above or below its trend for several epochs, and the recency weights leave fewer epochs
#: that count), so it understates how uncertain the trend's course is. First set to 6 on learning curves of
#: scikit-learn MLP classifiers (``benchmarks/trial_estimate.py``'s development set); 3 since the plateau
#: hypothesis of short curves (:data:`hpo.progress.curves.PLATEAU_WEIGHT`) widened the intervals too: 3
#: centres the 80 % interval's coverage on the benchmark's three development sets (82, 79 and 85 %, against
#: 84, 82 and 87 % with 6), before its third held-out set was scored.
COV_INFLATION = 3.0


def _draw_params(fit: Fit, count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` parameter vectors (rows): the fit's, perturbed by its covariance (× :data:`COV_INFLATION`)."""
    if fit.cov is None:
        return np.tile(fit.params, (count, 1))
    return rng.multivariate_normal(fit.params, fit.cov * COV_INFLATION, size=count, method="eigh")


@dataclass(frozen=True)
class Draws:
    """Sampled trends, one per continuation: a family by its Akaike weight, parameters by their covariance.

    Attributes:
        trend: The fitted trend they were drawn from.
        blocks: ``(family, parameters)`` pairs, one parameter row per continuation of that family.
        order: Shuffles the rows, so that a continuation's index says nothing about its family.
        deviation: Each continuation's noise at the last epoch simulated so far (updated by :meth:`values`).
    """

    trend: Trend
    blocks: tuple[tuple[str, np.ndarray], ...]
    order: np.ndarray
    deviation: np.ndarray

    def values(self, epochs: np.ndarray, rng: np.random.Generator) -> np.ndarray:
        """Noisy values at the given future epochs, in the curve's own units (call again for later epochs).

        The noise goes on from where the previous call (or the observed curve) left it; values on a grid
        (:attr:`Trend.grid`) are rounded to it.

        Args:
            epochs: 1-based epochs, shape ``(H,)``.
            rng: Random source of the noise.

        Returns:
            Array ``(samples, H)``: one continuation per row, higher is better.
        """
        trend, rows = self.trend, []
        for family, params in self.blocks:
            with np.errstate(all="ignore"):
                block = FAMILIES[family][0](epochs[None, :], *(params[:, [i]] for i in range(params.shape[1])))
            rows.append(np.clip(np.nan_to_num(block, nan=trend.low), trend.low, trend.high))
        paths = np.concatenate(rows, axis=0)[self.order]
        if trend.noise:
            paths += self._noise(paths.shape, rng)
        values = trend.offset + trend.scale * paths
        if trend.grid is not None:
            origin, step = trend.grid
            values = origin + np.round((values - origin) / step) * step
        return values

    def _noise(self, shape: tuple[int, int], rng: np.random.Generator) -> np.ndarray:
        """AR(1) noise for ``shape[1]`` further epochs, continuing :attr:`deviation` (normalised units)."""
        memory = NOISE_MEMORY
        shocks = rng.normal(0.0, self.trend.noise * np.sqrt(1 - memory**2), size=shape)
        noise = np.empty(shape)
        deviation = self.deviation
        for j in range(shape[1]):
            deviation = memory * deviation + shocks[:, j]
            noise[:, j] = deviation
        self.deviation[:] = deviation
        return noise


def draw(trend: Trend, samples: int, rng: np.random.Generator) -> Draws:
    """Draws ``samples`` trends from a fitted one (see :class:`Draws`)."""
    counts = rng.multinomial(samples, trend.weights)
    blocks = tuple(
        (fit.family, _draw_params(fit, int(count), rng)) for fit, count in zip(trend.fits, counts, strict=True) if count
    )
    return Draws(trend, blocks, rng.permutation(samples), np.full(samples, trend.last))
