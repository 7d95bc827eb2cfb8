"""A sweep's results: one :class:`~hpo.trial.protocol.TrialRow` per trial, the best, the goal, the summary.

:func:`build_summary` makes the sweep's :class:`~hpo.sweep_summary.SweepSummary`, whose serialisation is
``STORAGE/NAME/summary.json``, the contract CI jobs and notebooks read (its keys:
:mod:`hpo.sweep_summary`); ``status`` is ``finished``, or ``interrupted`` (Ctrl-C or SIGTERM: ``best`` is
the best so far, no model was registered, ``--resume`` finishes it). With ``search.repeats`` > 1 the
best is the configuration with the best mean over its repeats (each repeat's value: its best epoch) and, of
that configuration, its best repeat; ``statistics`` says whether it beats the others beyond noise.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from hpo.config import SweepConfig
from hpo.object_store import error_status
from hpo.objective import best_value, configuration_key, reaches_goal, repeats_reach_goal
from hpo.results import EPOCH_KEY, REPEAT_KEY, SCORED_STATUSES, epochs_of, trial_status
from hpo.stats import Comparison, compare
from hpo.storage import checkpoint_uri
from hpo.sweep_summary import (
    SCHEMA_VERSION,
    Best,
    Goal,
    MlflowSection,
    Statistics,
    SweepStatus,
    SweepSummary,
)
from hpo.trial.protocol import TrialRow, trial_failure_line


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
        summary: The summary as written (the ``summary.json`` document).
        sweep_summary: The same, typed.
    """

    name: str
    best_params: dict[str, Any]
    best_metric: float | None
    best_trial_id: str | None
    trials: Any
    summary_path: Path
    summary: dict[str, Any] = field(repr=False)
    sweep_summary: SweepSummary = field(repr=False)

    @classmethod
    def from_summary(cls, summary: SweepSummary, path: Path) -> TuneResult:
        """The result of a sweep whose summary was written to ``path``."""
        import pandas as pd

        rows = [row.to_dict() for row in summary.trials]
        frame = pd.DataFrame([{**{k: v for k, v in r.items() if k != "params"}, **r["params"]} for r in rows])
        best = summary.best
        return cls(
            name=summary.name,
            best_params=best.params if best is not None else {},
            best_metric=best.metric if best is not None else None,
            best_trial_id=best.trial_id if best is not None else None,
            trials=frame,
            summary_path=path,
            summary=summary.to_json(),
            sweep_summary=summary,
        )


