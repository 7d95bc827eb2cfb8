"""The simulator host: one detached, threaded, zero-CPU actor per Ray cluster that runs every simulated trial.

A simulated trial needs no process of its own (starting an actor costs a new worker process, seconds): its
replay runs in a thread of :class:`SimulatorHost`, which also keeps each trial group's channel
(:class:`HostChannel`, reached from the trial driver through a :class:`HostedChannel`) and each sweep's
simulated clock (:class:`~hpo.trial.simclock.SimClock`, opened by :class:`~hpo.trial.simtime.SweepClock`).
A replay reaches its channel and its clock in-process, through its :class:`Replay`.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable
from typing import Any

import ray

from hpo.trial.backend import Channel
from hpo.trial.simclock import Participant, SimClock

#: The most real seconds a replay waits for the clock or for the driver to take a report before it gives up
#: (the trial's driver is gone without a stop request).
WAIT_LIMIT_S = 600.0
#: The most real seconds :meth:`HostChannel.drain` waits for a message while a replay runs.
DRAIN_WAIT_S = 1.0


class HostChannel(Channel):
    """A :class:`~hpo.trial.backend.Channel` kept in the :class:`SimulatorHost`, safe for its threads.

    Its replay thread waits on it for the driver to take a report; a stop request also cancels the
    replay's clock sleep, so a stopped trial ends at once instead of at its epoch's simulated end.
    """

    def __init__(self) -> None:
        super().__init__()
        self.cond = threading.Condition()
        #: The replay's place on the sweep's clock (None: real time, or no replay running).
        self.participant: Participant | None = None
        #: A replay runs on this channel (:meth:`drain` waits for its messages).
        self.replaying = False

    def put(self, message: Any) -> None:
        """Queues one message from the replay."""
        with self.cond:
            super().put(message)
            self.cond.notify_all()

    def drain(self) -> list[Any]:
        """Returns and clears the queued messages; while a replay runs, waits up to :data:`DRAIN_WAIT_S` for one.

        (The driver polls its channel; waiting here hands it each report as it comes instead of at its next poll.)
        """
        with self.cond:
            self.cond.wait_for(lambda: self.messages or not self.replaying, DRAIN_WAIT_S)
            return super().drain()

    def replay_running(self, running: bool) -> None:
        """A replay started or ended on this channel."""
        with self.cond:
            self.replaying = running
            self.cond.notify_all()

    def checkpoint_done(self) -> None:
        """The driver handed the last report to Tune (frees the slot, wakes the replay)."""
        with self.cond:
            super().checkpoint_done()
            self.cond.notify_all()

    def request_stop(self) -> None:
        """Asks the replay to stop; cancels its clock sleep."""
        with self.cond:
            super().request_stop()
            participant = self.participant
            self.cond.notify_all()
        if participant is not None:
            participant.cancel()

    def reset(self) -> None:
        """Clears messages, the stop flag and the checkpoint slot for the next trial."""
        with self.cond:
            super().reset()
            self.cond.notify_all()

    def wait_taken(self, timeout_s: float) -> None:
        """Waits until the driver has handed the last report to Tune (the checkpoint slot is free) or a stop came."""
        with self.cond:
            self.cond.wait_for(lambda: not self.checkpoint_busy or self.stop_requested, timeout_s)


class Replay:
    """What one replay thread uses in the host: its channel, and its place on the sweep's clock.

    On a clock (``participant`` set), an epoch is a sleep on the clock, and after each report the replay
    waits, holding the clock, until the driver has handed the report to Tune and Tune has answered (its
    scheduler's decision included), so a stop is decided before simulated time moves on. Without one,
    an epoch sleeps ``simulated_epoch_s`` of real time and the replay does not wait for the driver.
    """

    def __init__(self, channel: HostChannel, clock: SimClock | None = None, participant: Participant | None = None):
        self.channel, self.clock, self.participant = channel, clock, participant

    def now(self) -> float:
        """The time on the trial's clock (Unix time, real or simulated)."""
        return time.time() if self.clock is None else self.clock.now()

    def pause(self, seconds: float) -> bool:
        """One epoch's time; False if a stop request cut it short."""
        if self.participant is None:
            time.sleep(seconds)
            return True
        return self.participant.sleep(seconds, timeout_s=WAIT_LIMIT_S)

    def put(self, message: Any) -> None:
        """Sends one message to the driver."""
        self.channel.put(message)

    def should_stop(self) -> bool:
        """True once the driver asked the trial to stop."""
        return self.channel.should_stop()

    def taken(self) -> None:
        """On a clock: waits until the driver has handed the last report to Tune (or a stop came)."""
        if self.participant is not None:
            self.channel.wait_taken(WAIT_LIMIT_S)


class SimulatorHost:
    """One zero-CPU, threaded actor per Ray cluster that replays every simulated trial and holds its channel.

    Starting an actor costs a new worker process (seconds); a simulated trial needs none of its own. The
    host is detached and named, so the trials of every sweep on the cluster share it; a local Ray that
    hpo started ends it with everything else. It also keeps each sweep's :class:`~hpo.trial.simclock.SimClock`
    (opened by the sweep's :class:`~hpo.trial.simtime.SweepClock`).
    """

    def __init__(self) -> None:
        self.channels: dict[str, HostChannel] = {}
        self.clocks: dict[str, SimClock] = {}
        self.expected: dict[str, int] = {}  # clock -> the last expect() call's number
        self.lock = threading.Lock()

    def call(self, key: str, method: str, *args: Any) -> Any:
        """Calls ``method`` of channel ``key`` (created on first use)."""
        return getattr(self._channel(key), method)(*args)

    def _channel(self, key: str) -> HostChannel:
        with self.lock:
            return self.channels.setdefault(key, HostChannel())

    def run(self, fn: Callable[..., Any], args: list[Any]) -> Any:
        """Runs ``fn(*args)`` in a thread of this actor."""
        return fn(*args)

    def replay(self, fn: Callable[..., Any], args: list[Any], clock: str | None, trial: str) -> Any:
        """Runs one simulated trial (``fn(spec, params, channel, resume)``) in a thread of this actor.

        The channel argument (a :class:`HostedChannel`) is replaced by the trial's :class:`Replay`; with a
        ``clock`` key, the trial joins that clock as ``trial`` (its Tune trial id) until ``fn`` returns.
        """
        spec, params, hosted, *rest = args
        channel = self._channel(hosted.key)
        sim = None if clock is None else self.clock(clock)
        participant = None if sim is None else sim.join(trial)
        channel.participant = participant
        channel.replay_running(True)
        try:
            return fn(spec, params, Replay(channel, sim, participant), *rest)
        finally:
            if participant is not None:
                participant.leave()
                if channel.participant is participant:
                    channel.participant = None
            channel.replay_running(False)

    def clock(self, key: str, start: float | None = None) -> SimClock:
        """The clock ``key`` (opened at ``start``, default now, on first use)."""
        with self.lock:
            found = self.clocks.get(key)
            if found is None:
                found = self.clocks[key] = SimClock(time.time() if start is None else start)
            return found

    def open_clock(self, key: str, start: float) -> None:
        """Opens a sweep's clock at ``start`` (Unix time)."""
        self.clock(key, start)

    def now(self, key: str) -> float | None:
        """The time on clock ``key`` (None: no such clock, or it was closed)."""
        with self.lock:
            found = self.clocks.get(key)
        return None if found is None else found.now()

    def expect(self, key: str, number: int, running: list[str], settling: list[str]) -> None:
        """:meth:`SimClock.expect` of clock ``key``; a call older than the last one applied is ignored.

        (Calls on a threaded actor may run out of order; ``number`` counts them.)
        """
        with self.lock:
            if number <= self.expected.get(key, -1):
                return
            self.expected[key] = number
        self.clock(key).expect(running, settling)

    def close_clock(self, key: str) -> None:
        """Forgets clock ``key`` (its sweep ended)."""
        with self.lock:
            clock = self.clocks.pop(key, None)
            self.expected.pop(key, None)
        if clock is not None:
            clock.close()

    def close(self, key: str) -> None:
        """Forgets channel ``key``."""
        with self.lock:
            self.channels.pop(key, None)


class _Method:
    """``channel.<method>.remote(*args)`` of a :class:`HostedChannel`."""

    def __init__(self, host: Any, key: str, method: str) -> None:
        self.host, self.key, self.method = host, key, method

    def remote(self, *args: Any) -> Any:
        return self.host.call.remote(self.key, self.method, *args)


class HostedChannel:
    """A :class:`~hpo.trial.backend.Channel` kept in the :class:`SimulatorHost`, called as the actor would be."""

    def __init__(self, host: Any, key: str) -> None:
        self.host, self.key = host, key

    def __getattr__(self, method: str) -> _Method:
        if method.startswith("_"):
            raise AttributeError(method)
        return _Method(self.host, self.key, method)


#: Name and namespace of the cluster's :class:`SimulatorHost`.
HOST_NAME, HOST_NAMESPACE = "hpo-simulator", "hpo"


def simulator_host() -> Any:
    """The cluster's :class:`SimulatorHost` (started by the first simulated trial)."""
    actor = ray.remote(SimulatorHost).options(
        name=HOST_NAME,
        namespace=HOST_NAMESPACE,
        lifetime="detached",
        get_if_exists=True,
        num_cpus=0,
        max_concurrency=1000,
        # Its node lost: Ray starts it again on a node that lives (its channels and clocks start empty; the
        # trials that ran in it fail and are retried from their checkpoints, as on any lost node).
        max_restarts=-1,
        # Not in the placement group of the trial that happens to start it (Tune's groups capture child
        # actors): the host would die with that trial's group, and every other trial with it.
        scheduling_strategy="DEFAULT",
    )
    return actor.remote()


