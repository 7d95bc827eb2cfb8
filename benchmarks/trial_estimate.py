"""How well ``estimate_trial`` foresees a trial's length on learning curves it was not built on.

``benchmarks/progress.py`` measures the per-trial estimate on the curves of small tf-keras MLPs, the kind
of trial hpo runs and the curves its method was tuned on. This script measures it on curves of other
libraries and model families, trained here on CPU in one process with scikit-learn, epoch by epoch, on the
datasets bundled with scikit-learn (and its synthetic generators). Each curve is trained once for its
``max_epochs`` without early stopping (every epoch's validation metrics recorded) and cached, compressed,
in ``benchmarks/curves/trial_estimate_<set>.jsonl.gz`` (a rerun trains only what is missing there).

The curves are split, before the method was tuned, into two sets:

- **development** (``--set dev``): ``sklearn.neural_network.MLPClassifier`` networks trained with
  ``partial_fit`` on digits, breast cancer, wine and iris (adam or SGD, constant learning rate), each
  scored on ``val_accuracy`` (max) and ``val_loss`` (log-loss, min), EarlyStopping with patience 5 and 10,
  ``min_delta`` 0. The method may be changed while looking at these (and at ``benchmarks/progress.py``'s
  own curves).
- **held-out** (``--set heldout``): other model families and curve shapes, other patience and
  ``min_delta``: linear models by SGD (``SGDClassifier``: noisy accuracy and log-loss curves;
  ``SGDRegressor``), gradient boosting stage by stage (``GradientBoostingClassifier`` /
  ``GradientBoostingRegressor``: smooth curves, noisy ones with ``subsample`` < 1, overfitting ones),
  ``MLPRegressor`` (diabetes, Friedman #1), and MLP classifiers whose learning rate follows a step or a
  cyclic schedule (curves that plateau and then improve again); datasets beyond the development four
  (diabetes, Friedman #1, ``make_classification``, ``make_moons``); patience 3, 7 and 15 with
  ``min_delta`` 0, and patience 5 and 10 with ``min_delta`` 0.002 and 0.01. Scored only once the method
  was frozen.
- **second held-out** (``--set heldout2``): recorded after the first held-out set had been scored, before
  any change made on what it showed, and kept for the method's next change: growing forests (random
  forests, one batch of trees an epoch: noisy early, then flat), histogram gradient boosting (a batch of
  iterations an epoch), passive-aggressive linear models (hinge accuracy curves, epsilon-insensitive
  regression), and MLPs on datasets no other set uses (``make_circles``, ``make_gaussian_quantiles``,
  Friedman #2 and #3); patience 4, 6, 12 and 20 with ``min_delta`` 0, and 8 with 0.001. Scored once, with
  the method frozen at the plateau weight's commit; development data since.
- **third held-out set** (``--set heldout3``): recorded after the second was scored and before any change
  made on what it showed: AdaBoost stage by stage, random Fourier features with an SGD linear model
  (noisy, kernel-like curves), MLPs trained by SGD with Nesterov momentum (batch sizes from 4 to 512), and
  Gaussian naive Bayes fed one more chunk of the training data each epoch (curves of a growing data set);
  on datasets no other set uses (``make_hastie_10_2``, ``make_blobs``, a five-class
  ``make_classification``, ``make_regression``, ``make_sparse_uncorrelated``) and digits; patience 2, 9
  and 25 with ``min_delta`` 0, and 6 with 0.005.

Each run (curve × metric × rule) is cut by Keras' EarlyStopping rule (``hpo.progress.stopping``) to its
true length; at 25, 50 and 75 % of it (``round(fraction × length)`` epochs, at least one, below the
length) ``estimate_trial`` sees the observed prefix. Recorded: the absolute % error of ``epochs_median``
against the true length, whether the 80 % interval holds it, and the naive "current epoch + patience"
(capped at ``max_epochs``). Writes ``benchmarks/results/trial_estimate_<set>.json`` (``--out``);
``--combine`` gathers the development set's (before and after the method's change) and the held-out set's
into ``benchmarks/results/trial_estimate.json``, apart. The targets are those of the held-out set: median
error <= 30 / 15 / 10 % at 25 / 50 / 75 %, at least 25 % below the naive rule's at each, 80 % interval
coverage 75-85 % over all fractions.

The figures are epochs, not seconds: they do not depend on the machine's speed or load.
"""

from __future__ import annotations

import argparse
import gzip
import hashlib
import json
import math
import os
import platform
import statistics
import sys
import time
import warnings
from pathlib import Path
from typing import Any

# benchmarks/ holds a queue.py that would shadow the standard library's (joblib imports ``queue``): this
# folder goes to the end of the import path instead of the front.
HERE = os.path.dirname(os.path.abspath(__file__))
if sys.path and os.path.abspath(sys.path[0]) == HERE:
    sys.path.append(sys.path.pop(0))

import numpy as np  # noqa: E402
from _report import write_report  # noqa: E402

from hpo.progress import estimate_trial  # noqa: E402
from hpo.progress.stopping import Rules, State, advance, higher_is_better  # noqa: E402

ROOT = Path(__file__).resolve().parents[1]
CURVES = ROOT / "benchmarks" / "curves"
FRACTIONS = (0.25, 0.5, 0.75)
VAL_SHARE = 0.25
ERROR_TARGETS = {0.25: 30.0, 0.5: 15.0, 0.75: 10.0}
NAIVE_MARGIN = 0.25
COVERAGE_RANGE = (0.75, 0.85)

