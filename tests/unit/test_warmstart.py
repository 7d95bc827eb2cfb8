from __future__ import annotations

import json

import optuna
import pytest

from hpo.config import parse_sweep
from hpo.errors import ConfigError
from hpo.search import previous_best, seed_study
from tests.conftest import base_sweep

SPACE = {
    "learning_rate": {"type": "float", "low": 0.001, "high": 0.1, "log": True},
    "optimizer": {"type": "categorical", "choices": ["adam", "sgd"]},
    "momentum": {"type": "float", "low": 0.0, "high": 0.9, "when": {"optimizer": "sgd"}},
}


def previous(tmp_path, trials, objective=None):
    """A previous sweep's summary.json with these trials' params and metrics (each completed, 3 epochs)."""
    rows = [{"trial_id": f"t{i}", "status": "completed", "epochs": 3, "stopped_early": False, "mlflow_run_id": None,
             "checkpoint": None, **trial} for i, trial in enumerate(trials)]
    path = tmp_path / "summary.json"
    path.write_text(json.dumps({"name": "previous", "objective": objective or {"metric": "val_accuracy", "mode": "max"},
                                "best": None, "trials": rows, "mlflow": {}, "wall_time_s": 1.0}))
    return path


def test_previous_best_takes_the_k_best_points_that_fit_the_space(tmp_path):
    config = parse_sweep(base_sweep(space=SPACE))
    path = previous(tmp_path, [
        {"params": {"learning_rate": 0.01, "optimizer": "adam"}, "metric": 0.9},
        {"params": {"learning_rate": 0.02, "optimizer": "sgd", "momentum": 0.5}, "metric": 0.95},
        {"params": {"learning_rate": 0.5, "optimizer": "adam"}, "metric": 0.99},  # outside today's space
        {"params": {"learning_rate": 0.003, "optimizer": "adam"}, "metric": 0.7},
        {"params": {"learning_rate": 0.004, "optimizer": "adam"}, "metric": None},  # failed trial
    ])
    points = previous_best(path, config, k=2)
    assert points == [({"learning_rate": 0.02, "optimizer": "sgd", "momentum": 0.5}, 0.95),
                      ({"learning_rate": 0.01, "optimizer": "adam"}, 0.9)]


def test_previous_best_needs_the_same_objective(tmp_path):
    config = parse_sweep(base_sweep(space=SPACE))
    path = previous(tmp_path, [], objective={"metric": "val_loss", "mode": "min"})
    with pytest.raises(ConfigError, match="warm-start only from a sweep with the same objective"):
        previous_best(path, config, k=2)


@pytest.mark.parametrize("mode", ["prior", "reevaluate"])
def test_seed_study(tmp_path, mode):
    config = parse_sweep(base_sweep(space=SPACE))
    url = f"sqlite:///{tmp_path / 'optuna.db'}"
    points = [({"learning_rate": 0.02, "optimizer": "sgd", "momentum": 0.5}, 0.95),
              ({"learning_rate": 0.01, "optimizer": "adam"}, 0.9)]
    seed_study(url, config, points, mode)
    study = optuna.load_study(study_name="t", storage=url)
    if mode == "prior":
        assert [(t.params, t.value, t.state) for t in study.trials] == [
            (p, v, optuna.trial.TrialState.COMPLETE) for p, v in points]
    else:
        assert [t.state for t in study.trials] == [optuna.trial.TrialState.WAITING] * 2
        first = study.ask()
        assert first.params == {} and first.suggest_float("learning_rate", 0.001, 0.1, log=True) == 0.02
