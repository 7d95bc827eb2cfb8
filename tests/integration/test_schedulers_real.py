"""Each scheduler family with real Horovod trials (the full contract runs on the simulated backend).

ASHA and FIFO run with real 2-worker trials in the sweep, MLflow, resume and runtime tests; here
HyperBand and the median stopping rule, and a goal that registers the reaching trial's model.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from mlflow.tracking import MlflowClient

import hpo
from tests.integration.contract import check_pair, tiny, with_goal

pytestmark = pytest.mark.slow


@pytest.fixture(scope="module")
def ray_session():
    import ray

    from hpo.ray_session import start_ray

    start_ray(num_cpus=2)
    yield
    ray.shutdown()


@pytest.mark.parametrize(("algorithm", "scheduler"), [("random", "hyperband"), ("grid", "median")])
def test_scheduler_with_real_trials(ray_session, tmp_path, monkeypatch, algorithm, scheduler):
    monkeypatch.chdir(tmp_path)
    summary = check_pair(tmp_path, algorithm, scheduler, backend="horovod")
    assert all(Path(t["checkpoint"]).is_dir() for t in summary["trials"])


def test_goal_registers_the_model_of_the_trial_that_reached_it(ray_session, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = with_goal(tiny("goal", "random", "fifo", "horovod", num_samples=6, max_concurrent=1), 1e-6)
    result = hpo.tune(config, storage=tmp_path / "runs")
    (trial,) = result.summary["trials"]
    assert trial["epochs"] == 1 and trial["status"] == "completed"
    # Ended as finished at that epoch (not cut by Tune): its model is saved and registered.
    assert (Path(trial["checkpoint"]) / "model.keras").is_file()
    assert result.summary["mlflow"]["model"]["trial_id"] == trial["trial_id"]
    client = MlflowClient(result.summary["mlflow"]["uri"])
    assert client.get_run(trial["mlflow_run_id"]).data.tags["hpo.stop_reason"] == "goal"
