"""A sweep run to a deadline (``--deadline``): set up before its trials start, written up at its end.

:func:`start` gives the monitor the deadline (``p_meet`` in every view and ``progress.json``) and the warning
it says once when ``p_meet`` falls below 0.5, with the plan's advice; where the sweep has an earlier round it
plans the sweep from it and journals the prediction (what ``hpo report`` holds against the real wall time);
on a cluster (a Ray address) it asks the autoscaler for the nodes that plan recommends, with Ray's
``request_resources``, instead of waiting for the trials' demand to scale it up. A local Ray is asked nothing.
:func:`section` is the summary's ``deadline``. Nothing here stops or cuts a trial.
"""

from __future__ import annotations

import logging
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpo.config import SweepConfig
from hpo.options import RunOptions
from hpo.plan.capacity import Capacity
from hpo.plan.deadline import StartPlan, advice, node_bundles, plan_at_start
from hpo.plan.history import SweepRecord
from hpo.plan.rounds import Round, record_round
from hpo.progress.deadline import DeadlineWatch
from hpo.progress.journal import process_started
from hpo.sweep_summary import DeadlineSection

logger = logging.getLogger(__name__)


@dataclass
class DeadlineRun:
    """A sweep's deadline as it runs.

    Attributes:
        deadline_at: The deadline (Unix time).
        deadline_s: Seconds from the command's start to it.
        watch: The monitor's watch (the warning, the last ``p_meet``).
        start_plan: The plan made at the start (None: no earlier round to plan from).
        requested: Node type → nodes asked of the autoscaler (None: none asked).
    """

    deadline_at: float
    deadline_s: float
    watch: DeadlineWatch
    start_plan: StartPlan | None = None
    requested: dict[str, int] | None = None


def cluster_capacity() -> Capacity | None:
    """The node types the connected cluster's autoscaler may launch (None: not known)."""
    from hpo.cluster.fit import autoscaler_node_types

    try:
        known = autoscaler_node_types()
    except Exception as exc:  # noqa: BLE001 - the plan is extra; the sweep runs without it
        logger.warning("the cluster's node types are not known (%s): no nodes asked for", exc)
        return None
    if known is None or not known[0]:
        return None
    types, max_workers = known
    return Capacity(tuple(types), max_workers or None, "the cluster's autoscaler")


def request_nodes(nodes: dict[str, int], capacity: Capacity) -> list[dict[str, float]]:
    """Asks the autoscaler for ``nodes`` at once (Ray's ``request_resources``); returns the bundles asked."""
    from ray.autoscaler.sdk import request_resources

    bundles = node_bundles(nodes, capacity)
    request_resources(bundles=bundles)
    return bundles


def start(
    config: SweepConfig, options: RunOptions, monitor: Any, earlier: SweepRecord | None, say: Any = None,
) -> DeadlineRun | None:
    """Sets the sweep's deadline up (after Ray started, before the monitor's journal segment starts).

    Args:
        config: The sweep.
        options: Its options (``deadline_at``, ``address``).
        monitor: Its :class:`~hpo.progress.monitor.SweepMonitor`.
        earlier: Its earlier round, read before this run touched its state (None: none).
        say: Prints a line for the user (None: quiet).

    Returns:
        The deadline as it runs (None without ``--deadline``).
    """
    if options.deadline_at is None:
        return None
    began = process_started() or time.time()
    deadline_s = options.deadline_at - began
    monitor.progress.deadline_at = options.deadline_at
    capacity = cluster_capacity() if options.address else None
    directory = options.sweep_dir(config.name)

    def advise(_: float) -> str:
        return advice(config, directory, deadline_s, capacity)

    run = DeadlineRun(options.deadline_at, deadline_s, DeadlineWatch(options.deadline_at, advise, started_at=began))
    monitor.deadline = run.watch
    if earlier is not None and earlier.after_s is not None:
        monitor.progress.tail_s = earlier.after_s  # the end the trials' forecast does not hold
    if earlier is not None and deadline_s > 0:
        run.start_plan = plan_at_start(config, earlier, deadline_s, capacity)
        run.watch.prediction = run.start_plan.prediction() if run.start_plan is not None else None
    recommended = run.start_plan.plan.recommended if run.start_plan is not None else None
    if options.address and capacity is not None and recommended is not None:
        try:
            request_nodes(recommended.nodes, capacity)
            run.requested = dict(recommended.nodes)
        except Exception as exc:  # noqa: BLE001 - the trials' own demand still scales the cluster up
            logger.warning("the autoscaler was not asked for nodes: %s", exc)
        else:
            nodes = ", ".join(f"{count} {name}" for name, count in recommended.nodes.items())
            if say is not None:
                say(f"deadline: asked the autoscaler for {nodes} ({run.start_plan.plan.why})")  # type: ignore[union-attr]
    elif say is not None and run.start_plan is not None and run.start_plan.own is not None:
        own = run.start_plan.own
        say(f"deadline: the plan from the earlier round gives p_meet {own.p_meet:.2f} at this shape "
            f"(median {own.wall_s_median:.0f}s)")
    return run


