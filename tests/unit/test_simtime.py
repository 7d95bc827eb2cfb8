"""What the sweep's clock hears from Tune's loop: which trials run or start, which just ended."""

from __future__ import annotations

from types import SimpleNamespace

from hpo.trial.simclock import SimClock
from hpo.trial.simhost import SimulatorHost
from hpo.trial.simtime import START_HOLD_S, SweepClock


class _Direct:
    """Stands for the host's actor handle: ``.method.remote(...)`` runs the host's method at once."""

    def __init__(self, host: SimulatorHost) -> None:
        self.host, self.calls = host, []

    def __getattr__(self, name: str):
        def remote(*args):
            self.calls.append((name, args))
            return getattr(self.host, name)(*args)

        return SimpleNamespace(remote=remote)


def _trials(**status: str) -> list:
    return [SimpleNamespace(trial_id=k, status=v) for k, v in status.items()]


def _clock() -> tuple[SweepClock, _Direct, SimClock]:
    host = SimulatorHost()
    clock = SweepClock("k", 100.0)
    clock._host = _Direct(host)
    host.open_clock("k", 100.0)
    return clock, clock._host, host.clocks["k"]


def test_running_and_starting_trials_hold_the_clock_and_an_ended_one_holds_it_one_step_more():
    clock, direct, sim = _clock()
    clock.on_step_end(0, _trials(a="RUNNING", b="PENDING", c="PAUSED", d="TERMINATED"))
    assert direct.calls[-1] == ("expect", ("k", 1, ["a", "b"], []))
    assert sim._running == {"a", "b"} and sim._settling == set()
    clock.on_step_end(1, _trials(a="RUNNING", b="PENDING", c="PAUSED", d="TERMINATED"))
    assert len(direct.calls) == 1  # nothing changed: nothing sent
    clock.on_step_end(2, _trials(a="TERMINATED", b="RUNNING", c="PAUSED", d="TERMINATED"))
    assert direct.calls[-1] == ("expect", ("k", 2, ["b"], ["a"]))
    clock.on_step_end(3, _trials(a="TERMINATED", b="RUNNING", e="RUNNING"))
    assert direct.calls[-1] == ("expect", ("k", 3, ["b", "e"], []))


def test_a_trial_pending_longer_than_the_start_hold_no_longer_holds_the_clock():
    clock, direct, _ = _clock()
    clock.on_step_end(0, _trials(a="RUNNING", b="PENDING"))
    clock._pending_since["b"] -= START_HOLD_S + 1  # waited for resources that long
    clock.on_step_end(1, _trials(a="RUNNING", b="PENDING"))
    assert direct.calls[-1] == ("expect", ("k", 2, ["a"], ["b"]))


def test_an_older_expect_that_arrives_late_is_ignored():
    host = SimulatorHost()
    host.open_clock("k", 0.0)
    host.expect("k", 2, ["new"], [])
    host.expect("k", 1, ["old"], ["gone"])
    assert host.clocks["k"]._running == {"new"} and host.clocks["k"]._settling == set()


def test_the_time_of_a_result_is_its_epoch_end_until_the_step_ends():
    clock, direct, _ = _clock()
    assert clock.now() == 100.0
    clock.on_trial_result(0, [], None, {"epoch_end_time": 103.5})
    assert clock.now() == 103.5
    clock.on_step_end(0, [])
    assert clock.now() == 100.0  # the host's clock again
    clock.on_experiment_end([])
    assert clock.now() == 100.0 and "k" not in direct.host.clocks  # the last reading, once closed


def test_a_trial_waiting_for_a_free_slot_does_not_hold_the_clock():
    # Two at once: a paused trial Tune wants to resume (PENDING) waits until one of the two running ends.
    host = SimulatorHost()
    clock = SweepClock("k", 0.0, max_concurrent=2)
    clock._host = direct = _Direct(host)
    clock.on_step_end(0, _trials(a="RUNNING", b="RUNNING", c="PENDING"))
    assert direct.calls[-1] == ("expect", ("k", 1, ["a", "b"], []))
    clock.on_step_end(1, _trials(a="TERMINATED", b="RUNNING", c="PENDING", d="PENDING"))
    assert direct.calls[-1] == ("expect", ("k", 2, ["b", "c"], ["a"]))  # one slot free: the first waiting takes it
