"""Records the learning-curve tables the search benchmark replays: every configuration's whole curve, once.

Each task draws ``--configs`` configurations from a realistic space of its model (learning rate, batch size,
width and depth, L2, optimizer with a conditional momentum; for the linear model, the penalty with a
conditional mix and the loss), trains each for ``MAX_EPOCHS`` epochs with no early stopping, and keeps every
epoch's validation objective and wall seconds. A share of the configurations (``--seed-share``) is
trained again with a second seed (another initialisation and shuffle), so the benchmark knows the noise
between runs of one configuration.

The models are scikit-learn's, trained one epoch at a time with ``partial_fit`` in this process (one pass
over the training rows per call; adam or SGD with momentum for the networks), on datasets that ship with
scikit-learn, each split once (stratified where it is a classification) into 80 % training and 20 %
validation rows and standardised on the training rows. They are not hpo's Horovod/Keras trials: the
tables are for comparing search methods on real curves at no training cost; ``benchmarks/search.py`` runs
the real thing.

Tasks, and which ones are held out from tuning hpo's search defaults (fixed here before any tuning):

- ``digits_mlp`` (development): a multilayer perceptron on the 8x8 digits, validation accuracy.
- ``cancer_mlp`` (development): a multilayer perceptron on the breast-cancer table, validation log loss.
- ``digits_linear`` (held out): a linear model trained by SGD on the digits, validation accuracy.
- ``diabetes_mlp`` (held out): a multilayer perceptron regression on the diabetes table, validation MSE of
  the standardised target.

Two more tasks were added on 2026-11-27, after hpo's defaults had been chosen on the first four, and recorded
before any search method ran on them: they judge the frozen defaults on tasks no setting was compared on.

- ``cancer_linear`` (held out): the linear model trained by SGD on the breast-cancer table, validation
  accuracy.
- ``wine_mlp`` (held out): a multilayer perceptron on the wine table (178 rows, 3 classes), validation log
  loss.

By the evening of 2026-11-27 three candidate settings had been rejected on ``digits_linear`` (and run on
``diabetes_mlp``): those two had been used to choose, so from then on they count as development tasks, and two
more tasks were recorded, before any search method ran on them or any new setting was compared, to be held
out with ``cancer_linear`` and ``wine_mlp``. Their data are drawn by scikit-learn's generators (fixed seed):

- ``synth_mlp`` (held out): a multilayer perceptron on ``make_classification`` (1,500 rows, 20 features of
  which 10 informative and 4 redundant, 3 classes, 3 % of labels flipped), validation log loss.
- ``friedman_mlp`` (held out): a multilayer perceptron regression on ``make_friedman1`` (1,000 rows, 10
  features of which 5 matter, noise 1), validation MSE of the standardised target.

Later on 2026-11-27 a scheduler setting was compared on all eight tables above (``synth_mlp`` had shown the
defaults' weakness), so all eight count as development tasks from then on, and two more were recorded before
any search method ran on them or that setting was judged, to be the held-out tasks:

- ``hastie_mlp`` (held out): a multilayer perceptron on ``make_hastie_10_2`` (2,000 rows, 10 features, two
  classes split by a sphere), validation accuracy.
- ``friedman3_mlp`` (held out): a multilayer perceptron regression on ``make_friedman3`` (1,000 rows, 4
  features, an arctangent target, noise 0.1), validation MSE of the standardised target.

On 2026-11-28 the benchmark's replay changed (a noisy answer is clipped to what the neighbouring recorded
configurations reached, not to the whole table's range), and all ten tables above had been run under it, so
all ten count as development tasks from then on. Two more were recorded before any search method ran on them
or any setting was compared under the new replay, to be the held-out tasks:

- ``synth_linear`` (held out): the linear model trained by SGD on the ``make_classification`` data of
  ``synth_mlp``, validation accuracy.
- ``quantiles_mlp`` (held out): a multilayer perceptron on ``make_gaussian_quantiles`` (1,500 rows, 6
  features, 3 classes split by nested spherical shells), validation log loss.

On 2026-11-29 a new candidate default (TPE with ``search.random_fraction`` 0.5) was chosen on the development
screen for regret at 25, 50 and 100 % of the budget; ``synth_linear`` and ``quantiles_mlp`` had been run under
the new replay with the defaults and random search, so they count as development tasks from then on, and two
more were recorded before any search method ran on them, to be the held-out tasks of that round:

- ``moons_mlp`` (held out): a multilayer perceptron on ``make_moons`` (1,500 rows, 2 features, two
  interleaved half circles, noise 0.3), validation accuracy.
- ``regression_mlp`` (held out): a multilayer perceptron regression on ``make_regression`` (1,000 rows, 20
  features of which 8 matter, a linear target, noise 20), validation MSE of the standardised target.

Later on 2026-11-29 a second candidate was chosen on the development screen; ``moons_mlp`` and
``regression_mlp`` had been used to judge the first one, so they count as development tasks from then on, and
two more were recorded before any search method ran on them, to be the held-out tasks of that round:

- ``circles_mlp`` (held out): a multilayer perceptron on ``make_circles`` (1,500 rows, 2 features, two
  concentric circles, the inner one half the radius, noise 0.15), validation log loss.
- ``friedman2_mlp`` (held out): a multilayer perceptron regression on ``make_friedman2`` (1,000 rows, 4
  features, an impedance-like target, noise 30), validation MSE of the standardised target.

On 2026-12-01 a third candidate (TPE with ``search.random_fraction`` 0.5 from trial ``search.random_after``
on) was to be screened; ``circles_mlp`` and ``friedman2_mlp`` had judged the second one, so they count as
development tasks from then on, and two more were recorded before any search method ran on them, to be the
held-out tasks of that round:

- ``blobs_mlp`` (held out): a multilayer perceptron on ``make_blobs`` (1,500 rows, 4 features, 8 classes of
  overlapping Gaussian clusters, standard deviation 3.5; 8 features, 4 clusters and 4.0 were tried first with
  ``--quick`` and left nearly every configuration at one accuracy), validation accuracy.
- ``swissroll_mlp`` (held out): a multilayer perceptron regression on ``make_swiss_roll`` (1,000 rows, the
  3 coordinates of a rolled sheet, noise 0.5), predicting the position along the roll, validation MSE of
  the standardised target.

Later on 2026-12-01 a fourth candidate (a random share that starts later than trial 30) was to be screened;
``blobs_mlp`` and ``swissroll_mlp`` had judged the third one, so they count as development tasks from then on,
and two more were recorded before any search method ran on them, to be the held-out tasks of that round:

- ``iris_mlp`` (held out): a multilayer perceptron on the iris table (150 rows, 4 features, 3 classes),
  validation log loss.
- ``scurve_mlp`` (held out): a multilayer perceptron regression on ``make_s_curve`` (1,000 rows, the 3
  coordinates of an S-shaped sheet, noise 0.3), predicting the position along the S, validation MSE of the
  standardised target.

Writes ``benchmarks/curves/TASK.parquet`` (:class:`hpo.replay.CurveTable`; a rerun with the same arguments
writes the same curves, their seconds aside; curves already trained are taken from ``--cache``).
``--quick``: 20 configurations a task, to try the script.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
import warnings
import zlib
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

for _threads in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_threads, "1")  # one thread: small matrices, and epoch times not disturbed by BLAS threads

import numpy as np  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT))

from hpo.replay import Curve, CurveTable, Task  # noqa: E402

MAX_EPOCHS = 20
OUT = Path(__file__).resolve().parent

MLP_SPACE: dict[str, Any] = {
    "learning_rate": {"type": "float", "low": 0.0001, "high": 0.1, "log": True},
    "batch_size": {"type": "categorical", "choices": [16, 32, 64, 128]},
    "units": {"type": "int", "low": 16, "high": 256, "step": 16},
    "layers": {"type": "int", "low": 1, "high": 3},
    "l2": {"type": "float", "low": 0.000001, "high": 0.1, "log": True},
    "optimizer": {"type": "categorical", "choices": ["adam", "sgd"]},
    "momentum": {"type": "float", "low": 0.5, "high": 0.99, "when": {"optimizer": "sgd"}},
}
LINEAR_SPACE: dict[str, Any] = {
    "learning_rate": {"type": "float", "low": 0.00001, "high": 1.0, "log": True},
    "schedule": {"type": "categorical", "choices": ["constant", "invscaling"]},
    "l2": {"type": "float", "low": 0.0000001, "high": 0.1, "log": True},
    "penalty": {"type": "categorical", "choices": ["l2", "l1", "elasticnet"]},
    "l1_ratio": {"type": "float", "low": 0.05, "high": 0.95, "when": {"penalty": "elasticnet"}},
    "loss": {"type": "categorical", "choices": ["log_loss", "hinge", "modified_huber"]},
}


@dataclass(frozen=True)
class TaskSpec:
    """One task: its data, model, objective and space, and whether it is held out from tuning defaults."""

    name: str
    dataset: str
    model: str
    metric: str
    mode: str
    space: dict[str, Any]
    held_out: bool


TASKS = (
    TaskSpec("digits_mlp", "digits", "mlp_classifier", "val_accuracy", "max", MLP_SPACE, held_out=False),
    TaskSpec("cancer_mlp", "breast_cancer", "mlp_classifier", "val_loss", "min", MLP_SPACE, held_out=False),
    TaskSpec("digits_linear", "digits", "sgd_classifier", "val_accuracy", "max", LINEAR_SPACE, held_out=False),
    TaskSpec("diabetes_mlp", "diabetes", "mlp_regressor", "val_loss", "min", MLP_SPACE, held_out=False),
    TaskSpec("cancer_linear", "breast_cancer", "sgd_classifier", "val_accuracy", "max", LINEAR_SPACE, held_out=False),
    TaskSpec("wine_mlp", "wine", "mlp_classifier", "val_loss", "min", MLP_SPACE, held_out=False),
    TaskSpec("synth_mlp", "classification", "mlp_classifier", "val_loss", "min", MLP_SPACE, held_out=False),
    TaskSpec("friedman_mlp", "friedman1", "mlp_regressor", "val_loss", "min", MLP_SPACE, held_out=False),
    TaskSpec("hastie_mlp", "hastie_10_2", "mlp_classifier", "val_accuracy", "max", MLP_SPACE, held_out=False),
    TaskSpec("friedman3_mlp", "friedman3", "mlp_regressor", "val_loss", "min", MLP_SPACE, held_out=False),
    TaskSpec("synth_linear", "classification", "sgd_classifier", "val_accuracy", "max", LINEAR_SPACE,
             held_out=False),
    TaskSpec("quantiles_mlp", "gaussian_quantiles", "mlp_classifier", "val_loss", "min", MLP_SPACE,
             held_out=False),
    TaskSpec("moons_mlp", "moons", "mlp_classifier", "val_accuracy", "max", MLP_SPACE, held_out=False),
    TaskSpec("regression_mlp", "regression", "mlp_regressor", "val_loss", "min", MLP_SPACE, held_out=False),
    TaskSpec("circles_mlp", "circles", "mlp_classifier", "val_loss", "min", MLP_SPACE, held_out=False),
    TaskSpec("friedman2_mlp", "friedman2", "mlp_regressor", "val_loss", "min", MLP_SPACE, held_out=False),
    TaskSpec("blobs_mlp", "blobs", "mlp_classifier", "val_accuracy", "max", MLP_SPACE, held_out=False),
    TaskSpec("swissroll_mlp", "swiss_roll", "mlp_regressor", "val_loss", "min", MLP_SPACE, held_out=False),
    TaskSpec("iris_mlp", "iris", "mlp_classifier", "val_loss", "min", MLP_SPACE, held_out=True),
    TaskSpec("scurve_mlp", "s_curve", "mlp_regressor", "val_loss", "min", MLP_SPACE, held_out=True),
)

#: scikit-learn's generators behind the generated datasets (``make_NAME``), each with its fixed arguments.
GENERATED: dict[str, dict[str, Any]] = {
    "classification": {"n_samples": 1500, "n_features": 20, "n_informative": 10, "n_redundant": 4,
                       "n_classes": 3, "flip_y": 0.03, "random_state": 0},
    "friedman1": {"n_samples": 1000, "n_features": 10, "noise": 1.0, "random_state": 0},
    "hastie_10_2": {"n_samples": 2000, "random_state": 0},
    "friedman3": {"n_samples": 1000, "noise": 0.1, "random_state": 0},
    "gaussian_quantiles": {"n_samples": 1500, "n_features": 6, "n_classes": 3, "random_state": 0},
    "moons": {"n_samples": 1500, "noise": 0.3, "random_state": 0},
    "regression": {"n_samples": 1000, "n_features": 20, "n_informative": 8, "noise": 20.0, "random_state": 0},
    "circles": {"n_samples": 1500, "noise": 0.15, "factor": 0.5, "random_state": 0},
    "friedman2": {"n_samples": 1000, "noise": 30.0, "random_state": 0},
    "blobs": {"n_samples": 1500, "n_features": 4, "centers": 8, "cluster_std": 3.5, "random_state": 0},
    "swiss_roll": {"n_samples": 1000, "noise": 0.5, "random_state": 0},
    "s_curve": {"n_samples": 1000, "noise": 0.3, "random_state": 0},
}


def draw(space: dict[str, Any], rng: np.random.Generator) -> dict[str, Any]:
    """One configuration drawn uniformly from ``space`` (log-uniform where it says), conditionals honoured."""
    params: dict[str, Any] = {}
    for name, spec in space.items():  # parents come before the parameters that depend on them
        if any(params.get(parent) != value for parent, value in (spec.get("when") or {}).items()):
            continue
        if spec["type"] == "categorical":
            params[name] = spec["choices"][int(rng.integers(len(spec["choices"])))]
        elif spec["type"] == "int":
            step = spec.get("step", 1)
            params[name] = int(spec["low"] + step * rng.integers((spec["high"] - spec["low"]) // step + 1))
        elif spec.get("log"):
            params[name] = float(math.exp(rng.uniform(math.log(spec["low"]), math.log(spec["high"]))))
        else:
            params[name] = float(rng.uniform(spec["low"], spec["high"]))
    return params


def split(dataset: str, regression: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
    """The dataset's fixed 80/20 split, standardised on the training rows (a regression's target too).

    ``dataset`` names a bundled dataset (``load_NAME``) or one of :data:`GENERATED` (``make_NAME``).
    """
    from sklearn import datasets
    from sklearn.model_selection import train_test_split
    from sklearn.preprocessing import StandardScaler

    if dataset in GENERATED:
        x, y = getattr(datasets, f"make_{dataset}")(**GENERATED[dataset])
    else:
        x, y = getattr(datasets, f"load_{dataset}")(return_X_y=True)
    x_train, x_val, y_train, y_val = train_test_split(
        x, y, test_size=0.2, random_state=0, stratify=None if regression else y)
    scaler = StandardScaler().fit(x_train)
    x_train, x_val = scaler.transform(x_train), scaler.transform(x_val)
    if regression:
        mean, std = y_train.mean(), y_train.std()
        y_train, y_val = (y_train - mean) / std, (y_val - mean) / std
    return x_train, x_val, y_train, y_val


def model(spec: TaskSpec, params: dict[str, Any], seed: int) -> Any:
    """The task's scikit-learn model for ``params``, trained by ``partial_fit`` one epoch a call."""
    from sklearn.linear_model import SGDClassifier
    from sklearn.neural_network import MLPClassifier, MLPRegressor

    if spec.model == "sgd_classifier":
        return SGDClassifier(loss=params["loss"], penalty=params["penalty"], alpha=params["l2"],
                             l1_ratio=params.get("l1_ratio", 0.15), learning_rate=params["schedule"],
                             eta0=params["learning_rate"], random_state=seed)
    kind = MLPRegressor if spec.model == "mlp_regressor" else MLPClassifier
    return kind(hidden_layer_sizes=(params["units"],) * params["layers"], alpha=params["l2"],
                solver=params["optimizer"], learning_rate_init=params["learning_rate"],
                batch_size=params["batch_size"], momentum=params.get("momentum", 0.9), nesterovs_momentum=True,
                random_state=seed, shuffle=True)


