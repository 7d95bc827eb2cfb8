"""How many trials a sweep runs, and the unit Tune counts a trial's progress in."""

from __future__ import annotations

from hpo.config import SweepConfig

#: Tune's iteration counter; one iteration is one epoch of a trial.
TIME_ATTR = "training_iteration"


def planned_trials(config: SweepConfig) -> int:
    """How many trials the sweep runs: configurations × repeats, capped by ``search.max_trials``."""
    planned = config.search.num_samples * config.search.repeats
    return planned if config.search.max_trials is None else min(planned, config.search.max_trials)


def tune_num_samples(config: SweepConfig) -> int:
    """Tune's ``num_samples``: the planned trials, or repetitions of the grid for a grid searcher (capped there)."""
    if config.search.kind.grid:
        return config.search.num_samples // config.grid_size
    return planned_trials(config)