#: The split, fixed before the method was tuned: (patience, min_delta) rules per set.
RULES = {
    "dev": ((5, 0.0), (10, 0.0)),
    "heldout": ((3, 0.0), (7, 0.0), (15, 0.0), (5, 0.002), (10, 0.01)),
    "heldout2": ((4, 0.0), (6, 0.0), (12, 0.0), (20, 0.0), (8, 0.001)),
    "heldout3": ((2, 0.0), (9, 0.0), (25, 0.0), (6, 0.005)),
}
#: Curves per (set, family): the development set's MLP classifiers, the held-out set's other kinds.
FAMILIES = {
    "dev": {"mlp_classifier": 120},
    "heldout": {"sgd_classifier": 40, "sgd_regressor": 24, "gradient_boosting": 40, "mlp_regressor": 24,
                "mlp_lr_schedule": 40},
    "heldout2": {"random_forest": 32, "hist_gradient_boosting": 32, "passive_aggressive": 32, "mlp_other_data": 40},
    "heldout3": {"adaboost": 32, "fourier_sgd": 32, "mlp_nesterov": 32, "naive_bayes_stream": 24},
}
DEV_DATASETS = ("digits", "breast_cancer", "wine", "iris")
HELDOUT_CLASSIFICATION = ("digits", "breast_cancer", "wine", "iris", "classification", "moons")
HELDOUT_REGRESSION = ("diabetes", "friedman1")
HELDOUT2_CLASSIFICATION = ("circles", "quantiles", "digits", "wine")
HELDOUT2_REGRESSION = ("friedman2", "friedman3")
HELDOUT3_CLASSIFICATION = ("hastie", "blobs", "five_classes", "digits")
HELDOUT3_REGRESSION = ("regression", "sparse_uncorrelated")
#: The seed stream of each set's configurations.
SET_SEED = {"dev": 0, "heldout": 1, "heldout2": 2, "heldout3": 3}


# ---------------------------------------------------------------------------------------------- data


def dataset(name: str, seed: int) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray, bool]:
    """Standardised train/validation split of a bundled (or generated) dataset, and whether it is a regression."""
    from sklearn import datasets

    if name == "classification":
        x, y = datasets.make_classification(n_samples=1200, n_features=20, n_informative=8, n_classes=3,
                                            flip_y=0.05, random_state=seed % 1000)
    elif name == "moons":
        x, y = datasets.make_moons(n_samples=800, noise=0.3, random_state=seed % 1000)
    elif name == "friedman1":
        x, y = datasets.make_friedman1(n_samples=800, noise=1.0, random_state=seed % 1000)
    elif name == "friedman2":
        x, y = datasets.make_friedman2(n_samples=800, noise=50.0, random_state=seed % 1000)
    elif name == "friedman3":
        x, y = datasets.make_friedman3(n_samples=800, noise=0.1, random_state=seed % 1000)
    elif name == "circles":
        x, y = datasets.make_circles(n_samples=800, noise=0.15, factor=0.5, random_state=seed % 1000)
    elif name == "quantiles":
        x, y = datasets.make_gaussian_quantiles(n_samples=900, n_features=6, n_classes=3, random_state=seed % 1000)
    elif name == "hastie":
        x, y = datasets.make_hastie_10_2(n_samples=1000, random_state=seed % 1000)
    elif name == "blobs":
        x, y = datasets.make_blobs(n_samples=900, n_features=4, centers=4, cluster_std=2.5, random_state=seed % 1000)
    elif name == "five_classes":
        x, y = datasets.make_classification(n_samples=1000, n_features=12, n_informative=6, n_classes=5,
                                            n_clusters_per_class=1, flip_y=0.1, random_state=seed % 1000)
    elif name == "regression":
        x, y = datasets.make_regression(n_samples=800, n_features=15, n_informative=6, noise=20.0,
                                        random_state=seed % 1000)
    elif name == "sparse_uncorrelated":
        x, y = datasets.make_sparse_uncorrelated(n_samples=800, n_features=10, random_state=seed % 1000)
    else:
        bunch = getattr(datasets, f"load_{name}")()
        x, y = bunch.data, bunch.target
    regression = name in HELDOUT_REGRESSION + HELDOUT2_REGRESSION + HELDOUT3_REGRESSION
    x = np.asarray(x, dtype=np.float64)
    order = np.random.default_rng(seed).permutation(len(x))
    n_val = round(len(x) * VAL_SHARE)
    val, train = order[:n_val], order[n_val:]
    mean, std = x[train].mean(axis=0), x[train].std(axis=0) + 1e-8
    x = (x - mean) / std
    if regression:
        y = (y - y[train].mean()) / y[train].std()
    return x[train], y[train], x[val], y[val], regression


# ---------------------------------------------------------------------------------------------- specs


def _log_uniform(rng: np.random.Generator, low: float, high: float) -> float:
    return float(np.exp(rng.uniform(math.log(low), math.log(high))))


