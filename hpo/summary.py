"""A sweep's results: one :class:`~hpo.trial.protocol.TrialRow` per trial, the best, the goal, ``summary.json``.

``summary.json`` (``STORAGE/NAME/summary.json``) is the contract CI jobs and notebooks read:
``{name, status, objective, best, statistics, trials, mlflow, wall_time_s[, goal]}``; ``status`` is
``finished``, or ``interrupted`` (Ctrl-C or SIGTERM: ``best`` is the best so far, no model was registered,
``--resume`` finishes it). With ``search.repeats`` > 1 the
best is the configuration with the best mean over its repeats (each repeat's value: its best epoch) and, of
that configuration, its best repeat; ``statistics`` says whether it beats the others beyond noise.
"""

from __future__ import annotations

import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal

from hpo.config import SweepConfig
from hpo.config.tracking_uri import masked
from hpo.errors import ConfigError
from hpo.objective import best_value, configuration_key, reaches_goal, repeats_reach_goal
from hpo.options import summary_path
from hpo.results import REPEAT_KEY, SCORED_STATUSES, epochs_of, trial_status
from hpo.stats import Comparison, compare
from hpo.storage import Storage, checkpoint_uri, write_text_atomic
from hpo.trial.protocol import TrialRow, trial_failure_line

SweepStatus = Literal["finished", "interrupted"]


@dataclass
class TuneResult:
    """What a finished sweep returns (and what ``summary.json`` holds).

    Attributes:
        name: Sweep name.
        best_params: Parameters of the best trial.
        best_metric: Its objective value (best epoch, whose weights EarlyStopping restores).
        best_trial_id: Its Tune trial id.
        trials: One row per trial: trial_id, status, epochs, metric, stopped_early, mlflow_run_id, params.
        summary_path: Path of ``summary.json``.
        summary: The summary as written.
    """

    name: str
    best_params: dict[str, Any]
    best_metric: float | None
    best_trial_id: str | None
    trials: Any
    summary_path: Path
    summary: dict[str, Any] = field(repr=False)

    @classmethod
    def from_summary(cls, summary: dict[str, Any], path: Path) -> TuneResult:
        """The result of a sweep whose summary was written to ``path``."""
        import pandas as pd

        rows = summary["trials"]
        frame = pd.DataFrame([{**{k: v for k, v in r.items() if k != "params"}, **r["params"]} for r in rows])
        best = summary.get("best") or {}
        return cls(
            name=summary["name"],
            best_params=best.get("params", {}),
            best_metric=best.get("metric"),
            best_trial_id=best.get("trial_id"),
            trials=frame,
            summary_path=path,
            summary=summary,
        )


def trial_rows(
    results: Any,
    config: SweepConfig,
    run_ids: dict[str, str],
    trial_ids: list[str] | None = None,
    interrupted: set[str] | frozenset[str] = frozenset(),
) -> list[TrialRow]:
    """One row per trial of Tune's ``ResultGrid``, sorted by trial id.

    A trial's metric is the objective at its best epoch (the weights EarlyStopping restores).

    Args:
        results: Tune's ``ResultGrid``.
        config: The sweep.
        run_ids: Trial id → nested MLflow run id.
        trial_ids: Each result's trial id, in order (a trial that never reported has none in its metrics).
        interrupted: Trials that Ctrl-C stopped before they ended (status ``interrupted``).
    """
    metric, mode = config.objective.metric, config.objective.mode
    rows = []
    for i, result in enumerate(results):
        last = result.metrics or {}
        known_id = trial_ids[i] if trial_ids is not None else None
        trial_id = last.get("trial_id") or known_id or str(result.path).rstrip("/").rsplit("/", 1)[-1]
        history = result.metrics_dataframe
        values = list(history[metric]) if history is not None and metric in history else []
        params = dict(result.config or {})
        repeat = int(params.pop(REPEAT_KEY, 0))
        status = trial_status(last, result.error is not None)
        if trial_id in interrupted and status != "failed":
            status = "interrupted"
        rows.append(
            TrialRow(
                trial_id=trial_id,
                params=params,
                status=status,
                epochs=epochs_of(last),
                metric=best_value(values, mode),
                stopped_early=status == "stopped_early",
                mlflow_run_id=run_ids.get(trial_id),
                checkpoint=checkpoint_uri(result.checkpoint) if result.checkpoint else None,
                repeat=repeat,
                error=trial_failure_line(_error_file(result), result.error) if result.error is not None else None,
            )
        )
    return sorted(rows, key=lambda r: r.trial_id)


