"""Malformed sweep files through ``hpo validate``: one line, exit 2, the file and the key named, no traceback.

The cases are generated: every numeric setting with values no sweep can use (infinite, NaN, text, lists,
mappings, negative), every choice setting with values outside its choices, tracking URIs that cannot
work, names that cannot be a path, broken search spaces, unknown and repeated keys, YAML that does not
parse. None of them may be accepted.
"""

from __future__ import annotations

import copy
import math
from pathlib import Path

import pytest
import yaml

from tests.conftest import ROOT, hpo_cli

BASE = yaml.safe_load((ROOT / "search_spaces" / "digits_mlp.yaml").read_text())
NUMERIC = [
    "search.num_samples", "search.max_concurrent", "search.seed", "search.repeats", "search.time_budget_s",
    "search.max_trials", "search.startup_trials", "search.random_fraction", "search.random_after",
    "scheduler.grace_period",
    "scheduler.reduction_factor", "scheduler.brackets",
    "scheduler.bootstrap_count", "trial.workers", "trial.cpus_per_worker", "trial.gpus_per_worker",
    "trial.max_epochs", "trial.batch_size_per_worker", "trial.learning_rate", "trial.reference_batch_size",
    "trial.max_failures", "trial.simulated_epoch_s", "trial.early_stopping.patience",
    "trial.early_stopping.min_delta", "data.validation_fraction", "data.cache.size_limit_mb",
]
NOT_A_NUMBER = [math.inf, -math.inf, math.nan, "inf", "", "abc", [1], {"a": 1}, -5, "3", True, 10**30]
CHOICES = [
    "search.algorithm", "scheduler.type", "trial.lr_scaling", "trial.backend", "data.task", "objective.mode",
    "trial.optimizer", "trial.loss",
]
NOT_A_CHOICE = ["bogus", "", 5, [1]]
URIS = ["", "sqlite://", "sqlite:///:memory:", "http://", "https://", "ftp://host/x", "mysql://u:p@h/db",
        "sqlite:////nonexistent/dir/m.db", "mssql://h/db", "s3://bucket/x"]
