"""Recurring tuning: seed a new sweep's Optuna study with the best configurations of a previous sweep."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from hpo.config import SweepConfig
from hpo.errors import ConfigError
from hpo.objective import configuration_key
from hpo.options import WarmStartMode
from hpo.results import SCORED_STATUSES
from hpo.search.space import SearchSpace
from hpo.sweep_summary import SweepSummary


def previous_best(summary_path: Path, config: SweepConfig, k: int) -> list[tuple[dict[str, Any], float]]:
    """The ``k`` best trials of a previous sweep whose parameters fit the current space.

    Args:
        summary_path: The previous sweep's ``summary.json``.
        config: The new sweep (its objective must match).
        k: How many configurations to take.

    Returns:
        ``(params, metric)`` pairs, best first.
    """
    if not summary_path.is_file():
        raise ConfigError(f"{summary_path}: (file): no summary of a previous sweep; check the name or --storage")
    summary = SweepSummary.read(summary_path)
    objective = {"metric": summary.objective.metric, "mode": summary.objective.mode}
    if objective != {"metric": config.objective.metric, "mode": config.objective.mode}:
        raise ConfigError(
            f"{summary_path}: objective: the previous sweep optimised {objective}; "
            "warm-start only from a sweep with the same objective"
        )
    # One entry per configuration (its repeats share its parameters), valued by the mean of its repeats.
    groups: dict[str, list[float]] = {}
    for trial in summary.trials:
        if trial.metric is not None and trial.status in SCORED_STATUSES:
            groups.setdefault(configuration_key(trial.params), []).append(float(trial.metric))
    means = sorted(((sum(v) / len(v), key) for key, v in groups.items()), reverse=config.objective.mode == "max")
    out = []
    for mean, key in means:
        params = {name: value for name, value in json.loads(key).items() if name in config.space}
        if SearchSpace(config).contains(params):
            out.append((params, mean))
        if len(out) == k:
            break
    return out


def seed_study(
    storage_url: str, config: SweepConfig, points: list[tuple[dict[str, Any], float]], mode: WarmStartMode
) -> None:
    """Adds the previous points to the new sweep's Optuna study before it starts.

    ``prior``: each point is added as a finished trial with its old result (TPE/GP learn from it, nothing is
    rerun). ``reevaluate``: each point is queued and trained again first.
    """
    import optuna

    study = optuna.create_study(
        storage=storage_url,
        study_name=config.name,
        direction="maximize" if config.objective.mode == "max" else "minimize",
        load_if_exists=True,
    )
    space = SearchSpace(config)
    for params, value in points:
        if mode == "prior":
            distributions = {name: space.distribution(name) for name in params}
            study.add_trial(optuna.trial.create_trial(params=params, distributions=distributions, value=value))
        else:
            study.enqueue_trial(params)