def _error_file(result: Any) -> str | None:
    """Tune's ``error.txt`` of a failed trial's result, when its directory is local (else None)."""
    path = getattr(result, "path", None)
    return os.path.join(str(path), "error.txt") if path and "://" not in str(path) else None


def best_row(rows: list[TrialRow], mode: str, configuration: str | None = None) -> TrialRow | None:
    """The completed or stopped-early trial with the best metric (None if none has one; never a diverged one).

    Args:
        rows: The sweep's trials.
        mode: ``max`` or ``min``.
        configuration: Only the repeats of this configuration (:func:`~hpo.objective.configuration_key`):
            the winner by mean when the sweep has repeats.
    """
    scored = [r for r in rows if r.metric is not None and r.status in SCORED_STATUSES]
    if configuration is not None:
        scored = [r for r in scored if configuration_key(r.params) == configuration]
    if not scored:
        return None
    pick = max if mode == "max" else min
    return pick(scored, key=lambda r: r.metric)


def compare_configurations(rows: list[TrialRow], mode: str, alpha: float = 0.05) -> Comparison | None:
    """Each configuration's repeats (scored trials' best-epoch values) compared by :func:`hpo.stats.compare`.

    Returns:
        The comparison, or None when no trial has a value.
    """
    groups: dict[str, list[float]] = {}
    for row in rows:
        if row.metric is not None and row.status in SCORED_STATUSES:
            groups.setdefault(configuration_key(row.params), []).append(row.metric)
    return compare(groups, mode=mode, alpha=alpha) if groups else None


def sweep_best(config: SweepConfig, rows: list[TrialRow]) -> tuple[TrialRow | None, Comparison | None]:
    """The sweep's best trial and the comparison of its configurations.

    Without repeats the best is the best trial; with ``search.repeats`` > 1 it is the best repeat of the
    configuration with the best mean (not the luckiest repeat of any configuration).
    """
    comparison = compare_configurations(rows, config.objective.mode)
    winner = comparison.winner if comparison is not None and config.search.repeats > 1 else None
    return best_row(rows, config.objective.mode, winner), comparison


def statistics_section(comparison: Comparison | None, rows: list[TrialRow], top: int = 5) -> dict[str, Any] | None:
    """``summary.json``'s ``statistics``: the verdict, the test, and the top configurations with their figures."""
    if comparison is None:
        return None
    params = {configuration_key(r.params): r.params for r in rows}
    data = comparison.to_dict()
    data["configurations"] = [
        {"rank": i + 1, "params": params[key], **vars(comparison.groups[key]),
         "p_value": comparison.p_values.get(key)}
        for i, key in enumerate(comparison.ranking[:top])
    ]
    for key in ("groups", "p_values", "raw_p_values", "ranking"):
        data.pop(key)
    return data


def goal_status(config: SweepConfig, rows: list[TrialRow]) -> dict[str, Any]:
    """``{value, reached, trial_id}``: whether a trial's best epoch reached ``objective.goal``, and the first that did.

    "First" is in trial-id order (Tune's ids count up as trials start), which is the order trials ran in
    when they run one at a time. With ``search.repeats`` > 1 a configuration reaches the goal when the mean
    of its repeats' best epochs does (all repeats ended with a value); ``trial_id`` is its first trial and
    ``trial_ids`` lists all of them.
    """
    goal, mode, repeats = config.objective.goal, config.objective.mode, config.search.repeats
    if goal is None:
        return {"value": None, "reached": False, "trial_id": None}
    if repeats == 1:
        hit = [r.trial_id for r in rows if r.status in SCORED_STATUSES and reaches_goal(r.metric, goal, mode)]
        return {"value": goal, "reached": bool(hit), "trial_id": hit[0] if hit else None}
    groups: dict[str, list[TrialRow]] = {}
    for row in sorted(rows, key=lambda r: r.trial_id):
        groups.setdefault(configuration_key(row.params), []).append(row)
    reaching = []
    for group in groups.values():
        for i in range(0, len(group) - repeats + 1, repeats):  # the same configuration drawn again: a new group
            scored = [r.metric if r.status in SCORED_STATUSES else None for r in group[i : i + repeats]]
            if repeats_reach_goal(scored, goal, mode):
                reaching.append([r.trial_id for r in group[i : i + repeats]])
    first = min(reaching, default=None)
    return {"value": goal, "reached": first is not None, "trial_id": first[0] if first else None,
            "trial_ids": first}