def score(spec: TaskSpec, fitted: Any, x_val: np.ndarray, y_val: np.ndarray) -> float:
    """The objective on the validation rows (NaN where training broke down)."""
    from sklearn.metrics import log_loss, mean_squared_error

    try:
        if spec.metric == "val_accuracy":
            return float(np.mean(fitted.predict(x_val) == y_val))
        if spec.model == "mlp_regressor":
            value = float(mean_squared_error(y_val, fitted.predict(x_val)))
        else:
            value = float(log_loss(y_val, fitted.predict_proba(x_val), labels=fitted.classes_))
        return value if math.isfinite(value) else math.nan
    except (ValueError, FloatingPointError):
        return math.nan


def train(spec: TaskSpec, params: dict[str, Any], seed: int, data: tuple) -> Curve:
    """One curve: ``MAX_EPOCHS`` epochs of ``partial_fit``, each scored and timed."""
    x_train, x_val, y_train, y_val = data
    fitted = model(spec, params, seed)
    rng = np.random.default_rng(seed)
    classes = None if spec.model == "mlp_regressor" else np.unique(y_train)
    values, seconds = [], []
    for _ in range(MAX_EPOCHS):
        start = time.perf_counter()
        order = rng.permutation(len(x_train))  # the linear model's partial_fit does not shuffle by itself
        with warnings.catch_warnings(), np.errstate(all="ignore"):
            warnings.simplefilter("ignore")
            try:
                if classes is None:
                    fitted.partial_fit(x_train[order], y_train[order])
                else:
                    fitted.partial_fit(x_train[order], y_train[order], classes=classes)
            except (ValueError, FloatingPointError, OverflowError):
                pass  # diverged: scored NaN below
            value = score(spec, fitted, x_val, y_val)
        seconds.append(time.perf_counter() - start)
        values.append(value)
    return Curve(np.array(values), np.array(seconds))


