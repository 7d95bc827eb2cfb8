"""How much training TPE + ASHA needs to match what random search + FIFO finds with its full budget.

On the digits MLP (a cheap but real task), for each seed: random + FIFO runs ``--trials`` trials to
``--epochs`` epochs each (the full budget) and finds its best validation accuracy B; TPE + ASHA may start
``--tpe-trials`` trials (ASHA may stop them after 1 or 3 epochs, so the epochs, not the trials, are
what is compared), and we count the epochs it trained, in order, until one epoch reached B. The
ratio epochs-to-B / full budget is the figure (target ≤ 0.33); a seed where TPE + ASHA never reaches B
counts as infinitely slow in the median. TPE + ASHA trials run one at a time, so the order of epochs is
exact, and the sweep has ``objective.goal: B``, so it ends at the epoch that reaches B. ASHA runs with
``scheduler.bootstrap_count: 1`` (``--bootstrap-count``; 0 is Tune's ASHA, which lets the first trial at
each rung, the sweep's first random configuration included, train to the end whatever its value).
Random search's configurations do not depend on results, so its trials run two at a time (only its best
epoch counts).
TPE gets its own seed (``SEED_OFFSET + s``) so its random start-up trials do not replay random search's
draws, and models the space after ``--startup-trials`` random trials.
``--hpo-defaults`` runs hpo's own defaults instead: the sweep file leaves ``search.algorithm`` and the
scheduler's settings out (TPE with Optuna's 10 random start-up trials, reduction factor 2,
``bootstrap_count`` 0; the JSON records the ``searcher`` that ran), and ``--conditional`` adds a
conditional parameter to the space
(``momentum`` when the optimizer is SGD): the two together check the replayed search benchmark's verdict
(``benchmarks/search_peers.py``) on real training. GP + ASHA and grid + FIFO are run once as references.
Also recorded: each one's best accuracy after a third of random search's budget (an anytime view).
Counts epochs, not seconds.

Why 40 seeds: the figure varies a lot from seed to seed (B is the luckiest single epoch of random
search; the ratio ranged from 0.02 to never on 2026-11-24), and so do medians over few seeds: with Tune's
ASHA the 5-seed blocks read 0.51, 0.27, 0.12, 0.33, 0.64, 0.44, 1.02 and 0.40, and with
``bootstrap_count: 1`` the two 20-seed halves 0.25 and 0.57 (``block_medians`` are reported too).
``--first-seed`` and ``--seeds`` pick the seeds, ``--merge`` makes one report of runs over different
seeds. ~45 minutes on 2 cores.

Writes ``benchmarks/results/search.json``.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import statistics
import tempfile
import time
from pathlib import Path
from typing import Any

import pandas as pd
from _report import finite, write_report

ROOT = Path(__file__).resolve().parents[1]
SPACE = {
    "learning_rate": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
    "units": {"type": "int", "low": 8, "high": 128, "step": 8},
    "layers": {"type": "int", "low": 1, "high": 3},
    "dropout": {"type": "float", "low": 0.0, "high": 0.5},
    "optimizer": {"type": "categorical", "choices": ["adam", "sgd"]},
}
#: ``--conditional``: a parameter only some configurations have, as in the replayed benchmark's tables.
CONDITIONAL = {"momentum": {"type": "float", "low": 0.5, "high": 0.99, "when": {"optimizer": "sgd"}}}


def sweep(
    name: str,
    algorithm: str | None,
    scheduler: str,
    seed: int,
    trials: int,
    epochs: int,
    startup: int | None = None,
    validation_fraction: float = 0.2,
    goal: float | None = None,
    concurrent: int = 1,
    bootstrap: int = 0,
    conditional: bool = False,
    hpo_defaults: bool = False,
    random_fraction: float | None = None,
) -> dict[str, Any]:
    """The sweep file of one run; ``algorithm`` None leaves ``search.algorithm`` to hpo's default.

    ``random_fraction``: ``search.random_fraction`` of a model-based searcher (None: hpo's default).
    """
    space = {**SPACE, **CONDITIONAL} if conditional else SPACE
    schedule = {"grace_period": 1, "reduction_factor": 3,
                **({"bootstrap_count": bootstrap} if scheduler == "asha" else {})}
    if algorithm == "grid":
        space = {"learning_rate": {"type": "grid", "values": [1e-3, 1e-2]}, "units": {"type": "grid",
                 "values": [32, 128]}, "optimizer": {"type": "categorical", "choices": ["adam", "sgd"]}}
    return {
        "name": name,
        "model": "hpo.models.mlp:build",
        "data": {"train": "builtin:digits", "validation_fraction": validation_fraction},
        "objective": {"metric": "val_accuracy", "mode": "max", "goal": goal},
        "search": {**({"algorithm": algorithm} if algorithm else {}),
                   "num_samples": trials if algorithm != "grid" else 8, "max_concurrent": concurrent, "seed": seed,
                   **({"startup_trials": startup}
                      if startup and algorithm and algorithm.startswith("optuna") and not hpo_defaults else {}),
                   **({"random_fraction": random_fraction} if random_fraction is not None else {})},
        "scheduler": {"type": scheduler, **({} if hpo_defaults else schedule)},
        "trial": {"workers": 2, "cpus_per_worker": 0.5, "max_epochs": epochs, "batch_size_per_worker": 32,
                  "early_stopping": {"patience": epochs}},
        "space": space,
    }


#: TPE runs with seed SEED_OFFSET + s against random search's seed s.
SEED_OFFSET = 1000
#: The model side's searcher without --hpo-defaults (and of every run recorded before ``searcher`` was).
MODEL_SEARCHER = "optuna-tpe"
#: The issue's target: TPE + ASHA reaches B within this share of random search's epochs.
TARGET = 0.33


def epochs_in_order(storage: Path, name: str) -> list[float]:
    """Validation accuracy of every epoch trained, in the order trials ran (one trial at a time)."""
    frames = [pd.read_csv(p, float_precision="round_trip") for p in (storage / name).glob("*/progress.csv")]
    frames.sort(key=lambda f: f["timestamp"].iloc[0])
    return [float(v) for f in frames for v in f["val_accuracy"]]


def settings(args: argparse.Namespace) -> dict[str, Any]:
    """What a run's figures depend on besides its seeds (runs merged with ``--merge`` must agree on it)."""
    # Under --hpo-defaults the sweep file leaves these to hpo: the figures record hpo's values, not the flags'.
    import inspect

    from optuna.samplers import TPESampler

    from hpo.config.sections import SchedulerConfig, SearchConfig

    fields = SchedulerConfig.model_fields
    searcher = SearchConfig.model_fields["algorithm"].default if args.hpo_defaults else MODEL_SEARCHER
    optuna_startup = inspect.signature(TPESampler).parameters["n_startup_trials"].default  # search.startup_trials unset
    startup, bootstrap, reduction = (
        (optuna_startup, fields["bootstrap_count"].default, fields["reduction_factor"].default)
        if args.hpo_defaults else (args.startup_trials, args.bootstrap_count, 3))
    search = SearchConfig(algorithm=searcher)  # what hpo resolves the unset keys to for that searcher
    random_fraction = args.random_fraction if args.random_fraction is not None else search.random_share
    random_after: int | None = search.random_start
    if not searcher.startswith("optuna"):
        startup = random_fraction = random_after = None  # random search has no model to start or to interleave with
    return {
        "searcher": searcher, "trials": args.trials, "tpe_trials": args.tpe_trials, "max_epochs": args.epochs,
        "tpe_startup_trials": startup, "validation_fraction": args.validation_fraction,
        "asha_bootstrap_count": bootstrap, "asha_reduction_factor": reduction, "tpe_seed_offset": SEED_OFFSET,
        "conditional_space": args.conditional, "hpo_defaults": args.hpo_defaults,
        "tpe_random_fraction": random_fraction, "tpe_random_after": random_after,
        # None: on for TPE and GP (hpo.search.searchers); the sweep files here never set it
        "tpe_match_budget": SearchConfig.model_fields["match_budget"].default is not False
        and searcher.startswith("optuna"),
    }


def figures(per_seed: list[dict[str, Any]]) -> dict[str, Any]:
    """The per-seed rows and what is read from them: seeds reached, median ratio, block medians."""
    ratios = [s["ratio"] for s in per_seed if s["ratio"] is not None]
    # A seed that never reached B counts as slower than any that did.
    ranked = [math.inf if s["ratio"] is None else s["ratio"] for s in per_seed]
    return {
        "per_seed": per_seed,
        "reached_in": f"{len(ratios)}/{len(per_seed)} seeds",
        "ratio_median": finite(statistics.median(ranked)) if ranked else None,
        "seeds_at_or_under_target": f"{sum(r <= TARGET for r in ranked)}/{len(ranked)}",
        "ratio_max_reached": max(ratios) if ratios else None,
        # The median of each block of 5 consecutive seeds: what a 5-seed run would have reported.
        "block_medians": [finite(statistics.median(ranked[i:i + 5])) for i in range(0, len(ranked) - 4, 5)],
        "tpe_asha_ahead_after_third": "{}/{} seeds".format(
            sum(s["best_after_third"]["tpe_asha"] > s["best_after_third"]["random_fifo"] for s in per_seed),
            len(per_seed),
        ),
    }


def merge(paths: list[str], out: str) -> None:
    """One report from runs of the same settings over different seeds (``--first-seed``)."""
    runs = [json.loads(Path(p).read_text()) for p in paths]
    keys = ("trials", "tpe_trials", "max_epochs", "tpe_startup_trials", "validation_fraction",
            "asha_bootstrap_count", "asha_reduction_factor", "tpe_seed_offset", "conditional_space",
            "hpo_defaults")
    for run in runs:
        run.setdefault("searcher", MODEL_SEARCHER)  # every run before the key was recorded modelled with TPE
        run.setdefault("tpe_random_fraction", 0.0 if run["searcher"].startswith("optuna") else None)  # the default then
        run.setdefault("tpe_random_after", 0 if run["searcher"].startswith("optuna") else None)  # before the key
    keys = ("searcher", "tpe_random_fraction", "tpe_random_after", *keys)
    for run, path in zip(runs[1:], paths[1:], strict=True):
        differ = [k for k in keys if run.get(k) != runs[0].get(k)]
        if differ:
            raise SystemExit(f"error: {path}: {', '.join(differ)} differ from {paths[0]}; merge runs of one setting")
    per_seed = sorted((s for run in runs for s in run["per_seed"]), key=lambda s: s["seed"])
    seeds = [s["seed"] for s in per_seed]
    if len(set(seeds)) != len(seeds):
        raise SystemExit("error: the runs share seeds; merge runs over different --first-seed ranges")
    write_report({
        "benchmark": "search",
        "task": runs[0]["task"],
        **{k: runs[0][k] for k in keys},
        "seeds": len(per_seed),
        "merged_from": [{"file": Path(p).name, "when": r["when"], "wall_s": r["wall_s"], "first_seed":
                         r.get("first_seed", 0), "seeds": r["seeds"]} for p, r in zip(paths, runs, strict=True)],
        **figures(per_seed),
        "references_seed0": next((r["references_seed0"] for r in runs if r.get("references_seed0")), {}),
    }, out)


def main() -> None:
    """Runs the comparison and writes the JSON result."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=40)
    parser.add_argument("--first-seed", type=int, default=0, help="run seeds first-seed .. first-seed + seeds - 1")
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--epochs", type=int, default=9,
                        help="Epochs per trial (ASHA's max_t; with grace 1 and reduction 3 its rungs are 1, 3, 9)")
    parser.add_argument("--tpe-trials", type=int, default=30,
                        help="Trials TPE + ASHA may start (ASHA stops most early, so it needs more trials than "
                             "random + FIFO for the same epochs; what is counted is epochs).")
    parser.add_argument("--validation-fraction", type=float, default=0.2,
                        help="Share of the 1797 digits held out for validation (0.2: 359 rows). 0.5 halves the "
                             "noise of one epoch's accuracy but also the training rows, and trials learn slower "
                             "than ASHA's first rung can judge (TPE + ASHA missed B in both seeds tried)")
    parser.add_argument("--startup-trials", type=int, default=4, help="TPE / GP random start-up trials")
    parser.add_argument("--bootstrap-count", type=int, default=1,
                        help="ASHA's scheduler.bootstrap_count (0: Tune's ASHA, where the first trial at a rung "
                             "always continues)")
    parser.add_argument("--conditional", action="store_true",
                        help="add momentum, searched only when the optimizer is sgd, to the space")
    parser.add_argument("--hpo-defaults", action="store_true",
                        help="TPE + ASHA with hpo's defaults (10 start-up trials, reduction 2, bootstrap 0)")
    parser.add_argument("--random-fraction", type=float, default=None,
                        help="search.random_fraction of the model side (default: hpo's)")
    parser.add_argument("--skip-references", action="store_true", help="do not run GP + ASHA and grid + FIFO")
    parser.add_argument("--merge", nargs="+", metavar="JSON",
                        help="write one report from earlier runs over different seeds instead of running")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "search.json"))
    args = parser.parse_args()
    if args.merge:
        merge(args.merge, args.out)
        return

    import hpo
    from hpo.ray_session import start_ray

    began = time.time()
    per_seed = []
    references: dict[str, Any] = {}
    with tempfile.TemporaryDirectory(prefix="hpo-bench-") as scratch:
        os.chdir(scratch)
        storage = Path(scratch) / "runs"
        start_ray(num_cpus=os.cpu_count())

        def run(name: str, algorithm: str | None, scheduler: str, seed: int, trials: int = args.trials,
                goal: float | None = None, concurrent: int = 1, random_fraction: float | None = None) -> list[float]:
            config = hpo.SweepConfig.model_validate(
                sweep(name, algorithm, scheduler, seed, trials, args.epochs, args.startup_trials,
                      args.validation_fraction, goal, concurrent, args.bootstrap_count, args.conditional,
                      args.hpo_defaults, random_fraction)
            )
            hpo.tune(config, storage=storage)
            return epochs_in_order(storage, name)

        for seed in range(args.first_seed, args.first_seed + args.seeds):
            baseline = run(f"random-fifo-{seed}", "random", "fifo", seed, concurrent=2)
            target = max(baseline)
            # A different seed: the model side's random draws (TPE's start-up trials) must not replay random
            # search's own. --hpo-defaults: hpo's default searcher.
            tpe = run(f"tpe-asha-{seed}", None if args.hpo_defaults else MODEL_SEARCHER, "asha", SEED_OFFSET + seed,
                      args.tpe_trials, goal=target, random_fraction=args.random_fraction)
            reached = next((i + 1 for i, v in enumerate(tpe) if v >= target), None)
            third = len(baseline) // 3
            per_seed.append({
                "seed": seed, "random_fifo_best": target, "random_fifo_epochs": len(baseline),
                "tpe_asha_epochs_run": len(tpe), "tpe_asha_best": max(tpe),
                "tpe_asha_epochs_to_reach": reached,
                "ratio": round(reached / len(baseline), 4) if reached else None,
                # Anytime view: the best accuracy each had after a third of random search's budget.
                "best_after_third": {"random_fifo": max(baseline[:third]), "tpe_asha": max(tpe[:third])},
            })
            print(json.dumps(per_seed[-1]), flush=True)
        for label, algorithm, scheduler in () if args.skip_references else (
            ("gp-asha", "optuna-gp", "asha"), ("grid-fifo", "grid", "fifo")
        ):
            values = run(label, algorithm, scheduler, 0)
            references[label] = {"best": max(values), "epochs": len(values)}
        import ray

        ray.shutdown()
        os.chdir(ROOT)
    report = {
        "benchmark": "search",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "task": "digits MLP, 2 Horovod workers, batch 32/worker",
        **settings(args),
        "seeds": args.seeds,
        "first_seed": args.first_seed,
        "wall_s": round(time.time() - began, 1),
        **figures(per_seed),
        "references_seed0": references,
    }
    write_report(report, args.out)


if __name__ == "__main__":
    main()
