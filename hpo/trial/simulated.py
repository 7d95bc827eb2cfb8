"""A simulated trial backend: synthetic learning curves replayed without TensorFlow or Horovod.

``trial.backend: simulated`` runs every trial through the real driver, Tune, scheduler, searcher,
MLflow tracking and ``summary.json``, but its "training" replays a learning curve determined by the
trial's parameters, seed and repeat, in a thread of one zero-CPU actor shared by the cluster
(:class:`~hpo.trial.simhost.SimulatorHost`, no new process per trial): it sends the same messages rank 0
of a Horovod group sends (:class:`~hpo.trial.protocol.TrialStarted`, one
:class:`~hpo.trial.protocol.EpochReport` per epoch with a checkpoint), applies the same stopping rules
(Keras EarlyStopping semantics, ``max_epochs``, the objective goal) and honours the driver's stop
requests before each epoch. It exists to test search and scheduling logic in seconds; it trains no
model, so a simulated trial has no ``model.keras`` and no model is registered.

By default (``trial.simulated_clock``) an epoch takes ``simulated_epoch_s`` on the sweep's simulated clock
(:mod:`hpo.trial.simclock`, kept in the host, told by :class:`~hpo.trial.simtime.SweepClock` which trials
Tune runs): the trials running at once advance together, each report is handed to Tune before simulated
time moves on, and every time a message carries is on that clock. Otherwise an epoch sleeps that long in
real time.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
import uuid
from dataclasses import dataclass
from typing import Any

import numpy as np
import ray

from hpo.objective import reaches_goal
from hpo.results import REPEAT_KEY
from hpo.trial.backend import WARM_POOL, PooledGroup
from hpo.trial.protocol import EpochCheckpoint, EpochReport, TrialStarted
from hpo.trial.simhost import HostedChannel, Replay, simulator_host
from hpo.trial.spec import TrialSpec

#: Standard deviation of the per-epoch noise on the accuracy curve.
NOISE = 0.01


def _unit(text: str, salt: str) -> float:
    """A number in [0, 1) determined by ``text`` and ``salt``."""
    digest = hashlib.sha256(f"{salt}:{text}".encode()).digest()
    return int.from_bytes(digest[:8], "big") / 2**64


@dataclass(frozen=True)
class SyntheticCurve:
    """An accuracy curve ``ceiling - (ceiling - start) * epoch ** -rate`` plus seeded noise.

    The ceiling and rate follow from the parameters (a learning rate far from 1e-2 lowers the ceiling,
    so searchers have something to find); the noise from the sweep's seed and the repeat index, so
    repeats of one configuration differ and a resumed trial replays the same values.
    """

    ceiling: float
    rate: float
    noise: tuple[float, ...]
    start: float = 0.1

    @classmethod
    def for_trial(cls, spec: TrialSpec, params: dict[str, Any]) -> SyntheticCurve:
        """The curve of one trial."""
        config = {k: v for k, v in params.items() if k != REPEAT_KEY}
        key = json.dumps(config, sort_keys=True, default=str)
        ceiling = 0.55 + 0.4 * _unit(key, "ceiling")
        lr = config.get("learning_rate")
        if isinstance(lr, int | float) and lr > 0:
            ceiling = 0.1 + (ceiling - 0.1) * math.exp(-((math.log10(lr) + 2) ** 2) / 2)
        rate = 0.5 + 1.5 * _unit(key, "rate")
        repeat = int(params.get(REPEAT_KEY, 0))
        seed = int(_unit(key, f"noise:{spec.seed}:{repeat}") * 2**32)
        noise = np.random.default_rng(seed).normal(0.0, NOISE, spec.max_epochs)
        return cls(ceiling=ceiling, rate=rate, noise=tuple(float(n) for n in noise))

    def accuracy(self, epoch: int) -> float:
        """The (noisy) validation accuracy after ``epoch`` (1-based), within [0, 1]."""
        trend = self.ceiling - (self.ceiling - self.start) * epoch**-self.rate
        return min(1.0, max(0.0, trend + self.noise[epoch - 1]))

    def metrics(self, epoch: int) -> dict[str, float]:
        """Keras-style epoch logs: accuracy and a loss that falls as accuracy rises."""
        val = self.accuracy(epoch)
        train = min(1.0, val + 0.02)
        return {
            "accuracy": train,
            "loss": -math.log(max(train, 1e-6)),
            "val_accuracy": val,
            "val_loss": -math.log(max(val, 1e-6)),
        }


class EarlyStopping:
    """Keras' ``EarlyStopping`` rule (``monitor``, ``mode``, ``patience``, ``min_delta``), without Keras."""

    def __init__(self, mode: str, patience: int, min_delta: float, state: dict[str, Any] | None = None) -> None:
        self.sign = 1.0 if mode == "max" else -1.0
        self.patience, self.min_delta = patience, abs(min_delta)
        state = state or {}
        self.best = float(state.get("best", -self.sign * math.inf))
        self.wait = int(state.get("wait", 0))
        self.best_epoch = int(state.get("best_epoch", 0))
        self.stopped = False

    def update(self, value: float, epoch: int) -> None:
        """Takes the value of 0-based ``epoch`` (as Keras' ``on_epoch_end``) and decides whether to stop."""
        self.wait += 1
        if self.sign * (value - self.best) - self.min_delta > 0:
            self.best, self.best_epoch, self.wait = value, epoch, 0
            return
        if self.wait >= self.patience and epoch > 0:
            self.stopped = True

    def state(self) -> dict[str, Any]:
        """The checkpoint's ``early_stopping`` entry."""
        return {"best": self.best, "wait": self.wait, "best_epoch": self.best_epoch}


