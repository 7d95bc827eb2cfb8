"""The Keras callbacks a trial's workers train with, each usable and testable on its own.

They know nothing of Ray or Horovod: what they need of them comes in as plain callables (rank 0's poll of
the driver's stop flag, the broadcast that makes every rank agree, the send to the driver, the object
store's put), which :mod:`hpo.trial.worker` builds. Order matters and is the worker's: Horovod's metric
averaging, then :class:`DivergenceStop`, :class:`ResumableEarlyStopping`, :class:`GoalStop`, :class:`SyncedStop`,
:class:`Affinity`, and :class:`EpochStream` last, on rank 0 only (it reads the others' decisions).

This module imports tf-keras (Keras 2): import it only where TensorFlow is wanted.
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from typing import Any

import tf_keras as keras

from hpo.objective import reaches_goal
from hpo.trial.protocol import EpochCheckpoint, EpochReport, Message, TrialStarted

#: Ranks agree on "stop now?" (a tiny broadcast) about this many times per epoch, and at every epoch end.
STOP_CHECKS_PER_EPOCH = 10


class DivergenceStop(keras.callbacks.Callback):
    """Ends training at the first epoch whose loss, validation loss or objective is NaN or infinite.

    Keras' ``TerminateOnNaN`` rule, checked on the epoch's logs: after Horovod's metric averaging every rank
    sees the same values (a NaN on one rank is NaN in the mean), so all ranks stop at the same epoch.

    Args:
        keys: The logs to check; absent ones are skipped.
    """

    def __init__(self, keys: tuple[str, ...] = ("loss", "val_loss")) -> None:
        super().__init__()
        self.keys = keys
        self.diverged = False

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        """Stops training if a checked value is not finite."""
        logs = logs or {}
        if any(key in logs and not math.isfinite(float(logs[key])) for key in self.keys):
            self.diverged = True
            self.model.stop_training = True


class ResumableEarlyStopping(keras.callbacks.EarlyStopping):
    """Keras' EarlyStopping whose best value, wait counter and best weights survive a resume.

    Args:
        resume: The checkpoint a resumed trial starts from (its ``early_stopping`` state and best
            weights), or None.
        **kwargs: EarlyStopping's arguments.
    """

    def __init__(self, resume: EpochCheckpoint | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.resume = resume

    def on_train_begin(self, logs: Any = None) -> None:
        """Starts as Keras does, then takes the checkpoint's state."""
        super().on_train_begin(logs)
        state = self.resume.early_stopping if self.resume is not None else None
        if state:
            self.best, self.wait, self.best_epoch = state["best"], state["wait"], state["best_epoch"]
            self.best_weights = self.resume.best_or_last_weights

    def state(self) -> dict[str, Any]:
        """The checkpoint's ``early_stopping`` entry."""
        return {"best": float(self.best), "wait": int(self.wait), "best_epoch": int(self.best_epoch)}


