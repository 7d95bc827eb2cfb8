"""A sweep replayed from a :class:`~hpo.replay.table.CurveTable`, on a simulated clock, in this process.

The searcher and the scheduler are hpo's own, built from the sweep file as a real sweep builds them
(:func:`hpo.search.build_searcher`, :func:`hpo.search.build_scheduler`: Tune's searcher and scheduler
objects, Optuna's study and all), or Tune objects given instead (a peer's, in a benchmark). What replaces
Ray Tune's controller is an event loop that calls them as Tune's controller does: :mod:`hpo.replay.loop`
for schedulers that continue or stop trials (``asha``, ``median``, ``fifo``), :mod:`hpo.replay.pausing` for
those that also pause and resume them (HyperBand: ``hyperband``, Tune's own, BOHB's). Trials run
``search.max_concurrent`` at once, asynchronously: a slot that frees up starts the next trial at that moment
of simulated time, each epoch taking the seconds the table recorded for it. Nothing sleeps: a 200-trial
sweep replays in about a second.

A trial stops by itself as a real one does (Keras ``EarlyStopping`` with the sweep's ``patience`` and
``min_delta``, ``max_epochs``, the objective goal, which also ends the sweep); the scheduler may stop it
earlier. Supported: the searchers whose Tune object is a ``Searcher`` (``optuna-tpe``, ``optuna-gp``,
``random``) and every scheduler of the sweep file; a grid expands Tune's variants, which this loop does not
do (a clear error says so). Repeats are not replayed.
"""

from __future__ import annotations

from typing import Any

from ray.tune.schedulers import HyperBandScheduler

from hpo.config import SweepConfig
from hpo.replay.loop import ITERATION, Replay
from hpo.replay.pausing import PausingReplay
from hpo.replay.result import ReplayedTrial, ReplayResult
from hpo.replay.surrogate import Surrogate
from hpo.replay.table import CurveTable


def _check(config: SweepConfig, table: CurveTable) -> None:
    """Raises ValueError for what this loop does not replay or a table that does not fit the sweep."""
    from hpo import kinds

    if kinds.searcher(config.search.algorithm).grid:
        raise ValueError(f"search.algorithm: '{config.search.algorithm}' is not replayed (grid expansion); "
                         "use optuna-tpe, optuna-gp or random")
    if config.search.repeats > 1:
        raise ValueError("search.repeats: repeats are not replayed; set it to 1")
    if config.objective.metric != table.task.metric or config.objective.mode != table.task.mode:
        raise ValueError(f"objective: the table records {table.task.metric} ({table.task.mode}); the sweep "
                         f"asks for {config.objective.metric} ({config.objective.mode})")
    if config.trial.max_epochs > table.task.max_epochs:
        raise ValueError(f"trial.max_epochs: {config.trial.max_epochs} is more than the table's "
                         f"{table.task.max_epochs} recorded epochs")


def replay_sweep(
    config: SweepConfig,
    table: CurveTable,
    *,
    budget_epochs: int | None = None,
    startup_s: float = 0.0,
    surrogate: Surrogate | None = None,
    searcher: Any = None,
    scheduler: Any = None,
) -> ReplayResult:
    """Replays ``config`` on ``table``.

    Args:
        config: The sweep (its searcher, scheduler, seed, ``search.num_samples``/``max_trials``,
            ``max_concurrent``, ``time_budget_s`` on the simulated clock, stopping rules, goal).
        table: The recorded curves of its task.
        budget_epochs: Ends the sweep once this many epochs have been trained (running trials are cut
            there, ``stopped_by="budget"``); None: the sweep's own trial count and time budget only.
        startup_s: Simulated seconds a trial takes before its first epoch.
        surrogate: Answers each proposal with this surrogate's curve (fitted on ``table``); None: with the
            nearest recorded configuration's curve, as recorded.
        searcher: A Tune ``Searcher`` to replay instead of the sweep file's (a peer's own, in a benchmark),
            told its search space, metric and mode already. None: the sweep file's.
        scheduler: A Tune ``TrialScheduler`` to replay instead of the sweep file's. None: the sweep file's.

    Returns:
        Every trial and every epoch, on the simulated clock.

    Raises:
        ValueError: A searcher, scheduler or setting the replay does not support, or a table that does
            not record the sweep's objective.
    """
    from hpo import search

    _check(config, table)
    if scheduler is None:
        scheduler = search.build_scheduler(config)
    loop = PausingReplay if isinstance(scheduler, HyperBandScheduler) else Replay
    return loop(config, table, budget_epochs, startup_s, surrogate, searcher=searcher, scheduler=scheduler).run()


__all__ = ["ITERATION", "ReplayResult", "ReplayedTrial", "replay_sweep"]