def build_summary(
    config: SweepConfig,
    rows: list[TrialRow],
    mlflow: dict[str, Any],
    wall_time_s: float,
    goal: dict[str, Any] | None,
    status: SweepStatus = "finished",
) -> dict[str, Any]:
    """The ``summary.json`` document of a sweep (``status``: ``finished`` or ``interrupted``)."""
    best, comparison = sweep_best(config, rows)
    best_entry: dict[str, Any] | None = None
    if best is not None:
        best_entry = {"trial_id": best.trial_id, "params": best.params, "metric": best.metric}
        if comparison is not None and config.search.repeats > 1:
            group = comparison.groups[comparison.winner]
            best_entry.update(mean=group.mean, std=group.std, ci_low=group.ci_low, ci_high=group.ci_high, n=group.n)
    summary: dict[str, Any] = {
        "name": config.name,
        "status": status,
        "objective": {"metric": config.objective.metric, "mode": config.objective.mode},
        "best": best_entry,
        "statistics": statistics_section(comparison, rows),
        "trials": [r.to_dict() for r in rows],
        "mlflow": mlflow,
        "wall_time_s": round(wall_time_s, 2),
    }
    if goal is not None:
        summary["goal"] = goal
    if config.search.repeat_of:
        summary["repeat_of"] = config.search.repeat_of
    return summary


def failure_line(exc: BaseException) -> str:
    """The line that says what went wrong: the last line of the innermost cause (Tune wraps tracebacks)."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    text = str(exc)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if "Traceback (most recent call last)" in text and not lines[-1].startswith("Traceback"):
        return lines[-1]  # already "SomeError: message"
    return f"{type(exc).__name__}: {lines[-1]}" if lines else type(exc).__name__


def write_summary(path: Path, summary: dict[str, Any]) -> None:
    """Writes ``summary.json`` atomically."""
    write_text_atomic(path, json.dumps(summary, indent=2, default=str))


def read_summary(storage: Storage | Path | str, name: str) -> dict[str, Any]:
    """Reads sweep ``name``'s ``summary.json`` (from a shared storage's copy when this driver has none).

    Raises:
        ConfigError: If the sweep has no summary there.
    """
    storage = Storage.parse(storage)
    path = summary_path(storage, name)
    if not path.is_file():
        storage.pull_state(name)
    if not path.is_file():
        raise ConfigError(f"{path}: (file): no summary for sweep '{name}'; run 'hpo tune' first or pass --storage")
    return json.loads(path.read_text())


def sync_sweep(storage: Storage | Path | str, name: str) -> tuple[int, int]:
    """Sends a finished sweep's spooled MLflow writes (``hpo sync``) and updates its summary.json.

    Returns:
        (writes sent, writes still waiting).

    Raises:
        ConfigError: No summary, or the tracking server is unreachable.
    """
    from hpo.tracking import health, is_server
    from hpo.tracking.outbox import SPOOL_NAME, Outbox, update_summary

    summary = read_summary(storage, name)
    path = summary_path(storage, name)
    info = summary["mlflow"]
    spool = path.parent / SPOOL_NAME
    if not spool.is_file():
        return 0, 0
    problem = health(info["uri"]) if is_server(info["uri"]) else None
    if problem is not None:
        raise ConfigError(
            f"{path}: mlflow.uri: MLflow server {masked(info['uri'])} is unreachable ({problem}); "
            "start it again, then rerun 'hpo sync'"
        )
    outbox = Outbox(info["uri"], spool, info["parent_run_id"], info["experiment_id"])
    known = {f"trial:{t['trial_id']}": t["mlflow_run_id"] for t in summary["trials"] if t.get("mlflow_run_id")}
    outbox.run_ids.update(known)
    if info.get("model"):
        outbox.model = info["model"]
    total = sum(1 for line in spool.read_text().splitlines() if line.strip())
    left = outbox.flush()
    update_summary(summary, outbox, left)
    write_summary(path, summary)
    return total - left, left
