"""How often ``hpo.stats.compare`` declares a winner: false winners under equal means, power under a real gap.

A simulation, no training: each simulated sweep draws every configuration's repeat values from a normal
distribution with standard deviation sigma (run-to-run noise) and asks :func:`hpo.stats.compare` whether the
configuration with the best mean beats every other one beyond noise (Welch's two-sided t-test,
Holm-corrected, alpha = 0.05).

- **False-winner rate**: all configurations share one true mean; the fraction of sweeps with a declared
  winner must be <= alpha (target <= 5 %), for 2, 3, 5 and 10 configurations and 3, 5 and 10 repeats.
- **Power**: one configuration is ``--gap`` sigmas better than the others (default 2); the fraction of
  sweeps that declare it (and not another) the winner. Target >= 80 % with 10 repeats; reported as it is
  for 3 and 5 repeats.

``--sweeps`` simulated sweeps per cell (default 2000). Writes ``benchmarks/results/stats.json``.
"""

from __future__ import annotations

import argparse
import math
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from benchmarks._report import write_report
from hpo.stats import TEST_NAME, compare

ALPHA = 0.05
MEAN, SIGMA = 0.66, 0.015  # the run-to-run noise the project measured on one seed's accuracy


def declared(rng: np.random.Generator, configs: int, repeats: int, gap: float, sweeps: int) -> tuple[float, float]:
    """Fractions of simulated sweeps with a declared winner, and with configuration 0 declared the winner."""
    means = np.full(configs, MEAN)
    means[0] += gap * SIGMA
    any_winner = right = 0
    for _ in range(sweeps):
        draws = rng.normal(means[:, None], SIGMA, size=(configs, repeats))
        result = compare({str(i): list(row) for i, row in enumerate(draws)}, mode="max", alpha=ALPHA)
        any_winner += result.significant
        right += result.significant and result.winner == "0"
    return any_winner / sweeps, right / sweeps


def interval(rate: float, n: int) -> list[float]:
    """A 95 % Wilson interval of a simulated rate."""
    z = 1.96
    centre = (rate + z * z / (2 * n)) / (1 + z * z / n)
    half = z * math.sqrt(rate * (1 - rate) / n + z * z / (4 * n * n)) / (1 + z * z / n)
    return [round(centre - half, 4), round(centre + half, 4)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--sweeps", type=int, default=2000)
    parser.add_argument("--gap", type=float, default=2.0, help="the better configuration's lead, in sigmas")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=str(Path(__file__).parent / "results" / "stats.json"))
    args = parser.parse_args()
    rng = np.random.default_rng(args.seed)
    started = time.time()
    false_winners, power = [], []
    for configs in (2, 3, 5, 10):
        for repeats in (3, 5, 10):
            rate, _ = declared(rng, configs, repeats, 0.0, args.sweeps)
            false_winners.append({"configurations": configs, "repeats": repeats, "rate": round(rate, 4),
                                  "ci95": interval(rate, args.sweeps), "meets_target": rate <= ALPHA})
    for configs in (2, 5):
        for repeats in (3, 5, 10):
            _, rate = declared(rng, configs, repeats, args.gap, args.sweeps)
            power.append({"configurations": configs, "repeats": repeats, "power": round(rate, 4),
                          "ci95": interval(rate, args.sweeps)})
    write_report({
        "benchmark": "stats",
        "test": TEST_NAME,
        "alpha": ALPHA,
        "sigma": SIGMA,
        "gap_sigmas": args.gap,
        "sweeps_per_cell": args.sweeps,
        "seed": args.seed,
        "false_winner_rate": false_winners,
        "false_winner_target_met": all(row["meets_target"] for row in false_winners),
        "power": power,
        "power_target_met_at_10_repeats": all(row["power"] >= 0.8 for row in power if row["repeats"] == 10),
        "seconds": round(time.time() - started, 1),
    }, args.out)


if __name__ == "__main__":
    main()