def record(spec: TaskSpec, configs: int, seed_share: float, cache: Path, log: Callable[[str], None]) -> CurveTable:
    """The task's table: ``configs`` drawn configurations, a ``seed_share`` of them twice.

    Each curve is appended to ``cache/TASK.jsonl`` as it is trained, keyed by its configuration and seed, so
    an interrupted recording goes on where it stopped.
    """
    rng = np.random.default_rng(zlib.crc32(spec.name.encode()))  # the same draws on every run
    data = split(spec.dataset, regression=spec.model == "mlp_regressor")
    params = [draw(spec.space, rng) for _ in range(configs)]
    twice = set(rng.choice(configs, size=round(seed_share * configs), replace=False).tolist())
    cache.mkdir(parents=True, exist_ok=True)
    done = cache / f"{spec.name}.jsonl"
    known: dict[str, Curve] = {}
    if done.is_file():
        for line in done.read_text().splitlines():
            row = json.loads(line)
            known[row["key"]] = Curve(np.array(row["values"], dtype=float), np.array(row["epoch_s"]))
    curves = {}
    start = time.time()
    for config_id, p in enumerate(params):
        for seed in (0, 1) if config_id in twice else (0,):
            key = json.dumps([MAX_EPOCHS, seed, config_id, p], sort_keys=True)
            if key not in known:
                known[key] = train(spec, p, 1000 * config_id + seed, data)
                with done.open("a") as out:
                    out.write(json.dumps({"key": key, "values": [None if math.isnan(v) else v
                                                                for v in known[key].values.tolist()],
                                          "epoch_s": known[key].epoch_s.tolist()}) + "\n")
            curves[(config_id, seed)] = known[key]
        if (config_id + 1) % 50 == 0:
            log(f"{spec.name}: {config_id + 1}/{configs} configurations, {time.time() - start:.0f} s")
    generated = spec.dataset in GENERATED
    loader = f"make_{spec.dataset}(**{GENERATED[spec.dataset]})" if generated else f"load_{spec.dataset}()"
    source = (f"scikit-learn {spec.model} on {loader} (80/20 split, standardised), partial_fit "
              f"one epoch a call, {MAX_EPOCHS} epochs; held out from tuning defaults: {spec.held_out}")
    return CurveTable(Task(spec.name, spec.metric, spec.mode, MAX_EPOCHS, spec.space, source), params, curves)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--tasks", default=",".join(t.name for t in TASKS))
    parser.add_argument("--configs", type=int, default=320)
    parser.add_argument("--seed-share", type=float, default=0.25)
    parser.add_argument("--out", type=Path, default=OUT)
    parser.add_argument("--cache", type=Path, default=Path.home() / ".cache" / "hpo" / "curves",
                        help="curves trained so far (an interrupted recording goes on from them)")
    parser.add_argument("--quick", action="store_true", help="20 configurations a task")
    args = parser.parse_args()
    wanted = set(args.tasks.split(","))
    for spec in TASKS:
        if spec.name not in wanted:
            continue
        table = record(spec, 20 if args.quick else args.configs, args.seed_share, args.cache, print)
        path = args.out / f"{spec.name}.parquet"
        table.write(path)
        print(f"{path}: {len(table.params)} configurations, {len(table.curves)} curves, "
              f"{path.stat().st_size / 1024:.0f} KiB")


if __name__ == "__main__":
    main()
