"""A simulated clock shared by the trials that run at once: simulated seconds pass only when all of them wait.

Each trial that runs on the clock is a *participant*: it joins (:meth:`SimClock.join`), then alternates between
work (reporting an epoch, waiting for the driver to take it) and :meth:`Participant.sleep` ("my epoch
takes 3 simulated seconds"). While any participant works, or any trial the clock expects (:meth:`SimClock.expect`)
has not joined yet, the clock stands still; once every one of them sleeps, it jumps to the earliest
wake-up and wakes every participant due then. So epochs of trials that run at once end in the order
simulated time says, however long the real work between them takes, and a sweep takes the real time its
work needs, not the simulated time its epochs stand for.

Who runs is told by the tuner's loop (:meth:`SimClock.expect`): the trials it has started or is starting
(they hold the clock until they join and sleep) and those that just ended (they hold it until the loop
has had a chance to start the next trial in their place). A participant that the loop no longer runs holds
nothing: a stopped trial's replay cannot stall the others. Without an :meth:`~SimClock.expect`, every
participant counts. Pure Python (threads and a condition variable): the simulated backend keeps one clock
per sweep in its host actor; a replay of recorded learning curves would use the same.
"""

from __future__ import annotations

import math
import threading
import time
from collections.abc import Iterable


class Participant:
    """One trial on a :class:`SimClock` (from :meth:`SimClock.join`)."""

    def __init__(self, clock: SimClock, key: str) -> None:
        self.clock, self.key = clock, key
        #: Simulated time it sleeps until (None: awake).
        self.wake: float | None = None
        self.cancelled = False

    def sleep(self, seconds: float, timeout_s: float | None = None) -> bool:
        """Waits until the clock has advanced ``seconds`` simulated seconds from now.

        Args:
            seconds: Simulated seconds (>= 0).
            timeout_s: The most real seconds to wait (None: no limit).

        Returns:
            True once the clock reached the wake-up; False if :meth:`cancel` (or a later :meth:`SimClock.join`
            of the same key, or :meth:`leave`) ended the wait first, or ``timeout_s`` passed.
        """
        return self.clock._sleep(self, seconds, timeout_s)

    def cancel(self) -> None:
        """Ends the current (and any later) :meth:`sleep` at once, without moving the clock (a stop request)."""
        self.clock._cancel(self)

    def leave(self) -> None:
        """The trial ended: it no longer holds the clock (idempotent)."""
        self.clock._leave(self)


class SimClock:
    """Simulated time for trials that run at once (see the module docstring).

    Args:
        start: The clock's reading before any time passed (e.g. the sweep's Unix start time, so simulated
            times read as Unix times).
    """

    def __init__(self, start: float = 0.0) -> None:
        self._now = float(start)
        self._cond = threading.Condition()
        self._members: dict[str, Participant] = {}
        self._running: set[str] | None = None
        self._settling: set[str] = set()

    def now(self) -> float:
        """The simulated time."""
        with self._cond:
            return self._now

    def join(self, key: str) -> Participant:
        """A trial starts running on the clock (awake: it holds the clock until it sleeps).

        A participant already joined under ``key`` (an earlier attempt of the same trial) is cancelled and
        replaced.
        """
        with self._cond:
            old = self._members.get(key)
            if old is not None:
                old.cancelled, old.wake = True, None
            member = self._members[key] = Participant(self, key)
            self._cond.notify_all()
            return member

    def cancel(self, key: str) -> None:
        """Cancels the participant joined under ``key``, if there is one (see :meth:`Participant.cancel`)."""
        with self._cond:
            member = self._members.get(key)
        if member is not None:
            member.cancel()

    def expect(self, running: Iterable[str] | None, settling: Iterable[str] = ()) -> float:
        """What the tuner's loop runs; returns the simulated time.

        Args:
            running: Keys of the trials it runs or is starting: each holds the clock until it has joined and
                sleeps; participants not among them hold nothing. None: every participant counts (the default).
            settling: Keys of trials that just ended: they hold the clock until the next call, so the loop
                can start the next trial in their place before time moves on.
        """
        with self._cond:
            self._running = None if running is None else set(running)
            self._settling = set(settling)
            self._advance()
            return self._now

    def close(self) -> None:
        """Ends every participant's wait (their sweep ended); later sleeps return False at once."""
        with self._cond:
            for member in self._members.values():
                member.cancelled, member.wake = True, None
            self._cond.notify_all()

    # -- inside -------------------------------------------------------------------------------------

    def _counts(self, member: Participant) -> bool:
        return self._running is None or member.key in self._running

    def _held(self) -> bool:
        """True while some counted participant is awake, or an expected trial has not joined yet."""
        if self._settling:
            return True
        for member in self._members.values():
            if member.wake is None and self._counts(member):
                return True
        return any(key not in self._members for key in self._running or ())

    def _advance(self) -> None:
        """Jumps to the earliest counted wake-up once nothing holds the clock; wakes everyone due (lock held)."""
        if self._held():
            return
        wakes = [m.wake for m in self._members.values() if m.wake is not None and self._counts(m)]
        if not wakes:
            return
        self._now = max(self._now, min(wakes))
        for member in self._members.values():
            if member.wake is not None and member.wake <= self._now:
                member.wake = None
        self._cond.notify_all()

    def _sleep(self, member: Participant, seconds: float, timeout_s: float | None) -> bool:
        deadline = math.inf if timeout_s is None else time.monotonic() + timeout_s
        with self._cond:
            if member.cancelled or self._members.get(member.key) is not member:
                return False
            member.wake = self._now + max(0.0, float(seconds))
            self._advance()
            while member.wake is not None and not member.cancelled:
                left = deadline - time.monotonic()
                if left <= 0:
                    break
                self._cond.wait(None if math.isinf(left) else left)
            woke = member.wake is None and not member.cancelled
            member.wake = None  # awake again (holding the clock) whatever ended the wait
            return woke

    def _cancel(self, member: Participant) -> None:
        with self._cond:
            member.cancelled = True
            member.wake = None
            self._cond.notify_all()

    def _leave(self, member: Participant) -> None:
        with self._cond:
            member.cancelled, member.wake = True, None
            if self._members.get(member.key) is member:
                del self._members[member.key]
            self._advance()
            self._cond.notify_all()
