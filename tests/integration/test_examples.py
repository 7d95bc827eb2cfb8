"""The example sweeps in ``search_spaces/`` a user copies, run for real on CPU (shortened).

The image and tabular examples go the way their comments tell a user: ``make_example_data.py``, then
``hpo data convert`` (npz images keep their 8×8 shape; the CSV becomes a regression dataset), then the sweep.
Each runs through the real stack (Ray Tune, Horovod/Gloo, Petastorm, MLflow) with two configurations of two
epochs; the GPU cluster example is checked as a file in ``tests/unit/test_cli.py`` (its data and servers
exist on a cluster only).
"""

from __future__ import annotations

import math
import subprocess
import sys

import pytest

from tests.conftest import ROOT, hpo_cli

pytestmark = pytest.mark.slow
EXAMPLES = ROOT / "search_spaces"


@pytest.fixture(scope="module")
def example_data(tmp_path_factory):
    """The raw files and the converted datasets, made as the examples' comments say."""
    root = tmp_path_factory.mktemp("examples")
    made = subprocess.run([sys.executable, str(EXAMPLES / "make_example_data.py"), str(root)],
                          capture_output=True, text=True, timeout=120)
    assert made.returncode == 0, made.stderr
    images = hpo_cli("data", "convert", root / "digits_images.npz", root / "digits_images", "--features", "x",
                     "--label", "y", "--validation-fraction", "0.2", cwd=root)
    assert images.returncode == 0, images.stderr
    assert "of shape [8, 8]" in images.stdout and "10 classes" in images.stdout
    table = hpo_cli("data", "convert", root / "diabetes.csv", root / "diabetes", "--label", "progression",
                    "--task", "regression", "--validation-fraction", "0.2", cwd=root)
    assert table.returncode == 0, table.stderr
    assert "10 features" in table.stdout and "classes" not in table.stdout
    return root


@pytest.fixture(scope="module")
def ray_session():
    """One local Ray for the module's sweeps (each would otherwise start and stop its own)."""
    import ray

    from hpo.ray_session import start_ray

    start_ray(num_cpus=2)
    yield
    ray.shutdown()


SHORT = {"search.num_samples": 2, "trial.max_epochs": 2, "search.max_concurrent": 1}
REAL = {
    # example: (its own overrides, the bound the winner of two 2-epoch trials must beat)
    "digits_cnn": ({}, 0.3),  # 10 classes: chance is 0.1
    "diabetes_regression": ({"trial.max_epochs": 4}, 0.75),  # predicting the training mean: MAE ≈ 0.65-0.7
    # SGD only: momentum is sampled for every trial and reaches Keras' SGD for real.
    # (plain SGD needs a larger rate than the example's range to get anywhere in two epochs).
    "digits_conditional": ({"space.optimizer.choices": ["sgd"], "space.learning_rate.low": 0.05,
                            "space.learning_rate.high": 0.2}, 0.3),
}


def tune(example: str, tmp_path, overrides: dict) -> object:
    import hpo

    overrides = {"tracking.mlflow_uri": f"sqlite:///{tmp_path}/mlflow.db", **overrides}
    config = hpo.load_sweep(EXAMPLES / f"{example}.yaml", overrides)
    return hpo.tune(config, storage=tmp_path / "runs", progress=False)


@pytest.mark.parametrize("example", list(REAL))
def test_example_sweep_trains(example, example_data, ray_session, tmp_path):
    extra, bound = REAL[example]
    overrides = {**SHORT, **extra}
    if example in ("digits_cnn", "diabetes_regression"):
        stem = "digits_images" if example == "digits_cnn" else "diabetes"
        overrides["data.train"] = (example_data / stem / "train").as_uri()
        overrides["data.validation"] = (example_data / stem / "validation").as_uri()
    result = tune(example, tmp_path, overrides)
    statuses = list(result.trials["status"])
    assert len(statuses) == 2 and "failed" not in statuses, result.trials.to_dict("records")
    assert math.isfinite(result.best_metric)
    better = result.best_metric < bound if result.summary["objective"]["mode"] == "min" else result.best_metric > bound
    assert better, (example, result.best_metric, result.trials.to_dict("records"))
    assert result.summary["mlflow"]["model"] is not None  # the winner is registered, as in a full run
    if example == "digits_conditional":
        assert set(result.trials["optimizer"]) == {"sgd"} and result.trials["momentum"].between(0.5, 0.99).all()
        assert "dropout" not in result.trials or result.trials["dropout"].isna().eq(result.trials["layers"] == 1).all()


@pytest.mark.parametrize("example", ["digits_grid", "digits_repeats"])
def test_example_search_settings_run_whole(example, ray_session, tmp_path):
    """The grid (every point once) and repeats (the winner by mean) examples, whole, on simulated trials."""
    result = tune(example, tmp_path, {"trial.backend": "simulated", "trial.simulated_epoch_s": 0.02})
    trials = result.summary["trials"]
    assert all(t["status"] in ("completed", "stopped early") for t in trials)
    if example == "digits_grid":
        points = {(t["params"]["units"], t["params"]["layers"]) for t in trials}
        assert len(trials) == 8 and len(points) == 8  # 4 x 2, each once
    else:
        assert len(trials) == 12 and result.summary["statistics"]["verdict"]  # 4 configurations x 3 repeats
