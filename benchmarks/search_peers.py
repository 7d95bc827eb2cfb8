"""hpo's search against its peers, head to head on recorded learning curves (``benchmarks/curves/*.parquet``).

Every method runs on the same table, with the same seeds, the same budget (``--budget`` × ``max_epochs``
epochs, 50 by default), the same trials-at-once (``--concurrency``, 2 and 8) and the same trial-level
stopping (Keras EarlyStopping with ``--patience``, ``max_epochs``), on a simulated clock where each epoch
takes the seconds its curve says. A method sees a configuration's curve only by training it.

A proposal is answered by :class:`hpo.replay.Surrogate` fitted on the table (``--answers surrogate``, the
default: k nearest recorded configurations, 1/distance² weights, noise drawn from the seed repeats), so a
searcher that refines around a good point gets new, nearby curves instead of the same recorded one again.
A noisy answer is clipped, epoch by epoch, to the range its neighbours' recorded seeds span
(``--answers surrogate-table``: to the whole table's range, as runs before that change did; the JSON's
``noise_clip`` says which). ``--answers nearest`` answers with the nearest recorded configuration. The
surrogate is validated on each table (5-fold over configurations: rank correlation and error of the
predicted best epoch against the recorded one, next to the seed-to-seed rank correlation of the repeated
configurations) and that goes in the JSON.

Methods (each through its own library's code):

- ``hpo``: hpo's defaults (``search.algorithm`` and ``scheduler`` left out of the sweep file), replayed by
  :func:`hpo.replay.replay_sweep` through hpo's own searcher and scheduler;
- ``random_fifo``: random search, no early stopping (the baseline);
- ``random_asha``: random search with Ray Tune's ASHA (``random`` + ``asha`` in hpo: Tune's scheduler);
- ``optuna_hyperband``: Optuna's TPE with Optuna's own ``HyperbandPruner``, by ask and tell;
- ``tune_hyperband``, ``tune_bohb``: Ray Tune's own ``HyperBandScheduler`` with random search, and ``TuneBOHB``
  with ``HyperBandForBOHB`` (HpBandSter, from ``benchmarks/.tune-bohb-site``, which ``make_venv.sh`` fills;
  missing: the JSON says so), replayed by hpo's loop for schedulers that pause (:mod:`hpo.replay.pausing`);
- ``syne_asha``, ``syne_bohb``, ``dehb``, ``smac_hb``: Syne Tune's ASHA and BOHB, DEHB, SMAC3's
  multi-fidelity facade with Hyperband, in their own venv (``benchmarks/peers/make_venv.sh``; their pins
  clash with hpo's stack), run by ``benchmarks/peers/adapters.py`` as a subprocess (``--peers-python``);
  missing venv: the JSON says so. ``--peer-seeds`` runs the slow ones (DEHB, SMAC, BOHB) on fewer seeds.
  Their events are kept per seed in ``--cache`` (``~/.cache/hpo/search_peers``, keyed by the table, the
  adapters' code and the settings): a run finds the seeds it already has and runs only the others, so 40
  seeds of the slow peers (about 3.5 hours on 2 cores) can be run in parts, ``--peer-seeds 20`` then 40.
- ``syne_mobster``, ``syne_hypertune``: Syne Tune's MOBSTER and Hyper-Tune, which left Syne Tune after 0.13,
  from a venv of Syne Tune 0.13 (``--syne-gp-python``, ``benchmarks/.syne-gp-venv``, also made by
  ``make_venv.sh``), run by ``benchmarks/peers/syne_gp.py``; slow peers (a GP fitted at each decision:
  minutes a run), cached the same way, and run only where ``--methods`` names them.
- ``--variants``: hpo with other settings of its sweep-file keys (``name:section.key=value,...``), to
  screen defaults on the development tasks.

Figures per task and trials-at-once, over the seeds:

- ``ratio``: epochs a method trained (in time order) until an epoch reached B, over the budget, where B is
  random + FIFO's best with the whole budget for that seed (a seed where it never does counts as infinite);
  the median over seeds, with its interquartile range;
- normalised regret at 25, 50 and 100 % of the budget: (best mean curve in the table − best found) /
  (best − median of the configurations' best mean epochs), so 0 is the table's best configuration and 1 a
  typical one (noise can take it below 0); mean, a bootstrap 95 % interval of the mean, and a paired
  Wilcoxon test of hpo against each peer; the mean regret at 20 points of the budget (``anytime``), for
  the plots (``benchmarks/search_peers_plot.py``).

Tasks marked held out in ``benchmarks/curves/record.py`` are reported apart (``held_out``). Writes
``benchmarks/results/search_peers.json``. ``--quick``: 5 seeds, to try the script. ``--time-200``: only
times one replayed 200-trial sweep of hpo's defaults per table; ``--validate-only``: only the surrogate's
validation.
"""

