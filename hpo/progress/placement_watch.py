"""Trials waiting for resources: a lost node, a placement group Ray leaves unplaced, a shape nothing can hold.

When a worker node is lost (a spot instance reclaimed, a machine crashed), the trials on it fail with it
and Tune retries them from their last checkpoint in a new placement group. That group may wait: for a
node to come back, which is what the views must say, or forever: Ray's GCS has been seen to leave such a
group pending while a node that joined since sits idle with room for it (a new group is placed at once).

:class:`PlacementWatch`, a Tune callback, looks at the groups Tune holds every few seconds (in Tune's own
loop) and, for a group unplaced for ``stuck_s`` seconds, decides (:func:`decide`):

- ``recreate``: the cluster has room for it now: the group is removed and Tune asked for a new one
  (a trial whose actor waits in it is retried, without counting as one of its failures);
- ``fail``: no node of the cluster and no node type of its autoscaler could ever hold it: the trials
  waiting for it fail with that one-line reason;
- ``wait``: nothing has room yet (a node is coming, or never will without an autoscaler): the views say
  ``waiting for resources since T (node N lost)`` until a node joins, and the sweep's time budget still
  ends it.

:func:`decide` is pure (tested on synthetic states); the callback gathers Ray's state and acts through
:mod:`hpo.compat`.
"""

from __future__ import annotations

import logging
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any, Literal

from ray.tune import Callback

logger = logging.getLogger(__name__)

#: Environment variable: seconds a placement group may stay unplaced before :func:`decide` acts on it.
STUCK_ENV = "HPO_PLACEMENT_STUCK_S"
#: Its default.
STUCK_S = 30.0
#: A node lost at most this many seconds before a group began to wait is named as the reason it waits.
LOSS_WINDOW_S = 300.0
#: Ray's states of a group that is not placed (``RESCHEDULING``: its node was lost).
UNPLACED = ("PENDING", "RESCHEDULING")

Action = Literal["wait", "recreate", "retry", "fail"]


@dataclass(frozen=True)
class NodeState:
    """One Ray node as the watch sees it.

    Attributes:
        node_id: Ray's node id (hex).
        alive: Whether the GCS counts it alive.
        total: Its resources.
        free: Its resources not in use or reserved now.
        death: Why the GCS declared it dead (empty while alive).
    """

    node_id: str
    alive: bool
    total: dict[str, float]
    free: dict[str, float]
    death: str = ""


@dataclass(frozen=True)
class GroupState:
    """One placement group Tune holds.

    Attributes:
        group_id: Ray's placement group id (hex).
        state: Ray's state of it: ``PENDING``, ``RESCHEDULING``, ``CREATED`` or ``REMOVED``.
        bundles: Its bundles' resources.
        where: ``staged`` (Tune waits for it), ``ready`` (placed, for the next trial) or ``acquired`` (a
            trial's actor is in it).
        trial_id: The trial whose actor is in it (``acquired`` only).
        started: Whether that actor has started.
    """

    group_id: str
    state: str
    bundles: tuple[dict[str, float], ...]
    where: str
    trial_id: str | None = None
    started: bool = False


@dataclass(frozen=True)
class Decision:
    """What to do about one group unplaced for too long.

    Attributes:
        group_id: The group.
        action: ``recreate`` (Tune waits for it: a new one instead), ``retry`` (a trial's actor waits in it:
            its start fails and Tune retries it in a new group), ``fail`` (it can never be placed) or
            ``wait``.
        reason: One line for the log and, for ``fail``, the trials' error.
    """

    group_id: str
    action: Action
    reason: str


@dataclass(frozen=True)
class ResourceWait:
    """Trials waiting for resources, as the views show it.

    Attributes:
        since: Unix time since which a trial's placement group is unplaced.
        groups: Groups unplaced now.
        lost: The node lost most recently while the sweep ran (``"node 3fa2b1c0"``), or empty.
    """

    since: float
    groups: int
    lost: str = ""


def fits(bundles: Sequence[dict[str, float]], nodes: Sequence[dict[str, float]]) -> bool:
    """True if every bundle finds room on some node (first fit, largest first; a bundle never spans nodes)."""
    room = [dict(n) for n in nodes]
    for bundle in sorted(bundles, key=lambda b: -sum(b.values())):
        for node in room:
            if all(node.get(k, 0.0) + 1e-9 >= v for k, v in bundle.items() if v > 0):
                for k, v in bundle.items():
                    node[k] = node.get(k, 0.0) - v
                break
        else:
            return False
    return True


