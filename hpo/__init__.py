"""hpo: hyperparameter sweeps of Keras models as Horovod-on-Ray trials, searched by Ray Tune.

Public API::

    import hpo
    result = hpo.tune("search_spaces/digits_mlp.yaml", num_samples=8)
    result.best_params, result.best_metric, result.trials
    results = hpo.tune_partitions("sweep.yaml", partitions={"eu": "file:///d/eu", "us": "file:///d/us"})
"""

from __future__ import annotations

import hpo._env  # noqa: F401  (must run before TensorFlow or Ray is imported)
from hpo.api import tune, tune_partitions
from hpo.config import SweepConfig, load_sweep
from hpo.errors import ConfigError, HpoError
from hpo.sweep import TuneResult

__all__ = ["ConfigError", "HpoError", "SweepConfig", "TuneResult", "load_sweep", "tune", "tune_partitions"]
__version__ = "0.1.0"
