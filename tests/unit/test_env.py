"""``hpo._env.applied``: a sweep run from Python leaves the caller's environment and log levels as they were."""

from __future__ import annotations

import logging
import os

from hpo import _env


def test_applied_puts_back_the_environment_and_every_log_level_a_sweep_sets(tmp_path, monkeypatch):
    import optuna

    import hpo
    from hpo.search import build_searcher
    from tests.conftest import base_sweep

    for key in _env.WORKER_ENV:
        monkeypatch.delenv(key, raising=False)
    monkeypatch.setenv("TF_CPP_MIN_LOG_LEVEL", "1")  # the user's own value wins and stays
    optuna.logging.set_verbosity(optuna.logging.INFO)
    ray_tune = logging.getLogger("ray.tune")
    kept = ray_tune.level
    ray_tune.setLevel(logging.DEBUG)
    config = hpo.SweepConfig.model_validate(base_sweep(search={"algorithm": "optuna-tpe", "num_samples": 2, "seed": 1}))
    try:
        with _env.applied() as env:
            assert env["TF_CPP_MIN_LOG_LEVEL"] == "1" and os.environ["TF_USE_LEGACY_KERAS"] == "1"
            build_searcher(config, tmp_path)  # what a sweep's Optuna searcher sets
            assert optuna.logging.get_verbosity() == optuna.logging.WARNING
        assert optuna.logging.get_verbosity() == optuna.logging.INFO
        assert ray_tune.level == logging.DEBUG
        assert "TF_USE_LEGACY_KERAS" not in os.environ and os.environ["TF_CPP_MIN_LOG_LEVEL"] == "1"
    finally:
        optuna.logging.set_verbosity(optuna.logging.WARNING)
        ray_tune.setLevel(kept)