def decide(
    groups: Sequence[GroupState],
    nodes: Sequence[NodeState],
    unplaced_since: dict[str, float],
    now: float,
    stuck_s: float,
    never: Callable[[tuple[dict[str, float], ...]], str] | None = None,
) -> list[Decision]:
    """What to do about each group unplaced for at least ``stuck_s`` seconds.

    Args:
        groups: The groups Tune holds.
        nodes: The cluster's nodes, alive and dead.
        unplaced_since: Group id → since when it is unplaced.
        now: The time of the check.
        stuck_s: Seconds a group may wait before it is acted on.
        never: Bundles → why no node and no node type of the cluster could ever hold them ("" if one
            could, or if the cluster's node types are not known); None: never known.

    Returns:
        One decision per group unplaced for long enough, in ``groups``' order.
    """
    alive = [n for n in nodes if n.alive]
    decisions = []
    for group in groups:
        since = unplaced_since.get(group.group_id)
        if group.state not in UNPLACED or since is None or now - since < stuck_s:
            continue
        waited = f"unplaced for {now - since:.0f}s"
        room = next((n for n in alive if fits(group.bundles, [n.free])), None)
        if room is None and fits(group.bundles, [n.free for n in alive]):
            room = alive[0]  # spread over several nodes (the group's strategy is PACK: it may)
        if room is not None:
            if group.where in ("staged", "ready"):
                decisions.append(Decision(group.group_id, "recreate", f"{waited} with room on node {room.node_id[:8]}"))
            elif not group.started:
                decisions.append(Decision(group.group_id, "retry", f"{waited} with room on node {room.node_id[:8]}"))
            else:
                decisions.append(Decision(group.group_id, "wait", f"{waited}; its trial's actor runs"))
            continue
        why = never(group.bundles) if never is not None else ""
        if why:
            decisions.append(Decision(group.group_id, "fail", why))
        else:
            decisions.append(Decision(group.group_id, "wait", f"{waited}: no node has room for it yet"))
    return decisions


def stuck_after_s() -> float:
    """:data:`STUCK_ENV` (seconds, > 0) or :data:`STUCK_S`."""
    raw = os.environ.get(STUCK_ENV, "")
    try:
        value = float(raw) if raw else STUCK_S
    except ValueError:
        logger.warning("%s=%r is no number of seconds; using %s", STUCK_ENV, raw, STUCK_S)
        return STUCK_S
    return value if value > 0 else STUCK_S


