"""One shape's wall time, drawn with the sweep forecast on the history's trials moved to that shape.

The history's ended trials keep their curves, their lengths and the scheduler's cut-offs (the sweep
forecast replays them under the new sweep's rules); their epoch times are multiplied by the shape's epoch
ratio (:mod:`hpo.plan.shape_model`), drawn at five quantiles of its log-normal, and a cold trial's start-up
by how much more of its node starts at once. The new sweep's first ``max_concurrent`` trials run at once
from its start, cold; the rest queue for the slots, warm (:func:`hpo.progress.estimate_sweep`, with the
history's trials as started ones and these as running or pending). Around it comes what the user's clock
sees outside the trials: the command's start (imports, checks, Ray), Tune's launch of the first trials, the
first trials' start-up, and the end (the best model logged, the summary), each drawn from the history.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, replace

import numpy as np

from hpo.plan.history import SweepRecord
from hpo.progress.sweep import SweepPlan, TrialHistory, estimate_sweep

#: Quantiles of the epoch ratio each drawn forecast uses (equal weights).
RATIO_QUANTILES = (0.1, 0.3, 0.5, 0.7, 0.9)
#: Spread (log scale) of each fixed overhead between two runs of a sweep (the command's start, Tune's launch,
#: a cold start-up, the end). On a machine nothing else ran on, the same sweep file's came 3.7-4.8 s,
#: 2.8-3.0 s, 3.4-4.6 s and 4.2-5.0 s (``benchmarks/plan.py``, development groups 4-7); on a machine shared
#: with other work they came 12.5-18.3 s, 6.1-7.5 s, 4.1-8.0 s and 3.7-9.7 s, which no journal can foresee.
OVERHEAD_SD = 0.10
#: Spread (log scale) of the whole run's speed between two runs (the same file, seed and shape took 20.8 and
#: 22.4 s on the quiet machine).
MACHINE_SD = 0.05
_Z90 = 1.2815515655446004


@dataclass(frozen=True)
class Moved:
    """The history moved to one shape.

    Attributes:
        record: The history sweep.
        log_ratio: Mean log epoch-time ratio (new over the sweep's).
        log_sd: Its standard deviation.
        start_ratio: How much longer a cold start takes at the new shape (more ranks starting on a node).
    """

    record: SweepRecord
    log_ratio: float
    log_sd: float
    start_ratio: float


def wall_samples(moved: list[Moved], plan: SweepPlan, trials: int, samples: int, seed: int) -> np.ndarray:
    """``samples`` draws of the new sweep's wall time (seconds, command start to end).

    Args:
        moved: Each history sweep with its ratios to the new shape.
        plan: The new sweep's rules and slots (``max_concurrent`` the shape's); ``planned_trials`` ignored.
        trials: Trials the new sweep runs.
        samples: Draws in all.
        seed: Seed (the same inputs give the same draws).
    """
    rng = np.random.default_rng(seed)
    per = max(20, samples // len(RATIO_QUANTILES))
    slots = min(plan.max_concurrent, trials)
    parts = []
    for k, q in enumerate(RATIO_QUANTILES):
        z = _normal_quantile(q)
        history = [trial for m in moved for trial in _scaled(m, math.exp(m.log_ratio + z * m.log_sd))]
        first = [TrialHistory([], None, "running", warm=False) for _ in range(slots)]
        everything = history + first
        sweep_plan = replace(plan, planned_trials=len(history) + trials, goal=None, elapsed_s=0.0)
        est = estimate_sweep(everything, sweep_plan, samples=per, seed=seed + k)
        if est.remaining_s_median is None:
            raise ValueError("the history has no timed epoch")
        parts.append(_split_normal(est.remaining_s_low, est.remaining_s_median, est.remaining_s_high, per, rng))
    loop = np.concatenate(parts)
    rng.shuffle(loop)
    count = len(loop)
    cold = [t.startup_s * m.start_ratio for m in moved for t in m.record.trials
            if t.warm is False and t.startup_s is not None]
    extra = _noisy([m.record.launch_s for m in moved], count, rng) + _noisy(cold, count, rng)
    extra += _noisy([m.record.before_s for m in moved if m.record.before_s is not None], count, rng)
    extra += _noisy([m.record.after_s for m in moved if m.record.after_s is not None], count, rng)
    return (loop + extra) * np.exp(MACHINE_SD * rng.standard_normal(count))


def _scaled(moved: Moved, ratio: float) -> list[TrialHistory]:
    """The sweep's trials with their epoch times × ``ratio`` and cold start-ups × the start ratio."""
    out = []
    for trial in moved.record.trials:
        seconds = trial.epoch_seconds
        if seconds is not None:
            seconds = [s * ratio for s in (seconds if isinstance(seconds, (list, tuple)) else [seconds])]
        startup = trial.startup_s
        if startup is not None and trial.warm is False:
            startup *= moved.start_ratio
        out.append(replace(trial, epoch_seconds=seconds, startup_s=startup))
    return out


def _noisy(values: list[float], count: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` draws of one overhead: one of ``values`` × a rerun's spread (zeros where there are none)."""
    if not values:
        return np.zeros(count)
    picked = np.asarray(values, dtype=float)[rng.integers(0, len(values), count)]
    return picked * np.exp(OVERHEAD_SD * rng.standard_normal(count))


def _split_normal(low: float | None, median: float | None, high: float | None, count: int,
                  rng: np.random.Generator) -> np.ndarray:
    """``count`` draws with this 10th percentile, median and 90th percentile (normal on each side, ≥ 0)."""
    median = median or 0.0
    low = median if low is None else low
    high = median if high is None else high
    z = rng.standard_normal(count)
    scale = np.where(z < 0, (median - low) / _Z90, (high - median) / _Z90)
    return np.maximum(0.0, median + z * scale)


def _normal_quantile(q: float) -> float:
    """The standard normal's quantile (Acklam's rational approximation is more than enough here)."""
    from statistics import NormalDist

    return NormalDist().inv_cdf(q)
