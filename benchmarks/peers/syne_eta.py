"""Syne Tune's ASHA with reduction factor 2 and 3 on one table: the best value each seed sees.

Run in the peers' venv: ``benchmarks/.peers-venv/bin/python benchmarks/peers/syne_eta.py --table T.json
--seeds 40 --out R.json`` (``T.json`` as ``benchmarks/search_peers.py`` writes it for the venv:
``adapters.write_json``). It answers one question about the benchmark: whether ``syne_asha`` (Syne Tune's
default reduction factor, 3) misses random + FIFO's final best on a table because of its reduction factor
(hpo's and ``random_asha``'s is 2). Each run is ``adapters.simulate`` with the same surrogate, budget,
patience and seeds as the benchmark; only the scheduler's ``reduction_factor`` differs. Reported per
reduction factor and trials at once: each seed's best value, the trials started, and the seeds whose best
reached the table's highest recorded epoch value (the value the surrogate's answers were clipped to when this
was asked, which random + FIFO's final best was on most seeds of those tables; the surrogate is built with
that clip, ``clip="table"``, so that the recorded answer is reproduced).
"""

from __future__ import annotations

import argparse
import json
import logging
import random
import sys
import warnings
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))

import adapters
import numpy as np


def run(table: adapters.CurveTable, seed: int, concurrency: int, eta: int, budget: int, patience: int) -> dict:
    """One Syne Tune ASHA run with reduction factor ``eta``: its best value and how many trials it started."""
    from syne_tune.optimizer import baselines

    random.seed(seed)
    np.random.seed(seed)  # as adapters.main: Syne Tune draws from numpy's global generator
    peer = adapters.SyneTune("asha", table, seed)
    peer.scheduler = baselines.ASHA(peer.scheduler.config_space, metric=adapters.METRIC,
                                    time_attr=adapters.TIME_ATTR, max_t=table.task.max_epochs,
                                    do_minimize=table.task.mode == "min", random_seed=seed, grace_period=1,
                                    reduction_factor=eta)
    answer = adapters.Surrogate(table, clip="table").curve
    events = adapters.simulate(peer, table, answer, seed=seed, concurrency=concurrency, budget=budget,
                               patience=patience)
    values = np.array([v for _, _, v in events], dtype=float)
    best = float(np.nanmax(values) if table.task.mode == "max" else np.nanmin(values))
    return {"best": best, "trials": len(peer.trials)}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--table", type=Path, required=True)
    parser.add_argument("--seeds", type=int, default=40)
    parser.add_argument("--concurrency", default="2,8")
    parser.add_argument("--etas", default="2,3")
    parser.add_argument("--budget", type=int, default=50, help="budget in multiples of max_epochs")
    parser.add_argument("--patience", type=int, default=3)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    table = adapters.read_table(args.table)
    finite = np.concatenate([c.values[~np.isnan(c.values)] for c in table.curves.values()])
    top = float(finite.max() if table.task.mode == "max" else finite.min())
    out: dict = {"task": table.task.name, "top": top, "seeds": args.seeds, "versions": adapters.versions(),
                 "runs": {}}
    for concurrency in (int(c) for c in args.concurrency.split(",")):
        for eta in (int(e) for e in args.etas.split(",")):
            runs = [run(table, seed, concurrency, eta, args.budget * table.task.max_epochs, args.patience)
                    for seed in range(args.seeds)]
            reached = sum(abs(r["best"] - top) < 1e-12 for r in runs)
            out["runs"][f"x{concurrency}_eta{eta}"] = {
                "reached_top": f"{reached}/{len(runs)}",
                "best_mean": float(np.mean([r["best"] for r in runs])),
                "trials_median": float(np.median([r["trials"] for r in runs])),
                "per_seed": runs,
            }
            print(f"{table.task.name} x{concurrency} eta {eta}: reached the top value on {reached}/{len(runs)} seeds, "
                  f"mean best {out['runs'][f'x{concurrency}_eta{eta}']['best_mean']:.4f}", flush=True)
    args.out.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
