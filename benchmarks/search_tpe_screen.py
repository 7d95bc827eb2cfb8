"""Which TPE to use: Optuna's default TPE against the TPE with ``group=True``, replayed on the development tasks.

``optuna-tpe``'s sampler is not a sweep-file key, so ``benchmarks/search_peers.py --variants`` cannot vary it:
this script replays hpo's default sweep (TPE + Tune's ASHA, through hpo's own searcher and scheduler, on the
surrogate of each table, as ``search_peers.py`` does) with the sampler ``optuna-tpe`` builds replaced, and
reports for each task and trials-at-once the median over seeds of the epochs until random + FIFO's final best
is reached, as a share of the budget (50 × max_epochs), and the mean normalised regret at 25 % of it.

Variants (``--variants``): ``default`` (``TPESampler(seed)``: multivariate over the parameters every trial
has, any other parameter on its own), ``group`` (``multivariate=True, group=True``: what ``optuna-tpe`` uses),
``group_complete`` (``group``, with trials the scheduler stopped told COMPLETE with their best epoch, as Ray's
``OptunaSearch`` does, instead of PRUNED), ``group_matched`` (``group``, shown the trials compared at one
budget: :mod:`hpo.search.matched`), ``random`` (random search with the same ASHA: the peer), and
``name:option=value+option=value``: ``group_matched`` (today's ``optuna-tpe``) with other ``TPESampler``
options (``n_ei_candidates``, ``prior_weight``, ``consider_endpoints``, ``consider_magic_clip``, and ``gamma``
given as the share of the trials in the good set, at most 25 as in Optuna's default of 0.1).

``python benchmarks/search_tpe_screen.py --seeds 20`` → ``benchmarks/results/search_tpe_screen.json``. Only the
development tasks by default: the held-out ones are for the chosen setting, in ``search_peers.py``.
"""

from __future__ import annotations

import argparse
import json
import math
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))

import search_peers as peers  # noqa: E402

from hpo.replay import CurveTable, Surrogate  # noqa: E402
from hpo.results import FINISHED_KEY  # noqa: E402
from hpo.search import searchers  # noqa: E402

VARIANTS = ("default", "group", "group_complete", "group_matched", "random")


def _sampler(matched: bool = False, **options: Any) -> Any:
    def make(config: Any) -> Any:
        import optuna

        from hpo.search.matched import BudgetMatched

        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            model = optuna.samplers.TPESampler(seed=config.search.seed, **searchers._startup(config), **options)
        return BudgetMatched(model) if matched else model

    return make


#: How hpo tells the study a trial ended (restored before each variant).
_TELL = searchers.DurableOptunaSearch.on_trial_complete


def _told_complete(self: Any, trial_id: str, result: dict | None = None, error: bool = False) -> None:
    """hpo's own telling, with a trial the scheduler stopped passed on as finished (told COMPLETE)."""
    if result and result.get(FINISHED_KEY) is False:
        result = {**result, FINISHED_KEY: True}
    _TELL(self, trial_id, result, error)


def tpe_options(text: str) -> dict[str, Any]:
    """``option=value+option=value`` as ``TPESampler`` keyword arguments (``gamma``: the good set's share)."""
    options: dict[str, Any] = {}
    for item in filter(None, text.split("+")):
        key, _, raw = item.partition("=")
        if key == "gamma":
            share = float(raw)
            options[key] = lambda n, share=share: min(math.ceil(share * n), 25)
        elif key in ("consider_endpoints", "consider_magic_clip", "consider_prior"):
            options[key] = raw.lower() == "true"
        elif key == "n_ei_candidates":
            options[key] = int(raw)
        elif key == "prior_weight":
            options[key] = float(raw)
        else:
            raise SystemExit(f"--variants: {key}: not a TPE option this screen sets; use one of n_ei_candidates, "
                             "prior_weight, gamma, consider_endpoints, consider_magic_clip, consider_prior")
    return options


def use(variant: str) -> str | None:
    """Sets ``optuna-tpe`` up as ``variant`` says; returns the search algorithm to replay (None: hpo's default)."""
    searchers.DurableOptunaSearch.on_trial_complete = _told_complete if variant == "group_complete" else _TELL
    if ":" in variant:
        object.__setattr__(searchers.tpe, "sampler", _sampler(matched=True, multivariate=True, group=True,
                                                              **tpe_options(variant.partition(":")[2])))
    elif variant == "default":
        object.__setattr__(searchers.tpe, "sampler", _sampler())
    elif variant in ("group", "group_complete", "group_matched"):
        object.__setattr__(searchers.tpe, "sampler",
                           _sampler(matched=variant == "group_matched", multivariate=True, group=True))
    return "random" if variant == "random" else None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", default="cancer_mlp,digits_mlp")
    parser.add_argument("--seeds", type=int, default=20)
    parser.add_argument("--concurrency", default="2,8")
    parser.add_argument("--variants", default=",".join(VARIANTS))
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "search_tpe_screen.json")
    args = parser.parse_args()
    began = time.time()
    report: dict[str, Any] = {"benchmark": "search_tpe_screen", "seeds": args.seeds, "budget_x_max_epochs": 50,
                              "patience": 3, "answers": "surrogate", "noise_clip": "neighbours", "variants": {}}
    tables = {name: CurveTable.read(ROOT / "benchmarks" / "curves" / f"{name}.parquet")
              for name in args.tasks.split(",")}
    targets: dict[tuple[str, int, int], float] = {}
    for variant in args.variants.split(","):
        method = peers.hpo_method(use(variant), None)
        rows = report["variants"][variant.partition(":")[0]] = {}
        for name, table in tables.items():
            answers, budget, mode = Surrogate(table), 50 * table.task.max_epochs, table.task.mode
            oracle, typical = peers.table_scale(table)
            sign = 1.0 if mode == "max" else -1.0
            for concurrency in (int(c) for c in args.concurrency.split(",")):
                ratios, regrets = [], []
                for seed in range(args.seeds):
                    key = (name, concurrency, seed)
                    if key not in targets:
                        baseline = peers.METHODS["random_fifo"](table, answers, seed, concurrency, budget, 3)
                        targets[key] = peers.best_within(baseline, budget, mode)
                    events = method(table, answers, seed, concurrency, budget, 3)
                    reached = peers.epochs_to(events, targets[key], mode)
                    ratios.append(math.inf if reached is None else reached / budget)
                    best = peers.best_within(events, 0.25 * budget, mode)
                    regrets.append(sign * (oracle - best) / abs(oracle - typical))
                median = statistics.median(ratios)
                rows[f"{name} x{concurrency}"] = {"ratio_median": None if math.isinf(median) else round(median, 4),
                                                  "regret_25_mean": round(float(np.mean(regrets)), 4),
                                                  "per_seed_ratio": [None if math.isinf(r) else round(r, 4)
                                                                     for r in ratios],
                                                  "per_seed_regret_25": [round(float(r), 4) for r in regrets]}
        report.setdefault("specs", {})[variant.partition(":")[0]] = variant
        finite = [r["ratio_median"] for r in rows.values()]
        rows["worst_ratio"] = None if None in finite else max(finite)
        print(variant, json.dumps({cell: [row["ratio_median"], row["regret_25_mean"]] if isinstance(row, dict) else row
                                   for cell, row in rows.items()}), flush=True)
    report["wall_s"] = round(time.time() - began, 1)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
