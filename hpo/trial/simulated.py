"""A simulated trial backend: synthetic learning curves replayed without TensorFlow or Horovod.

``trial.backend: simulated`` runs every trial through the real driver, Tune, scheduler, searcher,
MLflow tracking and ``summary.json``, but its "training" replays a learning curve determined by the
trial's parameters, seed and repeat, in a thread of one zero-CPU actor shared by the cluster
(:class:`SimulatorHost`, no new process per trial): it sends the same messages rank 0
of a Horovod group sends (:class:`~hpo.trial.protocol.TrialStarted`, one
:class:`~hpo.trial.protocol.EpochReport` per epoch with a checkpoint), applies the same stopping rules
(Keras EarlyStopping semantics, ``max_epochs``, the objective goal) and honours the driver's stop
requests before each epoch. It exists to test search and scheduling logic in seconds; it trains no
model, so a simulated trial has no ``model.keras`` and no model is registered.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import time
import uuid
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import numpy as np
import ray

from hpo.objective import reaches_goal
from hpo.results import REPEAT_KEY
from hpo.trial.backend import WARM_POOL, Channel, PooledGroup
from hpo.trial.protocol import EpochCheckpoint, EpochReport, TrialStarted
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
    spec: TrialSpec, params: dict[str, Any], channel: Any, resume: EpochCheckpoint | None = None
) -> dict[str, Any]:
    """Replays one trial's curve, reporting each epoch through ``channel`` as rank 0 would.

    Args:
        spec: The sweep's trial spec (``simulated_epoch_s`` is the time one epoch takes).
        params: The trial's sampled parameters.
        channel: The group's :class:`~hpo.trial.backend.Channel` actor.
        resume: The last checkpoint (its epoch and early-stopping state), as the driver loads it.

    Returns:
        The per-rank facts the Horovod worker returns, for rank 0 (no model, no rows read).
    """
    curve = SyntheticCurve.for_trial(spec, params)
    initial = resume.epoch if resume else 0
    early = EarlyStopping(spec.objective_mode, spec.patience, spec.min_delta, resume.early_stopping if resume else None)
    ray.get(channel.put.remote(TrialStarted(time.time())))
    for epoch in range(initial, spec.max_epochs):
        if ray.get(channel.should_stop.remote()):
            break
        started = time.time()
        time.sleep(spec.simulated_epoch_s)
        metrics = curve.metrics(epoch + 1)
        early.update(metrics[spec.objective_metric], epoch)
        goal = spec.goal is not None and reaches_goal(metrics[spec.objective_metric], spec.goal, spec.objective_mode)
        last = early.stopped or goal or epoch + 1 >= spec.max_epochs
        state = {"epoch": epoch + 1, "early_stopping": early.state()}
        report = EpochReport(
            epoch=epoch + 1,
            metrics=metrics,
            epoch_time_s=time.time() - started,
            time=time.time(),
            last=last,
            stopped_by_patience=early.stopped and not goal,
            stopped_by_goal=goal,
            checkpoint=EpochCheckpoint(state=state, weights=ray.put([np.array([float(epoch + 1)])])),
        )
        ray.get(channel.put.remote(report))
        if last:
            break
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


class SimulatorHost:
    """One zero-CPU, threaded actor per Ray cluster that replays every simulated trial and holds its channel.

    Starting an actor costs a new worker process (seconds); a simulated trial needs none of its own. The
    host is detached and named, so the trials of every sweep on the cluster share it; a local Ray that
    hpo started ends it with everything else.
    """

    def __init__(self) -> None:
        self.channels: dict[str, Channel] = {}

    def call(self, key: str, method: str, *args: Any) -> Any:
        """Calls ``method`` of channel ``key`` (created on first use)."""
        return getattr(self.channels.setdefault(key, Channel()), method)(*args)

    def run(self, fn: Callable[..., Any], args: list[Any]) -> Any:
        """Runs one simulated trial in a thread of this actor."""
        return fn(*args)

    def close(self, key: str) -> None:
        """Forgets channel ``key``."""
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
        # Not in the placement group of the trial that happens to start it (Tune's groups capture child
        # actors): the host would die with that trial's group, and every other trial with it.
        scheduling_strategy="DEFAULT",
    )
    return actor.remote()


class SimulatedBackend(PooledGroup):
    """A simulated trial's "group": a channel in the cluster's :class:`SimulatorHost`, which replays the curve.

    The trial's resources stay reserved in its placement group, as they would for Horovod workers.
    """

    shape = ("simulated",)

    def __init__(self) -> None:
        self.host = simulator_host()
        self.channel = HostedChannel(self.host, uuid.uuid4().hex)
        self.refs: list[Any] = []

    def launch(self, fn: Any, args: list[Any]) -> list[Any]:
        """Runs ``fn(*args)`` in a thread of the host (the simulated rank 0)."""
        ray.get(self.channel.reset.remote())
        self.refs = [self.host.run.remote(fn, args)]
        return self.refs

    def release(self, reusable: bool) -> None:
        """Keeps the channel for the next trial, or stops the replay (at its next epoch) and drops the channel."""
        if self.pool(reusable):
            return
        self.channel.request_stop.remote()
        ray.wait(self.refs, num_returns=len(self.refs), timeout=10)
        self.host.close.remote(self.channel.key)


def acquire(spec: TrialSpec) -> SimulatedBackend:
    """The warm simulated group of this process, or a new one."""
    return WARM_POOL.take(SimulatedBackend.shape) or SimulatedBackend()
