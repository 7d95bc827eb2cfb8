"""The simulated clock: trials that run at once share it, and simulated seconds pass only while all of them wait."""

from __future__ import annotations

import threading
import time

import pytest

from hpo.trial.simclock import SimClock


def _trial(clock: SimClock, key: str, epoch_s: float, epochs: int, log: list, work_s: float = 0.0) -> threading.Thread:
    """A thread that joins ``clock`` as ``key`` and logs ``(time, key, epoch)`` at each epoch's end."""
    member = clock.join(key)

    def run() -> None:
        for epoch in range(1, epochs + 1):
            assert member.sleep(epoch_s, timeout_s=30)
            time.sleep(work_s)  # real work at the epoch's end (reporting it): the clock waits for it
            log.append((clock.now(), key, epoch))
        member.leave()

    return threading.Thread(target=run)


def _run(*threads: threading.Thread) -> None:
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
        assert not t.is_alive()


def test_two_trials_at_once_end_their_epochs_in_the_order_of_simulated_time():
    clock, log = SimClock(), []
    _run(_trial(clock, "fast", 1.0, 6, log), _trial(clock, "slow", 3.0, 2, log))
    assert [t for t, _, _ in log] == [1, 2, 3, 3, 4, 5, 6, 6]
    assert [(t, k, e) for t, k, e in log if k == "slow"] == [(3, "slow", 1), (6, "slow", 2)]
    assert clock.now() == 6


def test_the_clock_waits_for_real_work_however_long_it_takes():
    # The fast trial's work at each epoch end takes real time; the slow trial's epoch still ends after
    # the fast one's third epoch, not earlier because its thread had nothing to do.
    clock, log = SimClock(start=100.0), []
    _run(_trial(clock, "fast", 1.0, 4, log, work_s=0.05), _trial(clock, "slow", 2.5, 1, log))
    assert [(t, k) for t, k, _ in log] == [(101, "fast"), (102, "fast"), (102.5, "slow"), (103, "fast"),
                                           (104, "fast")]


def test_simulated_seconds_take_no_real_time():
    clock, log = SimClock(), []
    started = time.monotonic()
    _run(_trial(clock, "a", 3600.0, 5, log), _trial(clock, "b", 7200.0, 3, log))
    assert clock.now() == 6 * 3600 and time.monotonic() - started < 5


def test_an_expected_trial_that_has_not_joined_holds_the_clock():
    clock = SimClock()
    clock.expect(["a", "b"])
    a = clock.join("a")
    woke = []
    thread = threading.Thread(target=lambda: woke.append(a.sleep(1.0, timeout_s=0.3)))
    thread.start()
    thread.join()
    assert woke == [False] and clock.now() == 0  # "b" never joined: no time passed
    b = clock.join("b")
    # a ends at 1; its place holds the clock until the loop says it no longer runs a; then time goes on to 5
    thread = threading.Thread(target=lambda: (woke.append(a.sleep(1.0, timeout_s=10)), a.leave(), clock.expect(["b"])))
    thread.start()
    assert b.sleep(5.0, timeout_s=10) is True
    thread.join()
    assert woke == [False, True] and clock.now() == 5


def test_a_settling_trial_holds_the_clock_until_the_next_expect():
    clock = SimClock()
    clock.expect(["a"], settling=["gone"])
    a = clock.join("a")
    assert a.sleep(1.0, timeout_s=0.2) is False and clock.now() == 0
    result = []
    thread = threading.Thread(target=lambda: result.append(a.sleep(1.0, timeout_s=10)))
    thread.start()
    time.sleep(0.05)
    assert clock.expect(["a"]) in (0.0, 1.0)  # the loop started no one in its place: time goes on
    thread.join()
    assert result == [True] and clock.now() == 1


def test_a_trial_the_loop_no_longer_runs_holds_nothing():
    # A stopped trial whose replay has not seen the stop yet (awake, or asleep) does not stall the others.
    clock = SimClock()
    stopped, running = clock.join("stopped"), clock.join("running")
    clock.expect(["running"])
    assert running.sleep(2.0, timeout_s=10) is True and clock.now() == 2
    stopped.leave()


def test_cancel_ends_a_sleep_at_once_without_moving_the_clock():
    clock = SimClock()
    a, b = clock.join("a"), clock.join("b")
    result = []
    thread = threading.Thread(target=lambda: result.append(a.sleep(10.0, timeout_s=10)))
    thread.start()
    time.sleep(0.05)
    clock.cancel("a")
    thread.join(timeout=10)
    assert result == [False] and clock.now() == 0
    assert a.sleep(1.0) is False  # a cancelled trial stays cancelled
    a.leave()
    assert b.sleep(1.0, timeout_s=10) is True and clock.now() == 1


def test_joining_again_replaces_and_cancels_the_earlier_attempt():
    clock = SimClock()
    first = clock.join("t")
    second = clock.join("t")
    assert first.sleep(1.0) is False
    first.leave()  # the old attempt leaving does not remove the new one
    other = clock.join("u")
    result = []
    thread = threading.Thread(target=lambda: result.append(other.sleep(1.0, timeout_s=0.2)))
    thread.start()
    thread.join()
    assert result == [False] and clock.now() == 0  # "t" (the second attempt) is awake: it holds the clock
    second.leave()


@pytest.mark.parametrize("seconds", [0.0, -1.0])
def test_a_sleep_of_no_time_returns_at_once(seconds):
    clock = SimClock(start=5.0)
    member = clock.join("a")
    assert member.sleep(seconds, timeout_s=1) is True and clock.now() == 5.0


def test_closing_the_clock_ends_every_wait():
    clock = SimClock()
    clock.expect(["a", "never"])
    a = clock.join("a")
    result = []
    thread = threading.Thread(target=lambda: result.append(a.sleep(1.0, timeout_s=30)))
    thread.start()
    time.sleep(0.05)
    clock.close()
    thread.join(timeout=10)
    assert result == [False] and clock.now() == 0 and a.sleep(1.0) is False