from __future__ import annotations

import argparse
import hashlib
import heapq
import json
import logging
import math
import os
import statistics
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks" / "curves"))
sys.path.insert(0, str(ROOT / "benchmarks"))  # peers/

import hpo  # noqa: E402
from hpo.progress.stopping import Rules, State, advance, higher_is_better  # noqa: E402
from hpo.replay import CurveTable, Surrogate, replay_sweep  # noqa: E402
from hpo.replay.sweep import ITERATION  # noqa: E402
from hpo.stats import holm as holm_adjust  # noqa: E402
from hpo.tracking.store import cache_root  # noqa: E402

FRACTIONS = (0.25, 0.5, 1.0)
#: Points of the budget at which the mean regret is kept for the plots.
ANYTIME = tuple(round(0.05 * i, 2) for i in range(1, 21))
#: The peers run in their own venv by ``benchmarks/peers/adapters.py``; the slow ones get ``--peer-seeds``.
VENV_PEERS = ("syne_asha", "syne_bohb", "dehb", "smac_hb", "syne_mobster", "syne_hypertune")
SLOW_PEERS = ("syne_bohb", "dehb", "smac_hb", "syne_mobster", "syne_hypertune")
#: Syne Tune 0.13's GP-based peers, run by ``benchmarks/peers/syne_gp.py`` in ``--syne-gp-python``'s venv, and
#: not run unless named in ``--methods``: one run of 1,000 epochs takes minutes (a GP fitted at each decision).
GP_PEERS = ("syne_mobster", "syne_hypertune")
ADAPTERS = ROOT / "benchmarks" / "peers" / "adapters.py"
SYNE_GP = ROOT / "benchmarks" / "peers" / "syne_gp.py"
SURROGATE = ROOT / "hpo" / "replay" / "surrogate.py"
#: ``(simulated seconds, epochs trained so far, value)`` of every epoch a method trained, in time order.
Events = list[tuple[float, int, float]]


def sweep_config(table: CurveTable, seed: int, concurrency: int, patience: int,
                 settings: dict[str, Any] | None = None, **search: Any) -> hpo.SweepConfig:
    """A sweep file for ``table``'s task; ``search`` may set ``algorithm`` and ``scheduler`` (else hpo's defaults).

    ``settings``: more sweep-file keys, ``{"section.key": value}`` (``scheduler.reduction_factor``, ...).
    """
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
    for key, value in (settings or {}).items():
        *sections, name = key.split(".")
        node = data
        for section in sections:
            node = node.setdefault(section, {})
        node[name] = value
    return hpo.SweepConfig.model_validate(data)


def hpo_method(algorithm: str | None, scheduler: str | None,
               settings: dict[str, Any] | None = None) -> Callable[..., Events]:
    """A method replayed through hpo's searcher and scheduler (None: hpo's default for that part)."""

    def run(table: CurveTable, answers: Surrogate | None, seed: int, concurrency: int, budget: int,
            patience: int) -> Events:
        search = {k: v for k, v in (("algorithm", algorithm), ("scheduler", scheduler)) if v}
        return _replayed(sweep_config(table, seed, concurrency, patience, settings, **search), table, answers,
                         budget)

    return run


def _replayed(config: hpo.SweepConfig, table: CurveTable, answers: Surrogate | None, budget: int,
              **tune: Any) -> Events:
    """``config`` replayed on ``table`` for ``budget`` epochs (``tune``: a Tune searcher or scheduler to use)."""
    result = replay_sweep(config, table, budget_epochs=budget, surrogate=answers, **tune)
    return [(t, done, v) for t, done, _, v in result.events]