NAMES = ["x" * 300, "", "a b", "../up", "-dash", "a/b", 5, None]
SPACES = {
    "int step 0.5": {"units": {"type": "int", "low": 16, "high": 64, "step": 0.5}},
    "step larger than range": {"units": {"type": "int", "low": 16, "high": 20, "step": 16}},
    "negative log range": {"lr": {"type": "float", "low": -0.1, "high": 0.1, "log": True}},
    "zero log low": {"lr": {"type": "float", "low": 0, "high": 0.1, "log": True}},
    "low above high": {"units": {"type": "int", "low": 64, "high": 16}},
    "missing high": {"units": {"type": "int", "low": 16}},
    "fractional int bounds": {"units": {"type": "int", "low": 1.5, "high": 4}},
    "log and step": {"lr": {"type": "float", "low": 0.001, "high": 0.1, "log": True, "step": 0.01}},
    "float with choices": {"lr": {"type": "float", "low": 0.001, "high": 0.1, "choices": [1]}},
    "categorical with low/high": {"act": {"type": "categorical", "choices": ["relu"], "low": 1, "high": 3}},
    "categorical with log": {"act": {"type": "categorical", "choices": ["relu"], "log": True}},
    "categorical without choices": {"act": {"type": "categorical"}},
    "empty choices": {"act": {"type": "categorical", "choices": []}},
    "unknown type": {"act": {"type": "uniform", "low": 1, "high": 2}},
    "infinite high": {"lr": {"type": "float", "low": 0.001, "high": math.inf}},
    "nan low": {"lr": {"type": "float", "low": math.nan, "high": 0.1}},
    "unknown optimizer choice": {"optimizer": {"type": "categorical", "choices": ["adam", "adamz"]}},
    "self condition": {"units": {"type": "int", "low": 16, "high": 64, "when": {"units": 16}}},
    "cyclic condition": {"a": {"type": "categorical", "choices": [1, 2], "when": {"b": 1}},
                         "b": {"type": "categorical", "choices": [1, 2], "when": {"a": 1}}},
    "condition on a float": {"lr": {"type": "float", "low": 0.001, "high": 0.1},
                             "units": {"type": "int", "low": 16, "high": 64, "when": {"lr": 0.01}}},
    "condition on an absent parameter": {"units": {"type": "int", "low": 16, "high": 64, "when": {"zz": 1}}},
    "condition value not a choice": {"act": {"type": "categorical", "choices": ["relu"]},
                                     "units": {"type": "int", "low": 16, "high": 64, "when": {"act": "tanh"}}},
    "grid without values": {"units": {"type": "grid"}},
    "grid with empty values": {"units": {"type": "grid", "values": []}},
    "grid under tpe": {"units": {"type": "grid", "values": [16, 32]}},
    "empty space": {},
    "parameter not a mapping": {"units": 5},
    "negative step": {"units": {"type": "int", "low": 16, "high": 64, "step": -16}},
    "unknown parameter key": {"units": {"type": "int", "low": 16, "high": 64, "stride": 2}},
    "unknown keras optimizer in grid": {"optimizer": {"type": "grid", "values": ["sgd", "nope"]}},
    "negative learning-rate range": {"learning_rate": {"type": "float", "low": -0.1, "high": 0.1}},
    "zero learning-rate choice": {"learning_rate": {"type": "categorical", "choices": [0, 0.1]}},
    "learning rate above 10": {"learning_rate": {"type": "float", "low": 0.1, "high": 100}},
    "learning-rate choices as text": {"learning_rate": {"type": "categorical", "choices": ["0.01", "0.1"]}},
    "learning-rate choices partly text": {"learning_rate": {"type": "categorical", "choices": [0.1, "0.01"]}},
    "float batch-size range": {"batch_size_per_worker": {"type": "float", "low": 16, "high": 64}},
    "zero batch size": {"batch_size_per_worker": {"type": "int", "low": 0, "high": 64}},
    "fractional batch-size choice": {"batch_size_per_worker": {"type": "categorical", "choices": [16, 32.5]}},
    "batch-size choice as text": {"batch_size_per_worker": {"type": "categorical", "choices": ["32"]}},
    "boolean batch-size choice": {"batch_size_per_worker": {"type": "categorical", "choices": [True, 32]}},
    "infinite batch-size choice": {"batch_size_per_worker": {"type": "categorical", "choices": [math.inf]}},
    "nan learning-rate choice": {"learning_rate": {"type": "categorical", "choices": [math.nan]}},
    "negative momentum": {"optimizer": {"type": "categorical", "choices": ["sgd"]},
                          "momentum": {"type": "float", "low": -0.5, "high": 0.9}},
    "int range up to 1e30": {"units": {"type": "int", "low": 1, "high": 10**30}},
    "int range from -1e30": {"units": {"type": "int", "low": -(10**30), "high": 4}},
    "range bound as text": {"units": {"type": "int", "low": "1", "high": 4}},
    "boolean range bound": {"units": {"type": "int", "low": True, "high": 4}},
    "step as text": {"units": {"type": "int", "low": 16, "high": 64, "step": "16"}},
}
CROSS = {  # settings valid one by one, not together: (dotted key → value), the key the error names
    "grace above max_epochs": ({"scheduler.grace_period": 50, "trial.max_epochs": 8}, "scheduler.grace_period"),
    "bootstrap without asha": ({"scheduler.type": "fifo", "scheduler.bootstrap_count": 1}, "scheduler.bootstrap_count"),
    "startup trials with random": ({"search.algorithm": "random", "search.startup_trials": 3}, "search.startup_trials"),
    "random fraction with random": ({"search.algorithm": "random", "search.random_fraction": 0.2},
                                    "search.random_fraction"),
    "match budget with random": ({"search.algorithm": "random", "search.match_budget": True}, "search.match_budget"),
    "random after without a fraction": ({"search.algorithm": "optuna-tpe", "search.random_fraction": 0.0,
                                         "search.random_after": 30},
                                        "search.random_after"),
    "max_trials not a multiple": ({"search.repeats": 2, "search.max_trials": 3}, "search.max_trials"),
    "objective not logged": ({"objective.metric": "val_auc"}, "objective.metric"),
    "unknown metric": ({"trial.metrics": ["accuracyy"]}, "trial.metrics"),
    "builtin with validation": ({"data.validation": "file:///tmp/v"}, "data.validation"),
    "train and partitions": ({"data.partitions": {"eu": "file:///tmp/eu"}}, "data.partitions"),
    "data URL without scheme": ({"data.train": "/tmp/data"}, "data.train"),
    "fractional gpus over one": ({"trial.gpus_per_worker": 1.5}, "trial.gpus_per_worker"),
    "grid with repeats": ({"search.algorithm": "grid", "search.repeats": 2}, "search"),
    "learning rate 1e308": ({"trial.learning_rate": 1e308}, "trial.learning_rate"),
    "seed 1e308": ({"search.seed": 1e308}, "search.seed"),
    "empty experiment": ({"tracking.experiment": ""}, "tracking.experiment"),
    "model without function": ({"model": "hpo.models.mlp"}, "model"),
    "model of a missing module": ({"model": "no_such_module:build"}, "model"),
    "model function missing": ({"model": "hpo.models.mlp:nope"}, "model"),
    "grid of ranges only": ({"search.algorithm": "grid", "space": {
        "lr": {"type": "float", "low": 0.001, "high": 0.1}, "units": {"type": "int", "low": 16, "high": 64}}},
        "search.algorithm"),
    "mlflow store in /proc": ({"tracking.mlflow_uri": "file:///proc/mlruns"}, "tracking.mlflow_uri"),
    "sqlite store in /proc": ({"tracking.mlflow_uri": "sqlite:////proc/mlflow.db"}, "tracking.mlflow_uri"),
    "mlflow unknown scheme": ({"tracking.mlflow_uri": "notaschema:whatever"}, "tracking.mlflow_uri"),
    "cache dir in /proc": ({"data.cache": {"enabled": True, "dir": "/proc/hpo-cache"}}, "data.cache.dir"),
    "validation_fraction leaving no training row": ({"data.validation_fraction": 0.9999},
                                                    "data.validation_fraction"),
}
#: Cases with more than one problem: every one is reported, one line each (case id → lines).
SEVERAL = {"space: unknown keras optimizer in grid": 2}


