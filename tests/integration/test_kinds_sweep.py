"""A searcher and a scheduler added with one registration each run a whole sweep, forecast included.

The toy searcher draws seeded random points of the space (no Optuna study); the toy scheduler stops every
trial at epoch 2, and its forecast rule says so. The trials run on the simulated backend.
"""

from __future__ import annotations

import json
import pickle
import random
from typing import Any

import numpy as np
import pytest
from ray.tune.schedulers import FIFOScheduler, TrialScheduler
from ray.tune.search import Searcher

import hpo
from hpo import kinds
from hpo.progress.live import PROGRESS_FILE
from hpo.search import TIME_ATTR
from tests.integration.contract import check_records, in_space, tiny

pytestmark = pytest.mark.slow


class SeededRandom(Searcher):
    """Toy searcher: seeded random points of the sweep's space; keeps what each trial was told."""

    def __init__(self, config: hpo.SweepConfig) -> None:
        super().__init__(metric=config.objective.metric, mode=config.objective.mode)
        self.space = dict(config.space)
        self.rng = random.Random(config.search.seed)
        self.told: dict[str, Any] = {}

    def suggest(self, trial_id: str) -> dict[str, Any]:
        point = {}
        for name, spec in self.space.items():
            if spec.type == "float":
                point[name] = self.rng.uniform(spec.low, spec.high)
            elif spec.type == "int":
                point[name] = self.rng.randrange(int(spec.low), int(spec.high) + 1, int(spec.step or 1))
            else:
                point[name] = self.rng.choice(spec.choices)
        return point

    def on_trial_complete(self, trial_id: str, result: dict | None = None, error: bool = False) -> None:
        self.told[trial_id] = (result or {}).get(self.metric)

    def save(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "wb") as f:
            pickle.dump(self.__dict__, f)

    def restore(self, checkpoint_path: str) -> None:
        with open(checkpoint_path, "rb") as f:
            self.__dict__.update(pickle.load(f))


MADE: list[SeededRandom] = []


def seeded_random(config, sweep_dir, resume, warm_points, warm_mode) -> SeededRandom:
    MADE.append(SeededRandom(config))
    return MADE[-1]


class StopAtTwo(FIFOScheduler):
    """Toy scheduler: every trial stops after its second epoch."""

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict) -> str:
        return TrialScheduler.STOP if result.get(TIME_ATTR, 0) >= 2 else TrialScheduler.CONTINUE


class StopAtTwoRule:
    """The toy scheduler's forecast rule; counts the replays the forecast asked for."""

    def __init__(self) -> None:
        self.replays = 0

    def stops(self, stops, paths, observed, others, plan) -> np.ndarray:
        return np.minimum(stops, max(2, len(observed)))

    def replayed(self, ys, plan) -> np.ndarray:
        self.replays += 1
        return np.array([2.0 if len(y) > 2 else np.inf for y in ys])


@pytest.fixture
def toys():
    rule = StopAtTwoRule()
    kinds.register_searcher(kinds.SearcherKind("toy-random", seeded_random, instead="random"))
    kinds.register_scheduler(kinds.SchedulerKind("toy-two", lambda config: StopAtTwo(), forecast=rule))
    yield rule
    del kinds.SEARCHERS["toy-random"], kinds.SCHEDULERS["toy-two"]


@pytest.fixture
def ray_session():
    import ray

    from hpo.ray_session import start_ray

    start_ray(num_cpus=2)
    yield
    ray.shutdown()


def test_a_toy_searcher_and_scheduler_run_a_sweep_with_its_forecast(toys, ray_session, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    MADE.clear()
    config = tiny("toys", "toy-random", "toy-two")
    result = hpo.tune(config, storage=tmp_path / "runs")
    summary = json.loads(result.summary_path.read_text())
    trials = summary["trials"]
    assert len(trials) == 4
    assert all(in_space(config, t["params"]) and set(t["params"]) == set(config.space) for t in trials)
    # the toy scheduler stopped every trial after its second epoch (max_epochs is 3)
    assert [(t["status"], t["epochs"]) for t in trials] == [("stopped_early", 2)] * 4, trials
    check_records(summary)
    # the toy searcher proposed them and was told each one's end
    [searcher] = MADE
    assert sorted(searcher.told) == sorted(t["trial_id"] for t in trials)
    assert all(value is not None for value in searcher.told.values())
    assert not (tmp_path / "runs" / config.name / "optuna.db").exists()  # no study: it is not an Optuna searcher

    # the forecast replayed the toy scheduler's own rule while trials were pending, and ended sane
    assert toys.replays > 0
    progress = json.loads((tmp_path / "runs" / config.name / PROGRESS_FILE).read_text())
    assert progress["state"] == "finished" and progress["method"] == "done"
    assert (progress["stopped_early"], progress["running"], progress["pending"]) == (4, 0, 0)
    assert progress["remaining_s_median"] == 0.0
