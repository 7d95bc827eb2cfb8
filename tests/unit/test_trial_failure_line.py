"""A failed trial's one line is the same on the console, in its MLflow run and in its summary row.

The MLflow run is in a real sqlite store; the error is Tune's ``error.txt`` as Ray writes it (a failure
header, the worker's traceback, the exception's line last).
"""

from __future__ import annotations

from types import SimpleNamespace

from mlflow import MlflowClient
from ray.tune import Result

from hpo.config import parse_sweep
from hpo.summary import trial_rows
from hpo.tracking.nesting import MlflowNesting
from hpo.tracking.runs import start_sweep_run
from hpo.trial.protocol import trial_error_line
from tests.conftest import base_sweep

LINE = "ValueError: the builder broke on purpose (units=-3)"
ERROR_TXT = f"""Failure # 1 (occurred at 2026-11-26_09-50-00)
ray::_Inner.train() (pid=4242, ip=127.0.0.1, actor_id=ab12, repr=HorovodTrainer)
  File "/work/hpo/trial/worker.py", line 179, in _build_model
    model = builder(params=model_params, input_shape=spec.train.input_shape, num_classes=spec.train.num_classes)
  File "/work/tests/integration/flaky_model.py", line 12, in build
    raise ValueError("the builder broke on purpose (units=-3)")
{LINE}

"""


def test_the_console_mlflow_and_the_summary_show_the_same_error_line(tmp_path):
    trial_dir = tmp_path / "trial_00001"
    trial_dir.mkdir()
    (trial_dir / "error.txt").write_text(ERROR_TXT)
    trial = SimpleNamespace(trial_id="00001", config={"units": -3}, last_result=None,
                            error_file=str(trial_dir / "error.txt"))

    console = trial_error_line(trial)  # what SweepMonitor.on_trial_error prints

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    sweep = start_sweep_run(uri, "fail", "fail", {}, {})
    nesting = MlflowNesting(sweep, "val_accuracy", "max", "fail", tmp_path / "spool.jsonl", flush_every_s=0.0)
    nesting.on_trial_start(0, [], trial)
    nesting.on_trial_error(0, [], trial)
    run = MlflowClient(uri).get_run(nesting.run_ids["00001"])

    result = Result(metrics={"trial_id": "00001", "config": {"units": -3}}, checkpoint=None,
                    error=RuntimeError("Tune's wrapper of the failure"), path=str(trial_dir))
    row = trial_rows([result], parse_sweep(base_sweep()), {})[0]

    assert console == LINE
    assert run.data.tags["hpo.stop_reason"] == LINE and run.data.tags["hpo.status"] == "failed"
    assert run.info.status == "FAILED"
    assert row.status == "failed" and row.error == LINE


def test_without_an_error_file_the_run_still_says_the_trial_failed(tmp_path):
    trial = SimpleNamespace(trial_id="00002", config={}, last_result=None, error_file=str(tmp_path / "none.txt"))
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    nesting = MlflowNesting(start_sweep_run(uri, "fail", "fail", {}, {}), "val_accuracy", "max", "fail",
                            tmp_path / "spool.jsonl", flush_every_s=0.0)
    nesting.on_trial_start(0, [], trial)
    nesting.on_trial_error(0, [], trial)
    assert MlflowClient(uri).get_run(nesting.run_ids["00002"]).data.tags["hpo.stop_reason"] == "trial failed"


def test_a_trial_handed_another_trials_last_result_counts_as_never_reported(tmp_path):
    # Tune can give a trial that never started the last result of the trial whose actor it reused, when the
    # sweep stops at that moment: its row keeps its own id and config, without the other's metric or epochs.
    done = Result(metrics={"trial_id": "aaaa", "training_iteration": 3, "epoch": 3, "val_accuracy": 0.9,
                           "config": {"units": 32}}, checkpoint=None, error=None, path=str(tmp_path / "a"))
    stale = Result(metrics={"trial_id": "aaaa", "config": {"units": 32}}, checkpoint=None, error=None,
                   path=str(tmp_path / "b"))
    rows = trial_rows([done, stale], parse_sweep(base_sweep()), {"aaaa": "run-a"}, ["aaaa", "bbbb"],
                      trial_configs=[{"units": 32}, {"units": 8}])
    assert [(r.trial_id, r.params, r.epochs, r.metric, r.mlflow_run_id) for r in rows] == [
        ("aaaa", {"units": 32}, 3, None, "run-a"), ("bbbb", {"units": 8}, 0, None, None)]


def test_a_trial_stopped_right_after_its_restore_keeps_the_epochs_it_reported(tmp_path):
    # Tune sets a restored trial's last result to its checkpoint's (epoch 3 here) until it reports again; a
    # trial stopped before that had reported epoch 4 (logged to MLflow), which its row must still count.
    import pandas as pd

    history = pd.DataFrame({"trial_id": ["aaaa"] * 4, "epoch": [1, 2, 3, 4], "val_accuracy": [0.5, 0.6, 0.7, 0.8]})
    restored = Result(metrics={"trial_id": "aaaa", "epoch": 3, "val_accuracy": 0.7, "config": {"units": 32}},
                      checkpoint=None, error=None, path=str(tmp_path / "a"), metrics_dataframe=history)
    [row] = trial_rows([restored], parse_sweep(base_sweep()), {"aaaa": "run-a"})
    assert (row.epochs, row.metric, row.status) == (4, 0.8, "stopped_early")
