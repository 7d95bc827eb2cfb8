"""MLflow tracking: one parent run per sweep, one nested run per trial.

Ray's ``MLflowLoggerCallback`` makes flat runs; :class:`MlflowNesting` is a Tune callback that runs in
the sweep's driver process (the only MLflow writer, so a sqlite store sees no concurrent writers) and
nests every trial run under the sweep's parent run.
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from typing import Any

from ray.tune import Callback

from hpo.config import REPEAT_KEY

#: The trial's effective training settings, reported with every epoch; logged once, as params.
EFFECTIVE = ("effective_learning_rate", "global_batch_size", "steps_per_epoch", "validation_steps")
#: Tune bookkeeping keys that are not model metrics.
_SKIP = {
    *EFFECTIVE,
    "warm_start",
    "resumed_from_epoch",
    "trial_finished",
    "stopped_by_patience",
    "epoch",
    "done",
    "training_iteration",
    "time_this_iter_s",
    "time_total_s",
    "timestamp",
    "time_since_restore",
    "iterations_since_restore",
    "pid",
    "node_ip",
    "startup_s",
}


def normalize_uri(uri: str) -> str:
    """Makes relative ``sqlite:///x.db`` and plain paths absolute, so every process agrees on them."""
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        return "sqlite:///" + os.path.abspath(uri[len("sqlite:///") :])
    if "://" not in uri:
        return "file://" + os.path.abspath(uri)
    return uri


@dataclass
class SweepRun:
    """Handles of a sweep's parent run."""

    uri: str
    experiment_id: str
    parent_run_id: str


def _client(uri: str) -> Any:
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def start_sweep_run(uri: str, experiment: str, name: str, params: dict[str, Any], tags: dict[str, str]) -> SweepRun:
    """Creates (or finds) the experiment and starts the sweep's parent run."""
    client = _client(uri)
    exp = client.get_experiment_by_name(experiment)
    experiment_id = exp.experiment_id if exp is not None else client.create_experiment(experiment)
    run = client.create_run(experiment_id, run_name=name, tags={"hpo.kind": "sweep", **tags})
    _log_params(client, run.info.run_id, params)
    return SweepRun(uri, experiment_id, run.info.run_id)


def finish_sweep_run(sweep: SweepRun, metrics: dict[str, float], tags: dict[str, str], failed: bool) -> None:
    """Logs the sweep's final figures and closes the parent run."""
    client = _client(sweep.uri)
    for key, value in metrics.items():
        if _finite(value):
            client.log_metric(sweep.parent_run_id, key, float(value))
    for key, value in tags.items():
        client.set_tag(sweep.parent_run_id, key, value)
    client.set_terminated(sweep.parent_run_id, "FAILED" if failed else "FINISHED")


def _finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _log_params(client: Any, run_id: str, params: dict[str, Any]) -> None:
    from mlflow.entities import Param

    items = [Param(str(k), str(v)[:6000]) for k, v in params.items()]
    for start in range(0, len(items), 100):
        client.log_batch(run_id, params=items[start : start + 100])


def trial_run_ids(sweep: SweepRun, client: Any = None) -> dict[str, str]:
    """The nested runs of a sweep's parent run, by Tune trial id."""
    client = client or _client(sweep.uri)
    runs = client.search_runs(
        [sweep.experiment_id], filter_string=f"tags.mlflow.parentRunId = '{sweep.parent_run_id}'", max_results=50000
    )
    return {r.data.tags["hpo.trial_id"]: r.info.run_id for r in runs if "hpo.trial_id" in r.data.tags}


def close_lost_runs(sweep: SweepRun, trial_ids: set[str]) -> None:
    """Closes the runs of trials a crash took away before Tune saved them (a resumed sweep reran them)."""
    client = _client(sweep.uri)
    for trial_id, run_id in trial_run_ids(sweep, client).items():
        if trial_id in trial_ids:
            client.set_tag(run_id, "hpo.status", "lost")
            client.set_tag(run_id, "hpo.stop_reason", "the sweep crashed before this trial was saved; it was rerun")
            client.set_terminated(run_id, "KILLED")


