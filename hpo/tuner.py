"""Ray Tune's ``Tuner`` for a sweep: searcher, scheduler, stopper, callbacks, storage; or the one restored."""

from __future__ import annotations

import time
from typing import Any

from hpo import compat
from hpo.config import SweepConfig
from hpo.options import RunOptions
from hpo.trial.spec import TrialSpec


def can_restore(options: RunOptions, name: str) -> bool:
    """True if the storage holds Tune's experiment state of sweep ``name``."""
    from ray import tune

    _, filesystem = options.storage.tune_storage()
    return tune.Tuner.can_restore(options.storage.experiment_path(name), storage_filesystem=filesystem)


def build_tuner(
    config: SweepConfig,
    options: RunOptions,
    spec: TrialSpec,
    watchers: list[Any],
    warm_points: list[tuple[dict[str, Any], float]] | None,
    started: float,
    resume: bool,
) -> Any:
    """Ray Tune's ``Tuner`` for the sweep (restored from its experiment state on a resume)."""
    from ray import tune

    from hpo import search
    from hpo.trial.driver import make_trainable
    from hpo.trial.retention import CheckpointRetention

    storage_path, filesystem = options.storage.tune_storage()
    # Superseded checkpoints are deleted by hpo, one saved experiment state behind, not by Tune's num_to_keep
    # (which saves the whole experiment state every few checkpoints of any trial: see hpo.trial.retention).
    callbacks: list[Any] = [*watchers, *compat.result_loggers(), CheckpointRetention()]
    stopper = search.build_stopper(config)
    if stopper is not None:
        callbacks.append(stopper)  # it hears when the trial that reached the goal has ended
    run_config = tune.RunConfig(
        name=config.name,
        storage_path=storage_path,
        storage_filesystem=filesystem,
        callbacks=callbacks,
        verbose=0,
        failure_config=tune.FailureConfig(max_failures=config.trial.max_failures),
        checkpoint_config=tune.CheckpointConfig(),
        stop=stopper,
    )
    trainable = make_trainable(spec)
    if resume:
        tuner = tune.Tuner.restore(
            options.storage.experiment_path(config.name), trainable=trainable, resume_errored=True,
            storage_filesystem=filesystem,
        )
        compat.set_tuner_callbacks(tuner, callbacks)  # this run's console and tracker, not the pickled ones
        return tuner
    mode = options.warm_start.mode_for(config.search, config.name) if options.warm_start else "prior"
    return tune.Tuner(
        trainable,
        param_space=search.SearchSpace(config).param_space(),
        tune_config=tune.TuneConfig(
            metric=config.objective.metric,
            mode=config.objective.mode,
            search_alg=search.build_searcher(config, options.sweep_dir(config.name), False, warm_points, mode),
            scheduler=search.build_scheduler(config),
            num_samples=search.tune_num_samples(config),
            max_concurrent_trials=config.search.max_concurrent,
            time_budget_s=remaining_budget(config.search.time_budget_s, started),
            reuse_actors=True,
        ),
        run_config=run_config,
    )


def remaining_budget(budget_s: float | None, started: float) -> float | None:
    """``search.time_budget_s`` less what the sweep spent before Tune starts (MLflow run, Ray, checks).

    Tune counts its budget from its own start; the sweep's budget counts from the sweep's.
    """
    if budget_s is None:
        return None
    return max(budget_s - (time.time() - started), 0.001)
