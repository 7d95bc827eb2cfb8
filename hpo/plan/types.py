"""The plan's typed messages: a candidate shape, one priced option per shape, and the plan itself."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Literal

#: Where the plan's numbers came from: this sweep's earlier rounds, other sweeps named with ``--from``, or
#: a pilot run for the plan.
SourceKind = Literal["earlier rounds", "from", "pilot"]


@dataclass(frozen=True)
class Shape:
    """How a sweep's trials run: what the plan varies.

    Attributes:
        workers_per_trial: Horovod workers per trial (``trial.workers``).
        max_concurrent: Trials that run at once (``search.max_concurrent``).
        gpus_per_worker: GPUs each worker holds.
        cpus_per_worker: CPUs each worker holds.
        batch_size_per_worker: Each worker's batch (``trial.batch_size_per_worker``).
    """

    workers_per_trial: int
    max_concurrent: int
    gpus_per_worker: float = 0.0
    cpus_per_worker: float = 1.0
    batch_size_per_worker: int = 32

    def __post_init__(self) -> None:
        if self.workers_per_trial < 1 or self.max_concurrent < 1 or self.batch_size_per_worker < 1:
            raise ValueError("workers_per_trial, max_concurrent and batch_size_per_worker must be at least 1")
        if self.gpus_per_worker < 0 or self.cpus_per_worker <= 0:
            raise ValueError("gpus_per_worker must be >= 0 and cpus_per_worker > 0")

    @property
    def label(self) -> str:
        """``4×2w`` (trials at once × workers per trial), with the GPUs and batch where they are set."""
        text = f"{self.max_concurrent}×{self.workers_per_trial}w"
        if self.gpus_per_worker:
            text += f" {self.gpus_per_worker:g}gpu"
        return f"{text} b{self.batch_size_per_worker}"


@dataclass(frozen=True)
class Source:
    """Where the plan's numbers came from.

    Attributes:
        kind: ``earlier rounds`` (this sweep's own journals), ``from`` (sweeps named with ``--from``) or
            ``pilot`` (trials run for the plan).
        sweeps: The sweeps read (their names).
        trials: How many ended trials they hold.
        shapes: The shapes they ran at.
    """

    kind: SourceKind
    sweeps: tuple[str, ...]
    trials: int
    shapes: tuple[Shape, ...]

    @property
    def line(self) -> str:
        """One line for the table's foot."""
        shapes = ", ".join(s.label for s in self.shapes)
        where = {"earlier rounds": "earlier rounds", "from": "sweeps named with --from", "pilot": "a pilot"}[self.kind]
        return f"from {where}: {', '.join(self.sweeps)} ({self.trials} trials at {shapes})"


@dataclass(frozen=True)
class PlanOption:
    """One candidate shape, placed on the cluster and forecast (low/high: the 80 % interval).

    Attributes:
        workers_per_trial: Horovod workers per trial.
        gpus_per_worker: GPUs per worker.
        max_concurrent: Trials at once.
        nodes: Node type → how many nodes the shape needs (``local`` without a cluster file).
        wall_s_median: Median wall time of the sweep, from the command's start to its end.
        wall_s_low: 10th percentile.
        wall_s_high: 90th percentile.
        p_meet: Probability of ending by the deadline (None without one).
        cost_median: What the nodes (or, without a cluster file, the trial slots) cost for the median wall
            time; 0 without prices.
        cost_high: The same for the 90th percentile.
        batch_size_per_worker: Each worker's batch.
        cpus_per_worker: CPUs per worker.
        measured: Whether the plan's history has run this exact shape (else it is predicted from others).
        epoch_ratio: Median per-epoch time at this shape over the history's (1.0: the same).
    """

    workers_per_trial: int
    gpus_per_worker: float
    max_concurrent: int
    nodes: dict[str, int]
    wall_s_median: float
    wall_s_low: float
    wall_s_high: float
    p_meet: float | None
    cost_median: float
    cost_high: float
    batch_size_per_worker: int = 32
    cpus_per_worker: float = 1.0
    measured: bool = False
    epoch_ratio: float = 1.0

    @property
    def shape(self) -> Shape:
        """The option's :class:`Shape`."""
        return Shape(self.workers_per_trial, self.max_concurrent, self.gpus_per_worker, self.cpus_per_worker,
                     self.batch_size_per_worker)


@dataclass(frozen=True)
class Plan:
    """What to run a sweep at to end by a deadline, and what it costs.

    Attributes:
        sweep: The sweep's name.
        trials: Trials the sweep plans (``search.num_samples``).
        deadline_s: Seconds from the command's start to the deadline (None: no deadline).
        confidence: The least ``p_meet`` a recommended option has.
        options: One option per candidate shape that fits, fastest first.
        recommended: The cheapest option with ``p_meet >= confidence`` (no deadline: the fastest per unit
            cost); where none meets it, the likeliest to; None without options.
        why: One sentence on the choice.
        source: Where the numbers came from.
        too_big: Shapes the cluster cannot hold (more than its ``max_workers`` or node counts allow).
        currency: The sweep file's currency sign.
        cluster: The cluster file the nodes come from (None: this machine).
        max_workers: The cluster's ``max_workers`` (None without a cluster file).
    """

    sweep: str
    trials: int
    deadline_s: float | None
    confidence: float
    options: list[PlanOption]
    recommended: PlanOption | None
    why: str
    source: Source
    too_big: list[Shape] = field(default_factory=list)
    currency: str = "$"
    cluster: str | None = None
    max_workers: int | None = None
