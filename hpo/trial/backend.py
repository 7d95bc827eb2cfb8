"""The distributed backend seam: how a trial gets N workers and runs a function on all of them.

The trial driver speaks only to :class:`Backend`; :class:`HorovodBackend` (``horovod.ray.RayExecutor``,
Gloo on CPU, NCCL on GPU) is the default; :mod:`hpo.trial.simulated` replays synthetic learning curves
behind the same protocol, for tests of the search and scheduling logic. A backend built on e.g. Ray
Train's TensorflowTrainer would implement the same members without touching search, tracking or data;
``hpo.trial.driver.BACKENDS`` maps ``trial.backend`` to a backend and the function its ranks run.

Warm workers: a started Horovod group (worker actors with TensorFlow imported and Horovod initialised)
is kept in this process's :data:`WARM_POOL` after a trial that ended cleanly, and handed to the next
trial of the same shape that Tune schedules on this (reused) trial actor. Start-up then costs a function
call instead of actor start + TF import + rendezvous. The pool is per process because the trial actor's
process is what Tune reuses between trials.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from typing import Any, Protocol

import ray

from hpo import compat
from hpo.trial.protocol import Message

#: Seconds to wait for Gloo rendezvous before a trial fails.
RENDEZVOUS_TIMEOUT_S = 120


class Backend(Protocol):
    """A group of data-parallel workers for one trial.

    Attributes:
        channel: An actor handle with ``put``/``drain``/``request_stop``/``should_stop``/``reset``
            (see :class:`Channel`) through which rank 0 reports and the driver asks for a stop.
    """

    channel: Any

    def launch(self, fn: Callable[..., Any], args: list[Any]) -> list[Any]:
        """Runs ``fn(*args)`` on every worker; returns one Ray object ref per rank (rank order)."""
        ...

    def release(self, reusable: bool) -> None:
        """Ends the trial's use of the workers: keep them warm (``reusable``) or tear them down."""
        ...

    @property
    def warm(self) -> bool:
        """True if the workers were already started by an earlier trial."""
        ...

    def now(self) -> float:
        """The clock rank 0 stamps its messages with: the wall clock, or a simulated sweep's clock."""
        ...

    def started_at(self, wall_start: float) -> float:
        """The trial's start on :meth:`now`'s clock, given the wall time its driver began."""
        ...


class Channel:
    """Rank 0 → driver messages and driver → workers stop requests (a zero-CPU actor per group)."""

    def __init__(self) -> None:
        self.messages: list[Message] = []
        self.stop_requested = False
        self.checkpoint_busy = False

    def put(self, message: Message) -> None:
        """Queues one message from rank 0 (one that carries weights makes the checkpoint slot busy)."""
        self.messages.append(message)
        if getattr(getattr(message, "checkpoint", None), "weights", None) is not None:
            self.checkpoint_busy = True

    def checkpoint_wanted(self) -> bool:
        """True if the driver has persisted the last checkpoint it got (rank 0 may hand over the next one).

        Keeps checkpoint writes off the training's critical path: rank 0 never waits for an upload, and at
        most one checkpoint is on its way to the storage at a time (epochs in between go without one).
        """
        return not self.checkpoint_busy

    def checkpoint_done(self) -> None:
        """The driver persisted the checkpoint it had (frees the slot)."""
        self.checkpoint_busy = False

    def drain(self) -> list[Message]:
        """Returns and clears the queued messages."""
        out, self.messages = self.messages, []
        return out

    def request_stop(self) -> None:
        """Asks the workers to stop at their next check."""
        self.stop_requested = True

    def should_stop(self) -> bool:
        """True once a stop was requested."""
        return self.stop_requested

    def reset(self) -> None:
        """Clears messages, the stop flag and the checkpoint slot for the next trial."""
        self.messages, self.stop_requested, self.checkpoint_busy = [], False, False


