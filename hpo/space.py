"""The search space: sweep-file parameters → Ray Tune domains."""

from __future__ import annotations

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
    """Builds the ``param_space`` of a Tuner from a sweep.

    For ``search.algorithm: grid`` categorical parameters are enumerated as grid axes too.
    """
    space: dict[str, Any] = {}
    for name, spec in config.space.items():
        if config.search.algorithm == "grid" and spec.type == "categorical":
            space[name] = tune.grid_search(list(spec.choices))
        else:
            space[name] = to_domain(spec)
    return space
