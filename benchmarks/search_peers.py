"""hpo's search against its peers, head to head on recorded learning curves (``benchmarks/curves/*.parquet``).

Every method runs on the same table, with the same seeds, the same budget (``--budget`` × ``max_epochs``
epochs, 50 by default), the same trials-at-once (``--concurrency``, 2 and 8) and the same trial-level
stopping (Keras EarlyStopping with ``--patience``, ``max_epochs``), on a simulated clock where each epoch
takes the seconds the table recorded for it. A method sees a configuration's curve only by training it.

Methods (each through its own library's code):

- ``hpo``: hpo's defaults (``search.algorithm`` and ``scheduler`` left out of the sweep file), replayed by
  :func:`hpo.replay.replay_sweep` through hpo's own searcher and scheduler;
- ``random_fifo``: random search, no early stopping (the baseline);
- ``random_asha``: random search with Ray Tune's ASHA (``random`` + ``asha`` in hpo: Tune's scheduler);
- ``optuna_hyperband``: Optuna's TPE with Optuna's own ``HyperbandPruner``, by ask and tell.

Figures per task and trials-at-once, over the seeds:

- ``ratio``: epochs a method trained (in time order) until an epoch reached B, over the budget, where B is
  random + FIFO's best with the whole budget for that seed (a seed where it never does counts as infinite);
  the median over seeds;
- normalised regret at 25, 50 and 100 % of the budget: (best in the table − best found) / (best in the
  table − median of the table's configurations' best epochs), so 0 is the table's best and 1 a typical
  configuration; mean and standard error over seeds, and a paired Wilcoxon test of hpo against each peer.

Tasks marked held out in ``benchmarks/curves/record.py`` are reported apart (``held_out``). Writes
``benchmarks/results/search_peers.json``. ``--quick``: 5 seeds, to try the script.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "curves"))

import hpo  # noqa: E402
from hpo.progress.stopping import Rules, State, advance, higher_is_better  # noqa: E402
from hpo.replay import CurveTable, replay_sweep  # noqa: E402

FRACTIONS = (0.25, 0.5, 1.0)
#: ``(simulated seconds, epochs trained so far, value)`` of every epoch a method trained, in time order.
Events = list[tuple[float, int, float]]


def sweep_config(table: CurveTable, seed: int, concurrency: int, patience: int, **search: Any) -> hpo.SweepConfig:
    """A sweep file for ``table``'s task; ``search`` may set ``algorithm`` and ``scheduler`` (else hpo's defaults)."""
    scheduler = search.pop("scheduler", None)
    data: dict[str, Any] = {
        "name": f"peers-{table.task.name}", "model": "hpo.models.mlp:build", "data": {"train": "builtin:digits"},
        "objective": {"metric": table.task.metric, "mode": table.task.mode},
        "search": {"num_samples": 100_000, "max_concurrent": concurrency, "seed": seed, **search},
        "trial": {"max_epochs": table.task.max_epochs, "early_stopping": {"patience": patience}},
        "space": table.task.space,
    }
    if scheduler:
        data["scheduler"] = {"type": scheduler}
    return hpo.SweepConfig.model_validate(data)


def hpo_method(algorithm: str | None, scheduler: str | None) -> Callable[..., Events]:
    """A method replayed through hpo's searcher and scheduler (None: hpo's default for that part)."""

    def run(table: CurveTable, seed: int, concurrency: int, budget: int, patience: int) -> Events:
        search = {k: v for k, v in (("algorithm", algorithm), ("scheduler", scheduler)) if v}
        result = replay_sweep(sweep_config(table, seed, concurrency, patience, **search), table,
                              budget_epochs=budget)
        return [(t, done, v) for t, done, _, v in result.events]

    return run


def optuna_hyperband(table: CurveTable, seed: int, concurrency: int, budget: int, patience: int) -> Events:
    """Optuna's TPE with its own HyperbandPruner, by ask and tell, ``concurrency`` trials at once."""
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    task = table.task
    study = optuna.create_study(
        direction="maximize" if task.mode == "max" else "minimize",
        sampler=optuna.samplers.TPESampler(seed=seed),
        pruner=optuna.pruners.HyperbandPruner(min_resource=1, max_resource=task.max_epochs),
    )
    rules = Rules(patience, 0.0, task.max_epochs)
    draws = np.random.default_rng(seed)
    events: Events = []
    queue: list[tuple[float, int, int]] = []
    running: dict[int, dict[str, Any]] = {}
    sequence = 0

    def start(now: float) -> None:
        nonlocal sequence
        trial = study.ask()
        params = _suggest(trial, task.space)
        config_id = table.nearest(params)
        curve = table.curve(config_id, int(draws.integers(1 << 30)))
        state = advance(State.start(1), higher_is_better(curve.values, task.mode)[None, :], rules)
        running[trial.number] = {"trial": trial, "curve": curve, "stop": int(state.stop[0]), "epoch": 0}
        heapq.heappush(queue, (now + float(curve.epoch_s[0]), sequence, trial.number))
        sequence += 1

    for _ in range(concurrency):
        start(0.0)
    while queue and len(events) < budget:
        now, _, number = heapq.heappop(queue)
        state = running[number]
        state["epoch"] += 1
        epoch, trial = state["epoch"], state["trial"]
        value = float(state["curve"].values[epoch - 1])
        events.append((now, len(events) + 1, value))
        if math.isnan(value):
            study.tell(trial, state=optuna.trial.TrialState.FAIL)
        else:
            trial.report(value, epoch)
            if epoch >= state["stop"]:
                study.tell(trial, value)
            elif trial.should_prune():
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            else:
                heapq.heappush(queue, (now + float(state["curve"].epoch_s[epoch]), sequence, number))
                sequence += 1
                continue
        del running[number]
        start(now)
    return events


