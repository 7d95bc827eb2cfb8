"""Every searcher x scheduler through the same real path: suggest -> train -> report -> complete."""

from __future__ import annotations

import itertools
import json
import time
from pathlib import Path

import optuna
import pandas as pd
import pytest

import hpo
from hpo.search import study_url

pytestmark = pytest.mark.slow
SEARCHERS = ["optuna-tpe", "optuna-gp", "random", "grid"]
SCHEDULERS = ["asha", "hyperband", "median", "fifo"]


@pytest.fixture(scope="module")
def ray_session(tmp_path_factory):
    import ray

    from hpo.ray_session import start_ray

    start_ray(num_cpus=2)
    yield
    ray.shutdown()


def tiny(name: str, algorithm: str, scheduler: str, **search) -> hpo.SweepConfig:
    space = {
        "learning_rate": {"type": "float", "low": 0.001, "high": 0.05, "log": True},
        "units": {"type": "int", "low": 8, "high": 32, "step": 8},
        "optimizer": {"type": "categorical", "choices": ["adam", "sgd"]},
    }
    if algorithm == "grid":
        space = {"units": {"type": "grid", "values": [8, 16]}, "optimizer": {"type": "categorical",
                                                                             "choices": ["adam", "sgd"]}}
    return hpo.SweepConfig.model_validate({
        "name": name,
        "model": "hpo.models.mlp:build",
        "data": {"train": "builtin:digits"},
        "search": {"algorithm": algorithm, "num_samples": 4, "max_concurrent": 2, "seed": 5, **search},
        "scheduler": {"type": scheduler, "grace_period": 1},
        # One Horovod worker per trial: the contract is about search and scheduling; 2-worker trials are
        # covered by the sweep, runtime, resume, MLflow and cluster tests.
        "trial": {"workers": 1, "cpus_per_worker": 1, "max_epochs": 3, "batch_size_per_worker": 128,
                  "max_failures": 0},
        "space": space,
    })


def in_space(config: hpo.SweepConfig, params: dict) -> bool:
    for name, value in params.items():
        spec = config.space[name]
        if spec.type == "float" and not spec.low <= value <= spec.high:
            return False
        if spec.type == "int" and not (spec.low <= value <= spec.high and (value - spec.low) % (spec.step or 1) == 0):
            return False
        if spec.type in ("categorical", "grid") and value not in (spec.choices or spec.values):
            return False
    return True


@pytest.mark.parametrize(("algorithm", "scheduler"), list(itertools.product(SEARCHERS, SCHEDULERS)))
def test_searcher_scheduler_pair(ray_session, tmp_path, monkeypatch, algorithm, scheduler):
    monkeypatch.chdir(tmp_path)
    config = tiny(f"{algorithm}-{scheduler}", algorithm, scheduler)
    result = hpo.tune(config, storage=tmp_path / "runs")
    summary = json.loads(result.summary_path.read_text())
    trials = summary["trials"]
    assert len(trials) == 4
    assert all(t["status"] in ("completed", "stopped_early") for t in trials), trials
    assert all(in_space(config, t["params"]) and set(t["params"]) == set(config.space) for t in trials)
    assert all(1 <= t["epochs"] <= 3 and t["metric"] is not None for t in trials)
    best = max(trials, key=lambda t: t["metric"])
    assert summary["best"]["trial_id"] == best["trial_id"]
    if algorithm == "grid":
        assert sorted((t["params"]["units"], t["params"]["optimizer"]) for t in trials) == [
            (8, "adam"), (8, "sgd"), (16, "adam"), (16, "sgd")]
    else:
        # The searcher was told every trial's outcome, stopped ones included, with the last value it saw
        # (Ray's OptunaSearch files trials HyperBand paused and ended as PRUNED, with that value).
        study = optuna.load_study(study_name=config.name, storage=study_url(tmp_path / "runs" / config.name))
        states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
        told = [t for t in study.trials if t.state in states]
        assert len(told) == 4 and all(t.value is not None for t in told)
        assert sorted(round(t.params["learning_rate"], 10) for t in told) == sorted(
            round(t["params"]["learning_rate"], 10) for t in trials)


