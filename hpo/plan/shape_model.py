"""Per-epoch time at a shape never measured, from the shapes that were.

A trial's epoch time is modelled as ``T ∝ workers^-α · batch^-β · load^γ`` (``load``: how full the busiest
node's CPUs are): ``α`` is the data-parallel speed-up (1: perfect, 0: none), ``β`` what a larger per-worker
batch saves per epoch (fewer steps, each a little longer), ``γ`` what trials sharing a node's cores cost
each other. Each exponent has a prior (``α ~ N(0.5, 0.5)``, ``β ~ N(0.4, 0.4)``, ``γ ~ N(0.4, 0.4)``, set
wide on the development group of ``benchmarks/plan.py``) and is fitted, Bayesian linear regression on the
log of each history sweep's median epoch time, wherever the history ran at more than one value of it. The
prediction for a new shape relative to a history sweep is log-normal: its variance is the exponents'
posterior variance along the shape's distance from the sweep (so an extrapolation far from what was
measured gets a wide interval, not a straight line) plus a rerun's own spread. Pure NumPy.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

#: Prior means and standard deviations of (α, β, γ).
PRIOR_MEAN = np.array([0.5, 0.4, 0.4])
PRIOR_SD = np.array([0.5, 0.4, 0.4])
#: Spread of a sweep's median epoch time between two runs at the same shape (log scale; a shared machine).
RERUN_SD = 0.2


@dataclass(frozen=True)
class Point:
    """One measured shape: its features and its median epoch time.

    Attributes:
        workers: Workers per trial.
        batch: Per-worker batch.
        load: How full the busiest node's CPUs were.
        epoch_s: Median epoch time (seconds).
    """

    workers: int
    batch: int
    load: float
    epoch_s: float

    @property
    def features(self) -> np.ndarray:
        """``(-log workers, -log batch, log load)``: the log epoch time is these times (α, β, γ) plus a constant."""
        return np.array([-math.log(self.workers), -math.log(self.batch), math.log(max(self.load, 1e-3))])


@dataclass(frozen=True)
class EpochModel:
    """The fitted exponents and their covariance.

    Attributes:
        mean: Posterior mean of (α, β, γ).
        cov: Their posterior covariance.
    """

    mean: np.ndarray
    cov: np.ndarray

    @classmethod
    def fit(cls, points: list[Point], noise_sd: float = RERUN_SD) -> EpochModel:
        """Bayesian linear regression of log epoch time on the features, with a flat prior on the constant.

        Args:
            points: The history's measured shapes (one or more).
            noise_sd: The spread of one measurement (log scale).
        """
        if not points:
            return cls(PRIOR_MEAN.copy(), np.diag(PRIOR_SD**2))
        x = np.array([p.features for p in points])
        y = np.log([p.epoch_s for p in points])
        # the constant is a nuisance: centring removes it (its flat prior integrates out exactly)
        xc = x - x.mean(axis=0)
        yc = y - y.mean()
        prior_precision = np.diag(1.0 / PRIOR_SD**2)
        precision = prior_precision + xc.T @ xc / noise_sd**2
        cov = np.linalg.inv(precision)
        mean = cov @ (prior_precision @ PRIOR_MEAN + xc.T @ yc / noise_sd**2)
        return cls(mean, cov)

    def log_ratio(self, new: Point, measured: Point) -> tuple[float, float]:
        """Mean and standard deviation of log(epoch time at ``new`` / at ``measured``)."""
        d = new.features - measured.features
        mean = float(d @ self.mean)
        var = float(d @ self.cov @ d)
        return mean, math.sqrt(var + RERUN_SD**2)