def optuna_hyperband(table: CurveTable, answers: Surrogate | None, seed: int, concurrency: int, budget: int,
                     patience: int) -> Events:
    """Optuna's TPE with its own HyperbandPruner, by ask and tell, ``concurrency`` trials at once.

    The study is named after the seed: the pruner puts a trial in a bracket by a checksum of the study's name
    and the trial's number, so an unnamed study (a random name) gave other brackets on every run.
    """
    import optuna

    optuna.logging.set_verbosity(optuna.logging.WARNING)
    task = table.task
    study = optuna.create_study(
        study_name=f"optuna_hyperband-{seed}",
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
        draw = int(draws.integers(1 << 30))
        curve = table.curve(table.nearest(params), draw) if answers is None else answers.curve(params, draw)
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


def _quiet_hyperband() -> None:
    """Tune's HyperBand logs each bracket too small for its budget at INFO (hundreds of lines a run)."""
    logging.getLogger("ray.tune.schedulers.hyperband").setLevel(logging.WARNING)


def tune_hyperband(table: CurveTable, answers: Surrogate | None, seed: int, concurrency: int, budget: int,
                   patience: int) -> Events:
    """Random search with Ray Tune's own ``HyperBandScheduler`` (its defaults: η 3; max_t = max_epochs).

    Replayed by hpo's loop for pausing schedulers (:mod:`hpo.replay.pausing`), as Tune runs it with
    ``max_concurrent_trials``: the searcher behind a ``ConcurrencyLimiter``, paused trials counted as live.
    """
    from ray.tune.schedulers import HyperBandScheduler

    _quiet_hyperband()
    scheduler = HyperBandScheduler(time_attr=ITERATION, max_t=table.task.max_epochs)
    return _replayed(sweep_config(table, seed, concurrency, patience, algorithm="random"), table, answers, budget,
                     scheduler=scheduler)


def tune_bohb(table: CurveTable, answers: Surrogate | None, seed: int, concurrency: int, budget: int,
              patience: int) -> Events:
    """Ray Tune's BOHB: ``TuneBOHB`` (HpBandSter's model, ``max_concurrent`` trials running) with
    ``HyperBandForBOHB`` (η 3, max_t = max_epochs), set up as Ray's BOHB example does, replayed by hpo's loop for
    pausing schedulers. HpBandSter draws from NumPy's global generator: it is seeded with the seed for the run
    and put back as it was after it.
    """
    from peers import tune_bohb as bohb  # benchmarks/peers
    from ray.tune.schedulers import HyperBandForBOHB

    _quiet_hyperband()
    logging.getLogger("hpbandster").setLevel(logging.ERROR)  # its KDE's warnings, many lines each
    state = np.random.get_state()
    np.random.seed(seed)
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", category=RuntimeWarning, module="statsmodels")  # its KDE: h / 0
            searcher = bohb.searcher(table.task.space, table.task.metric, table.task.mode, seed, concurrency)
            scheduler = HyperBandForBOHB(time_attr=ITERATION, max_t=table.task.max_epochs)
            return _replayed(sweep_config(table, seed, concurrency, patience, algorithm="random"), table, answers,
                             budget, searcher=searcher, scheduler=scheduler)
    finally:
        np.random.set_state(state)


METHODS: dict[str, Callable[..., Events]] = {
    "hpo": hpo_method(None, None),
    "random_fifo": hpo_method("random", "fifo"),
    "random_asha": hpo_method("random", "asha"),
    "optuna_hyperband": optuna_hyperband,
    "tune_hyperband": tune_hyperband,
    "tune_bohb": tune_bohb,
}


def peer_script(name: str) -> Path:
    """The script that runs the venv peer ``name``: ``syne_gp.py`` for Syne Tune's GP peers, else ``adapters.py``."""
    return SYNE_GP if name in GP_PEERS else ADAPTERS


def venv_peers(python: Path, table: CurveTable, names: list[str], seeds: list[int], concurrency: int, budget: int,
               patience: int, answers: str,
               script: Path = ADAPTERS) -> tuple[dict[str, dict[int, Events]], dict[str, str]]:
    """Runs the peers ``names`` in their venv by ``script`` (``adapters.py``'s CLI): their events, and versions."""
    sys.path.insert(0, str(ROOT / "benchmarks" / "peers"))
    from adapters import write_json

    with tempfile.TemporaryDirectory() as tmp:
        write_json(table, Path(tmp) / "table.json")
        subprocess.run(
            [str(python), str(script), "--table", str(Path(tmp) / "table.json"),
             "--methods", ",".join(names), "--seeds", ",".join(map(str, seeds)), "--concurrency", str(concurrency),
             "--budget", str(budget), "--patience", str(patience), "--answers", answers,
             "--out", str(Path(tmp) / "events.json")],
            check=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, stdout=subprocess.DEVNULL)
        data = json.loads((Path(tmp) / "events.json").read_text())
    runs = {name: {int(seed): [tuple(e) for e in events] for seed, events in per_seed.items()}
            for name, per_seed in data["runs"].items()}
    return runs, data["versions"]


#: Seeds of one peer run by one venv subprocess when filling the cache (each part is kept as it ends).
CACHE_PART = 5
DEFAULT_CACHE = cache_root() / "search_peers"


def cached_peers(cache: Path, python: Path, table: CurveTable, names: list[str], seeds: list[int],
                 concurrency: int, budget: int, patience: int, answers: str,
                 script: Path = ADAPTERS) -> tuple[dict[str, dict[int, Events]], dict[str, str]]:
    """:func:`venv_peers` with each seed's events kept in ``cache``: only the seeds not there yet are run.

    The key is the table's content, the surrogate's module, ``adapters.py`` (and ``script`` where it is another,
    which imports it) and the settings the events depend on, so a changed table, surrogate or adapter starts
    afresh; a peer's run depends on its seed only, not on the seeds run beside it.
    """
    sys.path.insert(0, str(ROOT / "benchmarks" / "peers"))
    from adapters import write_json

    with tempfile.TemporaryDirectory() as tmp:
        write_json(table, Path(tmp) / "table.json")
        digest = hashlib.sha256((Path(tmp) / "table.json").read_bytes())
    digest.update(ADAPTERS.read_bytes())
    if script != ADAPTERS:
        digest.update(script.read_bytes())
    digest.update(SURROGATE.read_bytes())  # how answers are made, noise and clipping included
    digest.update(json.dumps([concurrency, budget, patience, answers]).encode())
    where = cache / f"{table.task.name}-{digest.hexdigest()[:16]}"
    where.mkdir(parents=True, exist_ok=True)
    for name in names:
        missing = [s for s in seeds if not (where / f"{name}-{s}.json").exists()]
        for part in (missing[i:i + CACHE_PART] for i in range(0, len(missing), CACHE_PART)):
            runs, versions = venv_peers(python, table, [name], part, concurrency, budget, patience, answers,
                                        script)
            for seed, events in runs[name].items():
                tmp_file = where / f".{name}-{seed}.json.tmp"
                tmp_file.write_text(json.dumps({"events": events, "versions": versions}))
                os.replace(tmp_file, where / f"{name}-{seed}.json")
    out: dict[str, dict[int, Events]] = {}
    versions: dict[str, str] = {}
    for name in names:
        for seed in seeds:
            data = json.loads((where / f"{name}-{seed}.json").read_text())
            for package, version in data["versions"].items():
                if versions.setdefault(package, version) != version:
                    raise SystemExit(f"error: {where}: {name} seed {seed} ran with {package} {version}, others with "
                                     f"{versions[package]}; move that directory away to run them all again")
            out.setdefault(name, {})[seed] = [tuple(e) for e in data["events"]]
    return out, versions


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
    """The best of the table's mean curves (over seeds) and the median of their best epochs (regret's 0 and 1)."""
    sign = 1.0 if table.task.mode == "max" else -1.0
    bests = []
    for config_id in range(len(table.params)):
        mean = np.mean([table.curves[(config_id, s)].values for s in table.seeds(config_id)], axis=0)
        if not np.isnan(mean).all():
            bests.append(sign * np.nanmax(sign * mean))
    return (max(bests) if sign > 0 else min(bests)), float(statistics.median(bests))


def bootstrap_ci(values: np.ndarray, seed: int = 0, resamples: int = 2000) -> list[float]:
    """A bootstrap 95 % interval of the mean of ``values``."""
    values = values[~np.isnan(values)]
    if len(values) < 2:
        return [math.nan, math.nan]
    means = np.random.default_rng(seed).choice(values, (resamples, len(values))).mean(axis=1)
    return [round(float(np.percentile(means, 2.5)), 4), round(float(np.percentile(means, 97.5)), 4)]


def validate_surrogate(table: CurveTable, folds: int = 5, k_values: tuple[int, ...] = (1, 8)) -> dict[str, Any]:
    """How well the surrogate predicts configurations it was not fitted on (5-fold over configurations).

    For each left-out configuration, the best epoch of the noise-free predicted curve against the best
    epoch of its recorded mean curve: Spearman rank correlation and mean absolute error (k = 1 is the
    nearest recorded configuration). ``seed_to_seed_spearman``: the same rank correlation between the two
    seeds of the repeated configurations, the ceiling that noise sets.
    """
    from scipy.stats import spearmanr

    mode = table.task.mode
    pick = np.nanmax if mode == "max" else np.nanmin
    configs = len(table.params)
    order = np.random.default_rng(0).permutation(configs)
    actual = np.full(configs, np.nan)
    for c in range(configs):
        mean = np.mean([table.curves[(c, s)].values for s in table.seeds(c)], axis=0)
        actual[c] = np.nan if np.isnan(mean).all() else pick(mean)
    out: dict[str, Any] = {"folds": folds}
    for k in k_values:
        predicted = np.full(configs, np.nan)
        for fold in range(folds):
            held = order[fold::folds]
            fitted = Surrogate(table, k=k, noise=False, exclude=frozenset(int(c) for c in held))
            for c in held:
                values = fitted.mean_curve(table.params[int(c)]).values
                predicted[c] = np.nan if np.isnan(values).all() else pick(values)
        both = ~np.isnan(actual) & ~np.isnan(predicted)
        out[f"k{k}"] = {"spearman": round(float(spearmanr(actual[both], predicted[both]).statistic), 3),
                        "mae": round(float(np.mean(np.abs(actual[both] - predicted[both]))), 4),
                        "configs": int(both.sum())}
    pairs = [(pick(table.curves[(c, s[0])].values), pick(table.curves[(c, s[1])].values))
             for c in range(configs) if len(s := table.seeds(c)) >= 2]
    pairs = [p for p in pairs if not np.isnan(p).any()]
    a, b = np.array(pairs).T
    out["seed_to_seed_spearman"] = round(float(spearmanr(a, b).statistic), 3)
    out["seed_to_seed_mae"] = round(float(np.mean(np.abs(a - b))), 4)
    out["repeated_configs"] = len(pairs)
    return out


def run_task(table: CurveTable, answers: Surrogate | None, seeds: list[int], concurrency: int, budget: int,
             patience: int, methods: dict[str, Callable[..., Events]],
             peers: dict[str, dict[int, Events]]) -> dict[str, Any]:
    """Every method over the seeds on one table at one concurrency: ratios, regrets, tests.

    ``peers``: the venv peers' events, already run (a peer run on fewer seeds is compared on those).
    """
    from scipy.stats import binomtest, wilcoxon

    mode = table.task.mode
    oracle, typical = table_scale(table)
    rows: dict[str, dict[int, dict[str, Any]]] = {name: {} for name in [*methods, *peers]}
    targets: dict[int, float] = {}
    for seed in seeds:
        runs = {name: method(table, answers, seed, concurrency, budget, patience) for name, method in methods.items()}
        runs.update({name: per_seed[seed] for name, per_seed in peers.items() if seed in per_seed})
        target = targets[seed] = best_within(runs["random_fifo"], budget, mode)
        for name, events in runs.items():
            reached = epochs_to(events, target, mode)
            sign = 1.0 if mode == "max" else -1.0
            regret = {f: sign * (oracle - best_within(events, f * budget, mode)) / abs(oracle - typical)
                      for f in sorted({*FRACTIONS, *ANYTIME})}
            rows[name][seed] = {"ratio": None if reached is None else reached / budget, "regret": regret,
                                "epochs": len(events)}
    out: dict[str, Any] = {"oracle": oracle, "typical": typical, "methods": {}}
    for name, per_seed in rows.items():
        ranked = [_to_b(r) for r in per_seed.values()]
        entry: dict[str, Any] = {
            "seeds": len(per_seed),
            "ratio_median": _finite(statistics.median(ranked)),
            "ratio_iqr": [_finite(float(np.percentile(ranked, 25))), _finite(float(np.percentile(ranked, 75)))],
            "reached": f"{sum(r['ratio'] is not None for r in per_seed.values())}/{len(per_seed)}",
        }
        for f in FRACTIONS:
            values = np.array([r["regret"][f] for r in per_seed.values()], dtype=float)
            entry[f"regret_{int(f * 100)}"] = {
                "mean": round(float(np.nanmean(values)), 4),
                "ci95": bootstrap_ci(values),
                "median": round(float(np.nanmedian(values)), 4),
            }
        entry["ratio_median_ci95"] = median_ci(ranked)
        entry["anytime"] = [round(float(np.nanmean([r["regret"][f] for r in per_seed.values()])), 4)
                            for f in ANYTIME]
        entry["per_seed"] = {str(seed): {"ratio": None if r["ratio"] is None else round(r["ratio"], 4),
                                         **{f"regret_{int(f * 100)}": round(float(r["regret"][f]), 4) + 0.0
                                            for f in FRACTIONS}}
                             for seed, r in per_seed.items()}
        if name != "hpo" and "hpo" in rows:  # a run of other methods only (merged later) has no hpo to test against
            common = [s for s in per_seed if s in rows["hpo"]]
            first = [_to_b(rows["hpo"][s]) for s in common]
            then = [_to_b(per_seed[s]) for s in common]
            faster = sum(a < b for a, b in zip(first, then, strict=True))
            slower = sum(a > b for a, b in zip(first, then, strict=True))
            entry["hpo_faster_to_b_seeds"], entry["hpo_slower_to_b_seeds"] = faster, slower
            entry["hpo_vs_this_ratio_sign_p"] = (round(float(binomtest(faster, faster + slower).pvalue), 4)
                                                 if faster + slower else None)
            for f in FRACTIONS:
                mine = np.array([rows["hpo"][s]["regret"][f] for s in common])
                theirs = np.array([per_seed[s]["regret"][f] for s in common])
                differs = mine != theirs
                entry[f"hpo_vs_this_regret_{int(f * 100)}_wilcoxon_p"] = (
                    round(float(wilcoxon(mine[differs], theirs[differs]).pvalue), 4) if differs.sum() >= 5
                    else None)
        out["methods"][name] = entry
    return out


def _to_b(row: dict[str, Any]) -> float:
    """A seed's epochs to B as a share of the budget, infinite if it never reached B."""
    return math.inf if row["ratio"] is None else row["ratio"]


def median_ci(values: list[float], seed: int = 0, resamples: int = 2000) -> list[float | None]:
    """A bootstrap 95 % interval of the median of ``values`` (infinite values allowed; None: infinite)."""
    medians = np.median(np.random.default_rng(seed).choice(np.array(values), (resamples, len(values))), axis=1)
    with np.errstate(invalid="ignore"):  # between two infinite medians the percentile is NaN: never reached too
        return [_finite(float(np.percentile(medians, 2.5))), _finite(float(np.percentile(medians, 97.5)))]


#: The seed-by-seed tests of hpo against each other method, by figure (``hpo_vs_this_<figure>_p``).
TESTS = ("ratio_sign", "regret_25_wilcoxon", "regret_50_wilcoxon", "regret_100_wilcoxon")


def holm(report: dict[str, Any]) -> None:
    """Adds Holm's adjusted p to every test of hpo against another method, one family per figure.

    A family is every such test of one figure in the report (all tasks, trials-at-once and methods): with
    dozens of them, a few raw p below 0.05 are expected by chance alone.
    """
    for test in TESTS:
        found = [(figures, figures[f"hpo_vs_this_{test}_p"])
                 for entry in report["tasks"].values() for result in entry["by_concurrency"].values()
                 for figures in result["methods"].values() if figures.get(f"hpo_vs_this_{test}_p") is not None]
        adjusted = holm_adjust({i: p for i, (_, p) in enumerate(found)})
        for i, (figures, _) in enumerate(found):
            figures[f"hpo_vs_this_{test}_holm_p"] = round(adjusted[i], 4)


def _finite(value: float) -> float | None:
    return None if math.isinf(value) or math.isnan(value) else round(value, 4)


def parse_variants(text: str) -> dict[str, Callable[..., Events]]:
    """``name:section.key=value,section.key=value;name2:...`` → hpo methods with those settings.

    A value is read as JSON (``0.5``, ``true``, ``null``); one that is not JSON is a string (``random``).
    """
    methods = {}
    for part in filter(None, text.split(";")):
        name, _, settings = part.partition(":")
        values: dict[str, Any] = {}
        for pair in filter(None, settings.split(",")):
            key, _, raw = pair.partition("=")
            try:
                values[key] = json.loads(raw)
            except json.JSONDecodeError:
                values[key] = raw
        algorithm = values.pop("search.algorithm", None)
        scheduler = values.pop("scheduler.type", None)
        methods[name] = hpo_method(algorithm, scheduler, values)
    return methods


def time_200(tables: list[CurveTable]) -> dict[str, float]:
    """Wall seconds of one replayed 200-trial sweep of hpo's defaults (2 at once, no epoch budget) per table."""
    from peers.adapters import surrogate  # after hpo (imported first, it registers hpo bare)

    out = {}
    for table in tables:
        config = sweep_config(table, 0, 2, 3)
        config = config.model_copy(update={"search": config.search.model_copy(update={"num_samples": 200})})
        answers = surrogate(table, "surrogate")
        t0 = time.perf_counter()
        result = replay_sweep(config, table, surrogate=answers)
        out[table.task.name] = round(time.perf_counter() - t0, 2)
        assert len(result.trials) == 200, len(result.trials)
    return out


def main() -> None:
    from peers.adapters import ANSWERS, noise_clip, surrogate  # after hpo (imported first, it registers hpo bare)
    from record import TASKS

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tables", type=Path, default=ROOT / "benchmarks" / "curves")
    parser.add_argument("--tasks", default="", help="comma-separated task names (default: every table)")
    parser.add_argument("--seeds", type=int, default=40)
    parser.add_argument("--peer-seeds", type=int, default=None, help="seeds for DEHB, SMAC, BOHB (default: --seeds)")
    parser.add_argument("--concurrency", default="2,8")
    parser.add_argument("--budget", type=int, default=50, help="budget in multiples of max_epochs")
    parser.add_argument("--patience", type=int, default=3)
    parser.add_argument("--answers", choices=ANSWERS, default="surrogate")
    parser.add_argument("--methods", default=",".join([*METHODS, *(p for p in VENV_PEERS if p not in GP_PEERS)]),
                        help=f"default: all but {', '.join(GP_PEERS)} (minutes a run; name them to run them)")
    parser.add_argument("--variants", default="", help="hpo with other settings: 'name:section.key=value,...;...'")
    parser.add_argument("--peers-python", type=Path, default=ROOT / "benchmarks" / ".peers-venv" / "bin" / "python")
    parser.add_argument("--syne-gp-python", type=Path,
                        default=ROOT / "benchmarks" / ".syne-gp-venv" / "bin" / "python",
                        help="the venv of Syne Tune 0.13 (MOBSTER, Hyper-Tune), made by make_venv.sh")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "search_peers.json")
    parser.add_argument("--quick", action="store_true")
    parser.add_argument("--time-200", action="store_true")
    parser.add_argument("--machine", default=f"{os.cpu_count()} cores",
                        help="the machine and what else ran on it (the wall times are its)")
    parser.add_argument("--validate-only", action="store_true", help="only the surrogate's validation per table")
    parser.add_argument("--cache", type=Path, default=DEFAULT_CACHE,
                        help="where the venv peers' events are kept per seed (only missing seeds run)")
    parser.add_argument("--no-cache", action="store_true", help="run every venv peer seed, keep nothing")
    parser.add_argument("--merge", nargs="+", type=Path, metavar="JSON",
                        help="write one report (--out) from runs over other tasks or other methods, run nothing")
    args = parser.parse_args()
    if args.merge:
        merge(args.merge, args.out)
        return
    seeds = list(range(5 if args.quick else args.seeds))
    peer_seeds = seeds[: args.peer_seeds] if args.peer_seeds else seeds
    held_out = {t.name: t.held_out for t in TASKS}
    paths = sorted(args.tables.glob("*.parquet"), key=lambda p: (held_out.get(p.stem, True), p.stem))  # dev first
    if args.tasks:
        paths = [p for p in paths if p.stem in args.tasks.split(",")]
    if args.time_200:
        timed = time_200([CurveTable.read(p) for p in paths])
        report = {"benchmark": "search_peers_time_200", "replay_200_trials_s": timed,
                  "machine": args.machine}
        args.out.write_text(json.dumps(report, indent=1) + "\n")
        print(report)
        return
    if args.validate_only:
        report = {"benchmark": "search_surrogate_validation",
                  "tables": {p.stem: validate_surrogate(CurveTable.read(p)) for p in paths}}
        args.out.write_text(json.dumps(report, indent=1) + "\n")
        print(json.dumps(report, indent=1))
        return
    wanted = args.methods.split(",")
    methods = {name: m for name, m in METHODS.items() if name in wanted}
    methods["random_fifo"] = METHODS["random_fifo"]  # the target B
    methods.update(parse_variants(args.variants))
    venv = [name for name in VENV_PEERS if name in wanted]
    started = time.time()
    report: dict[str, Any] = {
        "benchmark": "search_peers", "answers": args.answers, "noise_clip": noise_clip(args.answers),
        "seeds": len(seeds), "peer_seeds": len(peer_seeds),
        "budget_x_max_epochs": args.budget, "patience": args.patience, "methods": [*methods, *venv],
        "variants": args.variants, "machine": args.machine, "hpo_defaults": hpo_defaults(),
        "versions": {"optuna": _version("optuna"), "ray": _version("ray")}, "tasks": {}}
    not_run = []
    runners = {ADAPTERS: args.peers_python, SYNE_GP: args.syne_gp_python}
    for script, python in runners.items():
        missing = [name for name in venv if peer_script(name) == script]
        if missing and not python.exists():
            not_run.append(f"{', '.join(missing)}: no venv at {python} (benchmarks/peers/make_venv.sh)")
            venv = [name for name in venv if name not in missing]
    if "tune_bohb" in methods:
        from peers import tune_bohb as bohb  # benchmarks/peers

        if why := bohb.missing():
            not_run.append(why)
            del methods["tune_bohb"]
        else:
            report["versions"].update(bohb.versions())
    if not_run:
        report["peers_not_run"] = "; ".join(not_run)
    report["methods"] = [*methods, *venv]
    for path in paths:
        table = CurveTable.read(path)
        task = table.task.name
        answers = surrogate(table, args.answers)
        entry = report["tasks"][task] = {"held_out": held_out.get(task, True), "configs": len(table.params),
                                         "by_concurrency": {}}
        if answers is not None:
            entry["surrogate_validation"] = validate_surrogate(table)
            print(f"{task}: surrogate {entry['surrogate_validation']}", flush=True)
        for concurrency in (int(c) for c in args.concurrency.split(",")):
            t0 = time.time()
            budget = args.budget * table.task.max_epochs
            peers: dict[str, dict[int, Events]] = {}
            if venv:
                for script, python in runners.items():
                    fast = [n for n in venv if n not in SLOW_PEERS and peer_script(n) == script]
                    slow = [n for n in venv if n in SLOW_PEERS and peer_script(n) == script]
                    for names, on in ((fast, seeds), (slow, peer_seeds)):
                        if not names:
                            continue
                        if args.no_cache:
                            runs, versions = venv_peers(python, table, names, on, concurrency, budget,
                                                        args.patience, args.answers, script)
                        else:
                            runs, versions = cached_peers(args.cache, python, table, names, on, concurrency,
                                                          budget, args.patience, args.answers, script)
                        peers.update(runs)
                        report["versions"].update(versions)
            result = run_task(table, answers, seeds, concurrency, budget, args.patience, methods, peers)
            result["wall_s"] = round(time.time() - t0, 1)
            entry["by_concurrency"][str(concurrency)] = result
            line = ", ".join(f"{m} {r['ratio_median']} / {r['regret_100']['mean']}"
                             for m, r in result["methods"].items())
            print(f"{task} x{concurrency} ({result['wall_s']} s): ratio / regret at 100 %: {line}", flush=True)
            report["wall_s"] = round(time.time() - started, 1)
            args.out.parent.mkdir(parents=True, exist_ok=True)
            args.out.write_text(json.dumps(report, indent=1) + "\n")
    report["wall_s"] = round(time.time() - started, 1)
    holm(report)
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out} in {report['wall_s']} s")


