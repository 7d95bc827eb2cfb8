"""The sweep's parent run and the lookups of its nested runs (direct MLflow client calls)."""

from __future__ import annotations

import math
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpo.tracking.store import mlflow_client


@dataclass
class SweepRun:
    """Handles of a sweep's parent run."""

    uri: str
    experiment_id: str
    parent_run_id: str


def _client(uri: str) -> Any:
    return mlflow_client(uri)


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
