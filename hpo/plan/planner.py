"""``hpo.plan``: the shapes a sweep could run at, each placed on the cluster and forecast, and the one to pick.

Candidate shapes vary the workers per trial and the trials at once (powers of two and the sweep file's own,
up to the trials it plans and what the cluster holds) and keep the file's GPUs, CPUs and batch per worker;
``shapes=`` names others (a batch size among them). Each is placed (:mod:`hpo.plan.capacity`), its
per-epoch time predicted from the history (:mod:`hpo.plan.shape_model`) and its wall time drawn
(:mod:`hpo.plan.forecast`). Cost is what the nodes cost for the wall time (without a cluster file: the
trial slots' CPUs and GPUs), at the sweep file's ``cost:`` prices.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Sequence
from dataclasses import replace
from pathlib import Path

import numpy as np

from hpo.config import SweepConfig, load_sweep
from hpo.errors import ConfigError
from hpo.plan.capacity import Capacity
from hpo.plan.choose import recommend
from hpo.plan.forecast import Moved, wall_samples
from hpo.plan.history import SweepRecord, extended, read_sweep, shape_of
from hpo.plan.shape_model import EpochModel, Point
from hpo.plan.types import Plan, PlanOption, Shape, Source, SourceKind
from hpo.progress.setup import sweep_plan

#: Most workers per trial and trials at once a default candidate has.
_MOST = 64


def plan(
    sweep: str | Path | SweepConfig,
    *,
    deadline_s: float | None = None,
    history: Iterable[str | Path | SweepRecord] = (),
    shapes: Sequence[Shape] | None = None,
    confidence: float = 0.8,
    samples: int = 1000,
    cluster: str | Path | Capacity | None = None,
    source: SourceKind | None = None,
    seed: int = 0,
) -> Plan:
    """Plans a sweep to a deadline: how to run it, how long it takes and what it costs.

    Args:
        sweep: The sweep file (or its :class:`SweepConfig`).
        deadline_s: Seconds from the command's start by which it must end (None: no deadline).
        history: Past sweeps to learn from: state directories (``STORAGE/NAME``) or read records.
        shapes: Candidate shapes (default: workers per trial and trials at once varied around the file's).
        confidence: The least probability of meeting the deadline a recommended option has.
        samples: Monte-Carlo draws per option.
        cluster: A Ray cluster file (or a :class:`Capacity`) whose node types the options are placed on;
            None: this machine.
        source: What the history is (default: ``earlier rounds`` where it holds the sweep's own name, else
            ``from``).
        seed: Seed of the draws (the same inputs give the same plan).

    Raises:
        ConfigError: A bad sweep file, cluster file or history, no history, or a bad deadline or confidence.
    """
    config = sweep if isinstance(sweep, SweepConfig) else load_sweep(sweep)
    name = config.name
    if deadline_s is not None and not (deadline_s > 0 and math.isfinite(deadline_s)):
        raise ConfigError(f"{name}: --deadline: {deadline_s} is not a positive time; give e.g. 6h or 90m")
    if not 0 < confidence < 1:
        raise ConfigError(f"{name}: confidence: {confidence} is not between 0 and 1; give e.g. 0.8")
    trial = config.trial
    records = [extended(h if isinstance(h, SweepRecord) else read_sweep(h), trial.max_epochs,
                        config.objective.mode, trial.early_stopping.patience, trial.early_stopping.min_delta)
               for h in history]
    if not records:
        raise ConfigError(f"{name}: (history): no earlier round of this sweep to plan from; name sweeps of the "
                          "same model with --from NAME, or run a pilot with --pilot N")
    capacity = cluster if isinstance(cluster, Capacity) else (
        Capacity.local() if cluster is None else Capacity.from_file(cluster))
    kind: SourceKind = source or ("earlier rounds" if any(r.name == name for r in records) else "from")
    src = Source(kind, tuple(r.name for r in records), sum(len(r.trials) for r in records),
                 tuple(dict.fromkeys(r.shape for r in records)))
    trials = config.search.num_samples
    prices = (config.cost.per_cpu_hour, config.cost.per_gpu_hour)
    placed = [(r, capacity.place(_fitting(r.shape, capacity), *prices)) for r in records]
    points = [Point(r.shape.workers_per_trial, r.shape.batch_size_per_worker,
                    capacity.load(r.shape, nodes) if nodes else 1.0, e)
              for r, nodes in placed if (e := r.epoch_cost) is not None]
    model = EpochModel.fit(points)
    base = sweep_plan(config, trials)
    options, too_big = [], []
    for shape in _candidates(config, capacity, trials) if shapes is None else list(shapes):
        nodes = capacity.place(shape, *prices)
        if nodes is None:
            too_big.append(shape)
            continue
        options.append(_option(shape, nodes, records, points, model, capacity, base, trials, deadline_s,
                               samples, prices, seed))
    options.sort(key=lambda o: (o.wall_s_median, o.cost_median))
    chosen, why = recommend(options, deadline_s, confidence, config.cost.currency)
    return Plan(name, trials, deadline_s, confidence, options, chosen, why, src, _smallest(too_big),
                config.cost.currency, capacity.source, capacity.max_workers)


def _option(
    shape: Shape, nodes: dict[str, int], records: list[SweepRecord], points: list[Point], model: EpochModel,
    capacity: Capacity, base, trials: int, deadline_s: float | None, samples: int,
    prices: tuple[float, float], seed: int,
) -> PlanOption:
    """One shape forecast and priced."""
    load = capacity.load(shape, nodes)
    new = Point(shape.workers_per_trial, shape.batch_size_per_worker, load, 1.0)
    moved = []
    for record, point in zip(records, points, strict=False):
        mean, sd = model.log_ratio(new, point)
        moved.append(Moved(record, mean, sd, _start_ratio(shape, record.shape, capacity)))
    plan = replace(base, max_concurrent=shape.max_concurrent,
                   cpus_per_trial=shape.workers_per_trial * shape.cpus_per_worker,
                   gpus_per_trial=shape.workers_per_trial * shape.gpus_per_worker)
    walls = wall_samples(moved, plan, trials, samples, seed)
    low, median, high = (float(v) for v in np.quantile(walls, [0.1, 0.5, 0.9]))
    if capacity.source is None:  # this machine: the slots' CPUs and GPUs
        per_cpu, per_gpu = prices
        rate = shape.max_concurrent * shape.workers_per_trial * (
            shape.cpus_per_worker * per_cpu + shape.gpus_per_worker * per_gpu) / 3600
    else:
        rate = capacity.rate(nodes, *prices)
    measured = any(_same_trial_shape(shape, r.shape) for r in records)
    ratio = math.exp(float(np.median([m.log_ratio for m in moved]))) if moved else 1.0
    return PlanOption(
        workers_per_trial=shape.workers_per_trial, gpus_per_worker=shape.gpus_per_worker,
        max_concurrent=shape.max_concurrent, nodes=nodes, wall_s_median=median, wall_s_low=low,
        wall_s_high=high, p_meet=None if deadline_s is None else float(np.mean(walls <= deadline_s)),
        cost_median=rate * median, cost_high=rate * high, batch_size_per_worker=shape.batch_size_per_worker,
        cpus_per_worker=shape.cpus_per_worker, measured=measured, epoch_ratio=ratio,
    )


def _same_trial_shape(a: Shape, b: Shape) -> bool:
    return (a.workers_per_trial, a.batch_size_per_worker, a.gpus_per_worker, a.cpus_per_worker) == (
        b.workers_per_trial, b.batch_size_per_worker, b.gpus_per_worker, b.cpus_per_worker)


def _start_ratio(new: Shape, old: Shape, capacity: Capacity) -> float:
    """How much longer a cold start takes at ``new``: worker processes starting at once beyond a node's CPUs."""

    def crowd(shape: Shape) -> float:
        nodes = capacity.place(_fitting(shape, capacity)) or {}
        count = max(1, sum(nodes.values()))
        cpus = max((t.resources.get("CPU", 1.0) for t in capacity.node_types if t.name in nodes), default=1.0)
        return max(1.0, shape.max_concurrent * shape.workers_per_trial / count / max(cpus, 1.0))

    return crowd(new) / crowd(old)


def _fitting(shape: Shape, capacity: Capacity) -> Shape:
    """``shape``, or with fewer trials at once where the cluster holds fewer (a history sweep ran as it could)."""
    while shape.max_concurrent > 1 and capacity.place(shape) is None:
        shape = replace(shape, max_concurrent=shape.max_concurrent - 1)
    return shape


def _candidates(config: SweepConfig, capacity: Capacity, trials: int) -> list[Shape]:
    """Workers per trial × trials at once: powers of two and the file's own, up to the planned trials."""
    own = shape_of(config)
    workers = sorted({own.workers_per_trial, *(2**i for i in range(7) if 2**i <= _MOST)})
    at_once = sorted({min(own.max_concurrent, trials), *(2**i for i in range(7) if 2**i <= min(trials, _MOST))})
    shapes = [replace(own, workers_per_trial=w, max_concurrent=m) for w in workers for m in at_once]
    fits = [s for s in shapes if capacity.place(s) is not None]
    # the shapes just past what fits, for the line on what more max_workers would allow
    bigger = [s for s in shapes if capacity.place(s) is None
              and s.max_concurrent * s.workers_per_trial <= 4 * max(
                  (f.max_concurrent * f.workers_per_trial for f in fits), default=1)]
    return fits + bigger


def _smallest(too_big: list[Shape]) -> list[Shape]:
    """The shapes the cluster cannot hold, fewest workers in all first."""
    return sorted(too_big, key=lambda s: (s.max_concurrent * s.workers_per_trial, s.workers_per_trial))