BOMB = "".join(f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 10) if i else 'x'}]\n" for i in range(8)) + "space: *l7\n"


def dotted(data: dict, key: str, value) -> dict:
    data = copy.deepcopy(data)
    node = data
    *parents, last = key.split(".")
    for part in parents:
        node = node.setdefault(part, {})
    node[last] = value
    return data


def cases() -> list[tuple[str, str, str]]:
    """``(case id, file text, text the error line must name)``."""
    out = []
    for key in NUMERIC:
        for value in NOT_A_NUMBER:
            out.append((f"{key}={value!r}", yaml.safe_dump(dotted(BASE, key, value)), key))
    for value in (math.inf, -math.inf, math.nan, "abc", [1], 1e308, -1e308):
        text = yaml.safe_dump(dotted(BASE, "objective.goal", value))
        out.append((f"objective.goal={value!r}", text, "objective.goal"))
    for key in CHOICES:
        for value in NOT_A_CHOICE:
            out.append((f"{key}={value!r}", yaml.safe_dump(dotted(BASE, key, value)), key))
    for uri in URIS:
        text = yaml.safe_dump(dotted(BASE, "tracking.mlflow_uri", uri))
        out.append((f"mlflow_uri={uri!r}", text, "tracking.mlflow_uri"))
    for name in NAMES:
        out.append((f"name={str(name)[:12]!r}", yaml.safe_dump(dotted(BASE, "name", name)), "name"))
    for label, space in SPACES.items():
        out.append((f"space: {label}", yaml.safe_dump(dotted(BASE, "space", space)), "space"))
    for label, (changes, key) in CROSS.items():
        data = BASE
        for k, v in changes.items():
            data = dotted(data, k, v)
        out.append((f"cross: {label}", yaml.safe_dump(data), key))
    for section in ("", "data.", "search.", "scheduler.", "trial.", "tracking.", "objective.", "trial.early_stopping."):
        out.append((f"unknown key {section}colour", yaml.safe_dump(dotted(BASE, section + "colour", "red")),
                    section + "colour"))
    for section in ("name", "model", "search"):
        text = yaml.safe_dump(BASE, sort_keys=False) + f"{section}: again\n"
        out.append((f"duplicate {section}", text, f"key '{section}' appears twice"))
    nested = yaml.safe_dump(BASE, sort_keys=False).replace("  seed: 7\n", "  seed: 7\n  seed: 8\n")
    out.append(("duplicate nested key", nested, "key 'seed' appears twice"))
    for label, text in {"tab indent": "name: x\n\tmodel: y\n", "unclosed bracket": "name: [x\n",
                        "bad mapping": "name: x\n  - y: z\n", "5000-deep flow": "name: " + "[" * 5000 + "]" * 5000,
                        "5000-deep block": "".join("  " * i + "k:\n" for i in range(5000)),
                        "alias bomb": BOMB, "self-referring alias": "name: &n [*n]\n",
                        "nul byte": "name: x\x00\n", "latin-1 text": "name: caf\u00e9\n".encode("latin-1"),
                        "binary": bytes(range(256)) * 4}.items():
        out.append((f"yaml: {label}", text, "line "))
    for label, text in {"a list": "- name: x\n", "a string": "just text\n", "empty": ""}.items():
        out.append((f"top level: {label}", text, "(top level)"))
    for key in ("name", "model", "data", "space"):
        data = copy.deepcopy(BASE)
        del data[key]
        out.append((f"missing {key}", yaml.safe_dump(data), key))
    return out


CASES = cases()


def test_at_least_three_hundred_malformed_files():
    assert len(CASES) >= 300 and len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize(("case", "text", "key"), CASES, ids=[c[0] for c in CASES])
def test_malformed_sweep_is_one_line_exit_2_naming_file_and_key(tmp_path: Path, case: str, text: str | bytes,
                                                                 key: str):
    sweep = tmp_path / "sweep.yaml"
    sweep.write_bytes(text) if isinstance(text, bytes) else sweep.write_text(text)
    proc = hpo_cli("validate", str(sweep), cwd=tmp_path)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-500:], proc.stderr[-1500:])
    assert len(lines) == SEVERAL.get(case, 1), lines
    assert all(line.startswith(f"error: {sweep}: ") and "; " in line for line in lines), lines
    assert key in lines[0] and "Traceback" not in proc.stderr, lines[0]
    assert "u:p@" not in proc.stderr  # credentials in a URI are never echoed
    assert [p.name for p in tmp_path.rglob(".hpo-write-probe-*")] == []  # the writability probe cleaned up