def test_seed_makes_the_suggestions_reproducible(ray_session, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runs = [hpo.tune(tiny("seeded", "random", "fifo"), storage=tmp_path / f"runs{i}") for i in range(2)]
    params = [sorted(json.dumps(t["params"], sort_keys=True) for t in r.summary["trials"]) for r in runs]
    assert params[0] == params[1]


def test_conditional_parameter_only_when_its_parent_matches(ray_session, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = tiny("conditional", "random", "fifo")
    data = config.model_dump()
    data["space"]["momentum"] = {"type": "float", "low": 0.5, "high": 0.9, "when": {"optimizer": "sgd"}}
    data["search"]["num_samples"] = 6
    result = hpo.tune(hpo.SweepConfig.model_validate(data), storage=tmp_path / "runs")
    trials = result.summary["trials"]
    assert {t["params"]["optimizer"] for t in trials} == {"adam", "sgd"}  # seeded: both drawn
    for t in trials:
        assert ("momentum" in t["params"]) == (t["params"]["optimizer"] == "sgd")


def test_repeats_run_each_config_with_different_seeds(ray_session, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = tiny("repeats", "optuna-tpe", "fifo", num_samples=2, repeats=2)
    result = hpo.tune(config, storage=tmp_path / "runs")
    trials = result.summary["trials"]
    assert len(trials) == 4
    by_config: dict[str, list] = {}
    for t in trials:
        by_config.setdefault(json.dumps(t["params"], sort_keys=True), []).append(t)
    assert len(by_config) == 2
    for group in by_config.values():
        assert sorted(t["repeat"] for t in group) == [0, 1]
        assert group[0]["metric"] != group[1]["metric"]  # different init and data order
    study = optuna.load_study(study_name="repeats", storage=study_url(tmp_path / "runs" / "repeats"))
    told = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(told) == 2  # the searcher saw one value (the mean) per configuration
    for t in told:
        group = by_config[json.dumps({k: t.params[k] for k in sorted(t.params)}, sort_keys=True)]
        lasts = []
        for trial in group:
            (trial_dir,) = (tmp_path / "runs" / "repeats").glob(f"hpo_trial_{trial['trial_id']}_*")
            lasts.append(float(pd.read_csv(trial_dir / "progress.csv")["val_accuracy"].iloc[-1]))
        assert t.value == pytest.approx(sum(lasts) / 2)


def test_warm_start_from_a_previous_sweep(ray_session, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    storage = tmp_path / "runs"
    first = hpo.tune(tiny("daily-1", "random", "fifo", num_samples=3), storage=storage)
    ranked = sorted(first.summary["trials"], key=lambda t: t["metric"], reverse=True)

    prior = hpo.tune(tiny("daily-2", "optuna-tpe", "fifo", num_samples=2), storage=storage,
                     warm_start="daily-1", warm_start_k=2, warm_start_mode="prior")
    study = optuna.load_study(study_name="daily-2", storage=study_url(storage / "daily-2"))
    seeded = [(t.params, t.value) for t in study.trials[:2]]
    assert seeded == [(t["params"], t["metric"]) for t in ranked[:2]]  # told, not rerun
    assert len(prior.summary["trials"]) == 2 and len(study.trials) == 4

    again = hpo.tune(tiny("daily-3", "optuna-tpe", "fifo", num_samples=2), storage=storage,
                     warm_start=str(first.summary_path), warm_start_k=1, warm_start_mode="reevaluate")
    rerun = [t["params"] for t in again.summary["trials"]]
    assert ranked[0]["params"] in rerun  # the previous best was trained again


def test_max_trials_is_honoured_exactly(ray_session, tmp_path, monkeypatch):
    # A 4-point grid capped at 3 trials: exactly 3 run, the first 3 points of the grid, all to the end.
    monkeypatch.chdir(tmp_path)
    config = tiny("capped", "grid", "fifo", max_trials=3)
    result = hpo.tune(config, storage=tmp_path / "runs")
    trials = result.summary["trials"]
    assert len(trials) == 3 and all(t["status"] == "completed" for t in trials)
    assert len({(t["params"]["units"], t["params"]["optimizer"]) for t in trials}) == 3
    assert len(list((tmp_path / "runs" / "capped").glob("hpo_trial_*"))) == 3


def test_time_budget_ends_the_sweep(ray_session, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = tiny("budget", "random", "fifo", num_samples=40, time_budget_s=12)
    # The budget runs from the Tuner's start; the checks before it (the first TensorFlow import and dataset
    # write, seconds when this test runs alone) are done here first so they do not count.
    from hpo.preflight import preflight

    preflight(config, tmp_path / "runs", "<test>")
    started = time.time()
    result = hpo.tune(config, storage=tmp_path / "runs")
    trials = result.summary["trials"]
    assert 1 <= len(trials) < 40  # the budget, not num_samples, ended it
    # No trial started after the budget ran out (results carry each trial's start time).
    for progress in (tmp_path / "runs" / "budget").glob("*/progress.csv"):
        first = pd.read_csv(progress).iloc[0]
        assert first["timestamp"] - first["time_total_s"] <= started + 12 + 2


def with_goal(config: hpo.SweepConfig, goal: float) -> hpo.SweepConfig:
    return hpo.SweepConfig.model_validate({**config.model_dump(), "objective": {"metric": "val_accuracy",
                                                                               "goal": goal}})


def test_goal_ends_the_sweep_at_the_first_epoch_that_reaches_it(ray_session, tmp_path, monkeypatch):
    # Random search, one trial at a time: the first trial's first epoch has some accuracy a > 0; a goal
    # just under it is reached right there, so no further epoch or trial runs.
    monkeypatch.chdir(tmp_path)
    config = with_goal(tiny("goal", "random", "fifo", num_samples=6, max_concurrent=1), 1e-6)
    result = hpo.tune(config, storage=tmp_path / "runs")
    trials = result.summary["trials"]
    # The trial ends as finished at that epoch (not cut by Tune), so its model is saved and registered.
    assert len(trials) == 1 and trials[0]["epochs"] == 1 and trials[0]["status"] == "completed"
    assert (Path(trials[0]["checkpoint"]) / "model.keras").is_file()
    assert result.summary["goal"] == {"value": 1e-6, "reached": True, "trial_id": trials[0]["trial_id"]}
    assert result.summary["mlflow"]["model"]["trial_id"] == trials[0]["trial_id"]
    from mlflow.tracking import MlflowClient

    client = MlflowClient(result.summary["mlflow"]["uri"])
    parent = client.get_run(result.summary["mlflow"]["parent_run_id"])
    assert parent.data.tags["hpo.goal_reached"] == "true"
    assert parent.data.tags["hpo.goal_trial_id"] == trials[0]["trial_id"]
    child = client.get_run(trials[0]["mlflow_run_id"])
    assert child.data.tags["hpo.status"] == "completed" and child.data.tags["hpo.stop_reason"] == "goal"


def test_unreachable_goal_runs_the_whole_budget(ray_session, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = with_goal(tiny("nogoal", "random", "fifo", num_samples=2), 1.5)  # accuracy never exceeds 1
    result = hpo.tune(config, storage=tmp_path / "runs")
    trials = result.summary["trials"]
    assert len(trials) == 2 and all(t["status"] == "completed" and t["epochs"] == 3 for t in trials)
    assert result.summary["goal"] == {"value": 1.5, "reached": False, "trial_id": None}


def test_with_repeats_the_goal_waits_for_every_repeat_of_a_configuration(ray_session, tmp_path, monkeypatch):
    # Reached at the first epoch as above, but with 2 repeats: neither repeat is cut at that epoch (one
    # seed is not the configuration), both train to the end, and the sweep ends after them on their mean.
    monkeypatch.chdir(tmp_path)
    config = with_goal(tiny("goal-rep", "random", "fifo", num_samples=4, max_concurrent=1, repeats=2), 1e-6)
    result = hpo.tune(config, storage=tmp_path / "runs")
    trials = result.summary["trials"]
    assert len(trials) == 2 and sorted(t["repeat"] for t in trials) == [0, 1]
    assert trials[0]["params"] == trials[1]["params"]
    assert all(t["status"] == "completed" and t["epochs"] == 3 for t in trials)
    ids = [t["trial_id"] for t in trials]
    assert result.summary["goal"] == {"value": 1e-6, "reached": True, "trial_id": ids[0], "trial_ids": ids}
    from mlflow.tracking import MlflowClient

    client = MlflowClient(result.summary["mlflow"]["uri"])
    for t in trials:
        assert client.get_run(t["mlflow_run_id"]).data.tags.get("hpo.stop_reason") != "goal"


def test_asha_bootstrap_count_stops_the_first_trial_at_its_first_rung(ray_session, tmp_path, monkeypatch):
    # Tune's ASHA would let the first trial train to max_epochs (nothing to compare it with at rung 1). The
    # stop reaches the trial while it trains on (tiny epochs take a fraction of a second), so the check is
    # that it was stopped well before the end, not exactly at epoch 1.
    monkeypatch.chdir(tmp_path)
    config = tiny("bootstrap", "optuna-tpe", "asha", num_samples=2, max_concurrent=1)
    config = hpo.SweepConfig.model_validate({
        **config.model_dump(),
        "scheduler": {"type": "asha", "grace_period": 1, "reduction_factor": 3, "bootstrap_count": 1},
        "trial": {**config.trial.model_dump(), "max_epochs": 20, "early_stopping": {"patience": 20}},
    })
    result = hpo.tune(config, storage=tmp_path / "runs")
    first = result.summary["trials"][0]
    assert first["status"] == "stopped_early" and first["epochs"] < 20
    study = optuna.load_study(study_name="bootstrap", storage=study_url(tmp_path / "runs" / "bootstrap"))
    assert study.trials[0].state == optuna.trial.TrialState.PRUNED  # told to TPE, as ASHA's own stops are