def run_simulated(
    spec: TrialSpec, params: dict[str, Any], channel: Replay, resume: EpochCheckpoint | None = None
) -> dict[str, Any]:
    """Replays one trial's curve, reporting each epoch through ``channel`` as rank 0 would.

    Args:
        spec: The sweep's trial spec (``simulated_epoch_s`` is the time one epoch takes).
        params: The trial's sampled parameters.
        channel: The trial's :class:`Replay`: its channel and its clock, in the :class:`SimulatorHost`.
        resume: The last checkpoint (its epoch and early-stopping state), as the driver loads it.

    Returns:
        The per-rank facts the Horovod worker returns, for rank 0 (no model, no rows read).
    """
    curve = SyntheticCurve.for_trial(spec, params)
    initial = resume.epoch if resume else 0
    early = EarlyStopping(spec.objective_mode, spec.patience, spec.min_delta, resume.early_stopping if resume else None)
    channel.put(TrialStarted(channel.now()))
    for epoch in range(initial, spec.max_epochs):
        if channel.should_stop():
            break
        started = channel.now()
        if not channel.pause(spec.simulated_epoch_s):
            break  # a stop request ended the epoch
        metrics = curve.metrics(epoch + 1)
        early.update(metrics[spec.objective_metric], epoch)
        goal = spec.goal is not None and reaches_goal(metrics[spec.objective_metric], spec.goal, spec.objective_mode)
        last = early.stopped or goal or epoch + 1 >= spec.max_epochs
        state = {"epoch": epoch + 1, "early_stopping": early.state()}
        ended = channel.now()
        report = EpochReport(
            epoch=epoch + 1,
            metrics=metrics,
            epoch_time_s=ended - started,
            time=ended,
            last=last,
            stopped_by_patience=early.stopped and not goal,
            stopped_by_goal=goal,
            checkpoint=EpochCheckpoint(state=state, weights=ray.put([np.array([float(epoch + 1)])])),
        )
        channel.put(report)
        if last:
            break
        channel.taken()
    hyper = spec.hyper(params)
    return {
        "rank": 0,
        "size": spec.workers,
        "pid": os.getpid(),
        "learning_rate": hyper["effective_learning_rate"],
        "initial_epoch": initial,
        "epoch_rows": [],
        "epoch_ids": [],
    }


class SimulatedBackend(PooledGroup):
    """A simulated trial's "group": a channel in the cluster's :class:`SimulatorHost`, which replays the curve.

    The trial's resources stay reserved in its placement group, as they would for Horovod workers.

    Attributes:
        clock: The key of the sweep's simulated clock in the host (None: epochs take real time).
    """

    shape = ("simulated",)

    def __init__(self, clock: str | None = None) -> None:
        self.host = simulator_host()
        self.channel = HostedChannel(self.host, uuid.uuid4().hex)
        self.clock = clock
        self.refs: list[Any] = []

    def now(self) -> float:
        """The time the trial's messages are stamped with: the sweep's simulated clock, or the wall clock."""
        if self.clock is None:
            return time.time()
        now = ray.get(self.host.now.remote(self.clock))
        return time.time() if now is None else now

    def started_at(self, wall_start: float) -> float:
        """On a simulated clock, the trial starts at its present reading (it stands still while a trial starts)."""
        return wall_start if self.clock is None else self.now()

    def launch(self, fn: Any, args: list[Any]) -> list[Any]:
        """Runs ``fn(*args)`` in a thread of the host (the simulated rank 0), on the sweep's clock if it has one."""
        ray.get(self.channel.reset.remote())
        trial = _trial_id() or self.channel.key
        self.refs = [self.host.replay.remote(fn, args, self.clock, trial)]
        return self.refs

    def release(self, reusable: bool) -> None:
        """Keeps the channel for the next trial, or stops the replay and drops the channel."""
        if self.pool(reusable):
            return
        self.channel.request_stop.remote()
        ray.wait(self.refs, num_returns=len(self.refs), timeout=10)
        self.host.close.remote(self.channel.key)


def _trial_id() -> str | None:
    """The Tune trial this process runs (None outside a trial): its key on the sweep's clock."""
    from ray import tune

    try:
        return tune.get_context().get_trial_id()
    except Exception:  # noqa: BLE001 - no Tune session here (a direct launch)
        return None


def acquire(spec: TrialSpec) -> SimulatedBackend:
    """The warm simulated group of this process, or a new one; on the sweep's clock (``spec.clock_key``)."""
    group = WARM_POOL.take(SimulatedBackend.shape) or SimulatedBackend()
    group.clock = spec.clock_key
    return group
