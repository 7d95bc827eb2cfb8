"""The searcher x scheduler contract, shared by the simulated and the real-training tests."""

from __future__ import annotations

import json
from pathlib import Path

import optuna

import hpo
from hpo import kinds
from hpo.search import study_url

#: Seconds per simulated epoch, on the sweep's simulated clock (no real time): a scheduler's stop reaches a trial
#: before its next epoch ends.
EPOCH_S = 0.1


def tiny(name: str, algorithm: str, scheduler: str, backend: str = "simulated", **search) -> hpo.SweepConfig:
    """A 4-trial, 3-epoch sweep of one-worker trials on ``builtin:digits``."""
    space = {
        "learning_rate": {"type": "float", "low": 0.001, "high": 0.05, "log": True},
        "units": {"type": "int", "low": 8, "high": 32, "step": 8},
        "optimizer": {"type": "categorical", "choices": ["adam", "sgd"]},
    }
    if kinds.searcher(algorithm).grid:
        space = {"units": {"type": "grid", "values": [8, 16]}, "optimizer": {"type": "categorical",
                                                                             "choices": ["adam", "sgd"]}}
    return hpo.SweepConfig.model_validate({
        "name": name,
        "model": "hpo.models.mlp:build",
        "data": {"train": "builtin:digits"},
        "search": {"algorithm": algorithm, "num_samples": 4, "max_concurrent": 2, "seed": 5, **search},
        "scheduler": {"type": scheduler, "grace_period": 1},
        # One simulated worker per trial: the contract is about search and scheduling; real 2-worker
        # trials are covered by the sweep, runtime, resume, MLflow, cluster and real-scheduler tests.
        "trial": {"workers": 1, "cpus_per_worker": 1, "max_epochs": 3, "batch_size_per_worker": 128,
                  "max_failures": 0, "backend": backend, "simulated_epoch_s": EPOCH_S},
        "space": space,
    })


def in_space(config: hpo.SweepConfig, params: dict) -> bool:
    """True if ``params`` lie in the sweep's space."""
    for name, value in params.items():
        spec = config.space[name]
        if spec.type == "float" and not spec.low <= value <= spec.high:
            return False
        if spec.type == "int" and not (spec.low <= value <= spec.high and (value - spec.low) % (spec.step or 1) == 0):
            return False
        if spec.type in ("categorical", "grid") and value not in (spec.choices or spec.values):
            return False
    return True


def with_goal(config: hpo.SweepConfig, goal: float) -> hpo.SweepConfig:
    """``config`` with ``objective.goal``."""
    return hpo.SweepConfig.model_validate({**config.model_dump(), "objective": {"metric": "val_accuracy",
                                                                               "goal": goal}})


def check_records(summary: dict) -> None:
    """Every summary row has one nested MLflow run, and every epoch it trained is logged there once."""
    from mlflow.tracking import MlflowClient

    client = MlflowClient(summary["mlflow"]["uri"])
    runs = client.search_runs([summary["mlflow"]["experiment_id"]],
                              filter_string=f"tags.mlflow.parentRunId = '{summary['mlflow']['parent_run_id']}'")
    by_trial = {r.data.tags["hpo.trial_id"]: r.info.run_id for r in runs}
    assert len(runs) == len(by_trial) == len(summary["trials"])
    for row in summary["trials"]:
        assert by_trial[row["trial_id"]] == row["mlflow_run_id"]
        steps = [m.step for m in client.get_metric_history(row["mlflow_run_id"], summary["objective"]["metric"])]
        assert sorted(steps) == list(range(1, row["epochs"] + 1)), (row["trial_id"], steps)


def check_pair(tmp_path: Path, algorithm: str, scheduler: str, backend: str = "simulated") -> dict:
    """Runs a 4-trial sweep of one searcher x scheduler in ``tmp_path`` and checks the contract.

    Every trial ends completed or stopped early, with 1-3 epochs and a metric, inside the space; the
    best is the best row; grid runs each point once; the searcher was told every trial's outcome.

    Returns:
        The sweep's summary.
    """
    config = tiny(f"{algorithm}-{scheduler}", algorithm, scheduler, backend)
    result = hpo.tune(config, storage=tmp_path / "runs")
    summary = json.loads(result.summary_path.read_text())
    trials = summary["trials"]
    assert len(trials) == 4
    assert all(t["status"] in ("completed", "stopped_early") for t in trials), trials
    assert all(in_space(config, t["params"]) and set(t["params"]) == set(config.space) for t in trials)
    assert all(1 <= t["epochs"] <= 3 and t["metric"] is not None for t in trials), trials
    best = max(trials, key=lambda t: t["metric"])
    assert summary["best"]["trial_id"] == best["trial_id"]
    check_records(summary)
    if kinds.searcher(algorithm).grid:
        assert sorted((t["params"]["units"], t["params"]["optimizer"]) for t in trials) == [
            (8, "adam"), (8, "sgd"), (16, "adam"), (16, "sgd")]
    elif kinds.searcher(algorithm).study:
        # The searcher was told every trial's outcome, stopped ones included, with the last value it saw
        # (Ray's OptunaSearch files trials HyperBand paused and ended as PRUNED, with that value).
        study = optuna.load_study(study_name=config.name, storage=study_url(tmp_path / "runs" / config.name))
        states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
        told = [t for t in study.trials if t.state in states]
        assert len(told) == 4 and all(t.value is not None for t in told)
        assert sorted(round(t.params["learning_rate"], 10) for t in told) == sorted(
            round(t["params"]["learning_rate"], 10) for t in trials)
        # One rule with the summary: a finished trial is told its best epoch.
        by_rate = {round(t["params"]["learning_rate"], 10): t for t in trials}
        for t in told:
            if t.state == optuna.trial.TrialState.COMPLETE:
                assert t.value == by_rate[round(t.params["learning_rate"], 10)]["metric"]
    return summary
