"""MLflow tracking: one parent run per sweep, one nested run per trial.

Ray's ``MLflowLoggerCallback`` makes flat runs; :class:`MlflowNesting` is a Tune callback that runs in
the sweep's driver process (the only MLflow writer, so a sqlite store sees no concurrent writers) and
nests every trial run under the sweep's parent run.
"""

from __future__ import annotations

import math
import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray.tune import Callback

from hpo.config import FINISHED_KEY, REPEAT_KEY

#: The trial's effective training settings, reported with every epoch; logged once, as params.
EFFECTIVE = ("effective_learning_rate", "global_batch_size", "steps_per_epoch", "validation_steps")
#: Tune bookkeeping keys that are not model metrics.
_SKIP = {
    *EFFECTIVE,
    "warm_start",
    "resumed_from_epoch",
    FINISHED_KEY,
    "stopped_by_patience",
    "stopped_by_goal",
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


#: Plain paths with these suffixes are sqlite databases; any other plain path is a file store directory.
SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")


def normalize_uri(uri: str) -> str:
    """Makes relative ``sqlite:///x.db`` and plain paths absolute, so every process agrees on them.

    A plain path ending in ``.db``/``.sqlite`` becomes a sqlite URI; any other plain path a ``file://``
    store directory; ``http(s)://`` URIs are kept (without a trailing slash).
    """
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        return "sqlite:///" + os.path.abspath(uri[len("sqlite:///") :])
    if "://" not in uri:
        path = os.path.abspath(os.path.expanduser(uri))
        return ("sqlite:///" if path.endswith(SQLITE_SUFFIXES) else "file://") + path
    if uri.startswith(("http://", "https://")):
        return uri.rstrip("/")
    return uri


def is_server(uri: str) -> bool:
    """True for the URI of a tracking server (``http://host:port``)."""
    return uri.startswith(("http://", "https://"))


def is_local(uri: str) -> bool:
    """True for stores this process writes itself (sqlite, file directory)."""
    return uri.startswith(("sqlite:", "file:"))


@dataclass
class SweepRun:
    """Handles of a sweep's parent run."""

    uri: str
    experiment_id: str
    parent_run_id: str


def _client(uri: str) -> Any:
    from mlflow.tracking import MlflowClient

    return MlflowClient(tracking_uri=uri)


def start_sweep_run(
    uri: str,
    experiment: str,
    name: str,
    params: dict[str, Any],
    tags: dict[str, str],
    artifact_location: str | None = None,
) -> SweepRun:
    """Creates (or finds) the experiment and starts the sweep's parent run.

    Args:
        uri: Tracking URI (normalized).
        experiment: Experiment name.
        name: Parent run name.
        params: The sweep's settings (flat).
        tags: Tags of the parent run.
        artifact_location: Artifact root of a new experiment (local stores); None: the store's default
            (a server's own artifact store).
    """
    client = _client(uri)
    exp = client.get_experiment_by_name(experiment)
    if exp is not None:
        experiment_id = exp.experiment_id
    else:
        experiment_id = client.create_experiment(experiment, artifact_location=artifact_location)
        # MLflow 3's UI opens an experiment of this kind on its training runs, not the GenAI overview.
        client.set_experiment_tag(experiment_id, "mlflow.experimentKind", "custom_model_development")
    run = client.create_run(experiment_id, run_name=name, tags={"hpo.kind": "sweep", **tags})
    _log_params(client, run.info.run_id, params)
    return SweepRun(uri, experiment_id, run.info.run_id)


def log_sweep_file(sweep: SweepRun, path: Path | None, text: str) -> None:
    """Logs the sweep file as the parent run's artifact ``sweep/<name>`` (the config as YAML if no file)."""
    client = _client(sweep.uri)
    if path is not None and path.is_file():
        client.log_artifact(sweep.parent_run_id, str(path), artifact_path="sweep")
    else:
        client.log_text(sweep.parent_run_id, text, "sweep/sweep.yaml")


def git_tags(cwd: str | Path) -> dict[str, str]:
    """MLflow's git tags for ``cwd`` (commit, dirty flag), or nothing outside a git work tree."""

    def git(*args: str) -> str | None:
        try:
            proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, timeout=10)
        except (OSError, subprocess.SubprocessError):
            return None
        return proc.stdout.strip() if proc.returncode == 0 else None

    commit = git("rev-parse", "HEAD")
    if not commit:
        return {}
    tags = {"mlflow.source.git.commit": commit, "hpo.git_commit": commit}
    status = git("status", "--porcelain", "--untracked-files=no")
    if status is not None:
        tags["hpo.git_dirty"] = str(bool(status)).lower()
    return tags


def finish_sweep_run(sweep: SweepRun, metrics: dict[str, float], tags: dict[str, str], failed: bool) -> None:
    """Logs the sweep's final figures and closes the parent run."""
    client = _client(sweep.uri)
    for key, value in metrics.items():
        if finite(value):
            client.log_metric(sweep.parent_run_id, key, float(value))
    for key, value in tags.items():
        client.set_tag(sweep.parent_run_id, key, value)
    client.set_terminated(sweep.parent_run_id, "FAILED" if failed else "FINISHED")


def set_tags(uri: str, run_id: str, tags: dict[str, str]) -> None:
    """Sets tags on a run."""
    from mlflow.entities import RunTag

    _client(uri).log_batch(run_id, tags=[RunTag(k, str(v)) for k, v in tags.items()])