def merge(paths: list[Path], out: Path) -> None:
    """One report from runs split by task or by method (the same seeds, budget, patience and answers).

    A method found in several runs of one task and trials-at-once keeps the first run's figures (the same
    seeds give the same events); the others are added. The runs must agree on what the figures depend on.
    Whether a task is held out is taken from ``record.py`` as it is now (an older run may have held out a
    task that a later round used to choose a setting); each run's own marking is kept in ``merged_from``.
    """
    from record import TASKS

    held_out = {t.name: t.held_out for t in TASKS}
    runs = [json.loads(p.read_text()) for p in paths]
    keys = ("answers", "noise_clip", "budget_x_max_epochs", "patience", "seeds")
    for run in runs:  # a run from before noise_clip was recorded clipped to the table's range
        run.setdefault("noise_clip", "table" if run["answers"] == "surrogate" else None)
    recorded = [run for run in runs if "hpo_defaults" in run]  # runs before it was recorded are not checked
    if any(run["hpo_defaults"] != recorded[0]["hpo_defaults"] for run in recorded):
        raise SystemExit("error: the runs' hpo_defaults differ; merge runs of the same defaults")
    for run, path in zip(runs[1:], paths[1:], strict=True):
        differ = [k for k in keys if run[k] != runs[0][k]]
        if differ:
            raise SystemExit(f"error: {path}: {', '.join(differ)} differ from {paths[0]}; merge runs of one setting")
    report = {**runs[0], "tasks": {}, "methods": [], "versions": {}, "merged_from": []}
    for path, run in zip(paths, runs, strict=True):
        report["merged_from"].append({"file": path.name, "methods": run["methods"], "tasks": list(run["tasks"]),
                                      "held_out": [t for t, e in run["tasks"].items() if e["held_out"]],
                                      "variants": run.get("variants", ""), "peer_seeds": run["peer_seeds"],
                                      "hpo_defaults": run.get("hpo_defaults"),
                                      "wall_s": run["wall_s"], "machine": run["machine"]})
        report["methods"] += [m for m in run["methods"] if m not in report["methods"]]
        report["versions"].update(run["versions"])
        for task, entry in run["tasks"].items():
            into = report["tasks"].setdefault(task, {**entry, "held_out": held_out.get(task, True),
                                                     "by_concurrency": {}})
            for concurrency, result in entry["by_concurrency"].items():
                have = into["by_concurrency"].setdefault(concurrency, {**result, "methods": {}})
                for name, figures in result["methods"].items():
                    have["methods"].setdefault(name, {"seeds": run["peer_seeds"], **figures})
    # The fewest seeds behind any figure kept (a superseded run's seed count does not count).
    report["peer_seeds"] = min(figures["seeds"] for entry in report["tasks"].values()
                               for result in entry["by_concurrency"].values() for figures in result["methods"].values())
    report["variants"] = ";".join(dict.fromkeys(filter(None, (run.get("variants", "") for run in runs))))  # once each
    report["wall_s"] = round(sum(run["wall_s"] for run in runs), 1)
    holm(report)
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {out} from {len(paths)} runs")


def hpo_defaults() -> dict[str, Any]:
    """What the ``hpo`` method ran: hpo's default searcher and scheduler settings when the run was made."""
    from hpo.config.sections import SchedulerConfig, SearchConfig

    search, scheduler = SearchConfig(), SchedulerConfig()
    defaults = {"searcher": search.algorithm, "random_fraction": search.random_share,
                "match_budget": search.budget_matched, "scheduler": scheduler.type,
                "grace_period": scheduler.grace_period, "reduction_factor": scheduler.reduction_factor}
    if search.random_start:  # recorded once it is set: runs from before the key read the same as runs of 0
        defaults["random_after"] = search.random_start
    return defaults


def _version(package: str) -> str:
    from importlib.metadata import version

    return version(package)


if __name__ == "__main__":
    main()