def spec(set_name: str, family: str, index: int) -> dict[str, Any]:
    """The configuration of curve ``index`` of a family: dataset, model settings, seed, epochs."""
    rng = np.random.default_rng([SET_SEED[set_name], sum(map(ord, family)), index])
    out: dict[str, Any] = {"family": family, "seed": int(rng.integers(2**31))}
    if family == "mlp_classifier":
        solver = "adam" if rng.random() < 0.6 else "sgd"
        out.update(dataset=DEV_DATASETS[index % len(DEV_DATASETS)], solver=solver,
                   learning_rate=_log_uniform(rng, *((1e-4, 1e-2) if solver == "adam" else (3e-3, 0.3))),
                   momentum=float(rng.choice([0.0, 0.9])), units=int(rng.choice([8, 16, 32, 64, 128])),
                   layers=int(rng.integers(1, 3)), alpha=_log_uniform(rng, 1e-5, 1e-2),
                   batch_size=int(rng.choice([16, 32, 64, 128])), max_epochs=60)
    elif family == "mlp_lr_schedule":
        schedule = "step" if index % 2 == 0 else "cyclic"
        out.update(dataset=HELDOUT_CLASSIFICATION[index // 2 % len(HELDOUT_CLASSIFICATION)], solver="sgd",
                   schedule=schedule, learning_rate=_log_uniform(rng, 0.01, 0.3), momentum=0.9,
                   units=int(rng.choice([16, 32, 64])), layers=int(rng.integers(1, 3)),
                   alpha=_log_uniform(rng, 1e-5, 1e-3), batch_size=int(rng.choice([32, 64, 128])),
                   step_every=int(rng.integers(12, 25)), period=int(rng.integers(10, 21)), max_epochs=80)
    elif family == "mlp_regressor":
        solver = "adam" if rng.random() < 0.6 else "sgd"
        out.update(dataset=HELDOUT_REGRESSION[index % 2], solver=solver,
                   learning_rate=_log_uniform(rng, *((1e-4, 1e-2) if solver == "adam" else (1e-3, 0.05))),
                   momentum=float(rng.choice([0.0, 0.9])), units=int(rng.choice([16, 32, 64, 128])),
                   layers=int(rng.integers(1, 3)), alpha=_log_uniform(rng, 1e-5, 1e-2),
                   batch_size=int(rng.choice([16, 32, 64])), max_epochs=80)
    elif family == "sgd_classifier":
        out.update(dataset=HELDOUT_CLASSIFICATION[index % len(HELDOUT_CLASSIFICATION)],
                   loss=str(rng.choice(["log_loss", "modified_huber"])),
                   learning_rate_schedule=str(rng.choice(["optimal", "constant", "invscaling", "adaptive"])),
                   eta0=_log_uniform(rng, 1e-3, 0.1), alpha=_log_uniform(rng, 1e-6, 1e-2), max_epochs=100)
    elif family == "sgd_regressor":
        out.update(dataset=HELDOUT_REGRESSION[index % 2],
                   learning_rate_schedule=str(rng.choice(["constant", "invscaling", "adaptive"])),
                   eta0=_log_uniform(rng, 1e-4, 0.03), alpha=_log_uniform(rng, 1e-6, 1e-2),
                   penalty=str(rng.choice(["l2", "elasticnet"])), max_epochs=100)
    elif family == "gradient_boosting":
        regression = index % 3 == 2
        names = HELDOUT_REGRESSION if regression else HELDOUT_CLASSIFICATION
        out.update(dataset=names[index // 3 % len(names)], learning_rate=_log_uniform(rng, 0.01, 0.5),
                   max_depth=int(rng.integers(1, 5)), subsample=float(rng.choice([1.0, 0.8, 0.5])),
                   stages_per_epoch=int(rng.choice([1, 2, 3])), max_epochs=60)
    elif family in ("random_forest", "hist_gradient_boosting", "passive_aggressive"):
        regression = index % 4 == 3
        names = HELDOUT2_REGRESSION if regression else HELDOUT2_CLASSIFICATION
        out.update(dataset=names[index // 4 % len(names)])
        if family == "random_forest":
            out.update(trees_per_epoch=int(rng.choice([1, 2, 4])), max_depth=int(rng.choice([2, 4, 8, 16])),
                       max_features=float(rng.choice([0.3, 0.6, 1.0])), max_epochs=40)
        elif family == "hist_gradient_boosting":
            out.update(iters_per_epoch=int(rng.choice([1, 2, 4])), learning_rate=_log_uniform(rng, 0.01, 0.5),
                       max_leaf_nodes=int(rng.choice([4, 8, 16, 31])), l2=_log_uniform(rng, 1e-4, 1.0),
                       max_epochs=60)
        else:
            out.update(c=_log_uniform(rng, 1e-3, 1.0), average=bool(rng.random() < 0.3), max_epochs=80)
    elif family == "mlp_other_data":
        regression = index % 4 == 3
        names = HELDOUT2_REGRESSION if regression else HELDOUT2_CLASSIFICATION[:2]
        solver = "adam" if rng.random() < 0.5 else "sgd"
        out.update(dataset=names[index // 4 % len(names)], solver=solver,
                   learning_rate=_log_uniform(rng, *((3e-4, 3e-2) if solver == "adam" else (3e-3, 0.2))),
                   momentum=float(rng.choice([0.5, 0.95])), units=int(rng.choice([8, 32, 128])),
                   layers=int(rng.integers(1, 4)), alpha=_log_uniform(rng, 1e-6, 1e-1),
                   batch_size=int(rng.choice([8, 32, 256])), max_epochs=80)
    elif family in ("adaboost", "fourier_sgd", "mlp_nesterov", "naive_bayes_stream"):
        regression = family != "naive_bayes_stream" and index % 4 == 3
        names = HELDOUT3_REGRESSION if regression else HELDOUT3_CLASSIFICATION
        out.update(dataset=names[index // 4 % len(names)])
        if family == "adaboost":
            out.update(learning_rate=_log_uniform(rng, 0.02, 1.5), max_depth=int(rng.choice([1, 2, 3])),
                       stages_per_epoch=int(rng.choice([1, 2])), max_epochs=60)
        elif family == "fourier_sgd":
            out.update(components=int(rng.choice([50, 200, 800])), gamma=_log_uniform(rng, 0.01, 1.0),
                       eta0=_log_uniform(rng, 1e-3, 0.1), alpha=_log_uniform(rng, 1e-6, 1e-2),
                       learning_rate_schedule=str(rng.choice(["constant", "invscaling", "adaptive"])),
                       batches_per_epoch=int(rng.choice([1, 4])), max_epochs=80)
        elif family == "mlp_nesterov":
            out.update(solver="sgd", learning_rate=_log_uniform(rng, 1e-3, 0.1), momentum=float(rng.uniform(0.5, 0.99)),
                       units=int(rng.choice([4, 16, 64, 256])), layers=int(rng.integers(1, 4)),
                       alpha=_log_uniform(rng, 1e-6, 1e-1), batch_size=int(rng.choice([4, 16, 64, 512])),
                       max_epochs=100)
        else:
            out.update(chunk=int(rng.choice([8, 20, 50])), smoothing=_log_uniform(rng, 1e-9, 1e-3), max_epochs=30)
    else:
        raise ValueError(family)
    return out


def key_of(s: dict[str, Any]) -> str:
    """The cache key of a configuration."""
    return hashlib.md5(json.dumps(sorted(s.items())).encode()).hexdigest()


# ---------------------------------------------------------------------------------------------- training


def _proba_metrics(model: Any, x: np.ndarray, y: np.ndarray, classes: np.ndarray) -> dict[str, float]:
    from sklearn.metrics import log_loss

    proba = model.predict_proba(x)
    accuracy = float(np.mean(classes[np.argmax(proba, axis=1)] == y))
    return {"val_accuracy": accuracy, "val_loss": float(log_loss(y, np.clip(proba, 1e-15, 1), labels=classes))}


def _regression_metrics(predicted: np.ndarray, y: np.ndarray) -> dict[str, float]:
    mse = float(np.mean((predicted - y) ** 2))
    return {"val_loss": mse if np.isfinite(mse) else float("nan"), "val_r2": float(1 - mse / np.var(y))}


def _mlp(s: dict[str, Any], regression: bool) -> Any:
    from sklearn.neural_network import MLPClassifier, MLPRegressor

    cls = MLPRegressor if regression else MLPClassifier
    return cls(hidden_layer_sizes=(s["units"],) * s["layers"], solver=s["solver"], alpha=s["alpha"],
               batch_size=s["batch_size"], learning_rate_init=s["learning_rate"], momentum=s["momentum"],
               random_state=s["seed"] % 2**31, shuffle=True)


def _scheduled_rate(s: dict[str, Any], epoch: int) -> float:
    """The learning rate of 0-based ``epoch``: ×0.2 every ``step_every`` epochs, or a cosine with warm restarts."""
    if s["schedule"] == "step":
        return s["learning_rate"] * 0.2 ** (epoch // s["step_every"])
    phase = (epoch % s["period"]) / s["period"]
    return s["learning_rate"] * (0.05 + 0.95 * 0.5 * (1 + math.cos(math.pi * phase)))


def train(s: dict[str, Any]) -> dict[str, list[float]]:
    """Trains one configuration for ``max_epochs`` epochs and returns each validation metric per epoch."""
    x, y, xv, yv, regression = dataset(s["dataset"], s["seed"])
    metrics: dict[str, list[float]] = {}
    rng = np.random.default_rng(s["seed"])

    def record(values: dict[str, float]) -> None:
        for name, value in values.items():
            metrics.setdefault(name, []).append(float(f"{value:.6g}"))

    family, epochs = s["family"], s["max_epochs"]
    if family in ("random_forest", "hist_gradient_boosting", "passive_aggressive"):
        _train_heldout2(s, x, y, xv, yv, regression, record)
        return metrics
    if family in ("adaboost", "fourier_sgd", "mlp_nesterov", "naive_bayes_stream"):
        _train_heldout3(s, x, y, xv, yv, regression, record)
        return metrics
    if family == "gradient_boosting":
        from sklearn.ensemble import GradientBoostingClassifier, GradientBoostingRegressor

        cls = GradientBoostingRegressor if regression else GradientBoostingClassifier
        model = cls(n_estimators=epochs * s["stages_per_epoch"], learning_rate=s["learning_rate"],
                    max_depth=s["max_depth"], subsample=s["subsample"], random_state=s["seed"] % 2**31)
        model.fit(x, y)
        every = s["stages_per_epoch"]
        if regression:
            for stage, predicted in enumerate(model.staged_predict(xv), 1):
                if stage % every == 0:
                    record(_regression_metrics(predicted, yv))
        else:
            from sklearn.metrics import log_loss

            for stage, proba in enumerate(model.staged_predict_proba(xv), 1):
                if stage % every == 0:
                    record({"val_accuracy": float(np.mean(model.classes_[np.argmax(proba, axis=1)] == yv)),
                            "val_loss": float(log_loss(yv, np.clip(proba, 1e-15, 1), labels=model.classes_))})
        return metrics
    if family in ("sgd_classifier", "sgd_regressor"):
        from sklearn.linear_model import SGDClassifier, SGDRegressor

        common = {"alpha": s["alpha"], "learning_rate": s["learning_rate_schedule"], "eta0": s["eta0"],
                  "random_state": s["seed"] % 2**31}
        if family == "sgd_classifier":
            model = SGDClassifier(loss=s["loss"], **common)
        else:
            model = SGDRegressor(penalty=s["penalty"], **common)
        classes = None if regression else np.unique(y)
        for _ in range(epochs):
            order = rng.permutation(len(x))
            if regression:
                model.partial_fit(x[order], y[order])
                record(_regression_metrics(model.predict(xv), yv))
            else:
                model.partial_fit(x[order], y[order], classes=classes)
                record(_proba_metrics(model, xv, yv, classes))
        return metrics
    model = _mlp(s, regression)
    classes = None if regression else np.unique(y)
    for epoch in range(epochs):
        if regression:
            model.partial_fit(x, y)
            record(_regression_metrics(model.predict(xv), yv))
        else:
            if family == "mlp_lr_schedule" and epoch:
                model._optimizer.learning_rate = _scheduled_rate(s, epoch)  # the SGD optimizer's current rate
            model.partial_fit(x, y, classes=classes)
            record(_proba_metrics(model, xv, yv, classes))
    return metrics


def _train_heldout2(s: dict[str, Any], x: np.ndarray, y: np.ndarray, xv: np.ndarray, yv: np.ndarray,
                    regression: bool, record: Any) -> None:
    """The second held-out set's forests, histogram boosting and passive-aggressive models, epoch by epoch."""
    from sklearn import ensemble, linear_model

    classes = None if regression else np.unique(y)
    rng = np.random.default_rng(s["seed"])
    seed = s["seed"] % 2**31
    family = s["family"]
    if family == "random_forest":
        cls = ensemble.RandomForestRegressor if regression else ensemble.RandomForestClassifier
        model = cls(n_estimators=0, warm_start=True, max_depth=s["max_depth"], max_features=s["max_features"],
                    random_state=seed)
    elif family == "hist_gradient_boosting":
        cls = ensemble.HistGradientBoostingRegressor if regression else ensemble.HistGradientBoostingClassifier
        model = cls(max_iter=0, warm_start=True, early_stopping=False, learning_rate=s["learning_rate"],
                    max_leaf_nodes=s["max_leaf_nodes"], l2_regularization=s["l2"], random_state=seed)
    elif regression:
        model = linear_model.PassiveAggressiveRegressor(C=s["c"], average=s["average"], random_state=seed)
    else:
        model = linear_model.PassiveAggressiveClassifier(C=s["c"], average=s["average"], random_state=seed)
    for epoch in range(1, s["max_epochs"] + 1):
        if family == "passive_aggressive":
            order = rng.permutation(len(x))
            if regression:
                model.partial_fit(x[order], y[order])
            else:
                model.partial_fit(x[order], y[order], classes=classes)
        else:
            grow = s["trees_per_epoch"] if family == "random_forest" else s["iters_per_epoch"]
            model.set_params(**{"n_estimators" if family == "random_forest" else "max_iter": epoch * grow})
            model.fit(x, y)
        if regression:
            record(_regression_metrics(model.predict(xv), yv))
        elif family == "passive_aggressive":  # no probabilities: accuracy only
            record({"val_accuracy": float(np.mean(model.predict(xv) == yv))})
        else:
            record(_proba_metrics(model, xv, yv, classes))


def load(path: Path) -> dict[str, dict[str, Any]]:
    """Key -> cached curve."""
    if not path.is_file():
        return {}
    with gzip.open(path, "rt") as f:
        return {row["key"]: row for row in map(json.loads, f)}


def curves(set_name: str, cache_dir: Path) -> list[dict[str, Any]]:
    """The set's curves, training (and caching) the missing ones."""
    path = cache_dir / f"trial_estimate_{set_name}.jsonl.gz"
    known = load(path)
    specs = [spec(set_name, family, i) for family, count in FAMILIES[set_name].items() for i in range(count)]
    missing = [s for s in specs if key_of(s) not in known]
    began = time.time()
    for i, s in enumerate(missing, 1):
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            known[key_of(s)] = {"key": key_of(s), "spec": s, "metrics": train(s)}
        if i % 20 == 0 or i == len(missing):
            print(f"{set_name}: trained {i}/{len(missing)} ({time.time() - began:.0f} s)", flush=True)
    if missing:
        path.parent.mkdir(parents=True, exist_ok=True)
        with gzip.open(path, "wt") as f:
            for s in specs:
                f.write(json.dumps(known[key_of(s)]) + "\n")
    return [known[key_of(s)] for s in specs]


# ---------------------------------------------------------------------------------------------- scoring


def mode_of(metric: str) -> str:
    """``max`` for accuracy and R², ``min`` for a loss."""
    return "min" if metric == "val_loss" else "max"


def true_stop(values: list[float], mode: str, patience: int, min_delta: float, max_epochs: int) -> int:
    """The epoch Keras' EarlyStopping (or ``max_epochs``) ends a run of this curve at."""
    y = higher_is_better(values[:max_epochs], mode)
    state = advance(State.start(1), y[None, :], Rules(patience, min_delta, max_epochs))
    return int(state.stop[0]) or len(y)


def observed_epochs(fraction: float, length: int) -> int:
    """Epochs observed at ``fraction`` of a run: rounded half up, at least 1, below the length."""
    return min(max(1, math.floor(fraction * length + 0.5)), length - 1)


def pct_error(predicted: float, true: float) -> float:
    """Absolute error in % of the true value."""
    return abs(predicted - true) / true * 100


def runs(rows: list[dict[str, Any]], set_name: str, samples: int) -> list[dict[str, Any]]:
    """One record per run and observed fraction (runs of length 1 have nothing to foresee and are left out)."""
    records = []
    for curve, row in enumerate(rows):
        s = row["spec"]
        for metric, values in row["metrics"].items():
            mode = mode_of(metric)
            for patience, min_delta in RULES[set_name]:
                length = true_stop(values, mode, patience, min_delta, s["max_epochs"])
                if length < 2:
                    continue
                for fraction in FRACTIONS:
                    n = observed_epochs(fraction, length)
                    est = estimate_trial(values[:n], mode=mode, patience=patience, min_delta=min_delta,
                                         max_epochs=s["max_epochs"], samples=samples, seed=0)
                    records.append({
                        "curve": curve, "family": s["family"], "dataset": s["dataset"], "metric": metric,
                        "patience": patience, "min_delta": min_delta, "fraction": fraction, "length": length,
                        "max_epochs": s["max_epochs"], "observed": n, "median": est.epochs_median,
                        "low": est.epochs_low, "high": est.epochs_high,
                        "error": pct_error(est.epochs_median, length),
                        "signed": (est.epochs_median - length) / length * 100,
                        "inside": est.epochs_low <= length <= est.epochs_high,
                        "naive": pct_error(min(n + patience, s["max_epochs"]), length), "method": est.method,
                    })
    return records


def _pct(values: list[float], q: float) -> float | None:
    return round(float(np.percentile(values, q)), 2) if values else None


def summary(records: list[dict[str, Any]]) -> dict[str, Any]:
    """Median / 90th-percentile error, coverage and the naive rule's error of a group of records."""
    errors, naive = [r["error"] for r in records], [r["naive"] for r in records]
    median, naive_median = _pct(errors, 50), _pct(naive, 50)
    return {
        "records": len(records),
        "median_abs_pct_error": median,
        "p90_abs_pct_error": _pct(errors, 90),
        "median_signed_pct_error": _pct([r["signed"] for r in records], 50),
        "coverage_80": round(statistics.fmean(r["inside"] for r in records), 4) if records else None,
        "naive_epoch_plus_patience_median_abs_pct_error": naive_median,
        "ratio_to_naive": round(median / naive_median, 3) if median is not None and naive_median else None,
    }


def by_fraction(records: list[dict[str, Any]]) -> dict[str, Any]:
    """:func:`summary` per observed fraction, and over all of them."""
    out = {f"{int(f * 100)}%": summary([r for r in records if r["fraction"] == f]) for f in FRACTIONS}
    out["all"] = summary(records)
    return out


def breakdown(records: list[dict[str, Any]], key: str) -> dict[str, Any]:
    """Median error per fraction and coverage, per value of ``key``."""
    out = {}
    for value in sorted({str(r[key]) for r in records}):
        group = [r for r in records if str(r[key]) == value]
        out[value] = {"runs": len(group) // len(FRACTIONS),
                      **{f"{int(f * 100)}%": _pct([r["error"] for r in group if r["fraction"] == f], 50)
                         for f in FRACTIONS},
                      "naive": {f"{int(f * 100)}%": _pct([r["naive"] for r in group if r["fraction"] == f], 50)
                                for f in FRACTIONS},
                      "coverage_80": round(statistics.fmean(r["inside"] for r in group), 3)}
    return out


def targets(scored: dict[str, Any]) -> list[dict[str, Any]]:
    """The acceptance criteria, measured on this set."""
    out = []
    for fraction, limit in ERROR_TARGETS.items():
        row = scored[f"{int(fraction * 100)}%"]
        error, naive = row["median_abs_pct_error"], row["naive_epoch_plus_patience_median_abs_pct_error"]
        out.append({"name": f"median_error_at_{int(fraction * 100)}%", "target": f"<= {limit:g} %",
                    "measured": error, "met": error is not None and error <= limit})
        out.append({"name": f"vs_naive_at_{int(fraction * 100)}%",
                    "target": f"<= {1 - NAIVE_MARGIN:g} × the naive 'epoch + patience' median error",
                    "measured": {"estimator": error, "naive": naive, "ratio": row["ratio_to_naive"]},
                    "met": error is not None and naive is not None and error <= (1 - NAIVE_MARGIN) * naive})
    coverage = scored["all"]["coverage_80"]
    low, high = COVERAGE_RANGE
    out.append({"name": "coverage_80", "target": f"{low:.0%}-{high:.0%} (all fractions)", "measured": coverage,
                "met": coverage is not None and low <= coverage <= high})
    return out


def _brief(path: Path) -> dict[str, Any] | None:
    """The headline figures of one per-set result (None if it was not written)."""
    if not path.is_file():
        return None
    result = json.loads(path.read_text())
    keep = ("median_abs_pct_error", "coverage_80", "naive_epoch_plus_patience_median_abs_pct_error", "ratio_to_naive")
    return {"file": path.name, "label": result["label"], "when": result["when"], "curves": result["curves"],
            "runs": result["runs"],
            "by_fraction": {k: {f: v[f] for f in keep} for k, v in result["by_fraction"].items()},
            "targets_met": {t["name"]: t["met"] for t in result["targets"]}}


def _project(path: Path) -> dict[str, Any] | None:
    """The trial-level figures of a ``benchmarks/progress.py`` result (the project's own curves)."""
    if not path.is_file():
        return None
    trial = json.loads(path.read_text())["trial_level"]
    return {"file": path.name, "curves": trial["curves"], "runs": trial["runs"],
            "by_fraction": {k: {"median_abs_pct_error": v["median_abs_pct_error"], "coverage_80": v["coverage_80"],
                                "naive_epoch_plus_patience": v["naive_epoch_plus_patience"]["median_abs_pct_error"]}
                            for k, v in trial["by_fraction"].items()},
            "overall_coverage_80": trial["overall"]["coverage_80"]}


def combine(results: Path) -> None:
    """Writes ``trial_estimate.json``: development (before and after) and held-out figures, apart."""
    heldout = _brief(results / "trial_estimate_heldout.json")
    report = {
        "benchmark": "trial_estimate",
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": {"cpus": os.cpu_count(), "note": "a shared, loaded 2-core machine (the figures are not timings)"},
        "split": {"dev": {"families": FAMILIES["dev"], "rules_patience_min_delta": RULES["dev"]},
                  "heldout": {"families": FAMILIES["heldout"], "rules_patience_min_delta": RULES["heldout"]},
                  "heldout2": {"families": FAMILIES["heldout2"], "rules_patience_min_delta": RULES["heldout2"]},
                  "heldout3": {"families": FAMILIES["heldout3"], "rules_patience_min_delta": RULES["heldout3"]},
                  "note": "each held-out set's curves were committed before the change it judged and scored once, "
                          "after the method was frozen: heldout (covariance x6), heldout2 (plateau of short "
                          "curves), heldout3 (covariance x3, the final method); each is development data since"},
        "dev_before": _brief(results / "trial_estimate_dev_before.json"),
        "dev_after": _brief(results / "trial_estimate_dev.json"),
        "heldout": heldout,
        "heldout_before_for_comparison": _brief(results / "trial_estimate_heldout_before.json"),
        "heldout_targets": json.loads((results / "trial_estimate_heldout.json").read_text())["targets"]
        if heldout else None,
        "heldout2": _brief(results / "trial_estimate_heldout2.json"),
        "heldout2_before_for_comparison": _brief(results / "trial_estimate_heldout2_before.json"),
        "heldout3": _brief(results / "trial_estimate_heldout3.json"),
        "heldout3_targets": json.loads((results / "trial_estimate_heldout3.json").read_text())["targets"]
        if (results / "trial_estimate_heldout3.json").is_file() else None,
        "final_method_on_development_sets": {
            name: _brief(results / f"trial_estimate_{name}_final.json") for name in ("dev", "heldout", "heldout2")
        },
        "project_curves_before": _project(results / "progress_80curves_before.json"),
        "project_curves_after": _project(results / "progress_80curves_after.json"),
        "project_curves_final": _project(results / "progress_80curves_final.json"),
    }
    write_report(report, results / "trial_estimate.json")


def main() -> None:
    """Trains (or loads) the chosen set's curves, scores the estimator on them and writes the JSON."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", choices=tuple(FAMILIES), default="dev", help="which set to score")
    parser.add_argument("--samples", type=int, default=1000, help="Monte-Carlo samples per estimate")
    parser.add_argument("--cache", default=str(CURVES), help="folder of the cached curves")
    parser.add_argument("--record-only", action="store_true", help="train and cache both sets' curves, score none")
    parser.add_argument("--label", default="", help="a note stored with the result (which method was scored)")
    parser.add_argument("--out", help="JSON result (default benchmarks/results/trial_estimate_<set>.json)")
    parser.add_argument("--combine", action="store_true",
                        help="score nothing: gather the per-set results into benchmarks/results/trial_estimate.json")
    args = parser.parse_args()
    began = time.time()
    if args.combine:
        combine(ROOT / "benchmarks" / "results")
        return
    if args.record_only:
        for set_name in FAMILIES:
            print(f"{set_name}: {len(curves(set_name, Path(args.cache)))} curves")
        return
    rows = curves(args.set, Path(args.cache))
    records = runs(rows, args.set, args.samples)
    scored = by_fraction(records)
    import sklearn

    report = {
        "benchmark": "trial_estimate",
        "set": args.set,
        "label": args.label,
        "when": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "host": {"python": platform.python_version(), "machine": platform.machine(), "cpus": os.cpu_count(),
                 "note": "a shared, loaded 2-core machine (the figures are not timings)"},
        "sklearn": sklearn.__version__,
        "curves": len(rows),
        "families": {family: sum(r["spec"]["family"] == family for r in rows) for family in FAMILIES[args.set]},
        "rules_patience_min_delta": [list(rule) for rule in RULES[args.set]],
        "runs": len(records) // len(FRACTIONS),
        "samples": args.samples,
        "naive": "min(observed epochs + patience, max_epochs)",
        "by_fraction": scored,
        "by_family": breakdown(records, "family"),
        "by_metric": breakdown(records, "metric"),
        "by_patience": breakdown(records, "patience"),
        "by_min_delta": breakdown(records, "min_delta"),
        "targets": targets(scored),
        "wall_s": round(time.time() - began, 1),
    }
    out = args.out or str(ROOT / "benchmarks" / "results" / f"trial_estimate_{args.set}.json")
    write_report(report, out)
    print(f"\n{args.set}: {report['curves']} curves, {report['runs']} runs")
    for key, row in scored.items():
        naive = row["naive_epoch_plus_patience_median_abs_pct_error"]
        print(f"{key:>5} median {row['median_abs_pct_error']}%  naive {naive}%"
              f"  ratio {row['ratio_to_naive']}  cover {row['coverage_80']}  signed {row['median_signed_pct_error']}%")



def _train_heldout3(s: dict[str, Any], x: np.ndarray, y: np.ndarray, xv: np.ndarray, yv: np.ndarray,
                    regression: bool, record: Any) -> None:
    """The third held-out set: AdaBoost stage by stage, random Fourier features + SGD, Nesterov MLPs, and
    Gaussian naive Bayes fed one more chunk of the data each epoch."""
    from sklearn import ensemble, kernel_approximation, linear_model, naive_bayes, neural_network, tree

    classes = None if regression else np.unique(y)
    rng = np.random.default_rng(s["seed"])
    seed = s["seed"] % 2**31
    family, epochs = s["family"], s["max_epochs"]
    if family == "adaboost":
        if regression:
            model = ensemble.AdaBoostRegressor(tree.DecisionTreeRegressor(max_depth=s["max_depth"] + 1),
                                               n_estimators=epochs * s["stages_per_epoch"],
                                               learning_rate=s["learning_rate"], random_state=seed)
        else:
            model = ensemble.AdaBoostClassifier(tree.DecisionTreeClassifier(max_depth=s["max_depth"]),
                                                n_estimators=epochs * s["stages_per_epoch"],
                                                learning_rate=s["learning_rate"], random_state=seed)
        model.fit(x, y)
        staged = model.staged_predict(xv) if regression else model.staged_predict_proba(xv)
        stages, last = 0, None
        for stages, out in enumerate(staged, 1):
            last = out
            if stages % s["stages_per_epoch"] == 0:
                _record_staged(out, yv, regression, model, record)
        for _ in range(stages // s["stages_per_epoch"], epochs):  # it ends early on a perfect fit: the curve stays
            _record_staged(last, yv, regression, model, record)
        return
    if family == "naive_bayes_stream":
        model = naive_bayes.GaussianNB(var_smoothing=s["smoothing"])
        order = rng.permutation(len(x))
        for epoch in range(epochs):
            part = order[epoch * s["chunk"] % len(x):][: s["chunk"]]
            model.partial_fit(x[part], y[part], classes=classes)
            record(_proba_metrics(model, xv, yv, classes))
        return
    if family == "mlp_nesterov":
        cls = neural_network.MLPRegressor if regression else neural_network.MLPClassifier
        model = cls(hidden_layer_sizes=(s["units"],) * s["layers"], solver="sgd", nesterovs_momentum=True,
                    momentum=s["momentum"], alpha=s["alpha"], batch_size=s["batch_size"],
                    learning_rate_init=s["learning_rate"], random_state=seed)
        for _ in range(epochs):
            if regression:
                model.partial_fit(x, y)
                record(_regression_metrics(model.predict(xv), yv))
            else:
                model.partial_fit(x, y, classes=classes)
                record(_proba_metrics(model, xv, yv, classes))
        return
    features = kernel_approximation.RBFSampler(gamma=s["gamma"], n_components=s["components"], random_state=seed)
    features.fit(x)
    fx, fxv = features.transform(x), features.transform(xv)
    common = {"alpha": s["alpha"], "learning_rate": s["learning_rate_schedule"], "eta0": s["eta0"],
              "random_state": seed}
    model = linear_model.SGDRegressor(**common) if regression else linear_model.SGDClassifier(loss="log_loss", **common)
    for _ in range(epochs):
        for part in np.array_split(rng.permutation(len(fx)), s["batches_per_epoch"]):
            if regression:
                model.partial_fit(fx[part], y[part])
            else:
                model.partial_fit(fx[part], y[part], classes=classes)
        if regression:
            record(_regression_metrics(model.predict(fxv), yv))
        else:
            record(_proba_metrics(model, fxv, yv, classes))


def _record_staged(out: np.ndarray, yv: np.ndarray, regression: bool, model: Any, record: Any) -> None:
    """Records one AdaBoost stage's validation metrics (``out``: predictions, or class probabilities)."""
    if regression:
        record(_regression_metrics(out, yv))
        return
    from sklearn.metrics import log_loss

    record({"val_accuracy": float(np.mean(model.classes_[np.argmax(out, axis=1)] == yv)),
            "val_loss": float(log_loss(yv, np.clip(out, 1e-15, 1), labels=model.classes_))})


if __name__ == "__main__":
    main()
