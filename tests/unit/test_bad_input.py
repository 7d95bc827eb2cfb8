"""Input that cannot mean what it says, and failures of the libraries behind it: one line each, exit 2.

Every case runs ``hpo validate`` (in-process, as the executable would) on a real file: a sweep file, a
dataset that is not Parquet, a model module that exits; the exact error lines are checked.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml

from hpo.data import write_dataset
from hpo.data.fs import path_to_url
from tests.conftest import base_sweep, hpo_cli


def errors_of(tmp_path: Path, sweep: dict | str | bytes, *args: str) -> list[str]:
    """The error lines of ``hpo validate`` on ``sweep`` (written to sweep.yaml), which must exit 2."""
    path = tmp_path / "sweep.yaml"
    if isinstance(sweep, dict):
        path.write_text(yaml.safe_dump(sweep, sort_keys=False))
    elif isinstance(sweep, str):
        path.write_text(sweep)
    else:
        path.write_bytes(sweep)
    proc = hpo_cli("validate", str(path), "--storage", str(tmp_path / "runs"), *args, cwd=tmp_path)
    assert proc.returncode == 2, (proc.returncode, proc.stdout[-800:], proc.stderr[-1500:])
    assert "Traceback" not in proc.stderr
    lines = proc.stderr.strip().splitlines()
    prefix = f"error: {path}: "
    assert all(line.startswith(prefix) for line in lines), lines
    return [line[len(prefix):] for line in lines]


def space(**params: dict) -> dict:
    return base_sweep(space=params)


# -- values that cannot mean what they say ------------------------------------------------------------------

SPACE_CASES = {
    "negative learning-rate range": (
        {"learning_rate": {"type": "float", "low": -0.1, "high": 0.1}},
        "space.learning_rate: -0.1 cannot be a learning rate (numbers above 0 up to 10); keep the range within that",
    ),
    "zero learning-rate low": (
        {"learning_rate": {"type": "float", "low": 0, "high": 0.1}},
        "space.learning_rate: 0 cannot be a learning rate (numbers above 0 up to 10); keep the range within that",
    ),
    "zero low on a log scale": (
        {"learning_rate": {"type": "float", "low": 0, "high": 0.1, "log": True}},
        "space.learning_rate: log scale needs low > 0 (got 0); raise low or set log: false",
    ),
    "float batch-size range": (
        {"batch_size_per_worker": {"type": "float", "low": 16, "high": 64}},
        "space.batch_size_per_worker: a float range gives fractional values, but a batch size takes whole numbers; "
        "use type: int",
    ),
    "fractional batch-size choice": (
        {"batch_size_per_worker": {"type": "categorical", "choices": [16, 32.5]}},
        "space.batch_size_per_worker: 32.5 is not a whole number; a batch size takes whole numbers, write one",
    ),
    "batch size above 2**20": (
        {"batch_size_per_worker": {"type": "int", "low": 16, "high": 2**21}},
        "space.batch_size_per_worker: 2097152 cannot be a batch size (whole numbers from 1 to 1048576); keep the "
        "range within that",
    ),
    "learning-rate choices as text": (
        {"learning_rate": {"type": "categorical", "choices": ["0.01", "0.1"]}},
        "space.learning_rate: '0.01' is text, not a number; write numbers without quotes",
    ),
    "boolean learning-rate value": (
        {"learning_rate": {"type": "categorical", "choices": [True, 0.1]}},
        "space.learning_rate: true is a boolean, not a number; write numbers",
    ),
    "momentum above one": (
        {"optimizer": {"type": "categorical", "choices": ["sgd"]},
         "momentum": {"type": "float", "low": 0.5, "high": 1.5}},
        "space.momentum: 1.5 cannot be a momentum (numbers from 0 to 1); keep the range within that",
    ),
    "int range up to 1e30": (
        {"units": {"type": "int", "low": 1, "high": 10**30}},
        "space.units: an int parameter's range must lie within ±2147483648 (2**31); narrow it",
    ),
    "range bound as text": (
        {"units": {"type": "int", "low": "1", "high": 4}},
        "space.units.low: '1' is text, not a number; write a number without quotes",
    ),
}


@pytest.mark.parametrize(("params", "line"), list(SPACE_CASES.values()), ids=list(SPACE_CASES))
def test_a_parameter_that_cannot_mean_what_it_says_is_refused(tmp_path, params, line):
    assert errors_of(tmp_path, space(**params)) == [line]


def test_a_grid_sweep_without_grid_points_is_refused(tmp_path):
    sweep = base_sweep(search={"algorithm": "grid"}, space={
        "learning_rate": {"type": "float", "low": 0.001, "high": 0.1, "log": True},
        "units": {"type": "int", "low": 16, "high": 64},
    })
    assert errors_of(tmp_path, sweep) == [
        "search.algorithm: grid search needs points, but every parameter of space is a range; list values "
        "(type: grid) or choices for at least one, or use random"
    ]


@pytest.mark.parametrize(("key", "value", "line"), [
    ("workers", "3", "trial.workers: '3' is text, not a whole number; write a whole number without quotes"),
    ("workers", True, "trial.workers: true is a boolean, not a whole number; write a whole number"),
    ("max_epochs", 3.0, "trial.max_epochs: 3.0 is a decimal number; write 3"),
    ("max_epochs", 2.5, "trial.max_epochs: 2.5 is not a whole number up to 2**31; write one"),
    ("learning_rate", "0.01", "trial.learning_rate: '0.01' is text, not a number; write a number without quotes"),
    ("max_failures", 10**30, "trial.max_failures: 1000000000000000000000000000000 is out of range (input should be "
                             "less than or equal to 2147483648); change it"),
])
def test_integer_keys_take_whole_numbers_only(tmp_path, key, value, line):
    assert errors_of(tmp_path, base_sweep(trial={key: value})) == [line]


def test_an_unknown_tracking_scheme_is_refused(tmp_path):
    sweep = base_sweep(tracking={"mlflow_uri": "notaschema:whatever"})
    assert errors_of(tmp_path, sweep) == [
        "tracking.mlflow_uri: 'notaschema:' is not an MLflow store; use sqlite:///mlflow.db, a directory or "
        "http://host:port"
    ]


def test_an_mlflow_store_that_cannot_be_written_is_refused_before_anything_is_written(tmp_path):
    sweep = base_sweep(tracking={"mlflow_uri": "file:///proc/mlruns"})
    assert errors_of(tmp_path, sweep) == [
        "tracking.mlflow_uri: file:///proc/mlruns cannot be written (/proc is not writable: No such file or "
        "directory); use a writable directory, e.g. sqlite:///mlflow.db"
    ]
    assert not (tmp_path / "runs").exists()


def test_a_cache_directory_that_cannot_be_written_is_refused(tmp_path):
    sweep = base_sweep(data={"train": "builtin:digits", "cache": {"enabled": True, "dir": "/proc/hpo-cache"}})
    assert errors_of(tmp_path, sweep) == [
        "data.cache.dir: /proc/hpo-cache cannot be written (/proc is not writable: No such file or directory); "
        "pick a writable directory or remove dir"
    ]


def test_the_writability_probe_leaves_the_directory_as_it_was(tmp_path):
    from hpo.writable import unwritable

    (tmp_path / "mine.txt").write_text("kept")
    assert unwritable(tmp_path / "not" / "yet") is None
    assert sorted(p.name for p in tmp_path.iterdir()) == ["mine.txt"] and (tmp_path / "mine.txt").read_text() == "kept"
    (tmp_path / "file").write_text("x")
    assert unwritable(tmp_path / "file" / "sub") == f"{tmp_path / 'file'} is not a directory"


# -- YAML that would exhaust the process -------------------------------------------------------------------

BOMB = "".join(
    f"{name}: &{name} [{', '.join([f'*{prev}'] * 10) if prev else ', '.join(['x'] * 10)}]\n"
    for prev, name in zip(["", "a", "b", "c", "d", "e", "f"], ["a", "b", "c", "d", "e", "f", "g"], strict=True)
)


def test_an_alias_bomb_in_choices_is_refused_without_expanding_it(tmp_path):
    choices = "space:\n  act: {type: categorical, choices: *g}\n"
    text = yaml.safe_dump(base_sweep(), sort_keys=False).replace("space:\n", BOMB + choices)
    assert errors_of(tmp_path, text) == [
        "line 9: aliases expand to more than 100,000 values; write the values out, or use fewer aliases"
    ]


def test_an_alias_inside_its_own_value_is_refused(tmp_path):
    assert errors_of(tmp_path, "name: &n [*n]\n") == [
        "line 1: an alias refers to the value that holds it; remove the alias"
    ]


def test_small_aliases_still_work(tmp_path):
    from hpo.config import read_yaml

    path = tmp_path / "s.yaml"
    path.write_text("a: &x [1, 2]\nb: *x\n")
    assert read_yaml(path) == {"a": [1, 2], "b": [1, 2]}


@pytest.mark.parametrize("text", [
    "name: " + "[" * 5000 + "]" * 5000 + "\n",
    "".join("  " * i + "k:\n" for i in range(5000)),
], ids=["flow", "block"])
def test_five_thousand_deep_nesting_is_one_line(tmp_path, text):
    lines = errors_of(tmp_path, text)
    assert len(lines) == 1 and lines[0].endswith(
        ": nested deeper than 50 levels; a sweep file needs a few levels, flatten it"), lines


def test_a_sweep_file_that_is_not_utf8_is_one_line(tmp_path):
    text = yaml.safe_dump(base_sweep(), sort_keys=False).replace("name: t", "name: caf\u00e9")
    assert errors_of(tmp_path, text.encode("latin-1")) == [
        "line 1: not UTF-8 text (byte 0xe9); save the file as UTF-8 (a sweep file is YAML text)"
    ]


def test_a_binary_sweep_file_is_one_line(tmp_path):
    assert errors_of(tmp_path, bytes(range(256))) == [
        "line 2: not UTF-8 text (byte 0x80); save the file as UTF-8 (a sweep file is YAML text)"
    ]
    assert errors_of(tmp_path, b"name: t\nmodel: \x00\x01\n") == [
        "line 2: character #x0000 cannot be in a YAML file (special characters are not allowed); a sweep file is "
        "text, remove it"
    ]


# -- every problem at once; --set on a value -------------------------------------------------------------------

def test_every_problem_of_a_sweep_file_is_reported_at_once_one_line_each(tmp_path):
    sweep = base_sweep(trial={"workers": 0, "max_epochs": "3", "wokers": 2}, search={"algorithm": "bogus"})
    assert errors_of(tmp_path, sweep) == [
        "search.algorithm: 'bogus' is not allowed; use one of 'optuna-tpe', 'optuna-gp', 'random' or 'grid'",
        "trial.workers: 0 is out of range (input should be greater than or equal to 1); change it",
        "trial.max_epochs: '3' is text, not a whole number; write a whole number without quotes",
        "trial.wokers: unknown key; remove it or check its spelling",
    ]


def test_every_cross_section_problem_is_reported_at_once(tmp_path):
    sweep = base_sweep(
        objective={"metric": "val_auc"},
        scheduler={"type": "fifo", "bootstrap_count": 1},
        space={"learning_rate": {"type": "float", "low": -1, "high": 0.1}},
    )
    assert errors_of(tmp_path, sweep) == [
        "space.learning_rate: -1 cannot be a learning rate (numbers above 0 up to 10); keep the range within that",
        "scheduler.bootstrap_count: only the asha scheduler has it (not fifo); remove it or use type: asha",
        "objective.metric: 'val_auc' is not logged by the trial (known: val_accuracy, val_loss); pick one or add it "
        "to trial.metrics",
    ]


def test_set_on_a_key_that_holds_a_value_is_one_line(tmp_path):
    assert errors_of(tmp_path, base_sweep(), "--set", "name.x=1") == [
        "--set name.x: 'name' is a value (str), not a section with keys; set name=VALUE, or check the key"
    ]


def test_set_into_an_empty_section_fills_it(tmp_path):
    from hpo.config import load_sweep

    path = tmp_path / "s.yaml"
    path.write_text(yaml.safe_dump(base_sweep(), sort_keys=False) + "trial:\n")
    assert load_sweep(path, {"trial.max_epochs": 3}).trial.max_epochs == 3


# -- data the libraries cannot read ------------------------------------------------------------------------

def test_s3_without_credentials_is_one_line(tmp_path, monkeypatch):
    for name in ("AWS_ACCESS_KEY_ID", "AWS_SECRET_ACCESS_KEY", "AWS_SESSION_TOKEN", "AWS_PROFILE"):
        monkeypatch.delenv(name, raising=False)
    monkeypatch.setenv("AWS_SHARED_CREDENTIALS_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_CONFIG_FILE", str(tmp_path / "none"))
    monkeypatch.setenv("AWS_EC2_METADATA_DISABLED", "true")
    url = "s3://hpo-test-no-such-bucket/data"
    assert errors_of(tmp_path, base_sweep(data={"train": url})) == [
        f"data.train: no credentials to read {url} (Unable to locate credentials); set AWS_ACCESS_KEY_ID and "
        "AWS_SECRET_ACCESS_KEY (or AWS_PROFILE), or copy the data to a file:// URL"
    ]


def test_hdfs_without_java_is_one_line(tmp_path, monkeypatch):
    monkeypatch.delenv("JAVA_HOME", raising=False)
    url = "hdfs://namenode:8020/data"
    assert errors_of(tmp_path, base_sweep(data={"train": url})) == [
        f"data.train: reading {url} needs Java and Hadoop's libhdfs (JAVA_HOME is not set); set JAVA_HOME and "
        "HADOOP_HOME (see pyarrow's HadoopFileSystem), or copy the data to file:// or s3://"
    ]


def test_a_file_that_is_not_parquet_is_one_line(tmp_path):
    csv = tmp_path / "table.csv"
    csv.write_text("a,b,label\n0.1,0.2,1\n")
    url = path_to_url(csv)
    assert errors_of(tmp_path, base_sweep(data={"train": url})) == [
        f"data.train: {url} is not a Parquet dataset (Parquet magic bytes not found in footer); convert the file "
        "with 'hpo data convert SOURCE DEST' and point the key at DEST"
    ]


@pytest.mark.parametrize("train", ["builtin", "own"])
def test_a_validation_fraction_that_leaves_no_training_row_names_the_key(tmp_path, train):
    if train == "own":
        rng = np.random.default_rng(0)
        url = write_dataset((rng.random((100, 4)), rng.integers(0, 3, 100)), path_to_url(tmp_path / "own"))
        rows = 100
    else:
        url, rows = "builtin:digits", 1797
    sweep = base_sweep(data={"train": url, "validation_fraction": 0.9999})
    assert errors_of(tmp_path, sweep) == [
        f"data.validation_fraction: 0.9999 of {rows} rows leaves none for training; lower it (e.g. 0.2)"
    ]
    assert not list((tmp_path / "runs").rglob("*.parquet"))  # nothing was written


# -- a model module that exits ------------------------------------------------------------------------------

def test_a_model_module_that_exits_at_import_is_one_line(tmp_path):
    (tmp_path / "exiting_model.py").write_text("import sys\n\nsys.exit(3)\n\n\ndef build(**kw):\n    pass\n")
    assert errors_of(tmp_path, base_sweep(model="exiting_model:build")) == [
        f"model: importing 'exiting_model' called sys.exit(3) at {tmp_path / 'exiting_model.py'}:3; a model module "
        "must not exit: move that code under 'if __name__ == \"__main__\":'"
    ]


# -- hpo tune checks before it announces the sweep ------------------------------------------------------------

def test_tune_with_the_mlflow_server_down_says_so_before_announcing_anything(tmp_path):
    from hpo.tracking.server import free_port

    uri = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    path = tmp_path / "sweep.yaml"
    path.write_text(yaml.safe_dump(base_sweep(name="down", tracking={"mlflow_uri": uri}), sort_keys=False))
    proc = hpo_cli("tune", str(path), "--storage", str(tmp_path / "runs"), cwd=tmp_path)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    assert proc.stdout == ""  # no header, no "MLflow: open http://…" for a server that is down
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {path}: tracking.mlflow_uri: MLflow server {uri} is "
                                                   "unreachable ("), lines
    assert lines[0].endswith("; start it (hpo ui --port N, or mlflow server) or use a sqlite:/// URI")


def test_exponent_floats_are_numbers_in_a_sweep_file_and_in_set(tmp_path):
    from hpo.cli.main import set_overrides
    from hpo.config import load_sweep

    path = tmp_path / "s.yaml"
    text = yaml.safe_dump(base_sweep(), sort_keys=False).replace("low: 0.001", "low: 1e-5")
    path.write_text(text + "trial: {learning_rate: 2E-3}\n")
    overrides = set_overrides(path, ["search.seed=7", "trial.simulated_epoch_s=1e-1"])
    config = load_sweep(path, overrides)
    assert config.space["learning_rate"].low == 1e-5 and config.trial.learning_rate == 2e-3
    assert config.search.seed == 7 and config.trial.simulated_epoch_s == 0.1
    assert errors_of(tmp_path, text.replace("low: 1e-5", "low: '1e-5'")) == [
        "space.learning_rate.low: '1e-5' is text, not a number; write a number without quotes"
    ]
