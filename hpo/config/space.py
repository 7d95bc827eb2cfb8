"""One searched parameter of a sweep's ``space``, and the rules between parameters (grid, ``when``)."""

from __future__ import annotations

import math
from typing import Any, Literal

from pydantic import Field, model_validator

from hpo import kinds
from hpo.config.sections import INT_MAX, FrozenModel, KeyedError

#: Searched parameters the trainer itself reads (:data:`hpo.trial.spec.TRAINER_PARAMS`) that take numbers:
#: name → (smallest, largest, whether the smallest is allowed, whole numbers only, what it is, in words).
NUMERIC_TRAINER_PARAMS: dict[str, tuple[float, float, bool, bool, str]] = {
    "learning_rate": (0.0, 10.0, False, False, "a learning rate"),
    "batch_size_per_worker": (1, 2**20, True, True, "a batch size"),
    "momentum": (0.0, 1.0, True, False, "a momentum"),
}


class ParamSpec(FrozenModel):
    """One searched parameter."""

    type: Literal["float", "int", "categorical", "grid"]
    low: float | None = Field(default=None, strict=True)
    high: float | None = Field(default=None, strict=True)
    log: bool = False
    step: float | None = Field(default=None, gt=0, strict=True)
    choices: list[Any] | None = None
    values: list[Any] | None = None
    when: dict[str, Any] | None = None

    @model_validator(mode="after")
    def _check(self) -> ParamSpec:
        if self.type in ("float", "int"):
            if self.low is None or self.high is None:
                raise ValueError(f"a {self.type} parameter needs low and high; add both")
            if not self.low < self.high:
                raise ValueError(f"low ({self.low:g}) must be < high ({self.high:g}); swap them")
            if self.log and self.low <= 0:
                raise ValueError(f"log scale needs low > 0 (got {self.low:g}); raise low or set log: false")
            if self.log and self.step is not None:
                raise ValueError("step and log cannot be combined; drop one of them")
            if self.type == "int" and (self.low != int(self.low) or self.high != int(self.high)):
                raise ValueError("an int parameter needs whole-number low and high; round them")
            if self.type == "int" and max(abs(self.low), abs(self.high)) > INT_MAX:
                raise ValueError(f"an int parameter's range must lie within ±{INT_MAX} (2**31); narrow it")
            if self.type == "int" and self.step is not None and self.step != int(self.step):
                raise ValueError(f"an int parameter needs a whole-number step (got {self.step:g}); round it")
            if self.step is not None and self.step > self.high - self.low:
                raise ValueError(f"step ({self.step:g}) is larger than high - low ({self.high - self.low:g}); "
                                 "lower it or widen the range")
            if self.choices is not None or self.values is not None:
                raise ValueError(f"a {self.type} parameter takes low/high, not choices/values; remove them")
        elif self.low is not None or self.high is not None or self.step is not None or self.log:
            raise ValueError(f"a {self.type} parameter takes {'choices' if self.type == 'categorical' else 'values'}, "
                             "not low/high/step/log; remove them or use type: float or int")
        elif self.type == "categorical":
            if not self.choices:
                raise ValueError("a categorical parameter needs a non-empty list under choices; add it")
        elif not self.values:
            raise ValueError("a grid parameter needs a non-empty list under values; add it")
        return self

    @property
    def is_grid(self) -> bool:
        """A ``type: grid`` parameter (its listed values are all run, under a grid searcher only)."""
        return self.type == "grid"


def check_trainer_params(space: dict[str, ParamSpec]) -> list[KeyedError]:
    """Checks the values of the numeric parameters the trainer reads (:data:`NUMERIC_TRAINER_PARAMS`).

    A learning rate must be a number above 0 (at most 10), a batch size a whole number from 1 to 2**20
    (so a ``float`` range is refused), a momentum a number from 0 to 1; choices given as text are refused.

    Returns:
        One error per bad parameter (empty if every one is fine).
    """
    errors = []
    for name, (low, high, low_ok, whole, what_it_is) in NUMERIC_TRAINER_PARAMS.items():
        spec = space.get(name)
        if spec is None:
            continue
        problem = _trainer_param_problem(spec, low, high, low_ok, whole, what_it_is)
        if problem is not None:
            errors.append(KeyedError(f"space.{name}", problem))
    return errors


