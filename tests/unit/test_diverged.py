"""A diverged trial (NaN/inf loss) has its own status and never becomes the best or the registered model."""

from __future__ import annotations

import optuna
import pytest

from hpo.cli.main import _no_best
from hpo.results import DIVERGED_KEY, FINISHED_KEY, stop_reason, trial_status
from hpo.search.searchers import DurableOptunaSearch
from hpo.storage import Storage
from hpo.summary import best_row
from hpo.sweep_summary import SweepSummary
from hpo.tracking.best_model import pick_model_trial
from hpo.trial.protocol import TrialRow


def row(trial_id, status, metric, checkpoint=None):
    return TrialRow(trial_id, {}, status, 2, metric, status == "stopped_early", None, checkpoint)


def test_status_and_reason_of_a_diverged_trial():
    last = {FINISHED_KEY: True, DIVERGED_KEY: True}
    assert trial_status(last, errored=False) == "diverged" and stop_reason(last) == "diverged"
    assert trial_status(last, errored=True) == "failed"
    assert trial_status({FINISHED_KEY: True, DIVERGED_KEY: False}, errored=False) == "completed"


def test_a_diverged_trial_is_never_the_best_or_the_registered_model(tmp_path):
    for name in ("a", "b"):
        (tmp_path / name).mkdir()
        (tmp_path / name / "model.keras").write_bytes(b"model")
    rows = [row("a", "diverged", 0.99, str(tmp_path / "a")), row("b", "completed", 0.5, str(tmp_path / "b"))]
    assert best_row(rows, "max").trial_id == "b"
    storage, dest = Storage.parse(tmp_path), tmp_path / "best"
    picked, path = pick_model_trial(rows, "max", storage, dest)
    assert picked.trial_id == "b" and path == dest / "model.keras" and path.read_bytes() == b"model"
    assert best_row([rows[0]], "max") is None and pick_model_trial([rows[0]], "max", storage, dest) is None


def test_why_a_sweep_has_no_best():
    def summary(*statuses):
        trials = [row(f"t{i}", status, None) for i, status in enumerate(statuses)]
        return SweepSummary(name="s", objective={"metric": "m", "mode": "max"}, trials=trials)

    assert _no_best(summary("diverged", "failed", "diverged")) == "every trial diverged or failed: 2 diverged, 1 failed"
    assert _no_best(summary()) == "no trial reported the objective: no trials"
    assert _no_best(summary("stopped_early")) == "no trial reported the objective: 1 stopped_early"


@pytest.mark.parametrize(("diverged", "state"), [(True, "FAIL"), (False, "COMPLETE")])
def test_the_study_is_told_a_diverged_trial_failed(diverged, state):
    storage = optuna.storages.InMemoryStorage()
    search = DurableOptunaSearch(
        space={"x": optuna.distributions.FloatDistribution(0, 1)}, metric="m", mode="max", storage=storage,
        study_name="s",
    )
    search.suggest("t1")
    search.on_trial_complete("t1", result={"m": 0.9, FINISHED_KEY: True, DIVERGED_KEY: diverged})
    study = optuna.load_study(study_name="s", storage=storage)
    assert [t.state.name for t in study.trials] == [state]


def test_a_failed_trials_error_line_is_the_workers_own_exception():
    from hpo.trial.protocol import error_line

    ray_text = (
        "ray::ImplicitFunc.train() (pid=1, ip=127.0.0.1)\n  File \"driver.py\", line 9, in _gather\n"
        "hpo.errors.TrialFailed: FileNotFoundError: /data/train/part-00000.parquet\n"
    )
    assert error_line(ray_text) == "FileNotFoundError: /data/train/part-00000.parquet"
    assert error_line("") == "str" and len(error_line("x" * 900)) == 500
