"""Statistics over repeats: is the winning configuration better than the others beyond run-to-run noise?

:func:`compare` takes each configuration's repeat values (the objective at each repeat's best epoch), picks
the winner by mean and tests it against every other configuration with Welch's two-sided t-test, Holm-
corrected over the comparisons. The winner is declared significant only when every corrected test rejects.

Why this keeps the false-winner rate at ``alpha`` although the winner is picked after looking at the data:
"the winner beats every other configuration" is an intersection of claims, and it can only be wrong if the
winner's comparison with some configuration at least as good is wrong. The two-sided test of that pair
rejects with probability at most ``alpha`` whichever of the two the data make look better (the selection of
the direction is what a one-sided test would not survive), and Holm's step-down keeps the family of
comparisons at ``alpha``. ``tests/unit/test_stats.py`` checks the rate by simulation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

__all__ = ["TEST_NAME", "Comparison", "GroupStats", "compare", "group_stats", "holm"]

#: The test's name as the summary and MLflow give it.
TEST_NAME = "Welch's t-test, two-sided, Holm-corrected"
#: Confidence of each configuration's interval of its mean.
CONFIDENCE = 0.95


@dataclass(frozen=True)
class GroupStats:
    """One configuration's repeats.

    Attributes:
        n: Number of repeats with a value.
        mean: Their mean.
        std: Their sample standard deviation (ddof 1); None with one repeat.
        ci_low: Lower end of the 95 % t interval of the mean; None with one repeat.
        ci_high: Upper end of that interval; None with one repeat.
    """

    n: int
    mean: float
    std: float | None
    ci_low: float | None
    ci_high: float | None


@dataclass(frozen=True)
class Comparison:
    """The winner of a set of configurations and whether it beats each other one beyond noise.

    Attributes:
        winner: Key of the configuration with the best mean.
        significant: True when the winner beats every other configuration after correction (False with a
            single configuration or without two repeats on each side).
        p_values: Winner vs each other configuration: Holm-corrected two-sided p-value (None where a side
            has fewer than two repeats).
        raw_p_values: The same before correction.
        test: The test's name.
        alpha: The level the decision was taken at.
        mode: ``max`` or ``min``.
        groups: Per configuration: n, mean, std, 95 % interval.
        ranking: Configuration keys from best mean to worst.
    """

    winner: str
    significant: bool
    p_values: dict[str, float | None]
    raw_p_values: dict[str, float | None]
    test: str
    alpha: float
    mode: str
    groups: dict[str, GroupStats] = field(default_factory=dict)
    ranking: list[str] = field(default_factory=list)

    @property
    def mean(self) -> dict[str, float]:
        """Mean per configuration."""
        return {k: g.mean for k, g in self.groups.items()}

    @property
    def std(self) -> dict[str, float | None]:
        """Sample standard deviation per configuration."""
        return {k: g.std for k, g in self.groups.items()}

    @property
    def ci_low(self) -> dict[str, float | None]:
        """Lower end of the 95 % interval per configuration."""
        return {k: g.ci_low for k, g in self.groups.items()}

    @property
    def ci_high(self) -> dict[str, float | None]:
        """Upper end of the 95 % interval per configuration."""
        return {k: g.ci_high for k, g in self.groups.items()}

    @property
    def n(self) -> dict[str, int]:
        """Repeats per configuration."""
        return {k: g.n for k, g in self.groups.items()}

    def verdict(self, sweep: str = "NAME") -> str:
        """The decision in words, as the CLI summary, ``summary.json`` and MLflow give it.

        Args:
            sweep: The sweep's name, in the ``hpo repeat`` command suggested when the noise is unknown.
        """
        if len(self.ranking) < 2:
            return "only one configuration: nothing to compare"
        runner_up = self.ranking[1]
        p = self.p_values.get(runner_up)
        if self.groups[self.winner].n < 2 or p is None:
            return ("the winner's noise is unknown (one run per configuration); "
                    f"run `hpo repeat {sweep} --top 3 --repeats 5` (or set search.repeats) to test it")
        if self.significant:
            worst = max(v for v in self.p_values.values() if v is not None)
            return f"best is significantly better than every other configuration (p <= {worst:.2g}, {self.test})"
        return (f"best is not significantly better than #2 (p = {p:.2g}, {self.test}, alpha = {self.alpha}); "
                "consider more repeats")

    def to_dict(self, sweep: str = "NAME") -> dict[str, object]:
        """A JSON-ready form (``summary.json``'s ``statistics``); ``sweep`` as for :meth:`verdict`."""
        return {
            "winner": self.winner,
            "significant": self.significant,
            "test": self.test,
            "alpha": self.alpha,
            "verdict": self.verdict(sweep),
            "ranking": list(self.ranking),
            "p_values": dict(self.p_values),
            "raw_p_values": dict(self.raw_p_values),
            "groups": {k: vars(g).copy() for k, g in self.groups.items()},
        }


def group_stats(values: Sequence[float]) -> GroupStats:
    """Mean, sample standard deviation and 95 % t interval of one configuration's repeat values.

    Raises:
        ValueError: Without values, or with a value that is not finite.
    """
    xs = [float(v) for v in values]
    if not xs or not all(math.isfinite(v) for v in xs):
        raise ValueError(f"need finite values, got {list(values)!r}")
    n, mean = len(xs), sum(xs) / len(xs)
    if n < 2:
        return GroupStats(n=n, mean=mean, std=None, ci_low=None, ci_high=None)
    # Imported only here and in _welch_p: scipy.stats costs a CLI process about a second, and a sweep of one
    # run per configuration needs none of it.
    from scipy import stats

    std = math.sqrt(sum((v - mean) ** 2 for v in xs) / (n - 1))
    half = float(stats.t.ppf(0.5 + CONFIDENCE / 2, n - 1)) * std / math.sqrt(n)
    return GroupStats(n=n, mean=mean, std=std, ci_low=mean - half, ci_high=mean + half)


def holm(p_values: Mapping[str, float]) -> dict[str, float]:
    """Holm's step-down adjustment: adjusted p-values, monotone, capped at 1."""
    order = sorted(p_values, key=lambda k: p_values[k])
    adjusted: dict[str, float] = {}
    running = 0.0
    for i, key in enumerate(order):
        running = max(running, min(1.0, (len(order) - i) * p_values[key]))
        adjusted[key] = running
    return adjusted


def _welch_p(a: GroupStats, b: GroupStats) -> float | None:
    """Two-sided Welch p-value of equal means, from summary statistics (None below two repeats a side)."""
    if a.n < 2 or b.n < 2 or a.std is None or b.std is None:
        return None
    if a.std == 0 and b.std == 0:
        return 1.0 if a.mean == b.mean else 0.0
    from scipy import stats

    return float(stats.ttest_ind_from_stats(a.mean, a.std, a.n, b.mean, b.std, b.n, equal_var=False).pvalue)


def compare(groups: Mapping[str, Sequence[float]], *, mode: str, alpha: float = 0.05) -> Comparison:
    """Picks the configuration with the best mean and tests it against every other one.

    Args:
        groups: Configuration key -> its repeats' objective values (finite numbers, at least one each).
        mode: ``max`` (higher is better) or ``min``.
        alpha: Level of the family of comparisons.

    Returns:
        The winner, per-configuration statistics, corrected p-values and the decision.

    Raises:
        ValueError: No configuration, an empty or non-finite group, a bad ``mode`` or ``alpha``.
    """
    if mode not in ("max", "min"):
        raise ValueError(f"mode must be 'max' or 'min', got {mode!r}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be between 0 and 1, got {alpha!r}")
    if not groups:
        raise ValueError("need at least one configuration")
    stats = {str(key): group_stats(values) for key, values in groups.items()}
    sign = -1.0 if mode == "max" else 1.0
    ranking = sorted(stats, key=lambda k: (sign * stats[k].mean, -stats[k].n, k))
    winner = ranking[0]
    raw = {k: _welch_p(stats[winner], stats[k]) for k in ranking[1:]}
    testable = {k: p for k, p in raw.items() if p is not None}
    adjusted = holm(testable)
    p_values = {k: adjusted.get(k) for k in ranking[1:]}
    significant = bool(raw) and len(testable) == len(raw) and all(p < alpha for p in adjusted.values())
    return Comparison(winner=winner, significant=significant, p_values=p_values, raw_p_values=raw,
                      test=TEST_NAME, alpha=alpha, mode=mode, groups=stats, ranking=ranking)