class PooledGroup:
    """What every group kept in the :data:`WARM_POOL` shares: a channel, a warm flag and a liveness check.

    Subclasses set ``shape`` and ``channel`` and may add :meth:`probes`.
    """

    shape: tuple[Any, ...]
    channel: Any
    _warm = False

    @property
    def warm(self) -> bool:
        """True if an earlier trial already ran on this group."""
        return self._warm

    def now(self) -> float:
        """The wall clock (rank 0 stamps its messages with it)."""
        return time.time()

    def started_at(self, wall_start: float) -> float:
        """``wall_start``: on the wall clock, the trial started when its driver began."""
        return wall_start

    def probes(self) -> list[Any]:
        """Calls that must answer, besides the channel's, for the group to be alive."""
        return []

    def alive(self) -> bool:
        """True if the channel and every probe answer within 10 s."""
        try:
            ray.get([*self.probes(), self.channel.drain.remote()], timeout=10)
            return True
        except (ray.exceptions.RayError, TimeoutError):
            return False

    def pool(self, reusable: bool) -> bool:
        """Keeps the group warm for the next trial if ``reusable`` (returns True), else drops it from the pool."""
        if reusable:
            self._warm = True
            WARM_POOL.keep(self)
            return True
        WARM_POOL.forget(self)
        return False


class HorovodBackend(PooledGroup):
    """Horovod-on-Ray workers placed in the trial's placement group.

    Args:
        workers: Number of ranks.
        cpus_per_worker: CPUs reserved per rank.
        gpus_per_worker: GPUs per rank (fractions allowed).
        rendezvous_host: Where Horovod's rendezvous server listens and its workers find it: ``127.0.0.1``
            on a one-machine Ray hpo started; None: this node's Ray address (a cluster).
    """

    def __init__(
        self, workers: int, cpus_per_worker: float, gpus_per_worker: float, rendezvous_host: str | None = None
    ) -> None:
        from horovod.ray import RayExecutor

        self.shape = (workers, cpus_per_worker, gpus_per_worker)
        settings = RayExecutor.create_settings(timeout_s=RENDEZVOUS_TIMEOUT_S)
        self.executor = RayExecutor(
            settings,
            num_workers=workers,
            cpus_per_worker=cpus_per_worker,
            use_gpu=gpus_per_worker > 0,
            gpus_per_worker=gpus_per_worker or None,
        )
        self.channel = ray.remote(Channel).options(num_cpus=0).remote()
        started = time.time()
        with compat.horovod_rendezvous_on(rendezvous_host or compat.ray_node_address()):  # not every interface
            self.executor.start()
        self.start_s = time.time() - started
        self.actors = compat.horovod_worker_actors(self.executor)

    def probes(self) -> list[Any]:
        """One call per worker actor: they must answer for the group to be alive."""
        return [a.hostname.remote() for a in self.actors]

    def launch(self, fn: Callable[..., Any], args: list[Any]) -> list[Any]:
        """Runs ``fn(*args)`` on every rank."""
        ray.get(self.channel.reset.remote())
        return self.executor.run_remote(fn, args=args)

    def release(self, reusable: bool) -> None:
        """Keeps the group for the next trial, or kills every worker actor and the channel."""
        if self.pool(reusable):
            return
        for actor in self.actors:
            ray.kill(actor, no_restart=True)
        try:
            self.executor.shutdown()
        except Exception:  # noqa: BLE001 - the actors are gone already; nothing else to release
            pass
        ray.kill(self.channel, no_restart=True)


class WarmPool:
    """The worker group a finished trial left started, for the next trial of this process.

    A group has a ``shape`` (what a trial needs of it), ``alive()`` and ``release(reusable)``.
    """

    def __init__(self) -> None:
        self._group: Any = None

    def keep(self, group: Any) -> None:
        """Holds ``group`` for the next :meth:`take` (one group at most: the trial actor runs one trial)."""
        self._group = group

    def forget(self, group: Any) -> None:
        """Drops ``group`` if it is the one held (it is being torn down)."""
        if self._group is group:
            self._group = None

    def take(self, shape: tuple[Any, ...]) -> Any:
        """The held group if it has this shape and still answers; a held group that does not is torn down."""
        group, self._group = self._group, None
        if group is None:
            return None
        if group.shape == shape and group.alive():
            return group
        group.release(reusable=False)
        return None


#: The warm group of this process (the trial actor), if the previous trial left one.
WARM_POOL = WarmPool()


def acquire(
    workers: int, cpus_per_worker: float, gpus_per_worker: float, rendezvous_host: str | None = None
) -> HorovodBackend:
    """Returns the warm group if it has this shape and is alive, else starts a new one."""
    shape = (workers, cpus_per_worker, gpus_per_worker)
    return WARM_POOL.take(shape) or HorovodBackend(*shape, rendezvous_host=rendezvous_host)