class PlacementWatch(Callback):
    """Watches the placement groups of Tune's trials; unsticks, fails or reports those left unplaced.

    Args:
        on_change: Called with the new :class:`ResourceWait` (None: nothing waits) when it changes.
        stuck_s: Seconds a group may stay unplaced before :func:`decide` acts on it (default
            :func:`stuck_after_s`).
        every_s: Seconds between checks (in Tune's loop, after a step).
        node_types: Returns the autoscaler's node types and ``max_workers``, or None if not known (asked
            once; the sweep passes :func:`hpo.cluster.fit.autoscaler_node_types`). None: never known.
        never_fits: ``(bundles, nodes, known) -> reason`` why no node and no node type could ever hold a
            group ("" if one could; the sweep passes :func:`hpo.cluster.fit.never_fits`). None: no verdict,
            so a group is waited for or recreated, never failed.
    """

    def __init__(
        self, on_change: Callable[[ResourceWait | None], None] | None = None, stuck_s: float | None = None,
        every_s: float = 5.0, node_types: Callable[[], tuple[list[Any], int] | None] | None = None,
        never_fits: Callable[[tuple[dict[str, float], ...], Sequence[Any], tuple[list[Any], int] | None], str]
        | None = None,
    ) -> None:
        self.on_change = on_change
        self.stuck_s = stuck_after_s() if stuck_s is None else stuck_s
        self.every_s = every_s
        self.node_types = node_types
        self.never_fits = never_fits
        self.controller: Any = None
        self.unplaced_since: dict[str, float] = {}
        self.alive: set[str] = set()
        self.lost: list[tuple[float, str, str]] = []  # (when, node id, why)
        self.wait: ResourceWait | None = None
        self.actions: list[Decision] = []  # what it did, for the log and the tests
        self._known: tuple[list[Any], int] | bool | None = False  # False: not asked yet
        self._last = 0.0

    def __getstate__(self) -> dict[str, Any]:
        # Tune pickles its callbacks with the Tuner; a resumed sweep gets a new watch.
        return {"on_change": None, "stuck_s": self.stuck_s, "every_s": self.every_s, "node_types": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(**state)  # type: ignore[misc]

    def bind(self, controller: Any) -> None:
        """Tune's controller, whose groups the watch reads (:func:`hpo.compat.tune_controller_seen`)."""
        self.controller = controller

    def on_step_end(self, iteration: int, trials: list, **info: Any) -> None:
        """Checks the groups every ``every_s`` seconds."""
        now = time.time()
        if self.controller is None or now - self._last < self.every_s:
            return
        self._last = now
        try:
            self.check(trials, now)
        except Exception:  # the watch must never stop the sweep
            logger.warning("placement check failed", exc_info=True)

    def check(self, trials: list, now: float) -> list[Decision]:
        """One check: Ray's state, the decisions, the actions, the views."""
        from hpo import compat

        held = compat.tune_placement_groups(self.controller)
        groups, handles = self._groups(held)
        nodes = self._nodes(now)
        for group in groups:
            if group.state in UNPLACED:
                self.unplaced_since.setdefault(group.group_id, now)
        current = {g.group_id for g in groups if g.state in UNPLACED}
        self.unplaced_since = {k: v for k, v in self.unplaced_since.items() if k in current}
        decisions = decide(groups, nodes, self.unplaced_since, now, self.stuck_s, self._never(nodes))
        by_id = {t.trial_id: t for t in trials}
        for decision in decisions:
            self._act(decision, handles[decision.group_id], by_id, trials)
        self._show(now)
        return decisions

    def _groups(self, held: list[tuple[Any, str, Any]]) -> tuple[list[GroupState], dict[str, tuple[Any, Any]]]:
        from ray.util.placement_group import placement_group_table

        from hpo import compat

        groups, handles = [], {}
        for pg, where, trial in held:
            table = placement_group_table(pg)
            group_id = pg.id.hex()
            started = trial is not None and compat.tune_actor_started(self.controller, trial)
            groups.append(GroupState(
                group_id, str(table.get("state", "")), tuple(dict(b) for b in (table.get("bundles") or {}).values()),
                where, getattr(trial, "trial_id", None), started,
            ))
            handles[group_id] = (pg, trial)
        return groups, handles

    def _nodes(self, now: float) -> list[NodeState]:
        import ray

        from hpo import compat

        free = compat.ray_available_per_node()
        nodes = []
        for n in ray.nodes():
            node_id = n["NodeID"]
            total = {k: float(v) for k, v in n.get("Resources", {}).items() if not k.startswith("node:")}
            avail = {k: v for k, v in free.get(node_id, {}).items() if not k.startswith(("node:", "bundle_group_"))}
            nodes.append(NodeState(node_id, bool(n.get("Alive")), total, avail, n.get("DeathReasonMessage", "")))
            if n.get("Alive"):
                self.alive.add(node_id)
            elif node_id in self.alive:  # alive at an earlier check: lost while the sweep ran
                self.alive.discard(node_id)
                why = n.get("DeathReasonMessage", "") or "no reason given"
                self.lost.append((now, node_id, why))
                logger.warning("node %s lost: %s", node_id[:8], why)
        return nodes

    def _never(self, nodes: list[NodeState]) -> Callable[[tuple[dict[str, float], ...]], str]:
        if self._known is False:
            try:
                self._known = self.node_types() if self.node_types is not None else None
            except Exception:  # noqa: BLE001 - a cluster file that cannot be read: no verdict
                self._known = None
        known = self._known if self._known is not False else None
        judge = self.never_fits
        if judge is None:
            return lambda bundles: ""
        return lambda bundles: judge(bundles, nodes, known)

    def _act(self, decision: Decision, handle: tuple[Any, Any], by_id: dict[str, Any], trials: list) -> None:
        from hpo import compat

        pg, trial = handle
        done = False
        if decision.action == "recreate":
            done = compat.tune_restage(self.controller, pg)
        elif decision.action == "retry" and trial is not None:
            done = compat.tune_retry_start(self.controller, trial, f"placement group {decision.reason}")
        elif decision.action == "fail":
            waiting = [trial] if trial is not None else [
                t for t in trials if t.status == "PENDING" and not compat.tune_trial_placed(self.controller, t)]
            for waiting_trial in waiting:
                compat.tune_fail_pending(self.controller, waiting_trial, decision.reason)
            done = bool(waiting)
        if done:
            self.unplaced_since.pop(decision.group_id, None)
            self.actions.append(decision)
            logger.warning("placement group %s %s: %s", decision.group_id[:8], decision.action, decision.reason)

    def _show(self, now: float) -> None:
        """Tells the views of groups unplaced since a node was lost, or for ``stuck_s``.

        (A slot that frees up in the normal course, or a node an autoscaler starts within it, is no news.)
        """
        since = min(self.unplaced_since.values(), default=None)
        recent = [node for when, node, _ in self.lost if since is not None and when >= since - LOSS_WINDOW_S]
        lost = f"node {recent[-1][:8]} lost" if recent else ""
        shown = since is not None and (bool(lost) or now - since >= self.stuck_s)
        wait = ResourceWait(since, len(self.unplaced_since), lost) if shown else None  # type: ignore[arg-type]
        if wait != self.wait:
            self.wait = wait
            if self.on_change is not None:
                try:
                    self.on_change(wait)
                except Exception:  # the views must not stop the watch
                    logger.warning("resource wait not shown", exc_info=True)
