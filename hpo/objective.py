"""The objective's rules: which value is better, when a value reaches ``objective.goal``, and repeats.

One place for each rule, used by the Tune goal stopper, the worker's goal check and ``summary.json``.
"""

from __future__ import annotations

import json
import math
import numbers
from collections.abc import Iterable
from typing import Any

from hpo.results import REPEAT_KEY


def is_number(value: object) -> bool:
    """True for a real, non-NaN number (NumPy scalars included, bools excluded)."""
    return isinstance(value, numbers.Real) and not isinstance(value, bool) and value == value


def best_value(values: Iterable[Any], mode: str) -> float | None:
    """The best finite value of a history (max or min), or None if it has none."""
    finite = [float(v) for v in values if is_number(v) and math.isfinite(v)]
    if not finite:
        return None
    return max(finite) if mode == "max" else min(finite)


def better(value: float, than: float | None, mode: str) -> bool:
    """True if ``value`` beats ``than`` (anything beats None)."""
    return than is None or (value > than if mode == "max" else value < than)


def reaches_goal(value: object, goal: float, mode: str) -> bool:
    """Whether an objective ``value`` reaches ``objective.goal``: at least it for ``max``, at most for ``min``.

    A missing (non-numeric) or NaN value never does; NumPy scalars (Keras' epoch logs) count as numbers.
    """
    if not isinstance(value, numbers.Real) or value != value:
        return False
    return value >= goal if mode == "max" else value <= goal


def repeats_reach_goal(values: list[float | None], goal: float, mode: str) -> bool:
    """Whether the mean of a configuration's repeats reaches ``objective.goal`` (a repeat without a value: no)."""
    return bool(values) and None not in values and reaches_goal(sum(values) / len(values), goal, mode)


def configuration_key(params: dict[str, Any]) -> str:
    """One string per configuration: its parameters without the repeat index, so its repeats share it."""
    return json.dumps({k: v for k, v in params.items() if k != REPEAT_KEY}, sort_keys=True, default=str)
