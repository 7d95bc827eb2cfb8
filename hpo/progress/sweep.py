"""How long a whole sweep will still run, how many trials and epochs it will train, and what that costs.

Each Monte-Carlo sample is one possible future of the sweep:

1. every running trial's length is simulated from its own curve (:func:`hpo.progress.trial.simulate_trial`)
   and cut where the scheduler would stop it (:mod:`hpo.cutoffs`);
2. trials not started yet (and running ones with fewer than two values) get a length drawn from those of the
   started ones: the ended trials' actual lengths (failed ones aside) and the running ones' simulated ones in
   that sample (so that the first, short, scheduler-stopped trials do not make the rest look short), each cut
   where the scheduler would stop it if it started now, against every result recorded since
   (the scheduler's :meth:`~hpo.kinds.ForecastRule.replayed`: the first trials ran unopposed), mixed
   with a uniform prior over ``1 … max_epochs`` by a Dirichlet process (:mod:`hpo.progress.pools`: each
   sample draws its own weights, so that how little a few trials tell stays in the interval); with no
   started trial to draw from, the prior is ``max_epochs``;
3. an epoch costs what the trial measured (the mean of its epoch times after the first); a trial with
   fewer than two timed epochs gets the steady cost of a started trial drawn at random, and one with none
   timed yet also a started trial's first-epoch extra (compiling, warming caches); a trial not started yet
   gets a cost by the Bayesian bootstrap of the measured ones (:mod:`hpo.progress.pools`) and pays a
   start-up drawn so from the started ones' (seconds from its start to its first epoch, plus that extra).
   Start-ups and extras come from trials that started as the one drawing them will: a trial not started
   yet starts on workers an earlier trial warmed (processes, imports and data caches paid once per slot),
   so it draws from the warm starts once one is measured; until then, between nothing and a cold trial's
   first-epoch extra (not the worker start-up the reuse skips), uniformly;
4. the trials not started yet queue for ``max_concurrent`` slots (first come, first served), so the sweep
   ends when its last slot is free, or when a running trial reaches the objective goal, or at the time
   budget, whichever comes first.

Not modelled: the cluster holding fewer trials than ``max_concurrent`` (pass the concurrency it can hold),
retries of failed trials, trials not started yet reaching the goal, and results other
trials record later moving the scheduler's cut-offs.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from functools import cached_property
from typing import Literal

import numpy as np

from hpo import kinds
from hpo.kinds import ForecastRule
from hpo.progress.pools import draw_costs, draw_lengths, mean_cost, pick, stack
from hpo.progress.schedule import Futures, Queue, run_queue
from hpo.progress.stopping import higher_is_better
from hpo.progress.trial import epoch_cost, epoch_times, first_epoch_extra, quantiles, simulate_trial

TrialStatus = Literal["running", "finished", "stopped", "failed"]


@dataclass(frozen=True)
class TrialHistory:
    """One started trial of a sweep.

    Attributes:
        values: The objective's value after each epoch so far.
        epoch_seconds: Seconds each epoch took (or one number); None: not measured.
        status: ``running``; ``finished`` (max_epochs, patience or goal); ``stopped`` (by the scheduler);
            ``failed``.
        cpus: CPUs the trial holds (all its workers together); None: the plan's ``cpus_per_trial``.
        gpus: GPUs it holds; None: the plan's ``gpus_per_trial``.
        startup_s: Seconds from the trial's start to the start of its first epoch (actors, workers, data);
            None: not measured.
        warm: True if it started on workers an earlier trial had started (no process start-up, imports or
            data cache left to pay), False if it started them itself; None: unknown.
    """

    values: tuple[float, ...] | list[float]
    epoch_seconds: tuple[float, ...] | list[float] | float | None = None
    status: TrialStatus = "running"
    cpus: float | None = None
    gpus: float | None = None
    startup_s: float | None = None
    warm: bool | None = None

    def __post_init__(self) -> None:
        if self.status not in ("running", "finished", "stopped", "failed"):
            raise ValueError(f"status must be running, finished, stopped or failed, not {self.status!r}")

    # What the estimate derives from the epoch times, worked out once per history: a sweep's ended trials
    # keep their history from one estimate to the next (see SweepProgress), so each estimate pays for the
    # trials that changed, not again for every trial the sweep has held.

    @cached_property
    def mean_epoch_s(self) -> float | None:
        """:func:`~hpo.progress.pools.mean_cost` of its epoch times."""
        return mean_cost(self.epoch_seconds)

    @cached_property
    def epoch_cost_s(self) -> float | None:
        """:func:`~hpo.progress.trial.epoch_cost` of its epoch times."""
        return epoch_cost(self.epoch_seconds)

    @cached_property
    def first_extra_s(self) -> float | None:
        """:func:`~hpo.progress.trial.first_epoch_extra` of its epoch times."""
        return first_epoch_extra(self.epoch_seconds)

    @cached_property
    def seconds_total(self) -> float:
        """The sum of its usable epoch times."""
        return float(epoch_times(self.epoch_seconds).sum())

    @cached_property
    def epochs_timed(self) -> int:
        """How many of its epochs have a usable time (:func:`~hpo.progress.trial.epoch_times`)."""
        return len(epoch_times(self.epoch_seconds))


@dataclass(frozen=True)
class SweepPlan:
    """What a sweep will run and under which rules (the sweep file's settings, and the time so far).

    Attributes:
        planned_trials: Trials the sweep runs in all (started or not).
        max_concurrent: Trials that run at once.
        max_epochs: The most epochs a trial trains.
        mode: ``max`` or ``min``.
        patience: EarlyStopping's patience.
        min_delta: EarlyStopping's smallest improvement.
        goal: The objective goal (the sweep ends when a trial reaches it), or None.
        scheduler: The ``scheduler.type`` (a kind of :data:`hpo.kinds.SCHEDULERS`).
        grace_period: The scheduler's grace period (epochs).
        reduction_factor: ASHA/HyperBand's reduction factor.
        brackets: ASHA's brackets.
        time_budget_s: The sweep's time budget, or None.
        elapsed_s: Seconds the sweep has run so far (counted against the budget).
        cpus_per_trial: CPUs a trial holds, for trials that do not say.
        gpus_per_trial: GPUs a trial holds, for trials that do not say.
        cost_per_cpu_hour: Price of a CPU hour (0: not counted).
        cost_per_gpu_hour: Price of a GPU hour (0: not counted).
    """

    planned_trials: int
    max_concurrent: int
    max_epochs: int
    mode: Literal["max", "min"] = "max"
    patience: int = 3
    min_delta: float = 0.0
    goal: float | None = None
    scheduler: str = kinds.DEFAULT_SCHEDULER
    grace_period: int = 1
    reduction_factor: float = 2.0
    brackets: int = 1
    time_budget_s: float | None = None
    elapsed_s: float = 0.0
    cpus_per_trial: float = 1.0
    gpus_per_trial: float = 0.0
    cost_per_cpu_hour: float = 0.0
    cost_per_gpu_hour: float = 0.0

    @property
    def rule(self) -> ForecastRule:
        """The scheduler's forecast rule (:class:`hpo.kinds.SchedulerKind`)."""
        return kinds.scheduler(self.scheduler).forecast  # type: ignore[return-value]

    def __post_init__(self) -> None:
        if self.scheduler not in kinds.SCHEDULERS:
            raise ValueError(f"scheduler must be {kinds.listed(kinds.SCHEDULERS, 'or')}, not {self.scheduler!r}")
        if self.planned_trials < 0 or self.max_concurrent < 1 or self.reduction_factor <= 1:
            raise ValueError("need planned_trials >= 0, max_concurrent >= 1 and reduction_factor > 1")

    @property
    def priced(self) -> bool:
        """Whether any resource has a price."""
        return bool(self.cost_per_cpu_hour or self.cost_per_gpu_hour)

    def rate(self, trial: TrialHistory | None = None) -> float:
        """What one second of a trial costs (the plan's trial shape where ``trial`` is None or does not say)."""
        cpus = self.cpus_per_trial if trial is None or trial.cpus is None else trial.cpus
        gpus = self.gpus_per_trial if trial is None or trial.gpus is None else trial.gpus
        return (cpus * self.cost_per_cpu_hour + gpus * self.cost_per_gpu_hour) / 3600


@dataclass(frozen=True)
class SweepEstimate:
    """A sweep's projected remaining time, size and cost (low/high: the 80 % interval).

    Attributes:
        remaining_s_median: Median seconds until the sweep ends; None without epoch timings.
        remaining_s_low: 10th percentile; None without timings.
        remaining_s_high: 90th percentile; None without timings.
        trials_ended: Trials finished, stopped or failed.
        trials_running: Trials running.
        trials_pending: Trials not started yet.
        trials_projected: Median number of trials the sweep will have started when it ends.
        epochs_done: Epochs trained so far, all trials together.
        epochs_median: Median total epochs the sweep trains (those done included).
        epochs_low: 10th percentile.
        epochs_high: 90th percentile.
        cost_spent: What the measured epochs cost; None without a price.
        cost_median: Median cost of the rest of the sweep; None without a price or timings.
        cost_low: 10th percentile; None without a price or timings.
        cost_high: 90th percentile; None without a price or timings.
        method: ``done`` (nothing left), ``prior`` (no started trial to learn lengths from) or ``monte-carlo``.
        remaining_s_draws: Every simulated future's seconds until the sweep ends (what a deadline's
            probability is read from); None without timings, empty when nothing is left.
    """

    remaining_s_median: float | None
    remaining_s_low: float | None
    remaining_s_high: float | None
    trials_ended: int
    trials_running: int
    trials_pending: int
    trials_projected: int
    epochs_done: int
    epochs_median: int
    epochs_low: int
    epochs_high: int
    cost_spent: float | None
    cost_median: float | None
    cost_low: float | None
    cost_high: float | None
    method: str
    remaining_s_draws: np.ndarray | None = field(default=None, repr=False, compare=False)


def _spent(trials: list[TrialHistory], plan: SweepPlan) -> float | None:
    """What the measured epochs cost (trials without timings count nothing)."""
    if not plan.priced:
        return None
    return sum(t.seconds_total * plan.rate(t) for t in trials)


def _goal_reached(ys: list[np.ndarray], plan: SweepPlan) -> bool:
    if plan.goal is None:
        return False
    target = plan.goal if plan.mode == "max" else -plan.goal
    return any(bool(np.any(y[np.isfinite(y)] >= target)) for y in ys)


def _simulate_running(
    trials: list[TrialHistory], ys: list[np.ndarray], plan: SweepPlan, samples: int, rng: np.random.Generator
) -> dict[int, tuple[np.ndarray, np.ndarray]]:
    """Index → (stops, by_goal) of each running trial that has a curve to extrapolate (or has stopped)."""
    out = {}
    for i, trial in enumerate(trials):
        if trial.status != "running":
            continue
        sim = simulate_trial(
            trial.values,
            mode=plan.mode,
            patience=plan.patience,
            min_delta=plan.min_delta,
            max_epochs=plan.max_epochs,
            goal=plan.goal,
            samples=samples,
            seed=int(rng.integers(2**63)),
        )
        if sim.method == "prior":
            continue
        others = [y for j, y in enumerate(ys) if j != i]
        stops = plan.rule.stops(sim.stops, sim.paths, ys[i], others, plan)
        out[i] = (stops, sim.by_goal & (stops == sim.stops))
    return out


def _draw(pool: np.ndarray | None, count: int, plan: SweepPlan, samples: int, rng: np.random.Generator) -> np.ndarray:
    """``count`` lengths per sample from the started trials' (:func:`draw_lengths`); ``max_epochs`` without."""
    high = plan.max_epochs
    return np.full((samples, count), high) if pool is None else draw_lengths(pool, count, high, rng)


def _futures(
    trials: list[TrialHistory], ys: list[np.ndarray], plan: SweepPlan, samples: int, rng: np.random.Generator
) -> tuple[Futures, bool]:
    """Every running and pending trial's length and epoch cost, per sample; and whether any was learnt."""
    simulated = _simulate_running(trials, ys, plan, samples, rng)
    cuts = plan.rule.replayed(ys, plan)
    ended = [i for i, t in enumerate(trials) if t.status in ("finished", "stopped") and len(ys[i])]
    columns = [np.full(samples, min(len(ys[i]), cuts[i])) for i in ended]
    columns += [np.minimum(stops, cuts[i]) for i, (stops, _) in simulated.items()]
    learnt = bool(columns)
    pool = np.column_stack(columns) if learnt else None
    steady = [t.mean_epoch_s for t in trials]
    known = np.array([c for c in steady if c is not None])
    if not len(known):  # only first epochs measured so far: they are the best there is
        known = np.array([c for c in (t.epoch_cost_s for t in trials) if c is not None])
    overheads = _warm(trials, _overhead)
    running = [i for i, t in enumerate(trials) if t.status == "running"]
    pending = max(0, plan.planned_trials - len(trials))
    lengths, goal, costs = [], [], []
    for i in running:
        stops, by_goal = simulated.get(i) or (np.maximum(_draw(pool, 1, plan, samples, rng)[:, 0], len(ys[i])), None)
        lengths.append(stops)
        goal.append(np.zeros(samples, dtype=bool) if by_goal is None else by_goal)
        cost = steady[i]
        costs.append(np.full(samples, cost) if cost is not None else pick(known, samples, rng))
    pending_costs = list(draw_costs(known, pending, samples, rng).T)
    pending_overheads = draw_costs(overheads, pending, samples, rng) if len(overheads) else np.zeros((samples, pending))
    extra = lambda t: t.first_extra_s  # noqa: E731
    extras = {warm: _warm(trials, extra) if warm else _alike(trials, extra, warm=warm)
              for warm in {trials[i].warm for i in running}}  # one pool per kind of start, not per trial
    first_extras = []
    for i in running:
        alike = extras[trials[i].warm]
        unstarted = not trials[i].epochs_timed and len(alike)
        first_extras.append(pick(alike, samples, rng) if unstarted else np.zeros(samples))
    futures = Futures(
        done=np.array([len(ys[i]) for i in running], dtype=float),
        lengths=stack(lengths, samples),
        by_goal=stack(goal, samples).astype(bool),
        costs=None if not len(known) else stack(costs, samples),
        rates=np.array([plan.rate(trials[i]) for i in running]),
        pending_lengths=_draw(pool, pending, plan, samples, rng).astype(float),
        pending_costs=None if not len(known) else stack(pending_costs, samples),
        pending_rate=plan.rate(),
        pending_overheads=pending_overheads,
        overheads=stack(first_extras, samples),
    )
    return futures, learnt


def _warm(trials: list[TrialHistory], value: Callable[[TrialHistory], float | None]) -> np.ndarray:
    """``value`` for a trial that will start on warm workers: the warm trials' once one is measured.

    Before that, with only cold starts measured, a warm start costs somewhere between nothing (the reused
    workers skip it all) and a cold trial's first-epoch extra (building and tracing the model, which a warm
    start repeats; not its start-up, the worker processes and imports it skips): drawn uniformly between.
    With no trial known as warm or cold, every trial's.
    """
    measured = [(t, v) for t in trials if (v := value(t)) is not None]
    if any(t.warm for t, _ in measured):
        return _same_start(measured, warm=True)
    cold = [t.first_extra_s or 0.0 for t, _ in measured if t.warm is False]
    if cold:
        return (np.array(cold)[:, None] * np.linspace(0.0, 1.0, 11)[None, :]).ravel()
    return _same_start(measured, warm=None)


def _alike(trials: list[TrialHistory], value: Callable[[TrialHistory], float | None], warm: bool | None) -> np.ndarray:
    """``value`` of the trials that started as ``warm`` says, where one is known; else of every trial."""
    return _same_start([(t, v) for t in trials if (v := value(t)) is not None], warm)


def _same_start(measured: list[tuple[TrialHistory, float]], warm: bool | None) -> np.ndarray:
    same = [v for t, v in measured if t.warm is not None and t.warm == warm]
    return np.array(same if same else [v for _, v in measured])


def _overhead(trial: TrialHistory) -> float | None:
    """A started trial's seconds beyond its steady epochs: start-up plus the first epoch's extra (None: unknown)."""
    extra = trial.first_extra_s
    if extra is None and trial.startup_s is None:
        return None
    return (extra or 0.0) + max(0.0, trial.startup_s or 0.0)


def _nothing_left(counts: dict, started: int, plan: SweepPlan) -> SweepEstimate:
    """The estimate of a sweep that has ended (every trial ended, or one reached the goal)."""
    cost = 0.0 if plan.priced else None
    done = counts["epochs_done"]
    return SweepEstimate(
        0.0,
        0.0,
        0.0,
        **counts,
        trials_projected=started,
        epochs_median=done,
        epochs_low=done,
        epochs_high=done,
        cost_median=cost,
        cost_low=cost,
        cost_high=cost,
        method="done",
        remaining_s_draws=np.zeros(0),
    )


def estimate_sweep(trials: list[TrialHistory], plan: SweepPlan, *, samples: int = 1000, seed: int = 0) -> SweepEstimate:
    """Estimates a sweep's remaining time, its projected trials and epochs, and the cost of the rest.

    Args:
        trials: Every started trial (running or ended), in any order.
        plan: The sweep's settings and its elapsed time.
        samples: Number of simulated futures.
        seed: Seed of the simulation (the same inputs give the same estimate).

    Returns:
        The estimate (see :class:`SweepEstimate` and the module docstring).
    """
    trials = list(trials)
    ys = [higher_is_better(t.values, plan.mode) for t in trials]
    running = sum(t.status == "running" for t in trials)
    counts = {
        "trials_ended": len(trials) - running,
        "trials_running": running,
        "trials_pending": max(0, plan.planned_trials - len(trials)),
        "epochs_done": sum(len(y) for y in ys),
        "cost_spent": _spent(trials, plan),
    }
    if _goal_reached(ys, plan) or not (running or counts["trials_pending"]):
        return _nothing_left(counts, len(trials), plan)
    rng = np.random.default_rng(seed)
    futures, learnt = _futures(trials, ys, plan, samples, rng)
    budget = None if plan.time_budget_s is None else max(0.0, plan.time_budget_s - plan.elapsed_s)
    queue: Queue = run_queue(futures, plan.max_concurrent, budget)
    seconds = [None] * 3 if queue.remaining_s is None else list(quantiles(queue.remaining_s))
    cost = [None] * 3 if queue.cost is None or not plan.priced else list(quantiles(queue.cost))
    epochs = [int(e) for e in quantiles(counts["epochs_done"] + queue.epochs)]
    trials_projected = int(quantiles(len(trials) + queue.started)[1])
    return SweepEstimate(
        seconds[1],
        seconds[0],
        seconds[2],
        **counts,
        trials_projected=trials_projected,
        epochs_median=epochs[1],
        epochs_low=epochs[0],
        epochs_high=epochs[2],
        cost_median=cost[1],
        cost_low=cost[0],
        cost_high=cost[2],
        method="monte-carlo" if learnt else "prior",
        remaining_s_draws=None if queue.remaining_s is None else np.asarray(queue.remaining_s, dtype=float),
    )
