"""Learning-curve trends: fit parametric families to a validation curve and sample noisy continuations.

A curve is taken as a smooth trend plus zero-mean noise (Dong & Luo, "Progress indication for deep learning
model training"). Values are in "higher is better" space (a loss is negated first) and are normalised to
their observed range before fitting. The families, with ``x`` the 1-based epoch and ``c = exp(t) > 0``:

- ``pow``: ``a - b·x^-c`` (inverse power law) and ``exp``: ``a - b·exp(-c·x)`` (exponential saturation),
  from four points on;
- ``log``: ``a + b·log x`` (log-linear), for two or three points, or when neither of the others can be
  fitted (it never levels off, so on a flattening curve it foresees improvements that do not come);
- ``flat``: ``a``, for a curve whose values are all equal (the others describe a noisy plateau too;
  offered a plateau by its score, a short rising curve is too often taken for one), and as the plateau
  hypothesis of a curve of two or three points (below).

``b`` may be negative: a falling (diverging) curve is a trend like any other. ``pow`` and ``exp`` start from
the best rate of a grid (``a`` and ``b`` are linear given ``c``); a curve whose best rate is the grid's
slowest is left to the other families (``pow`` tends to ``log`` there, ``exp`` to a straight line), one whose
best rate is the fastest (a step to a plateau) keeps that rate. Every fit weighs epoch ``x`` by ``x²``
(:data:`RECENCY`): where a curve is heading is told by its recent epochs more than by its first steep ones.
Each fitted family is scored by AICc (its small-sample term's denominator floored at 1); the continuations
mix the families by their Akaike weights. A rising curve of two or three points is the exception: too short
for a saturating family, it cannot tell a curve still rising from one about to level off, and ``log``
alone (which never levels off) projects such runs too long. Its continuations are half ``log`` and half
``flat`` (:data:`PLATEAU_WEIGHT`, a fixed prior weight, not a score), so the median is near the epoch a
plateau would stop at and the interval reaches the runs that go on rising.

The noise is the residual spread of the best family over the recent half of the curve (a learning-rate
change early on does not inflate it); with fewer than three residual degrees of freedom it cannot be
measured and is taken as at least 10 % of the observed range. It is not independent from epoch to epoch: a
validation curve that lies below its trend tends to stay below it for a while, so the simulated noise is an
AR(1) process (:data:`hpo.progress.draws.NOISE_MEMORY`) that starts from the last observed residual. The
fitted parameters' uncertainty (their covariance) is sampled too, and the sampled trend is kept within one
observed range of the values seen. A curve whose values all lie on a grid (an accuracy over ``N``
validation samples moves in steps of ``1/N``; see :func:`lattice`) is continued on that grid, so that a
simulated epoch ties the best as a real one does (a tie is no improvement). The continuations themselves
are drawn in :mod:`hpo.progress.draws`.
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

#: Residual sum of squares below this (per point, normalised values) counts as an exact fit.
_RSS_FLOOR = 1e-10
#: The noise of a curve too short to measure it, as a fraction of its observed range.
_NOISE_PRIOR = 0.1
#: Fits weigh epoch ``x`` by ``x**RECENCY``.
RECENCY = 2.0
#: How far (in grid steps) a value may lie off the grid of :func:`lattice` and still count as on it.
_LATTICE_TOLERANCE = 1e-3


def _flat(x: np.ndarray, a: np.ndarray) -> np.ndarray:
    return a + 0.0 * x


def _log(x: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a + b * np.log(x)


def _pow(x: np.ndarray, a: np.ndarray, b: np.ndarray, t: np.ndarray) -> np.ndarray:
    return a - b * x ** -np.exp(t)


def _exp(x: np.ndarray, a: np.ndarray, b: np.ndarray, t: np.ndarray) -> np.ndarray:
    return a - b * np.exp(-np.exp(t) * x)


def _basis(family: str, x: np.ndarray, c: np.ndarray) -> np.ndarray:
    """The term multiplied by ``-b`` (``x^-c`` or ``exp(-c·x)``), broadcast over rate(s) ``c``."""
    return x**-c if family == "pow" else np.exp(-c * x)


def _jacobian(family: str) -> Callable[..., np.ndarray]:
    def jac(x: np.ndarray, a: float, b: float, t: float) -> np.ndarray:
        c = np.exp(t)
        phi = _basis(family, x, c)
        slope = np.log(x) if family == "pow" else x
        return np.column_stack([np.ones_like(x), -phi, b * c * phi * slope])

    return jac


#: Rates ``c`` tried before the least-squares fit starts (from the best of them).
_RATES = {"pow": np.logspace(-2, 1.3, 34), "exp": np.logspace(-3, 1, 41)}


#: Family name → (trend function, number of parameters). The functions broadcast over parameter arrays.
FAMILIES: dict[str, tuple[Callable[..., np.ndarray], int]] = {
    "flat": (_flat, 1),
    "log": (_log, 2),
    "pow": (_pow, 3),
    "exp": (_exp, 3),
}
#: The saturating families need this many points (one more than their parameters).
SATURATING_POINTS = 4
#: Prior weight of the plateau (``flat``) beside ``log`` for a curve too short for a saturating family.
#: Even odds, not a tuned value: on ``benchmarks/trial_estimate.py``'s first held-out curves (development
#: data since they were scored) 0.3 / 0.5 / 0.7 gave a median error of 26.8 / 25.3 / 24.7 % a quarter of
#: the way; 0.5 was kept before the second held-out set was scored.
PLATEAU_WEIGHT = 0.5


@dataclass(frozen=True)
class Fit:
    """One family fitted to a normalised curve.

    Attributes:
        family: The family's name (a key of :data:`FAMILIES`).
        params: Its fitted parameters.
        cov: Their covariance, or None where it cannot be estimated.
        residuals: Observed minus fitted values, one per finite point.
        aicc: Its score (lower is better).
    """

    family: str
    params: np.ndarray
    cov: np.ndarray | None
    residuals: np.ndarray
    aicc: float


@dataclass(frozen=True)
class Trend:
    """A curve's fitted families, its noise and its normalisation (``value = offset + scale·z``).

    Attributes:
        fits: The fitted families.
        weights: Their Akaike weights.
        noise: The noise's spread (normalised units).
        offset: ``value = offset + scale·z``.
        scale: See ``offset``.
        low: The lowest value a sampled trend may take (normalised).
        high: The highest.
        last: The best family's residual at the last epoch: where the noise starts from.
        grid: ``(origin, step)`` of the grid the values lie on (:func:`lattice`), or None.
    """

    fits: tuple[Fit, ...]
    weights: np.ndarray
    noise: float
    offset: float
    scale: float
    low: float
    high: float
    last: float = 0.0
    grid: tuple[float, float] | None = None

    @property
    def family(self) -> str:
        """The family with the highest Akaike weight."""
        return self.fits[int(np.argmax(self.weights))].family


def _weights(x: np.ndarray) -> np.ndarray:
    """Each epoch's weight in the fits, ``x**RECENCY`` scaled to a mean of 1."""
    w = x**RECENCY
    return w / w.mean()