def release(run: DeadlineRun | None) -> None:
    """Withdraws the sweep's request to the autoscaler (Ray keeps one until it is replaced), if it made one."""
    if run is None or run.requested is None:
        return
    try:
        from ray.autoscaler.sdk import request_resources

        request_resources(bundles=[])
    except Exception as exc:  # noqa: BLE001 - the cluster's idle timeout is then what lets the nodes go
        logger.warning("the request for nodes was not withdrawn: %s", exc)


def journal(run: DeadlineRun | None, monitor: Any) -> None:
    """The start plan's prediction in the journal's new segment (once the monitor's journal started)."""
    recorder = getattr(monitor.progress, "recorder", None)
    if run is None or recorder is None:
        return
    figures = run.watch.prediction
    if figures is not None:
        recorder({"event": "prediction", "t": time.time(), "deadline_at": run.deadline_at, **figures,
                  "requested": run.requested})


def section(
    run: DeadlineRun | None, monitor: Any, directory: Path | None = None, status: str = "finished",
    ended_at: float | None = None,
) -> DeadlineSection | None:
    """The summary's ``deadline`` (None without a deadline); also journalled, and kept as a round.

    The section is journalled as a ``deadline`` event and, with the wall time predicted at the start,
    appended to the sweep's rounds in ``directory`` (:mod:`hpo.plan.rounds`).
    """
    if run is None:
        return None
    ended_at = time.time() if ended_at is None else ended_at
    figures = run.watch.prediction
    if directory is not None and figures is not None and run.watch.started_at is not None:
        record_round(directory, Round(
            started_at=run.watch.started_at, sweep_started_at=monitor.progress.started, source=str(figures["source"]),
            wall_s_median=float(figures["wall_s_median"]), wall_s_low=float(figures["wall_s_low"]),
            wall_s_high=float(figures["wall_s_high"]), ended_at=ended_at, deadline_at=run.deadline_at,
            status=status))
    own = run.start_plan.own if run.start_plan is not None else None
    result = DeadlineSection(
        deadline_at=run.deadline_at, deadline_s=round(run.deadline_s, 1), p_meet=run.watch.last,
        met=ended_at <= run.deadline_at, warning=run.watch.warned,
        predicted_wall_s=None if own is None else round(own.wall_s_median, 1), requested=run.requested,
    )
    recorder = getattr(monitor.progress, "recorder", None)
    if recorder is not None:
        recorder({"event": "deadline", "t": ended_at, **result.model_dump()})
    return result


def earlier_round(config: SweepConfig, options: RunOptions) -> SweepRecord | None:
    """The sweep's earlier round in its state directory, read before this run changes it (None: none)."""
    if options.deadline_at is None:
        return None
    from hpo.plan.deadline import earlier_round as read

    directory: Path = options.sweep_dir(config.name)
    return read(directory)
