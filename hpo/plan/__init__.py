"""Plan a sweep to a deadline: which shape (workers per trial, trials at once, nodes) ends it in time, at what cost.

:func:`plan` reads past sweeps' progress journals (:mod:`~hpo.plan.history`), predicts the per-epoch time
of shapes never measured (:mod:`~hpo.plan.shape_model`), places each candidate shape on a cluster file's
node types (:mod:`~hpo.plan.capacity`), draws its wall time with the sweep forecast
(:mod:`~hpo.plan.forecast`) and recommends one (:mod:`~hpo.plan.choose`); the messages are in
:mod:`~hpo.plan.types`. Only the types are imported with the package; the rest (NumPy, the estimator) when
first used, so that ``import hpo`` stays light.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

from hpo.plan.types import Plan, PlanOption, Shape, Source

if TYPE_CHECKING:
    from hpo.plan.capacity import Capacity
    from hpo.plan.history import SweepRecord, read_sweep
    from hpo.plan.planner import plan

__all__ = ["Capacity", "Plan", "PlanOption", "Shape", "Source", "SweepRecord", "plan", "read_sweep"]

#: Public name → the module that defines it (imported on first use).
_LAZY = {"Capacity": "capacity", "SweepRecord": "history", "read_sweep": "history", "plan": "planner"}


def __getattr__(name: str) -> Any:
    module = _LAZY.get(name)
    if module is None:
        raise AttributeError(f"module 'hpo.plan' has no attribute {name!r}")
    return getattr(importlib.import_module(f"hpo.plan.{module}"), name)