def _linear_fit(family: str, x: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, np.ndarray | None] | None:
    design = np.ones((len(x), 1)) if family == "flat" else np.column_stack([np.ones_like(x), np.log(x)])
    root = np.sqrt(_weights(x))
    design, z = design * root[:, None], z * root
    params, *_ = np.linalg.lstsq(design, z, rcond=None)
    dof = len(x) - design.shape[1]
    if dof < 1:
        return params, None
    s2 = float(np.sum((z - design @ params) ** 2)) / dof
    return params, s2 * np.linalg.pinv(design.T @ design)


def _start(family: str, x: np.ndarray, z: np.ndarray) -> int | None:
    """Index of the rate whose best linear fit of ``a`` and ``b`` leaves the least error.

    None if that is the smallest rate tried: the curve is then better described by a limit of the family
    (``pow`` with ``c → 0`` is ``log``, ``exp`` a straight line) than by it.
    """
    phi = _basis(family, x[None, :], _RATES[family][:, None])  # (rates, n)
    w = _weights(x) / len(x)  # sums to 1
    centred, zc = phi - (phi @ w)[:, None], z - z @ w
    slope = ((centred * w) @ zc) / np.maximum((centred**2) @ w, 1e-300)
    rss = ((zc[None, :] - slope[:, None] * centred) ** 2) @ w
    i = int(np.argmin(rss))
    return None if i == 0 else i


def _fixed_rate_fit(family: str, x: np.ndarray, z: np.ndarray, c: float) -> tuple[np.ndarray, np.ndarray | None]:
    """``a`` and ``b`` by linear least squares with the rate held at ``c`` (its variance taken as 0)."""
    root = np.sqrt(_weights(x))
    design = np.column_stack([np.ones_like(x), -_basis(family, x, c)]) * root[:, None]
    z = z * root
    (a, b), *_ = np.linalg.lstsq(design, z, rcond=None)
    params, dof = np.array([a, b, np.log(c)]), len(x) - 2
    if dof < 1:
        return params, None
    cov = np.zeros((3, 3))
    cov[:2, :2] = float(np.sum((z - design @ params[:2]) ** 2)) / dof * np.linalg.pinv(design.T @ design)
    return params, cov


