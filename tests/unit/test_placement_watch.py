"""The placement watch's decisions on synthetic cluster states, and what the views and the journal show."""

from __future__ import annotations

import json
import time
from types import SimpleNamespace

from hpo.cluster.fit import never_fits
from hpo.cluster.shapes import NodeShape
from hpo.progress.placement_watch import (
    STUCK_ENV,
    STUCK_S,
    GroupState,
    NodeState,
    PlacementWatch,
    ResourceWait,
    decide,
    fits,
    stuck_after_s,
)

WORKER = {"CPU": 0.5}
TRIAL = (WORKER, WORKER)  # a trial's group: one bundle per Horovod worker


def _node(node_id: str, cpus: float, free: float | None = None, alive: bool = True) -> NodeState:
    return NodeState(node_id, alive, {"CPU": cpus}, {"CPU": cpus if free is None else free},
                     "" if alive else "health check failed due to missing too many heartbeats")


HEAD = _node("head0000", 0.0)
LOST = _node("lost0000", 2.0, 0.0, alive=False)


def test_fits_places_each_bundle_on_one_node_and_may_spread_them():
    assert fits(TRIAL, [{"CPU": 1.0}])
    assert fits(TRIAL, [{"CPU": 0.5}, {"CPU": 0.5}])  # one bundle on each
    assert not fits(TRIAL, [{"CPU": 0.75}, {"CPU": 0.25}])  # 1 CPU in all, but no bundle spans two nodes
    assert not fits(({"CPU": 0.5, "GPU": 1},), [{"CPU": 8.0}])
    assert fits((), [])


def test_a_group_is_left_alone_until_it_has_waited_the_bound():
    group = GroupState("g1", "PENDING", TRIAL, "staged")
    nodes = [HEAD, LOST, _node("new00000", 2.0)]
    assert decide([group], nodes, {"g1": 100.0}, now=129.0, stuck_s=30) == []
    [decision] = decide([group], nodes, {"g1": 100.0}, now=130.0, stuck_s=30)
    assert decision.action == "recreate" and "room on node new00000" in decision.reason
    # placed groups are never acted on, however old
    assert decide([GroupState("g1", "CREATED", TRIAL, "ready")], nodes, {"g1": 0.0}, 1e9, 30) == []


def test_an_unplaced_group_with_room_is_recreated_or_its_trial_retried():
    nodes = [HEAD, _node("new00000", 2.0, free=1.0)]
    since = {"s": 0.0, "r": 0.0, "a": 0.0, "b": 0.0}
    groups = [
        GroupState("s", "PENDING", TRIAL, "staged"),  # Tune waits for it: a new group instead
        GroupState("r", "RESCHEDULING", TRIAL, "ready"),  # placed for the next trial, then its node was lost
        GroupState("a", "RESCHEDULING", TRIAL, "acquired", "t1", started=False),  # a trial's actor waits in it
        GroupState("b", "RESCHEDULING", TRIAL, "acquired", "t2", started=True),  # its actor runs: Ray's to mend
    ]
    assert [(d.group_id, d.action) for d in decide(groups, nodes, since, 60.0, 30)] == [
        ("s", "recreate"), ("r", "recreate"), ("a", "retry"), ("b", "wait")]


def test_without_room_a_group_waits_unless_no_node_type_could_ever_hold_it():
    group = GroupState("g", "PENDING", TRIAL, "staged")
    busy = [HEAD, LOST, _node("busy0000", 2.0, free=0.25)]
    [wait] = decide([group], busy, {"g": 0.0}, 60.0, 30, never=lambda bundles: "")
    assert wait.action == "wait" and "no node has room" in wait.reason
    [fail] = decide([group], busy, {"g": 0.0}, 60.0, 30, never=lambda bundles: "no node type can hold it")
    assert (fail.action, fail.reason) == ("fail", "no node type can hold it")


def test_never_fits_counts_the_nodes_and_the_autoscalers_node_types():
    nodes = [HEAD, LOST]  # the only worker node is gone
    assert never_fits(TRIAL, nodes, None) == ""  # node types unknown (a cluster started by hand): no verdict
    small = NodeShape("cpu-small", {"CPU": 1.0}, 2)
    assert never_fits(TRIAL, nodes, ([small], 2)) == ""  # the autoscaler can start a node that holds it
    gpu = ({"CPU": 1.0, "GPU": 1.0},) * 2
    line = never_fits(gpu, nodes, ([small], 2))
    assert line.startswith("no node of the cluster and no node type of its autoscaler can hold the trial's 2 bundles")
    assert "{CPU: 1, GPU: 1}" in line and "\n" not in line and "lower trial.workers" in line


