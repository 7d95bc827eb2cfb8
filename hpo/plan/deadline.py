"""A sweep run to a deadline (``hpo tune --deadline``): its plan at the start, advice when it runs late, nodes.

At the start, where the sweep has an earlier round (its journal in the state directory), :func:`plan_at_start`
plans it on that round, for this machine or, on a cluster, the node types its autoscaler may launch; the
plan's median wall time for the sweep's own shape is the prediction the report later holds against the real
one. When ``p_meet`` first falls below 0.5, :func:`advice` plans the sweep again on its own journal so far
and names the recommended shape. :func:`node_bundles` is what :func:`request_resources` asks the autoscaler
for: one bundle per node the plan recommends, each that node type's resources.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from hpo.errors import ConfigError
from hpo.plan.capacity import Capacity
from hpo.plan.history import SweepRecord, read_sweep, shape_of
from hpo.plan.types import Plan, PlanOption

if TYPE_CHECKING:
    from hpo.config import SweepConfig

#: Monte-Carlo draws per option of the plans made while a sweep runs (a few seconds at most).
SAMPLES = 300


@dataclass(frozen=True)
class StartPlan:
    """What the plan said at a sweep's start.

    Attributes:
        plan: The plan.
        own: Its option at the sweep file's own shape (None: the cluster cannot hold it).
    """

    plan: Plan
    own: PlanOption | None

    def prediction(self) -> dict[str, float | str] | None:
        """The journal's ``prediction`` event's figures (None without an own option)."""
        if self.own is None:
            return None
        return {"source": "plan", "wall_s_median": self.own.wall_s_median, "wall_s_low": self.own.wall_s_low,
                "wall_s_high": self.own.wall_s_high}


def earlier_round(directory: Path) -> SweepRecord | None:
    """The sweep's last round in its state directory, as the plan reads it (None: none that trained)."""
    try:
        return read_sweep(directory)
    except (ConfigError, OSError, KeyError, ValueError):
        return None


def plan_at_start(
    config: SweepConfig, record: SweepRecord, deadline_s: float, capacity: Capacity | None = None,
) -> StartPlan | None:
    """Plans the sweep to its deadline from its earlier round (None where that round cannot be planned from)."""
    from hpo.plan.planner import plan

    try:
        made = plan(config, deadline_s=deadline_s, history=[record], cluster=capacity, samples=SAMPLES)
    except ConfigError:
        return None
    own = shape_of(config)
    at_once = min(own.max_concurrent, made.trials)
    mine = next((o for o in made.options if o.workers_per_trial == own.workers_per_trial
                 and o.max_concurrent == at_once and o.batch_size_per_worker == own.batch_size_per_worker), None)
    return StartPlan(made, mine)


def advice(config: SweepConfig, directory: Path, deadline_s: float, capacity: Capacity | None = None) -> str:
    """What the plan would change, planned on the sweep's journal so far: one clause for the warning.

    ``4 trials at once × 2 workers on 1 local would give 0.86`` (the recommended option's ``p_meet`` for the
    whole sweep run at that shape from the command's start), the likeliest shape where none reaches the
    plan's confidence, or why there is none.
    """
    from hpo.plan.planner import plan

    record = earlier_round(directory)
    if record is None:
        return "no plan yet (no trial has ended with timed epochs)"
    made = plan(config, deadline_s=deadline_s, history=[record], cluster=capacity, samples=SAMPLES,
                source="earlier rounds")
    best = made.recommended
    if best is None:
        return "no shape the cluster holds would meet it"
    nodes = ", ".join(f"{count} {name}" for name, count in best.nodes.items())
    workers = f"{best.workers_per_trial} worker{'s' if best.workers_per_trial != 1 else ''}"
    shape = f"{best.max_concurrent} trials at once × {workers} on {nodes}"
    if best.p_meet is None:
        return shape
    if best.p_meet < made.confidence:
        return f"none meets it with {made.confidence:.0%}; the likeliest, {shape}, would give {best.p_meet:.2f}"
    return f"{shape} would give {best.p_meet:.2f}"


def node_bundles(nodes: dict[str, int], capacity: Capacity) -> list[dict[str, float]]:
    """One resource bundle per node: what ``request_resources(bundles=...)`` asks the autoscaler for.

    Raises:
        KeyError: A node type the capacity does not know.
    """
    by_name = {t.name: t for t in capacity.node_types}
    bundles = []
    for name, count in nodes.items():
        resources = {k: float(v) for k, v in by_name[name].resources.items() if v}
        bundles.extend(dict(resources) for _ in range(count))
    return bundles
