"""The search space: every conversion of a sweep file's parameter specs lives here.

Optuna-backed searchers (``optuna-tpe``, ``optuna-gp``, ``random``) sample through one define-by-run
function, which also handles conditional parameters (``when: {optimizer: sgd}``); a grid searcher
(:attr:`hpo.kinds.SearcherKind.grid`) uses Tune's own grid expansion; warm starts need Optuna distributions
and a membership test.
"""

from __future__ import annotations

from typing import Any

from hpo.config import ParamSpec, SweepConfig


class SearchSpace:
    """A sweep's ``space``, in each form a searcher needs it.

    Args:
        config: The validated sweep.
    """

    def __init__(self, config: SweepConfig) -> None:
        self.specs = dict(config.space)
        self.grid = config.search.kind.grid

    # -- Ray Tune ---------------------------------------------------------------------------------

    @staticmethod
    def domain(spec: ParamSpec) -> Any:
        """One parameter as a Ray Tune domain (or a ``{"grid_search": [...]}`` marker for grid parameters)."""
        from ray import tune

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

    def param_space(self) -> dict[str, Any]:
        """The Tuner's ``param_space``: the grid for a grid searcher (categoricals become axes too), else empty.

        Optuna-backed searchers bring their own space (:meth:`define_by_run`).
        """
        if not self.grid:
            return {}
        from ray import tune

        return {
            name: tune.grid_search(list(spec.choices)) if spec.type == "categorical" else self.domain(spec)
            for name, spec in self.specs.items()
        }

    # -- Optuna -----------------------------------------------------------------------------------

    def ordered(self) -> list[str]:
        """Parameter names with every condition's parent before the parameters that depend on it."""
        names: list[str] = []

        def visit(name: str) -> None:
            if name in names:
                return
            for parent in self.specs[name].when or {}:
                visit(parent)
            names.append(name)

        for name in self.specs:
            visit(name)
        return names

    def define_by_run(self) -> DefineByRun:
        """The space as an Optuna define-by-run function."""
        return DefineByRun(self.specs, self.ordered())

    def distribution(self, name: str) -> Any:
        """Parameter ``name`` as an Optuna distribution (for trials told to a study by hand)."""
        import optuna

        spec = self.specs[name]
        if spec.type == "float":
            return optuna.distributions.FloatDistribution(spec.low, spec.high, log=spec.log, step=spec.step)
        if spec.type == "int":
            step = int(spec.step) if spec.step else 1
            return optuna.distributions.IntDistribution(int(spec.low), int(spec.high), log=spec.log, step=step)
        return optuna.distributions.CategoricalDistribution(list(spec.choices))

    def contains(self, params: dict[str, Any]) -> bool:
        """True if ``params`` is a point of the space (conditional parameters may be absent)."""
        for name, spec in self.specs.items():
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


def active(spec: ParamSpec, chosen: dict[str, Any]) -> bool:
    """True if a (conditional) parameter applies given the values ``chosen`` so far."""
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


class DefineByRun:
    """An Optuna define-by-run space: suggests each active parameter, skipping inactive conditionals.

    A class rather than a closure so Tune can pickle the searcher with the experiment state.
    """

    def __init__(self, specs: dict[str, ParamSpec], names: list[str]) -> None:
        self.space = specs
        self.names = names

    def __call__(self, trial: Any) -> None:
        """Suggests the parameters for one Optuna trial."""
        chosen: dict[str, Any] = {}
        for name in self.names:
            spec = self.space[name]
            if active(spec, chosen):
                chosen[name] = _suggest(trial, name, spec)