def _suggest(trial: Any, space: dict[str, Any]) -> dict[str, Any]:
    """The sweep-file ``space`` asked of an Optuna trial, conditionals honoured."""
    params: dict[str, Any] = {}
    for name, spec in space.items():
        if any(params.get(parent) != value for parent, value in (spec.get("when") or {}).items()):
            continue
        if spec["type"] == "categorical":
            params[name] = trial.suggest_categorical(name, spec["choices"])
        elif spec["type"] == "int":
            params[name] = trial.suggest_int(name, spec["low"], spec["high"], step=spec.get("step", 1))
        else:
            params[name] = trial.suggest_float(name, spec["low"], spec["high"], log=bool(spec.get("log")))
    return params


METHODS: dict[str, Callable[..., Events]] = {
    "hpo": hpo_method(None, None),
    "random_fifo": hpo_method("random", "fifo"),
    "random_asha": hpo_method("random", "asha"),
    "optuna_hyperband": optuna_hyperband,
}


def best_within(events: Events, epochs: float, mode: str) -> float:
    """The best value among the first ``epochs`` epochs trained (NaN: none)."""
    values = [v for _, done, v in events if done <= epochs and not math.isnan(v)]
    if not values:
        return math.nan
    return max(values) if mode == "max" else min(values)


def epochs_to(events: Events, target: float, mode: str) -> int | None:
    """Epochs trained until one reached ``target`` (None: never)."""
    for _, done, value in events:
        if not math.isnan(value) and (value >= target if mode == "max" else value <= target):
            return done
    return None


def table_scale(table: CurveTable) -> tuple[float, float]:
    """The table's best value and the median of its curves' best epochs (regret's 0 and 1)."""
    sign = 1.0 if table.task.mode == "max" else -1.0
    bests = [sign * np.nanmax(sign * c.values) for c in table.curves.values() if not np.isnan(c.values).all()]
    return (max(bests) if sign > 0 else min(bests)), float(statistics.median(bests))