def finite(value: Any) -> bool:
    """True for a finite int or float (not a bool)."""
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

    Every write goes through the sweep's :class:`~hpo.outbox.Outbox`, so a tracking server that goes
    away mid-sweep costs no results: they are spooled and sent later.

    Args:
        sweep: The parent run.
        objective: The objective metric name.
        mode: ``max`` or ``min``.
        sweep_name: The sweep's name (tag ``hpo.sweep`` of every trial run).
        spool_path: The sweep's spool file (``STORAGE/NAME/mlflow_spool.jsonl``).
    """

    def __init__(
        self, sweep: SweepRun, objective: str, mode: str, sweep_name: str = "", spool_path: Path | None = None
    ) -> None:
        from hpo.outbox import SPOOL_NAME, Outbox

        self.sweep = sweep
        self.sweep_name = sweep_name
        self.objective = objective
        self.mode = mode
        self.outbox = Outbox(
            sweep.uri, spool_path or Path(SPOOL_NAME).resolve(), sweep.parent_run_id, sweep.experiment_id
        )
        self._started: set[str] = set()
        self._closed: set[str] = set()
        self._last_step: dict[str, int] = {}

    @property
    def run_ids(self) -> dict[str, str]:
        """Trial id → MLflow run id, for the runs created so far (not those still in the spool)."""
        return {k.split(":", 1)[1]: v for k, v in self.outbox.run_ids.items() if k.startswith("trial:")}

    def on_trial_start(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        """Creates the trial's nested run and logs its sampled parameters."""
        if trial.trial_id in self._started:
            return
        self._started.add(trial.trial_id)
        key = f"trial:{trial.trial_id}"
        existing = self._existing_run(trial.trial_id)
        if existing is not None:
            # A resumed sweep (or a retried trial): keep logging into the same run, after its last epoch.
            self.outbox.run_ids[key] = existing
            history = self.outbox.client.get_metric_history(existing, self.objective)
            self._last_step[trial.trial_id] = max((m.step for m in history), default=0)
            self.outbox.terminate(key, "RUNNING")
            return
        self.outbox.create_run(
            key,
            run_name=f"trial-{trial.trial_id}",
            tags={
                "mlflow.parentRunId": self.sweep.parent_run_id,
                "hpo.kind": "trial",
                "hpo.trial_id": trial.trial_id,
                "hpo.sweep": self.sweep_name,
                "hpo.repeat": str(trial.config.get(REPEAT_KEY, 0)),
            },
        )
        params = {str(k): str(v)[:6000] for k, v in trial.config.items() if k != REPEAT_KEY}
        self.outbox.log(key, params=params)

    def _existing_run(self, trial_id: str) -> str | None:
        """The run of ``trial_id`` if the parent already has one (None, too, while the server is down)."""
        if self.outbox.down:
            return None
        try:
            return trial_run_ids(self.sweep, self.outbox.client).get(trial_id)
        except Exception:  # noqa: BLE001  (server just went away: the outbox spools the new run's writes)
            return None

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        """Logs one epoch's metrics (step = epoch); the effective LR and global batch as params."""
        step = int(result.get("epoch", result.get("training_iteration", 0)))
        if step <= self._last_step.get(trial.trial_id, 0):
            return  # already logged before the sweep or the trial was resumed
        self._last_step[trial.trial_id] = step
        ts = int(result.get("timestamp", 0) * 1000)
        metrics = [(key, float(value), ts, step) for key, value in result.items() if key not in _SKIP and finite(value)]
        params = {}
        if step == 1 or result.get("training_iteration") == 1:
            params = {k: str(result[k]) for k in EFFECTIVE if k in result}
        self.outbox.log(f"trial:{trial.trial_id}", metrics=metrics, params=params)

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        """Tags the run completed (max epochs, patience or goal) or stopped_early (scheduler) and closes it."""
        last = trial.last_result or {}
        epochs = int(last.get("epoch", 0))
        if last.get(FINISHED_KEY):
            status = "completed"
            reason = "early_stopping_patience" if last.get("stopped_by_patience") else "max_epochs"
            reason = "goal" if last.get("stopped_by_goal") else reason
        else:
            status, reason = "stopped_early", "scheduler"
        self._finish(trial, "FINISHED", {"hpo.status": status, "hpo.stop_reason": reason, "hpo.epochs": str(epochs)})

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        """Tags the run failed, with the error's last line, and closes it."""
        reason = str(getattr(trial, "error_msg", None) or "trial failed").strip().splitlines()
        self._finish(trial, "FAILED", {"hpo.status": "failed", "hpo.stop_reason": (reason[-1] if reason else "")[:500]})

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        """Closes the runs of trials Tune stopped with the whole sweep (time budget, goal), which it does not report.

        Tune calls no trial hook for them, so their runs would stay RUNNING.
        """
        for trial in trials:
            if trial.trial_id in self._started and trial.trial_id not in self._closed:
                last = trial.last_result or {}
                if last.get(FINISHED_KEY):
                    self.on_trial_complete(0, trials, trial)
                    continue
                tags = {"hpo.status": "stopped_early", "hpo.stop_reason": "sweep_stopped",
                        "hpo.epochs": str(int(last.get("epoch", 0)))}
                self._finish(trial, "FINISHED", tags)

    def _finish(self, trial: Any, mlflow_status: str, tags: dict[str, str]) -> None:
        self._closed.add(trial.trial_id)
        key = f"trial:{trial.trial_id}"
        self.outbox.log(key, tags=tags)
        self.outbox.terminate(key, mlflow_status)