def _nonlinear_fit(family: str, x: np.ndarray, z: np.ndarray) -> tuple[np.ndarray, np.ndarray | None] | None:
    """``curve_fit`` from the grid's best rate (held there if it is the fastest: a step to a plateau)."""
    i = _start(family, x, z)
    if i is None:
        return None
    if i == len(_RATES[family]) - 1:
        return _fixed_rate_fit(family, x, z, float(_RATES[family][i]))
    start, _ = _fixed_rate_fit(family, x, z, float(_RATES[family][i]))
    from scipy.optimize import OptimizeWarning, curve_fit  # here: ``hpo status`` reads estimates, fits none

    try:
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore", OptimizeWarning)
            sigma = 1 / np.sqrt(_weights(x))
            params, cov = curve_fit(
                FAMILIES[family][0], x, z, p0=start, sigma=sigma, jac=_jacobian(family), method="lm", maxfev=100
            )
    except (RuntimeError, ValueError, FloatingPointError, np.linalg.LinAlgError):
        return None
    if not np.all(np.isfinite(params)) or abs(params[2]) > 20:
        return None
    usable = len(x) > 3 and np.all(np.isfinite(cov)) and np.all(np.linalg.eigvalsh((cov + cov.T) / 2) >= -1e-12)
    return params, cov if usable else None


def _fit(family: str, x: np.ndarray, z: np.ndarray) -> Fit | None:
    k = FAMILIES[family][1]
    fitted = _linear_fit(family, x, z) if k < 3 else _nonlinear_fit(family, x, z)
    if fitted is None:
        return None
    params, cov = fitted
    residuals = z - FAMILIES[family][0](x, *params)
    n = len(x)
    rss = max(float(np.sum(_weights(x) * residuals**2)), n * _RSS_FLOOR)
    aicc = n * np.log(rss / n) + 2 * k + 2 * k * (k + 1) / max(n - k - 1, 1)
    return Fit(family, params, cov, residuals, float(aicc)) if np.isfinite(aicc) else None


def _noise(best: Fit, n: int) -> float:
    """Residual spread of ``best`` over the recent half of the curve (normalised units)."""
    k = FAMILIES[best.family][1]
    window = best.residuals[-max(3, n // 2) :]
    dof = n - k
    measured = float(np.sqrt(np.mean(window**2) * n / max(dof, 1)))
    return max(measured, _NOISE_PRIOR) if dof < 3 else measured


def fit_trend(x: np.ndarray, y: np.ndarray) -> Trend | None:
    """Fits the families of the module docstring: ``pow`` and ``exp``, else ``log``; ``flat`` if constant.

    Args:
        x: 1-based epochs of the finite values (at least two).
        y: The finite values there, higher is better.

    Returns:
        The fitted trend, or None if no family could be fitted.
    """
    offset, scale = float(y[-1]), float(np.ptp(y))
    if not np.isfinite(scale):
        return None
    if scale <= 1e-12 * max(1.0, abs(offset)):
        scale = 0.0
    z = (y - offset) / scale if scale else np.zeros_like(y)
    names = ["flat"] if not scale else ["pow", "exp"] if len(x) >= SATURATING_POINTS else ["log"]
    fits = tuple(fit for fit in (_fit(name, x, z) for name in names) if fit is not None)
    if not fits and scale:
        fits = tuple(fit for fit in (_fit("log", x, z),) if fit is not None)
    if not fits:
        return None
    scores = np.array([fit.aicc for fit in fits])
    weights = np.exp(-(scores - scores.min()) / 2)
    weights /= weights.sum()
    best = fits[int(np.argmax(weights))]
    if scale and len(x) < SATURATING_POINTS:
        fits, weights = _with_plateau(fits, weights, x, z)
    noise = _noise(best, len(x)) if scale else 0.0
    last = float(np.clip(best.residuals[-1], -3 * noise, 3 * noise))
    low, high = float(z.min()) - 1.0, float(z.max()) + 1.0
    return Trend(fits, weights, noise, offset, scale or 1.0, low, high, last, lattice(y))


def _with_plateau(
    fits: tuple[Fit, ...], weights: np.ndarray, x: np.ndarray, z: np.ndarray
) -> tuple[tuple[Fit, ...], np.ndarray]:
    """The fits and weights with ``flat`` added at :data:`PLATEAU_WEIGHT` (unchanged if it cannot be fitted)."""
    plateau = _fit("flat", x, z)
    if plateau is None:
        return fits, weights
    return (*fits, plateau), np.append(weights * (1 - PLATEAU_WEIGHT), PLATEAU_WEIGHT)


def lattice(y: np.ndarray) -> tuple[float, float] | None:
    """The grid ``(origin, step)`` the values lie on, or None (values not on a grid, or too few to tell).

    An accuracy over ``N`` validation samples takes the values ``k/N``: the smallest gap between its distinct
    values is a step of the grid, and every other gap a whole number of steps. At least three distinct
    values are needed (two always lie on a grid); a continuous metric passes this test by chance rarely
    (with three values, about once in 500 curves), and then only rounds its simulated values.
    """
    distinct = np.unique(y)
    if len(distinct) < 3:
        return None
    step = float(np.diff(distinct).min())
    if not np.isfinite(step) or step <= 1e-12 * max(1.0, float(np.abs(distinct).max())):
        return None
    steps = (distinct - distinct[0]) / step
    if np.any(np.abs(steps - np.round(steps)) > _LATTICE_TOLERANCE):
        return None
    return float(distinct[0]), step
