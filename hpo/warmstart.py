"""Recurring tuning: seed a new sweep's Optuna study with the best configurations of a previous sweep."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any, Literal

from hpo.config import ParamSpec, SweepConfig
from hpo.errors import ConfigError

Mode = Literal["prior", "reevaluate"]


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
    summary = json.loads(summary_path.read_text())
    if summary["objective"] != {"metric": config.objective.metric, "mode": config.objective.mode}:
        raise ConfigError(
            f"{summary_path}: objective: the previous sweep optimised {summary['objective']}; "
            "warm-start only from a sweep with the same objective"
        )
    scored = [t for t in summary["trials"] if t.get("metric") is not None]
    scored.sort(key=lambda t: t["metric"], reverse=config.objective.mode == "max")
    out = []
    for trial in scored:
        params = {name: value for name, value in trial["params"].items() if name in config.space}
        if fits(config, params):
            out.append((params, float(trial["metric"])))
        if len(out) == k:
            break
    return out


def fits(config: SweepConfig, params: dict[str, Any]) -> bool:
    """True if ``params`` is a point of the sweep's space (conditional parameters may be absent)."""
    for name, spec in config.space.items():
        if name not in params:
            if spec.when is None:
                return False
            continue
        value = params[name]
        if spec.type in ("float", "int") and not spec.low <= value <= spec.high:
            return False
        if spec.type == "categorical" and value not in spec.choices:
            return False
    return True


def _distribution(spec: ParamSpec) -> Any:
    import optuna

    if spec.type == "float":
        return optuna.distributions.FloatDistribution(spec.low, spec.high, log=spec.log, step=spec.step)
    if spec.type == "int":
        step = int(spec.step) if spec.step else 1
        return optuna.distributions.IntDistribution(int(spec.low), int(spec.high), log=spec.log, step=step)
    return optuna.distributions.CategoricalDistribution(list(spec.choices))


def seed_study(storage_url: str, config: SweepConfig, points: list[tuple[dict[str, Any], float]], mode: Mode) -> None:
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
    for params, value in points:
        if mode == "prior":
            distributions = {name: _distribution(config.space[name]) for name in params}
            study.add_trial(optuna.trial.create_trial(params=params, distributions=distributions, value=value))
        else:
            study.enqueue_trial(params)