def test_the_bound_comes_from_the_environment(monkeypatch):
    monkeypatch.delenv(STUCK_ENV, raising=False)
    assert stuck_after_s() == STUCK_S
    monkeypatch.setenv(STUCK_ENV, "12.5")
    assert stuck_after_s() == 12.5
    for bad in ("soon", "-3", "0"):
        monkeypatch.setenv(STUCK_ENV, bad)
        assert stuck_after_s() == STUCK_S


def test_the_watch_tells_of_a_wait_after_a_node_loss_at_once_and_of_any_other_after_the_bound():
    changes: list[ResourceWait | None] = []
    watch = PlacementWatch(changes.append, stuck_s=30)
    watch.unplaced_since = {"g": 100.0}
    watch._show(105.0)
    assert changes == []  # a group waiting a few seconds for a slot is no news
    watch._show(130.0)
    assert changes == [ResourceWait(100.0, 1, "")]
    watch.lost.append((120.0, "3fa2b1c0ffff", "health check failed"))
    watch._show(131.0)
    assert changes[-1] == ResourceWait(100.0, 1, "node 3fa2b1c0 lost")
    watch.unplaced_since = {}
    watch._show(140.0)
    assert changes[-1] is None and len(changes) == 3
    watch.unplaced_since = {"h": 1000.0}  # a wait long after that loss: the loss is not its reason
    watch._show(1001.0)
    assert changes[-1] is None
    watch._show(1030.0)
    assert changes[-1] == ResourceWait(1000.0, 1, "")


def test_the_watch_fails_the_waiting_trials_of_a_group_that_can_never_be_placed(monkeypatch):
    from hpo import compat

    failed: list[tuple[str, str]] = []
    monkeypatch.setattr(compat, "tune_fail_pending", lambda controller, trial, reason: failed.append(
        (trial.trial_id, reason)))
    monkeypatch.setattr(compat, "tune_trial_placed", lambda controller, trial: trial.trial_id == "c")
    watch = PlacementWatch(stuck_s=30)
    trials = [SimpleNamespace(trial_id="a", status="RUNNING"), SimpleNamespace(trial_id="b", status="PENDING"),
              SimpleNamespace(trial_id="c", status="PENDING")]  # c's actor has its group: it is not waiting
    from hpo.progress.placement_watch import Decision

    watch._act(Decision("g", "fail", "no node type can hold it"), (object(), None), {}, trials)
    assert failed == [("b", "no node type can hold it")] and [d.action for d in watch.actions] == ["fail"]


def test_a_wait_for_resources_is_shown_recorded_in_the_journal_and_counted(tmp_path):
    from hpo.progress.journal import Journal, read_events
    from hpo.progress.live import Snapshot, read_live
    from hpo.progress.monitor import SweepMonitor
    from hpo.progress.views import sweep_text

    monitor = SweepMonitor.__new__(SweepMonitor)
    SweepMonitor.__init__(monitor, SimpleNamespace(recorder=Journal(tmp_path / "events.jsonl")), None, [],
                          tmp_path / "progress.json")
    since = time.time() - 45
    monitor.snapshot = Snapshot(name="s", state="running", time=since, elapsed_s=100.0, metric="val_accuracy",
                                mode="max", max_epochs=8, planned=2, running=1, pending=1, remaining_s_median=18.0,
                                remaining_s_low=13.0, remaining_s_high=21.0, method="monte-carlo")
    monitor.resources_changed(ResourceWait(since, 1, "node 3fa2b1c0 lost"))
    shown = read_live(tmp_path / "progress.json")  # what `hpo status` reads
    assert shown is not None and shown.resources_waiting_since == since
    text = sweep_text(shown)
    clock = time.strftime("%H:%M:%S", time.localtime(since))
    assert f"waiting for resources since {clock} (node 3fa2b1c0 lost) (45s), 1 placement group unplaced" in text
    assert "left [13s-21s] once placed" in text  # the estimate is of training time: the wait comes on top
    monitor.resources_changed(None)
    assert "waiting" not in sweep_text(monitor.snapshot) and monitor.snapshot.resources_waited_s >= 45
    events = [e for e in read_events(tmp_path / "events.jsonl") if e["event"] == "resources"]
    assert [(e["since"], e["note"]) for e in events] == [(since, "node 3fa2b1c0 lost"), (None, "")]
    assert json.loads((tmp_path / "progress.json").read_text())["resources_waiting_since"] is None
