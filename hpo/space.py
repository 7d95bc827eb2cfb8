"""The search space: sweep-file parameters → Ray Tune domains (grid) or an Optuna define-by-run space.

Optuna-backed searchers (``optuna-tpe``, ``optuna-gp``, ``random``) sample through one define-by-run
function, which also handles conditional parameters (``when: {optimizer: sgd}``); ``grid`` uses Tune's
own grid expansion.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from ray import tune

from hpo.config import ParamSpec, SweepConfig


def to_domain(spec: ParamSpec) -> Any:
    """Converts one parameter spec to a Ray Tune domain (or grid marker).

    Args:
        spec: A validated parameter spec.

    Returns:
        A ``ray.tune`` sampler, or a ``{"grid_search": [...]}`` marker for grid parameters.
    """
    if spec.type == "float":
        if spec.log:
            return tune.loguniform(spec.low, spec.high)
        if spec.step is not None:
            return tune.quniform(spec.low, spec.high, spec.step)
        return tune.uniform(spec.low, spec.high)
    if spec.type == "int":
        low, high = int(spec.low), int(spec.high)
        if spec.log:
            return tune.lograndint(low, high + 1)
        if spec.step is not None:
            return tune.qrandint(low, high, int(spec.step))
        return tune.randint(low, high + 1)
    if spec.type == "categorical":
        return tune.choice(list(spec.choices))
    return tune.grid_search(list(spec.values))


def to_param_space(config: SweepConfig) -> dict[str, Any]:
    """Builds the ``param_space`` of a Tuner for ``algorithm: grid`` (categoricals become grid axes too)."""
    space: dict[str, Any] = {}
    for name, spec in config.space.items():
        if config.search.algorithm == "grid" and spec.type == "categorical":
            space[name] = tune.grid_search(list(spec.choices))
        else:
            space[name] = to_domain(spec)
    return space


def _active(spec: ParamSpec, chosen: dict[str, Any]) -> bool:
    for parent, value in (spec.when or {}).items():
        wanted = value if isinstance(value, list) else [value]
        if parent not in chosen or str(chosen[parent]) not in map(str, wanted):
            return False
    return True


def _suggest(trial: Any, name: str, spec: ParamSpec) -> Any:
    if spec.type == "float":
        return trial.suggest_float(name, spec.low, spec.high, log=spec.log, step=spec.step)
    if spec.type == "int":
        step = int(spec.step) if spec.step else 1
        return trial.suggest_int(name, int(spec.low), int(spec.high), log=spec.log, step=step)
    return trial.suggest_categorical(name, list(spec.choices))


def ordered(config: SweepConfig) -> list[str]:
    """Parameter names with every condition's parent before the parameters that depend on it."""
    names: list[str] = []

    def visit(name: str) -> None:
        if name in names:
            return
        for parent in config.space[name].when or {}:
            visit(parent)
        names.append(name)

    for name in config.space:
        visit(name)
    return names


class DefineByRun:
    """An Optuna define-by-run space: suggests each active parameter, skipping inactive conditionals.

    A class rather than a closure so Tune can pickle the searcher with the experiment state.
    """

    def __init__(self, config: SweepConfig) -> None:
        self.space = dict(config.space)
        self.names = ordered(config)

    def __call__(self, trial: Any) -> None:
        """Suggests the parameters for one Optuna trial."""
        chosen: dict[str, Any] = {}
        for name in self.names:
            spec = self.space[name]
            if _active(spec, chosen):
                chosen[name] = _suggest(trial, name, spec)


def define_by_run(config: SweepConfig) -> Callable[[Any], None]:
    """The sweep's space as an Optuna define-by-run function."""
    return DefineByRun(config)
