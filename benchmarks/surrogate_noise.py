"""Where random + FIFO's final best comes from, under the surrogate's two clips of its noise.

The search benchmark's target B is the best value random search with no early stopping reaches in the budget
(``benchmarks/search_peers.py``). This script replays that baseline on every table, seed by seed, answered
by :class:`hpo.replay.Surrogate` with its noise clipped to the whole table's range (``clip="table"``, the
answers before 2026-11-28) and to the range its neighbours' recorded seeds span per epoch (``"neighbours"``,
the default since), and asks of the trial that set B:

- is B better than every recorded seed of the ``k`` configurations its curve was interpolated from ever was
  (at any epoch)? A real trial near those configurations could not have logged it;
- is B the table's best recorded value, the value the table-wide clip stops at?
- did that trial log B at a single epoch, both neighbouring epochs being worse by more than the trial's own
  median epoch-to-epoch change (a one-epoch dip)?

Usage: ``python benchmarks/surrogate_noise.py --seeds 10 --out benchmarks/results/search_surrogate_noise.json``.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

from search_peers import sweep_config  # noqa: E402

from hpo.replay import CurveTable, ReplayedTrial, Surrogate, replay_sweep  # noqa: E402
from hpo.replay.surrogate import CLIPS  # noqa: E402


def _dip(values: np.ndarray, at: int) -> bool:
    """Whether epoch ``at`` of ``values`` (lower is better) is a one-epoch dip: both neighbours worse by more
    than the curve's median epoch-to-epoch change."""
    steps = np.abs(np.diff(values[~np.isnan(values)]))
    if at == 0 or at == len(values) - 1 or len(steps) == 0:
        return False
    margin = float(np.median(steps))
    return bool(values[at - 1] - values[at] > margin and values[at + 1] - values[at] > margin)


def setter(table: CurveTable, surrogate: Surrogate, trial: ReplayedTrial, best: float) -> dict[str, Any]:
    """What is asked of the trial that first logged ``best`` (values as lower-is-better)."""
    sign = 1.0 if table.task.mode == "min" else -1.0
    values = sign * np.array(trial.values, dtype=float)
    rows, _ = surrogate._neighbours(trial.params)
    neighbours = min(float(np.nanmin(sign * table.curves[(int(surrogate.ids[r]), s)].values))
                     for r in rows for s in table.seeds(int(surrogate.ids[r])))
    floor = surrogate.low if sign > 0 else -surrogate.high
    at = int(np.nanargmin(values))
    return {"beats_neighbours": best < neighbours - 1e-12, "at_table_best": abs(best - floor) <= 1e-12,
            "one_epoch_dip": _dip(values, at), "gap_to_neighbours": round(neighbours - best, 4)}


def check(table: CurveTable, clip: str, seeds: int, concurrency: int, budget_x: int) -> dict[str, Any]:
    """The three questions over ``seeds`` replays of random + FIFO on ``table``."""
    surrogate = Surrogate(table, clip=clip)  # type: ignore[arg-type]
    sign = 1.0 if table.task.mode == "min" else -1.0
    rows = []
    for seed in range(seeds):
        config = sweep_config(table, seed, concurrency, 3, algorithm="random", scheduler="fifo")
        result = replay_sweep(config, table, budget_epochs=budget_x * table.task.max_epochs, surrogate=surrogate)
        best = sign * result.best()
        trial = next(t for t in result.trials
                     if t.values and abs(float(np.nanmin(sign * np.array(t.values))) - best) <= 1e-12)
        rows.append(setter(table, surrogate, trial, best))
    return {key: sum(r[key] for r in rows) for key in ("beats_neighbours", "at_table_best", "one_epoch_dip")} | {
        "seeds": seeds, "median_gap_to_neighbours": float(np.median([r["gap_to_neighbours"] for r in rows]))}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tables", type=Path, default=ROOT / "benchmarks" / "curves")
    parser.add_argument("--seeds", type=int, default=10)
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--budget", type=int, default=50, help="budget in multiples of max_epochs")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "search_surrogate_noise.json")
    args = parser.parse_args()
    started = time.time()
    report: dict[str, Any] = {"benchmark": "surrogate_noise", "seeds": args.seeds, "concurrency": args.concurrency,
                              "budget_x_max_epochs": args.budget, "tables": {}}
    for path in sorted(args.tables.glob("*.parquet")):
        table = CurveTable.read(path)
        report["tables"][table.task.name] = entry = {
            clip: check(table, clip, args.seeds, args.concurrency, args.budget) for clip in CLIPS}
        print(table.task.name, json.dumps(entry), flush=True)
    report["wall_s"] = round(time.time() - started, 1)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out} in {report['wall_s']} s")


if __name__ == "__main__":
    main()
