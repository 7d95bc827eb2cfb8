"""The ``hpo.tune`` entry point for notebooks and scripts."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from hpo.config import SweepConfig, load_sweep
from hpo.sweep import DEFAULT_STORAGE, TuneResult, run_sweep


def tune(
    sweep: str | Path | SweepConfig,
    *,
    num_samples: int | None = None,
    name: str | None = None,
    storage: str | Path = DEFAULT_STORAGE,
    mlflow_uri: str | None = None,
    address: str | None = None,
    resume: bool = False,
    console: Any = None,
    warm_start: str | None = None,
    warm_start_k: int = 5,
    warm_start_mode: str = "prior",
) -> TuneResult:
    """Runs a sweep and returns its result.

    Args:
        sweep: A sweep file path or a :class:`SweepConfig`.
        num_samples: Overrides ``search.num_samples``.
        name: Overrides ``name``.
        storage: Directory holding sweeps (``STORAGE/NAME/summary.json``).
        mlflow_uri: Overrides ``tracking.mlflow_uri``.
        address: Ray address (``auto``, ``ray://host:10001``); default starts a local Ray.
        resume: Continue an interrupted sweep of the same name.
        console: A ``rich`` console for progress lines; None keeps quiet.
        warm_start: A previous sweep (name in ``storage`` or a ``summary.json`` path) whose best
            configurations seed this sweep's study.
        warm_start_k: How many of them.
        warm_start_mode: ``prior`` (their results are told to the searcher) or ``reevaluate`` (they are
            trained again first).

    Returns:
        The sweep's :class:`TuneResult`.

    Raises:
        ConfigError: Bad sweep file, data or model reference (nothing has run yet).
    """
    overrides: dict[str, Any] = {}
    if num_samples is not None:
        overrides["search.num_samples"] = num_samples
    if name is not None:
        overrides["name"] = name
    if mlflow_uri is not None:
        overrides["tracking.mlflow_uri"] = mlflow_uri
    if isinstance(sweep, SweepConfig):
        source = f"<SweepConfig {sweep.name}>"
        if overrides:
            from hpo.config import apply_override, parse_sweep

            data = sweep.model_dump()
            for key, value in overrides.items():
                apply_override(data, key, value)
            sweep = parse_sweep(data, source)
        config = sweep
    else:
        source = str(sweep)
        config = load_sweep(sweep, overrides)
    return run_sweep(
        config,
        source=source,
        storage=storage,
        address=address,
        resume=resume,
        console=console,
        warm_start=warm_start,
        warm_start_k=warm_start_k,
        warm_start_mode=warm_start_mode,
    )
