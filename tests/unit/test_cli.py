"""The real ``hpo`` executable: exit codes and one-line errors (no sweep is run here)."""

from __future__ import annotations

import subprocess
import sys

import numpy as np
import pandas as pd
import pytest

from tests.conftest import HPO, ROOT, base_sweep, hpo_cli


def run(*args: str, cwd) -> subprocess.CompletedProcess:
    return hpo_cli(*args, cwd=cwd)


def test_validate_default_sweep(tmp_path):
    # The real executable, once: its entry point, environment set-up and exit code.
    proc = subprocess.run([HPO, "validate", str(ROOT / "search_spaces" / "digits_mlp.yaml")], cwd=tmp_path,
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert "ok — sweep 'digits-mlp'" in proc.stdout and "train 1438 rows" in proc.stdout


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


@pytest.mark.parametrize(
    ("change", "expected"),
    [
        ({"epochs": 3}, "sweep.yaml: epochs: unknown key; remove it or check its spelling"),
        ({"trial": {"workers": "two"}}, "sweep.yaml: trial.workers: "),
        (
            {"space": {"lr": {"type": "float", "low": 1, "high": 0.1}}},
            "sweep.yaml: space.lr: low (1) must be < high (0.1); swap them",
        ),
        ({"search": {"algorithm": "bohb"}}, "sweep.yaml: search.algorithm: 'bohb' is not allowed; use one of"),
        (
            {"model": "hpo.models.mlp:nope"},
            "sweep.yaml: model: module 'hpo.models.mlp' has no function 'nope'; check the name after ':'",
        ),
        ({"model": "no_such_pkg.models:build"}, "sweep.yaml: model: cannot import module 'no_such_pkg.models'"),
        (
            {"data": {"train": "file:///nonexistent/train", "validation": "file:///nonexistent/val"}},
            "sweep.yaml: data.train: no Parquet files at /nonexistent/train; check the URL",
        ),
    ],
)
def test_validate_bad_input_is_one_line_exit_2(tmp_path, write_sweep, change, expected):
    proc = run("validate", str(write_sweep(base_sweep(**change))), cwd=tmp_path)
    line = one_line_error(proc)
    assert line.startswith(f"error: {tmp_path}/{expected}"), line


def test_validate_label_column_absent(tmp_path, write_sweep):
    df = pd.DataFrame({"a": np.arange(60.0), "b": np.arange(60.0), "y": np.arange(60) % 2})
    df.to_csv(tmp_path / "d.csv", index=False)
    proc = run("data", "convert", str(tmp_path / "d.csv"), f"file://{tmp_path}/ds", "--label", "y", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "60 rows, 2 features, 24 row groups, 2 classes" in proc.stdout
    sweep = base_sweep(data={"train": f"file://{tmp_path}/ds", "label": "target"})
    line = one_line_error(run("validate", str(write_sweep(sweep)), cwd=tmp_path))
    assert line == (
        f"error: {tmp_path}/sweep.yaml: data.label: column 'target' not found "
        "(columns: row_id, features, y); set data.label to one of them"
    )


def test_data_convert_missing_label(tmp_path):
    pd.DataFrame({"a": [1.0, 2.0]}).to_csv(tmp_path / "d.csv", index=False)
    line = one_line_error(
        run("data", "convert", str(tmp_path / "d.csv"), f"file://{tmp_path}/o", "--label", "y", cwd=tmp_path)
    )
    assert "d.csv: y: label column not found (columns: a); pass --label with one of them" in line


def test_report_of_unknown_sweep(tmp_path):
    line = one_line_error(run("report", "nosuch", cwd=tmp_path))
    assert "no summary for sweep 'nosuch'; run 'hpo tune' first" in line


def test_a_stopped_sweep_names_the_error_not_the_traceback_header():
    import traceback

    from ray.tune import TuneError

    from hpo.summary import failure_line

    try:
        raise ValueError("Trial#2 has already finished and can not be updated.")
    except ValueError:
        wrapped = TuneError(traceback.format_exc())  # how Tune's controller re-raises a searcher's error
    assert failure_line(wrapped) == "ValueError: Trial#2 has already finished and can not be updated."
    try:
        raise RuntimeError("outer") from KeyError("inner")
    except RuntimeError as exc:
        assert failure_line(exc) == "KeyError: 'inner'"
    assert failure_line(OSError()) == "OSError"


@pytest.mark.parametrize("example", ["digits_grid", "digits_repeats", "digits_conditional"])
def test_example_sweeps_validate(tmp_path, example):
    """The examples in search_spaces/ a user copies: file, data and model checks pass (hpo validate)."""
    proc = run("validate", str(ROOT / "search_spaces" / f"{example}.yaml"), cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "ok — sweep" in proc.stdout


def test_gpu_cluster_example_is_a_valid_sweep_file():
    """Its data, S3 and MLflow server exist on the cluster only: here the file itself is checked."""
    import hpo

    config = hpo.load_sweep(ROOT / "search_spaces" / "digits_gpu_cluster.yaml")
    assert config.trial.workers == 2 and config.trial.gpus_per_worker == 1 and config.data.train.startswith("s3://")


def test_set_replaces_sweep_file_keys(tmp_path):
    """--set KEY=VALUE: the value is read as YAML; a malformed flag or an unknown key is a one-line error."""
    mlp = str(ROOT / "search_spaces" / "digits_mlp.yaml")
    proc = run("validate", mlp, "--set", "name=other", "--set", "search.num_samples=3", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "ok — sweep 'other'" in proc.stdout and ", 3 trials ×" in proc.stdout
    assert one_line_error(run("validate", mlp, "--set", "trial.max_epochs", cwd=tmp_path)) == (
        f"error: {mlp}: --set: 'trial.max_epochs' is not KEY=VALUE; write e.g. --set trial.max_epochs=3"
    )
    assert one_line_error(run("validate", mlp, "--set", "trial.epochz=3", cwd=tmp_path)) == (
        f"error: {mlp}: trial.epochz: unknown key; remove it or check its spelling"
    )
    assert one_line_error(run("tune", mlp, "--set", "search.num_samples=[1", cwd=tmp_path)).startswith(
        f"error: {mlp}: --set search.num_samples: '[1' is not a YAML value"
    )


def test_image_and_tabular_examples_validate_on_their_converted_data(tmp_path):
    """The CNN (npz images) and regression (CSV) examples: make the data as their comments say, then validate."""
    made = subprocess.run([sys.executable, str(ROOT / "search_spaces" / "make_example_data.py"), str(tmp_path)],
                          capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    for example, raw, dest, flags in [
        ("digits_cnn", "digits_images.npz", "digits_images", ["--features", "x", "--label", "y"]),
        ("diabetes_regression", "diabetes.csv", "diabetes", ["--label", "progression", "--task", "regression"]),
    ]:
        converted = run("data", "convert", tmp_path / raw, tmp_path / dest, *flags, "--validation-fraction", "0.2",
                        cwd=tmp_path)
        assert converted.returncode == 0, converted.stderr
        urls = [f"data.{part}={(tmp_path / dest / part).as_uri()}" for part in ("train", "validation")]
        proc = run("validate", str(ROOT / "search_spaces" / f"{example}.yaml"), "--set", urls[0], "--set", urls[1],
                   cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert f"ok — sweep '{example.replace('_', '-')}'" in proc.stdout
