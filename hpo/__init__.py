"""hpo: hyperparameter sweeps of Keras models as Horovod-on-Ray trials, searched by Ray Tune.

Public API::

    import hpo
    result = hpo.tune("search_spaces/digits_mlp.yaml", num_samples=8)
    result.best_params, result.best_metric, result.trials
    again = hpo.repeat(result.summary["name"], top=3, repeats=5)   # the winner against noise
    again.summary["statistics"]["verdict"]
    hpo.SweepSummary.read("hpo_runs/NAME/summary.json").best                # summary.json, typed
    plan = hpo.plan("sweep.yaml", deadline_s=6 * 3600, history=["hpo_runs/NAME"])  # shape for a deadline
    plan.recommended, plan.why
    results = hpo.tune_partitions("sweep.yaml", partitions={"eu": "file:///d/eu", "us": "file:///d/us"})

Importing hpo changes nothing in the caller's process: the environment, warning filters and log levels a
sweep needs are set while it runs and restored afterwards (the ``hpo`` command sets its own process up).
"""

from __future__ import annotations

from hpo import plan as _plan_package  # noqa: F401 - loaded first, so that ``hpo.plan`` below stays the function
from hpo import stats
from hpo.api import plan, repeat, tune, tune_partitions
from hpo.config import SweepConfig, load_sweep
from hpo.errors import ConfigError, HpoError
from hpo.options import RunOptions, WarmStart
from hpo.summary import TuneResult
from hpo.sweep_summary import SweepSummary

__all__ = [
    "ConfigError",
    "HpoError",
    "RunOptions",
    "SweepConfig",
    "SweepSummary",
    "TuneResult",
    "WarmStart",
    "load_sweep",
    "plan",
    "repeat",
    "stats",
    "tune",
    "tune_partitions",
]
__version__ = "0.1.0"
