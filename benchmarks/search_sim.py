"""Screens ASHA and TPE settings on simulated sweeps, minutes instead of the real benchmark's hour per variant.

The same question as ``search.py`` (epochs TPE + ASHA needs to reach random + FIFO's best B, over seeds),
but each configuration's learning curve comes from plain Keras in this process (the digits MLP, the same
split, global batch 64 and the learning rate doubled as on 2 Horovod workers), and ASHA is Tune's
stopping rule written out (a trial stops at a rung below the (1 - 1/rf) quantile of the values recorded
there before it). Optuna's samplers are the real ones. Curves are cached in ``--cache`` by configuration
and seed, so variants that suggest the same configurations share them. Not a substitute for
``search.py``: its figures are lower (Horovod shards and Petastorm's shuffle give other curves); use it to
compare variants with each other.

Variants: ``default`` (Tune's ASHA, hpo's default), ``rf2`` / ``rf4`` (reduction factor), ``startup2`` /
``startup8`` (TPE's random start-up trials), ``bootstrap1`` / ``2`` / ``3`` (``scheduler.bootstrap_count``,
Optuna's bootstrap rule: the first 1 / 2 / 3 trials at each rung stop there), ``top_k`` (promotion as in
the ASHA paper: continue only within the top ⌊n/rf⌋ of the rung, none while it holds fewer than rf),
``tell_best`` (TPE told each trial's best epoch, not its last), ``ei48`` (TPE scores 48 candidates, not
24). Optuna 5's TPE is multivariate already.

Writes ``benchmarks/results/search_sim.json``.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import os
import statistics
import time
from pathlib import Path
from typing import Any

import numpy as np
from _report import finite, write_report

ROOT = Path(__file__).resolve().parents[1]
MAX_T = 9
VARIANTS: dict[str, dict[str, Any]] = {
    "default": {},
    "rf2": {"rf": 2},
    "rf4": {"rf": 4},
    "startup2": {"startup": 2},
    "startup8": {"startup": 8},
    "bootstrap1": {"bootstrap": 1},
    "bootstrap2": {"bootstrap": 2},
    "bootstrap3": {"bootstrap": 3},
    "top_k": {"rule": "top_k"},
    "tell_best": {"tell_best": True},
    "ei48": {"tpe": {"n_ei_candidates": 48}},
}


class Curves:
    """Validation accuracy per epoch of a configuration trained with a seed, computed once and cached."""

    def __init__(self, cache: Path) -> None:
        self.cache = cache
        self.known: dict[str, list[float]] = {}
        if cache.is_file():
            for line in cache.read_text().splitlines():
                row = json.loads(line)
                self.known[row["key"]] = row["curve"]
        self._data: tuple[Any, ...] | None = None

    def data(self) -> tuple[Any, ...]:
        if self._data is None:
            from sklearn.datasets import load_digits

            digits = load_digits()
            x, y = (digits.data / 16.0).astype(np.float32), digits.target.astype(np.int64)
            order = np.random.default_rng(0).permutation(len(x))  # the split of builtin:digits
            n_val = round(len(x) * 0.2)
            self._data = (x[order[n_val:]], y[order[n_val:]], x[order[:n_val]], y[order[:n_val]])
        return self._data

    def __call__(self, params: dict[str, Any], seed: int) -> list[float]:
        key = hashlib.md5(json.dumps([sorted(params.items()), seed]).encode()).hexdigest()
        if key not in self.known:
            import tensorflow as tf

            from hpo.models.mlp import build

            tf.keras.utils.set_random_seed(seed)
            x_train, y_train, x_val, y_val = self.data()
            model = build(params, (64,), 10)
            optimizer = {"adam": tf.keras.optimizers.Adam, "sgd": tf.keras.optimizers.SGD}[params["optimizer"]]
            model.compile(optimizer=optimizer(learning_rate=2 * params["learning_rate"]),
                          loss="sparse_categorical_crossentropy", metrics=["accuracy"])
            history = model.fit(x_train, y_train, batch_size=64, epochs=MAX_T, validation_data=(x_val, y_val),
                                verbose=0)
            self.known[key] = [float(v) for v in history.history["val_accuracy"]]
            with self.cache.open("a") as f:
                f.write(json.dumps({"key": key, "params": params, "seed": seed, "curve": self.known[key]}) + "\n")
        return self.known[key]


def suggest(trial: Any) -> dict[str, Any]:
    """The space of ``search.py``."""
    return {
        "learning_rate": trial.suggest_float("learning_rate", 1e-4, 1e-1, log=True),
        "units": trial.suggest_int("units", 8, 128, step=8),
        "layers": trial.suggest_int("layers", 1, 3),
        "dropout": trial.suggest_float("dropout", 0.0, 0.5),
        "optimizer": trial.suggest_categorical("optimizer", ["adam", "sgd"]),
    }


def random_fifo(curves: Curves, seed: int, trials: int) -> list[float]:
    import optuna

    study = optuna.create_study(direction="maximize", sampler=optuna.samplers.RandomSampler(seed=seed))
    epochs: list[float] = []
    for i in range(trials):
        trial = study.ask()
        curve = curves(suggest(trial), seed * 1000 + i)
        epochs += curve
        study.tell(trial, curve[-1])
    return epochs


def stops(recorded: list[float], value: float, rf: int, rule: str, bootstrap: int) -> bool:
    """Whether a trial reaching a rung with ``value`` stops there, given the values recorded before it."""
    if rule == "top_k":
        if len(recorded) + 1 < rf:
            return True
        return sum(v > value for v in recorded) >= (len(recorded) + 1) // rf
    if len(recorded) < bootstrap:
        return True
    return bool(recorded) and value < float(np.nanpercentile(recorded, (1 - 1 / rf) * 100))


def tpe_asha(curves: Curves, seed: int, trials: int, target: float, rf: int = 3, startup: int = 4,
             bootstrap: int = 0, rule: str = "tune", tell_best: bool = False,
             tpe: dict[str, Any] | None = None) -> int | None:
    """Epochs trained until one reached ``target`` (None: never, within ``trials``)."""
    import optuna

    study = optuna.create_study(direction="maximize",
                                sampler=optuna.samplers.TPESampler(seed=seed, n_startup_trials=startup,
                                                                                   **(tpe or {})))
    rungs: dict[int, list[float]] = {}
    milestone = 1
    while milestone < MAX_T:
        rungs[milestone] = []
        milestone *= rf
    trained = 0
    for i in range(trials):
        trial = study.ask()
        curve = curves(suggest(trial), seed * 1000 + i)
        stopped = False
        for epoch, value in enumerate(curve, start=1):
            trained += 1
            if value >= target:
                return trained
            trial.report(max(curve[:epoch]) if tell_best else value, epoch)
            if epoch in rungs:
                stopped = stops(rungs[epoch], value, rf, rule, bootstrap)
                rungs[epoch].append(value)
                if stopped:
                    break
        if stopped:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)
        else:
            study.tell(trial, max(curve) if tell_best else curve[-1])
    return None


def paired(ratios: list[float], default: list[float | None], never: float) -> dict[str, Any]:
    """Seed-by-seed against ``default``: seeds faster / slower, and the Wilcoxon signed-rank p-value.

    A seed that never reached B counts as ``never`` (more epochs than TPE + ASHA could train) for the test.
    """
    from scipy.stats import wilcoxon

    pairs = [(min(r, never), never if d is None else d) for r, d in zip(ratios, default, strict=True)]
    diffs = [r - d for r, d in pairs if r != d]
    return {
        "faster": sum(r < d for r, d in pairs),
        "slower": sum(r > d for r, d in pairs),
        "wilcoxon_p": round(float(wilcoxon(diffs).pvalue), 4) if diffs else None,
    }


def main() -> None:
    """Runs every variant over the seeds and writes the JSON result."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=40)
    parser.add_argument("--trials", type=int, default=12)
    parser.add_argument("--tpe-trials", type=int, default=30)
    parser.add_argument("--variants", default=",".join(VARIANTS), help="comma-separated; default first for the "
                        "paired comparison")
    parser.add_argument("--cache", default=str(Path.home() / ".cache" / "hpo" / "search_sim_curves.jsonl"))
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "search_sim.json"))
    args = parser.parse_args()
    os.environ.setdefault("TF_USE_LEGACY_KERAS", "1")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")
    import optuna

    optuna.logging.set_verbosity(optuna.logging.ERROR)
    cache = Path(args.cache)
    cache.parent.mkdir(parents=True, exist_ok=True)
    curves = Curves(cache)
    began = time.time()
    targets = {seed: max(random_fifo(curves, seed, args.trials)) for seed in range(args.seeds)}
    budget = args.trials * MAX_T
    results = {}
    for name in args.variants.split(","):
        ratios = []
        for seed, target in targets.items():
            reached = tpe_asha(curves, 1000 + seed, args.tpe_trials, target, **VARIANTS[name])
            ratios.append(math.inf if reached is None else reached / budget)
        median = statistics.median(ratios)
        results[name] = {
            "ratio_median": finite(median),
            "ratio_median_by_half": [finite(statistics.median(ratios[: len(ratios) // 2])),
                                     finite(statistics.median(ratios[len(ratios) // 2:]))],
            "reached": sum(not math.isinf(r) for r in ratios),
            "ratios": [finite(r) for r in ratios],
        }
        if name != "default" and "default" in results:
            results[name]["vs_default"] = paired(ratios, results["default"]["ratios"], args.tpe_trials * MAX_T / budget)
        print(name, json.dumps(results[name]), flush=True)
    write_report({
        "benchmark": "search_sim",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "seeds": args.seeds, "trials": args.trials, "tpe_trials": args.tpe_trials, "max_epochs": MAX_T,
        "wall_s": round(time.time() - began, 1),
        "variants": results,
    }, args.out)


if __name__ == "__main__":
    main()