def trial_rows(
    results: Any,
    config: SweepConfig,
    run_ids: dict[str, str],
    trial_ids: list[str] | None = None,
    interrupted: set[str] | frozenset[str] = frozenset(),
    storage_interrupted: set[str] | frozenset[str] = frozenset(),
    trial_configs: list[dict[str, Any]] | None = None,
) -> list[TrialRow]:
    """One row per trial of Tune's ``ResultGrid``, sorted by trial id.

    A trial's metric is the objective at its best epoch (the weights EarlyStopping restores). A trial whose
    last result is another trial's (Tune can hand a trial that never started the result of the trial whose
    actor it reused, when the sweep stops at that moment) counts as one that never reported.

    Args:
        results: Tune's ``ResultGrid``.
        config: The sweep.
        run_ids: Trial id → nested MLflow run id.
        trial_ids: Each result's trial id, in order (a trial that never reported has none in its metrics).
        interrupted: Trials that Ctrl-C stopped before they ended (status ``interrupted``).
        storage_interrupted: Trials that ended because the storage did not answer (``interrupted``, not failed).
        trial_configs: Each result's own trial config, in order (used when its last result is another trial's).
    """
    metric, mode = config.objective.metric, config.objective.mode
    rows = []
    for i, result in enumerate(results):
        last = result.metrics or {}
        known_id = trial_ids[i] if trial_ids is not None else None
        history = result.metrics_dataframe
        values = list(history[metric]) if history is not None and metric in history else []
        # A trial restored from a checkpoint has that checkpoint's result as its last one until it reports
        # again: stopped before it does, its last result lags the epochs it reported (and MLflow logged).
        seen = list(history[EPOCH_KEY].dropna()) if history is not None and EPOCH_KEY in history else []
        reported = int(max(seen, default=0))
        params = dict(result.config or {})
        if known_id is not None and last.get("trial_id") not in (None, known_id):
            last, values, reported = {}, [], 0  # another trial's result: this trial never reported
            params = dict(trial_configs[i]) if trial_configs is not None else {}
        trial_id = known_id or last.get("trial_id") or str(result.path).rstrip("/").rsplit("/", 1)[-1]
        repeat = int(params.pop(REPEAT_KEY, 0))
        error = trial_failure_line(_error_file(result), result.error) if result.error is not None else None
        status = trial_status(last, error is not None)
        if error is not None:
            status = error_status(error)  # a storage outage past its limit interrupts the trial (resumable)
        if trial_id in interrupted and (status != "failed" or trial_id in storage_interrupted):
            status = "interrupted"
        rows.append(
            TrialRow(
                trial_id=trial_id,
                params=params,
                status=status,
                epochs=max(epochs_of(last), reported),
                metric=best_value(values, mode),
                stopped_early=status == "stopped_early",
                mlflow_run_id=run_ids.get(trial_id),
                checkpoint=checkpoint_uri(result.checkpoint) if result.checkpoint else None,
                repeat=repeat,
                error=error,
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


def statistics_section(
    comparison: Comparison | None, rows: list[TrialRow], name: str, top: int = 5
) -> Statistics | None:
    """The summary's ``statistics``: the verdict, the test, and the top configurations with their figures.

    Args:
        comparison: The configurations compared (None without values: no section).
        rows: The sweep's trials.
        name: The sweep (the verdict names it in the command it suggests).
        top: How many configurations to list.
    """
    if comparison is None:
        return None
    params = {configuration_key(r.params): r.params for r in rows}
    data = comparison.to_dict(sweep=name)
    data["configurations"] = [
        {"rank": i + 1, "params": params[key], **vars(comparison.groups[key]),
         "p_value": comparison.p_values.get(key)}
        for i, key in enumerate(comparison.ranking[:top])
    ]
    for key in ("groups", "p_values", "raw_p_values", "ranking"):
        data.pop(key)
    return Statistics.model_validate(data)


def goal_status(config: SweepConfig, rows: list[TrialRow]) -> Goal:
    """``{value, reached, trial_id}``: whether a trial's best epoch reached ``objective.goal``, and the first that did.

    "First" is in trial-id order (Tune's ids count up as trials start), which is the order trials ran in
    when they run one at a time. With ``search.repeats`` > 1 a configuration reaches the goal when the mean
    of its repeats' best epochs does (all repeats ended with a value); ``trial_id`` is its first trial and
    ``trial_ids`` lists all of them.
    """
    goal, mode, repeats = config.objective.goal, config.objective.mode, config.search.repeats
    if goal is None:
        return Goal(value=None, reached=False, trial_id=None)
    if repeats == 1:
        hit = [r.trial_id for r in rows if r.status in SCORED_STATUSES and reaches_goal(r.metric, goal, mode)]
        return Goal(value=goal, reached=bool(hit), trial_id=hit[0] if hit else None)
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
    return Goal(value=goal, reached=first is not None, trial_id=first[0] if first else None, trial_ids=first)


def build_summary(
    config: SweepConfig,
    rows: list[TrialRow],
    mlflow: MlflowSection | dict[str, Any],
    wall_time_s: float,
    goal: Goal | None,
    status: SweepStatus = "finished",
) -> SweepSummary:
    """The summary of a sweep (``status``: ``finished`` or ``interrupted``).

    Args:
        config: The sweep.
        rows: Its trials.
        mlflow: Where its runs are (the tracker's ``{uri, experiment_id, parent_run_id}``).
        wall_time_s: Seconds it took.
        goal: Whether it reached ``objective.goal`` (None: the sweep has no goal, and the key stays out).
        status: ``finished`` or ``interrupted``.
    """
    best, comparison = sweep_best(config, rows)
    best_entry: Best | None = None
    if best is not None:
        best_entry = Best(trial_id=best.trial_id, params=best.params, metric=best.metric)
        if comparison is not None and config.search.repeats > 1:
            group = comparison.groups[comparison.winner]
            best_entry = Best(trial_id=best.trial_id, params=best.params, metric=best.metric, mean=group.mean,
                              std=group.std, ci_low=group.ci_low, ci_high=group.ci_high, n=group.n)
    optional: dict[str, Any] = {}
    if goal is not None:
        optional["goal"] = goal
    if config.search.repeat_of:
        optional["repeat_of"] = config.search.repeat_of
    return SweepSummary(
        schema_version=SCHEMA_VERSION,
        name=config.name,
        status=status,
        objective={"metric": config.objective.metric, "mode": config.objective.mode},
        best=best_entry,
        statistics=statistics_section(comparison, rows, config.name),
        trials=list(rows),
        mlflow=mlflow,
        wall_time_s=round(wall_time_s, 2),
        **optional,
    )


def failure_line(exc: BaseException) -> str:
    """The line that says what went wrong: the last line of the innermost cause (Tune wraps tracebacks)."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    text = str(exc)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if "Traceback (most recent call last)" in text and not lines[-1].startswith("Traceback"):
        return lines[-1]  # already "SomeError: message"
    return f"{type(exc).__name__}: {lines[-1]}" if lines else type(exc).__name__