def run_task(table: CurveTable, seeds: list[int], concurrency: int, budget: int, patience: int) -> dict[str, Any]:
    """Every method over the seeds on one table at one concurrency: ratios, regrets, tests."""
    from scipy.stats import wilcoxon

    mode = table.task.mode
    oracle, typical = table_scale(table)
    rows: dict[str, list[dict[str, Any]]] = {name: [] for name in METHODS}
    for seed in seeds:
        runs = {name: method(table, seed, concurrency, budget, patience) for name, method in METHODS.items()}
        target = best_within(runs["random_fifo"], budget, mode)
        for name, events in runs.items():
            reached = epochs_to(events, target, mode)
            regret = {f: abs(oracle - best_within(events, f * budget, mode)) / abs(oracle - typical)
                      for f in FRACTIONS}
            rows[name].append({"seed": seed, "ratio": None if reached is None else reached / budget,
                               "regret": regret, "trials_epochs": len(events)})
    out: dict[str, Any] = {"oracle": oracle, "typical": typical, "methods": {}}
    for name, per_seed in rows.items():
        ranked = [math.inf if r["ratio"] is None else r["ratio"] for r in per_seed]
        entry: dict[str, Any] = {
            "ratio_median": _finite(statistics.median(ranked)),
            "reached": f"{sum(r['ratio'] is not None for r in per_seed)}/{len(per_seed)}",
        }
        for f in FRACTIONS:
            values = np.array([r["regret"][f] for r in per_seed], dtype=float)
            entry[f"regret_{int(f * 100)}"] = {
                "mean": round(float(np.nanmean(values)), 4),
                "stderr": round(float(np.nanstd(values, ddof=1) / math.sqrt(len(values))), 4) if len(values) > 1
                else None,
            }
        if name != "hpo":
            mine = np.array([r["regret"][1.0] for r in rows["hpo"]])
            theirs = np.array([r["regret"][1.0] for r in per_seed])
            differs = mine != theirs
            entry["hpo_vs_this_regret_100_wilcoxon_p"] = (
                round(float(wilcoxon(mine[differs], theirs[differs]).pvalue), 4) if differs.sum() >= 5 else None)
        out["methods"][name] = entry
    return out


def _finite(value: float) -> float | None:
    return None if math.isinf(value) else round(value, 4)


def main() -> None:
    from record import TASKS

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tables", type=Path, default=ROOT / "benchmarks" / "curves")
    parser.add_argument("--seeds", type=int, default=40)
    parser.add_argument("--concurrency", default="2,8")
    parser.add_argument("--budget", type=int, default=50, help="budget in multiples of max_epochs")
    parser.add_argument("--patience", type=int, default=3)
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "search_peers.json")
    parser.add_argument("--quick", action="store_true")
    args = parser.parse_args()
    seeds = list(range(5 if args.quick else args.seeds))
    held_out = {t.name: t.held_out for t in TASKS}
    started = time.time()
    report: dict[str, Any] = {"benchmark": "search_peers", "seeds": len(seeds), "budget_x_max_epochs": args.budget,
                              "patience": args.patience, "methods": list(METHODS), "tasks": {}}
    for path in sorted(args.tables.glob("*.parquet")):
        table = CurveTable.read(path)
        task = table.task.name
        report["tasks"][task] = {"held_out": held_out.get(task, True), "configs": len(table.params),
                                 "by_concurrency": {}}
        for concurrency in (int(c) for c in args.concurrency.split(",")):
            t0 = time.time()
            result = run_task(table, seeds, concurrency, args.budget * table.task.max_epochs, args.patience)
            result["wall_s"] = round(time.time() - t0, 1)
            report["tasks"][task]["by_concurrency"][str(concurrency)] = result
            line = ", ".join(f"{m} {r['ratio_median']} / {r['regret_100']['mean']}"
                             for m, r in result["methods"].items())
            print(f"{task} x{concurrency} ({result['wall_s']} s): ratio / regret at 100 %: {line}", flush=True)
    report["wall_s"] = round(time.time() - started, 1)
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out} in {report['wall_s']} s")


if __name__ == "__main__":
    main()