def resume_sweep_run(sweep: SweepRun) -> SweepRun:
    """Marks an interrupted sweep's parent run as running again and returns it."""
    _client(sweep.uri).update_run(sweep.parent_run_id, status="RUNNING")
    return sweep


class MlflowNesting(Callback):
    """Tune callback: a nested MLflow run per trial, with per-epoch metrics and a final status.

    Args:
        sweep: The parent run.
        objective: The objective metric name.
        mode: ``max`` or ``min``.
    """

    def __init__(self, sweep: SweepRun, objective: str, mode: str) -> None:
        self.sweep = sweep
        self.objective = objective
        self.mode = mode
        self.run_ids: dict[str, str] = {}
        self._last_step: dict[str, int] = {}
        self._client: Any = None

    def __getstate__(self) -> dict[str, Any]:
        # Tune pickles its callbacks with the experiment state; the client is rebuilt on demand.
        return {**self.__dict__, "_client": None}

    @property
    def client(self) -> Any:
        """The MLflow client (made on first use, also after unpickling)."""
        if self._client is None:
            self._client = _client(self.sweep.uri)
        return self._client

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        """Creates the trial's nested run and logs its sampled parameters."""
        if trial.trial_id in self.run_ids:
            return
        existing = trial_run_ids(self.sweep, self.client).get(trial.trial_id)
        if existing is not None:
            # A resumed sweep (or a retried trial): keep logging into the same run, after its last epoch.
            self.run_ids[trial.trial_id] = existing
            history = self.client.get_metric_history(existing, self.objective)
            self._last_step[trial.trial_id] = max((m.step for m in history), default=0)
            self.client.update_run(existing, status="RUNNING")
            return
        run = self.client.create_run(
            self.sweep.experiment_id,
            run_name=f"trial-{trial.trial_id}",
            tags={
                "mlflow.parentRunId": self.sweep.parent_run_id,
                "hpo.kind": "trial",
                "hpo.trial_id": trial.trial_id,
                "hpo.repeat": str(trial.config.get(REPEAT_KEY, 0)),
            },
        )
        self.run_ids[trial.trial_id] = run.info.run_id
        _log_params(self.client, run.info.run_id, {k: v for k, v in trial.config.items() if k != REPEAT_KEY})

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        """Logs one epoch's metrics (step = epoch); the effective LR and global batch as params."""
        from mlflow.entities import Metric, Param

        run_id = self.run_ids.get(trial.trial_id)
        if run_id is None:
            return
        step = int(result.get("epoch", result.get("training_iteration", 0)))
        if step <= self._last_step.get(trial.trial_id, 0):
            return  # already logged before the sweep or the trial was resumed
        self._last_step[trial.trial_id] = step
        ts = int(result.get("timestamp", 0) * 1000)
        metrics = [
            Metric(key, float(value), ts, step) for key, value in result.items() if key not in _SKIP and _finite(value)
        ]
        params = []
        if step == 1 or result.get("training_iteration") == 1:
            params = [Param(k, str(result[k])) for k in EFFECTIVE if k in result]
        self.client.log_batch(run_id, metrics=metrics, params=params)

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        """Tags the run completed (max epochs or patience) or stopped_early (scheduler) and closes it."""
        last = trial.last_result or {}
        epochs = int(last.get("epoch", 0))
        if last.get("trial_finished"):
            status = "completed"
            reason = "early_stopping_patience" if last.get("stopped_by_patience") else "max_epochs"
        else:
            status, reason = "stopped_early", "scheduler"
        self._finish(trial, "FINISHED", {"hpo.status": status, "hpo.stop_reason": reason, "hpo.epochs": str(epochs)})

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        """Tags the run failed, with the error's last line, and closes it."""
        reason = str(getattr(trial, "error_msg", None) or "trial failed").strip().splitlines()
        self._finish(trial, "FAILED", {"hpo.status": "failed", "hpo.stop_reason": (reason[-1] if reason else "")[:500]})

    def _finish(self, trial: Any, mlflow_status: str, tags: dict[str, str]) -> None:
        run_id = self.run_ids.get(trial.trial_id)
        if run_id is None:
            return
        for key, value in tags.items():
            self.client.set_tag(run_id, key, value)
        self.client.set_terminated(run_id, mlflow_status)