def _trainer_param_problem(
    spec: ParamSpec, low: float, high: float, low_ok: bool, whole: bool, what_it_is: str
) -> str | None:
    """What is wrong with one numeric trainer parameter, or None."""
    what = "whole numbers" if whole else "numbers"
    bounds = f"{'from' if low_ok else 'above'} {_number(low)} {'to' if low_ok else 'up to'} {_number(high)}"
    if spec.type == "float" and whole:
        return f"a float range gives fractional values, but {what_it_is} takes {what}; use type: int"
    if spec.type in ("float", "int"):
        values = [spec.low, spec.high]
        key = "the range"
    else:
        values = list(spec.choices or spec.values or [])
        key = "choices" if spec.type == "categorical" else "values"
        for value in values:
            if isinstance(value, bool):
                return f"{str(value).lower()} is a boolean, not a number; write {what}"
            if not isinstance(value, (int, float)):
                return f"{value!r} is {'text' if isinstance(value, str) else type(value).__name__}, not a number; " \
                       f"write {what} without quotes"
            if not math.isfinite(value):
                return f"{value} is not a finite number; write {what}"
            if whole and value != int(value):
                return f"{value!r} is not a whole number; {what_it_is} takes {what}, write one"
    bad = next((v for v in values if v is not None and (v < low or v > high or (v == low and not low_ok))), None)
    if bad is not None:
        return f"{_number(bad)} cannot be {what_it_is} ({what} {bounds}); keep {key} within that"
    return None


def _number(value: float) -> str:
    """A bound or value as written: ``1048576``, ``0.001``, ``1e+30``."""
    return str(int(value)) if float(value).is_integer() and abs(value) < 1e15 else f"{value:g}"


def check_conditions(space: dict[str, ParamSpec], searcher: kinds.SearcherKind) -> None:
    """Checks every ``when``: its parent is a categorical parameter and the values are its choices.

    Raises:
        KeyedError: On the first bad condition (also any condition under grid search).
    """
    for name, spec in space.items():
        for parent, value in (spec.when or {}).items():
            if parent == name:
                raise KeyedError(f"space.{name}.when", "a parameter cannot depend on itself; condition on another one")
            if _depends_on(space, parent, name):
                raise KeyedError(
                    f"space.{name}.when", f"'{parent}' depends on '{name}' in turn (a cycle); remove one condition"
                )
            other = space.get(parent)
            if other is None or not (other.type == "categorical" or other.is_grid):
                raise KeyedError(
                    f"space.{name}.when",
                    f"'{parent}' is not a categorical parameter of the space; condition on a categorical parameter",
                )
            allowed = other.choices or other.values or []
            wanted = value if isinstance(value, list) else [value]
            if not set(map(str, wanted)) <= set(map(str, allowed)):
                raise KeyedError(
                    f"space.{name}.when", f"{value!r} is not a choice of '{parent}' ({allowed}); use one of them"
                )
            if searcher.grid:
                raise KeyedError(
                    f"space.{name}.when",
                    f"conditional parameters are not supported with grid search; use {kinds.DEFAULT_SEARCHER} or "
                    f"{searcher.instead}",
                )


def _depends_on(space: dict[str, ParamSpec], name: str, target: str, seen: frozenset[str] = frozenset()) -> bool:
    """True if parameter ``name`` is conditional on ``target``, directly or through other conditions."""
    spec = space.get(name)
    if spec is None or name in seen:
        return False
    parents = set(spec.when or {})
    return target in parents or any(_depends_on(space, p, target, seen | {name}) for p in parents)
