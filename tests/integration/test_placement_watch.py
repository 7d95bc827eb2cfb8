"""The placement watch acting on Ray Tune's real trial executor: a group recreated, a waiting trial failed.

A local Ray of 1 CPU and two trials of 1 CPU each, both allowed at once: the second trial's placement group
waits (staged in Tune) until the first ends. The watch is told a node has room for it (``recreate``), or
that no node type could ever hold it (``fail``), and acts through :mod:`hpo.compat` on Tune's own
controller; each Tune run must then end as Tune would have it.
"""

from __future__ import annotations

import signal
import time

import pytest

from hpo import compat
from hpo.progress.placement_watch import NodeState, PlacementWatch


@pytest.fixture(scope="module")
def ray_session():
    import ray

    from hpo.ray_session import start_ray

    start_ray(num_cpus=1)
    yield
    ray.shutdown()


def _trainable(config: dict) -> None:
    from ray import tune

    time.sleep(config["seconds"])
    tune.report({"done": 1})


class RoomyWatch(PlacementWatch):
    """Sees a node with room for every group (Ray's own view is kept for everything else)."""

    def _nodes(self, now: float) -> list[NodeState]:
        return [*super()._nodes(now), NodeState("roomy000", True, {"CPU": 8.0}, {"CPU": 8.0})]


def _run(watch: PlacementWatch, tmp_path, name: str):
    from ray import tune

    trainable = tune.with_resources(_trainable, tune.PlacementGroupFactory([{"CPU": 1}]))
    tuner = tune.Tuner(
        trainable,
        param_space={"seconds": tune.grid_search([4.0, 0.1])},
        tune_config=tune.TuneConfig(max_concurrent_trials=2),
        run_config=tune.RunConfig(name=name, storage_path=str(tmp_path), callbacks=[watch], verbose=0,
                                  failure_config=tune.FailureConfig(max_failures=1)),
    )
    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGUSR1)}
    try:
        with compat.tune_controller_seen(watch.bind):
            return tuner.fit()
    finally:  # Tune leaves its SIGUSR1 handler installed after its loop (hpo's sweeps restore it)
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def test_a_group_left_unplaced_with_room_is_recreated_and_its_trial_runs(ray_session, tmp_path):
    watch = RoomyWatch(stuck_s=1.0, every_s=0.5)
    results = _run(watch, tmp_path, "recreate")
    assert [d.action for d in watch.actions][:1] == ["recreate"], watch.actions
    assert sorted(r.metrics.get("done") for r in results) == [1, 1]  # both trials ran on the groups Tune got
    assert not results.errors
    from ray.util.placement_group import placement_group_table

    states = [v["state"] for v in placement_group_table().values()]
    assert "PENDING" not in states and "RESCHEDULING" not in states  # the replaced group is gone, not left waiting


def test_a_group_no_node_type_can_hold_fails_its_trial_with_the_reason(ray_session, tmp_path):
    reason = "no node of the cluster and no node type of its autoscaler can hold the trial's 1 bundles"
    watch = PlacementWatch(stuck_s=1.0, every_s=0.5)
    watch._never = lambda nodes: (lambda bundles: reason)  # as if the cluster file had no type that fits
    results = _run(watch, tmp_path, "never")
    assert [d.action for d in watch.actions][:1] == ["fail"], watch.actions
    errors = [str(r.error) for r in results if r.error is not None]
    assert len(errors) == 1 and reason in errors[0], errors
    assert [r.metrics.get("done") for r in results if r.error is None] == [1]  # the trial that had room ran
