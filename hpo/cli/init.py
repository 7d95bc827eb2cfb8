"""``hpo init``: a sweep file and a model builder for the user's own data, written into the working directory.

It writes ``sweep.yaml`` and ``my_model.py`` (the builder ``my_model:build``) and never replaces a file:
if either exists, nothing is written (exit 2). The data decides the rest:

- no ``--data``: scikit-learn's digits (``builtin:digits``), so the sweep validates and runs at once;
- a ``.csv``, ``.parquet`` or ``.npz`` file: the sweep reads ``data/STEM/train`` and ``…/validation``, which
  the ``hpo data convert`` command it prints writes; the label's values decide the task (whole numbers
  from 0: classification, else regression), as ``hpo data convert`` decides it;
- a directory: an hpo dataset (``hpo data inspect`` checks it), or one with ``train/`` and ``validation/``.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated, Any, Optional

import typer
import yaml

from hpo.cli.errors import one_line_errors
from hpo.errors import ConfigError

SWEEP_FILE = "sweep.yaml"
MODEL_MODULE = "my_model"
#: The files ``hpo data convert`` takes.
TABLE_SUFFIXES = (".csv", ".parquet", ".pq", ".npz")

MODEL_TEXT = '''"""The model builder of sweep.yaml (``model: my_model:build``): edit it to your data."""

from __future__ import annotations

from typing import Any


def build(params: dict[str, Any], input_shape: tuple[int, ...], num_classes: int | None) -> Any:
    """Builds an uncompiled Keras 2 model (hpo compiles it with the searched learning rate and optimizer).

    Args:
        params: One trial's values of the sweep's ``space`` (here units, layers, dropout).
        input_shape: Shape of one example's features, e.g. (10,) or (28, 28, 1).
        num_classes: Number of classes, or None for regression (one linear output).

    Returns:
        A ``tf.keras.Model``.
    """
    import tensorflow as tf

    keras = tf.keras  # Keras 2 (tf-keras): what Horovod trains
    inputs = keras.Input(shape=input_shape)
    x = keras.layers.Flatten()(inputs) if len(input_shape) > 1 else inputs
    for _ in range(int(params.get("layers", 1))):
        x = keras.layers.Dense(int(params.get("units", 64)), activation="relu")(x)
        if float(params.get("dropout", 0.0)) > 0:
            x = keras.layers.Dropout(float(params["dropout"]))(x)
    if num_classes:
        outputs = keras.layers.Dense(num_classes, activation="softmax")(x)
    else:
        outputs = keras.layers.Dense(1)(x)
    return keras.Model(inputs, outputs)
'''


@dataclass(frozen=True)
class DataPlan:
    """Where the sweep reads its data, and the command that writes it first (if any).

    Attributes:
        data: The sweep file's ``data`` section.
        task: ``classification`` or ``regression``.
        convert: The ``hpo data convert`` command line to run first, or None.
    """

    data: dict[str, object]
    task: str
    convert: list[str] | None = None


def plan_data(data: Path | None, label: str | None, cwd: Path) -> DataPlan:
    """The data section for ``--data`` (None: the built-in digits).

    Raises:
        ConfigError: A path that does not exist or is no table or dataset, a missing or unknown label.
    """
    if data is None:
        return DataPlan({"train": "builtin:digits", "validation_fraction": 0.2, "task": "classification"},
                        "classification")
    if not data.exists():
        raise ConfigError(f"{data}: --data: no such file or directory; pass a .csv, .parquet or .npz file")
    if data.is_dir():
        return _dataset_plan(data.resolve(), label or "label")
    if data.suffix.lower() not in TABLE_SUFFIXES:
        raise ConfigError(f"{data}: --data: not a .csv, .parquet or .npz file; convert it to one of them first")
    columns, values = _label_values(data, label)
    if label is None or values is None:
        raise ConfigError(f"{data}: --label: {'required' if label is None else f'no column {label!r}'} "
                          f"(columns: {', '.join(columns)}); pass --label with the one to predict")
    text = values.dtype.kind in "OSU"  # text labels: numbered 0..k-1 by --encode-labels
    whole = values.dtype.kind in "iub" and (values.size == 0 or values.min() >= 0)
    task = "classification" if text or whole else "regression"
    dest = (cwd / "data" / _slug(data.stem)).resolve()
    section: dict[str, object] = {"train": (dest / "train").as_uri(), "validation": (dest / "validation").as_uri(),
                                  "label": label, "task": task}
    command = ["hpo", "data", "convert", str(data), str(dest.relative_to(cwd.resolve())), "--label", label,
               "--validation-fraction", "0.2"]
    if text:
        command += ["--encode-labels"]
    elif task == "regression":
        command += ["--task", "regression"]
    return DataPlan(section, task, command)


def _dataset_plan(path: Path, label: str) -> DataPlan:
    """The data section of an hpo dataset directory (or one holding ``train/`` and ``validation/``)."""
    from hpo.data import inspect_dataset

    parts = {p: path / p for p in ("train", "validation") if (path / p).is_dir()}
    train = parts.get("train", path)
    report = inspect_dataset(train.as_uri(), label=label)
    task = "classification" if "classes" in report["label"] else "regression"
    section: dict[str, object] = {"train": train.as_uri()}
    if "validation" in parts:
        section["validation"] = parts["validation"].as_uri()
    else:
        section["validation_fraction"] = 0.2
    section.update(label=label, task=task)
    return DataPlan(section, task)


def _label_values(path: Path, label: str | None) -> tuple[list[str], Any]:
    """The file's columns (npz: arrays) and the label's values (None if there is no such column)."""
    import numpy as np
    import pandas as pd

    suffix = path.suffix.lower()
    try:
        if suffix == ".npz":
            with np.load(path, allow_pickle=False) as arrays:
                columns = list(arrays.files)
                return columns, (np.asarray(arrays[label]) if label in columns else None)
        if suffix == ".csv":
            columns = list(pd.read_csv(path, nrows=0).columns)
            return columns, (pd.read_csv(path, usecols=[label])[label].to_numpy() if label in columns else None)
        import pyarrow.parquet as pq

        columns = list(pq.read_schema(path).names)
        return columns, (pq.read_table(path, columns=[label]).column(0).to_numpy() if label in columns else None)
    except (OSError, ValueError, UnicodeDecodeError) as exc:
        raise ConfigError(f"{path}: --data: cannot be read as {suffix[1:]} ({type(exc).__name__}); "
                          "check the file") from None


def _slug(text: str) -> str:
    import re

    return re.sub(r"[^A-Za-z0-9_.-]+", "-", text).strip("-.") or "data"


def sweep_document(name: str, plan: DataPlan) -> dict[str, object]:
    """The sweep file ``hpo init`` writes (a small TPE + ASHA sweep of the skeleton's MLP)."""
    metric, mode = ("val_accuracy", "max") if plan.task == "classification" else ("val_mae", "min")
    return {
        "name": name,
        "model": f"{MODEL_MODULE}:build",
        "data": plan.data,
        "objective": {"metric": metric, "mode": mode},
        "search": {"algorithm": "optuna-tpe", "num_samples": 8, "max_concurrent": 2, "seed": 0},
        "scheduler": {"type": "asha", "grace_period": 2, "reduction_factor": 2},
        "trial": {"workers": 1, "cpus_per_worker": 1, "max_epochs": 10, "batch_size_per_worker": 32,
                  "early_stopping": {"patience": 3}},
        "tracking": {"mlflow_uri": "sqlite:///mlflow.db"},
        "space": {
            "learning_rate": {"type": "float", "low": 0.0001, "high": 0.01, "log": True},
            "units": {"type": "int", "low": 16, "high": 128, "step": 16},
            "layers": {"type": "int", "low": 1, "high": 3},
            "dropout": {"type": "float", "low": 0.0, "high": 0.3},
        },
    }


@one_line_errors
def init(
    data: Annotated[
        Optional[Path], typer.Option("--data", help="Your .csv, .parquet or .npz file, or an hpo dataset directory.")
    ] = None,
    label: Annotated[Optional[str], typer.Option("--label", help="The column (npz: array) to predict.")] = None,
    name: Annotated[Optional[str], typer.Option("--name", help="The sweep's name (default: my-sweep).")] = None,
) -> None:
    """Write sweep.yaml and my_model.py for your data here (never over an existing file); say what to run next."""
    cwd = Path.cwd()
    targets = [cwd / SWEEP_FILE, cwd / f"{MODEL_MODULE}.py"]
    for path in targets:
        if path.exists():
            raise ConfigError(f"{path.name}: exists already; hpo init writes no file over another, "
                              "so move it away or run 'hpo init' in a new directory")
    plan = plan_data(data, label, cwd)
    document = sweep_document(name or "my-sweep", plan)
    header = "# Written by 'hpo init': every key is in docs/sweep-file.md.\n"
    if plan.convert:
        header += f"# Write the data first:\n#   {shlex.join(plan.convert)}\n"
    written = []
    sweep_text = header + yaml.safe_dump(document, sort_keys=False, default_flow_style=None)
    for path, text in zip(targets, [sweep_text, MODEL_TEXT], strict=True):
        with path.open("x") as out:  # "x": never over a file that appeared meanwhile
            out.write(text)
        written.append(path.name)
    print(f"wrote {' and '.join(written)} ({plan.task}); next:", flush=True)
    steps = [shlex.join(plan.convert)] if plan.convert else []
    steps += [f"hpo validate {SWEEP_FILE}", f"hpo tune {SWEEP_FILE}"]
    for step in steps:
        print(f"  {step}", flush=True)
