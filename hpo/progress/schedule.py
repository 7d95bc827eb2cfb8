"""When each trial of a sweep runs: running trials hold their slots, the rest queue for ``max_concurrent``.

Every array has one row per Monte-Carlo sample, so the queue of all samples is run at once: one step per
trial not started yet, each taking the slot that frees first (Tune starts a pending trial as soon as one
ends). The sweep ends when its last slot frees, when a running trial reaches the objective goal (the goal
stopper ends the whole sweep), or at the end of its time budget, whichever comes first; what is cut off
there is not trained and costs nothing.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np


@dataclass(frozen=True)
class Futures:
    """Simulated futures of a sweep's running and pending trials (``S`` samples, ``R`` running, ``P`` pending).

    Attributes:
        done: Epochs each running trial has trained, shape ``(R,)``.
        lengths: Total epochs of each running trial, ``(S, R)``.
        by_goal: Where it stops by reaching the objective goal, ``(S, R)``.
        costs: Seconds per epoch, ``(S, R)``; None without any timings.
        rates: What one second of each running trial costs, ``(R,)``.
        pending_lengths: Total epochs of each pending trial, ``(S, P)``.
        pending_costs: Their seconds per epoch, ``(S, P)``; None without any timings.
        pending_rate: What one second of a pending trial costs.
        pending_overheads: Seconds each pending trial spends before its steady epochs (start-up and the
            first epoch's extra), ``(S, P)``; None: nothing.
        overheads: Seconds each running trial still spends beyond its steady epochs (the first epoch's
            extra, for one that has trained none yet), ``(S, R)``; None: nothing.
    """

    done: np.ndarray
    lengths: np.ndarray
    by_goal: np.ndarray
    costs: np.ndarray | None
    rates: np.ndarray
    pending_lengths: np.ndarray
    pending_costs: np.ndarray | None
    pending_rate: float
    pending_overheads: np.ndarray | None = None
    overheads: np.ndarray | None = None


@dataclass(frozen=True)
class Queue:
    """The outcome of each sample's queue.

    Attributes:
        remaining_s: Seconds until the sweep ends, ``(S,)``; None without timings.
        cost: Cost of the rest of the sweep, ``(S,)``; None without timings.
        epochs: Epochs the sweep still trains, all trials together, ``(S,)``.
        started: Pending trials that start before the sweep ends, ``(S,)``.
    """

    remaining_s: np.ndarray | None
    cost: np.ndarray | None
    epochs: np.ndarray
    started: np.ndarray


def _starts(busy: np.ndarray, durations: np.ndarray, slots: int) -> tuple[np.ndarray, np.ndarray]:
    """Start times of the pending trials and the time every slot frees at, first come first served."""
    samples = busy.shape[0]
    free = np.zeros((samples, max(slots, busy.shape[1])))
    free[:, : busy.shape[1]] = busy
    rows = np.arange(samples)
    starts = np.empty_like(durations)
    for j in range(durations.shape[1]):
        slot = free.argmin(axis=1)
        starts[:, j] = free[rows, slot]
        free[rows, slot] += durations[:, j]
    return starts, free.max(axis=1) if free.shape[1] else np.zeros(samples)


def run_queue(futures: Futures, max_concurrent: int, budget_s: float | None) -> Queue:
    """Runs the queue of every sample (see the module docstring).

    Args:
        futures: The trials' simulated lengths and costs.
        max_concurrent: Trials that run at once.
        budget_s: Seconds left of the time budget, or None.

    Returns:
        Remaining seconds, cost, epochs and started trials per sample.
    """
    left = np.maximum(futures.lengths - futures.done[None, :], 0)
    pending = futures.pending_lengths
    if futures.costs is None or futures.pending_costs is None:
        started = np.full(left.shape[0], float(pending.shape[1]))
        return Queue(None, None, left.sum(axis=1) + pending.sum(axis=1), started)
    extra = np.zeros_like(left, dtype=float) if futures.overheads is None else futures.overheads
    busy = extra + left * futures.costs
    overheads = np.zeros_like(pending) if futures.pending_overheads is None else futures.pending_overheads
    durations = overheads + pending * futures.pending_costs
    starts, end = _starts(busy, durations, max_concurrent)
    if busy.shape[1]:
        end = np.minimum(end, np.where(futures.by_goal, busy, np.inf).min(axis=1))
    if budget_s is not None:
        end = np.minimum(end, budget_s)
    until = end[:, None]
    epochs = np.minimum(left, np.clip(np.floor((until - extra) / futures.costs + 1e-9), 0, None)).sum(axis=1)
    epochs += np.clip(np.floor((until - starts - overheads) / futures.pending_costs + 1e-9), 0, pending).sum(axis=1)
    cost = (np.minimum(busy, until) * futures.rates[None, :]).sum(axis=1)
    cost += np.clip(until - starts, 0, durations).sum(axis=1) * futures.pending_rate
    return Queue(end, cost, epochs, (starts < until).sum(axis=1).astype(float))
