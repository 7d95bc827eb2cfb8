"""Typed sweep configuration: the only place that reads a sweep YAML file.

Modules: :mod:`~hpo.config.sections` (one model per section), :mod:`~hpo.config.space` (searched
parameters), :mod:`~hpo.config.schema` (:class:`SweepConfig` and cross-section checks),
:mod:`~hpo.config.loading` (YAML → config, one-line errors). Every model is frozen and forbids unknown keys.
"""

from __future__ import annotations

from hpo.config.loading import apply_override, load_sweep, option_overrides, parse_sweep, read_yaml, yaml_value
from hpo.config.schema import SweepConfig
from hpo.config.sections import (
    CacheConfig,
    CostConfig,
    DataConfig,
    EarlyStoppingConfig,
    ObjectiveConfig,
    PartitionData,
    SchedulerConfig,
    SearchConfig,
    TrackingConfig,
    TrialConfig,
    default_metrics,
    partition_label,
)
from hpo.config.space import ParamSpec

__all__ = [
    "CacheConfig",
    "CostConfig",
    "DataConfig",
    "EarlyStoppingConfig",
    "ObjectiveConfig",
    "ParamSpec",
    "PartitionData",
    "SchedulerConfig",
    "SearchConfig",
    "SweepConfig",
    "TrackingConfig",
    "TrialConfig",
    "apply_override",
    "default_metrics",
    "load_sweep",
    "option_overrides",
    "parse_sweep",
    "partition_label",
    "read_yaml",
    "yaml_value",
]