class SyncedStop(keras.callbacks.Callback):
    """Stops every rank at the same batch when the driver asks.

    Args:
        ask: ``ask(wait)``: rank 0's answer to "did the driver ask to stop?" (always False on other
            ranks); without ``wait`` it may answer from the previous check instead of waiting.
        broadcast: ``broadcast(value, name)``: rank 0's value, on every rank.
        steps_per_epoch: Steps of one epoch; a check runs every ``steps_per_epoch //
            STOP_CHECKS_PER_EPOCH`` batches (at least 10) and at each epoch end (waiting for the answer).

    Attributes:
        requested: True once a stop was agreed (the trial was stopped, not finished).
    """

    def __init__(
        self, ask: Callable[[bool], bool], broadcast: Callable[[bool, str], bool], steps_per_epoch: int
    ) -> None:
        super().__init__()
        self.ask, self.broadcast = ask, broadcast
        self.every = max(10, steps_per_epoch // STOP_CHECKS_PER_EPOCH)
        self.requested = False

    def _check(self, name: str, wait: bool) -> None:
        if self.broadcast(self.ask(wait), name):
            self.requested = True
            self.model.stop_training = True

    def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
        """Checks every :attr:`every` batches without waiting for the driver."""
        if (batch + 1) % self.every == 0:
            self._check("hpo.stop.batch", wait=False)

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        """Checks at the epoch's end, waiting for the driver's answer."""
        self._check("hpo.stop.epoch", wait=True)


class GoalStop(keras.callbacks.Callback):
    """Ends training at the first epoch whose (averaged) objective reaches ``objective.goal``.

    The sweep ends there too (``hpo.search.GoalStopper``); ending the trial as finished rather than letting
    Tune stop it keeps its final model, so the trial that reached the goal can be the registered model.

    Args:
        metric: The objective metric.
        goal: The goal (None: never stop).
        mode: ``max`` or ``min``.
    """

    def __init__(self, metric: str, goal: float | None, mode: str) -> None:
        super().__init__()
        self.metric, self.goal, self.mode = metric, goal, mode
        self.reached = False

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        """Stops training if this epoch's objective reaches the goal."""
        if self.goal is not None and reaches_goal((logs or {}).get(self.metric), self.goal, self.mode):
            self.reached = True
            self.model.stop_training = True


class Affinity(keras.callbacks.Callback):
    """Calls ``refresh`` at each epoch's start (the worker re-pins itself to its claimed cores)."""

    def __init__(self, refresh: Callable[[], None]) -> None:
        super().__init__()
        self.refresh = refresh

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        """Refreshes the pin."""
        self.refresh()


def _floats(logs: dict[str, Any] | None) -> dict[str, float]:
    return {k: float(v) for k, v in (logs or {}).items() if hasattr(v, "__float__")}


class EpochStream(keras.callbacks.Callback):
    """Rank 0: sends :class:`TrialStarted`, then each epoch's metrics and checkpoint as an :class:`EpochReport`.

    Args:
        send: Delivers a message to the trial driver (returns once it is delivered).
        put: Stores weights where the driver can fetch them (the object store); returns a reference.
        early: The trial's EarlyStopping (its state goes into the checkpoint; its stop ends training).
        goal: The trial's goal stop.
        max_epochs: The trial's last epoch.
        clock: Wall-clock time.
        divergence: The trial's divergence stop (None: not checked).
        checkpoint_wanted: Whether the driver takes this epoch's weights (False while it still persists the
            previous checkpoint; the last epoch always carries them). None: every epoch.
    """

    def __init__(
        self,
        send: Callable[[Message], None],
        put: Callable[[Any], Any],
        early: ResumableEarlyStopping,
        goal: GoalStop,
        max_epochs: int,
        clock: Callable[[], float] = time.time,
        divergence: DivergenceStop | None = None,
        checkpoint_wanted: Callable[[], bool] | None = None,
    ) -> None:
        super().__init__()
        self.send, self.put, self.early, self.goal = send, put, early, goal
        self.max_epochs, self.clock, self.divergence = max_epochs, clock, divergence
        self.checkpoint_wanted = checkpoint_wanted or (lambda: True)
        self.epoch_start = 0.0

    def on_train_begin(self, logs: Any = None) -> None:
        """Tells the driver training starts."""
        self.epoch_start = self.clock()
        self.send(TrialStarted(self.epoch_start))

    def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
        """Starts the epoch's clock."""
        self.epoch_start = self.clock()

    def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
        """Sends the epoch's report, with the checkpoint a resumed trial needs."""
        now, early = self.clock(), self.early
        stopping = bool(self.model.stop_training)
        diverged = self.divergence is not None and self.divergence.diverged
        improved = early.best_epoch == epoch
        last = stopping or epoch + 1 >= self.max_epochs
        state = {"epoch": epoch + 1, "early_stopping": early.state()}
        if last or self.checkpoint_wanted():
            checkpoint = EpochCheckpoint(
                state=state,
                weights=self.put(self.model.get_weights()),
                best_weights=None if improved or early.best_weights is None else self.put(early.best_weights),
            )
        else:
            checkpoint = EpochCheckpoint(state=state, weights=None)  # the driver still persists the last one
        self.send(
            EpochReport(
                epoch=epoch + 1,
                metrics=_floats(logs),
                epoch_time_s=now - self.epoch_start,
                time=now,
                last=last,
                stopped_by_patience=stopping and early.stopped_epoch > 0 and not diverged,
                stopped_by_goal=self.goal.reached and not diverged,
                checkpoint=checkpoint,
                diverged=diverged,
            )
        )
