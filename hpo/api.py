"""The ``hpo.tune``, ``hpo.repeat``, ``hpo.tune_partitions`` and ``hpo.plan`` entry points for notebooks and scripts."""

from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from hpo import _env
from hpo.config import SweepConfig, load_sweep, option_overrides
from hpo.options import DEFAULT_STORAGE, RunOptions, Storage, WarmStart
from hpo.plan.types import Plan, Shape, SourceKind
from hpo.summary import TuneResult
from hpo.sweep_summary import SweepSummary


def _source(sweep: str | Path | SweepConfig) -> str:
    """What error messages name as the sweep's file."""
    return f"<SweepConfig {sweep.name}>" if isinstance(sweep, SweepConfig) else str(sweep)


def _load(sweep: str | Path | SweepConfig, overrides: dict[str, Any]) -> tuple[SweepConfig, str]:
    """The validated sweep with ``overrides`` (dotted keys) applied, and the source to name in errors."""
    source = _source(sweep)
    if isinstance(sweep, SweepConfig):
        if not overrides:
            return sweep, source
        from hpo.config import apply_override, parse_sweep

        data = sweep.model_dump()
        for key, value in overrides.items():
            apply_override(data, key, value, source)
        return parse_sweep(data, source), source
    return load_sweep(sweep, overrides), source


def tune(
    sweep: str | Path | SweepConfig,
    *,
    num_samples: int | None = None,
    name: str | None = None,
    storage: str | Path | Storage = DEFAULT_STORAGE,
    mlflow_uri: str | None = None,
    address: str | None = None,
    resume: bool = False,
    console: Any = None,
    warm_start: str | None = None,
    warm_start_k: int = 5,
    warm_start_mode: str | None = None,
    overwrite: bool = False,
    progress: bool = True,
    options: RunOptions | None = None,
    deadline_s: float | None = None,
) -> TuneResult:
    """Runs a sweep and returns its result, showing its progress as it runs.

    Args:
        sweep: A sweep file path or a :class:`SweepConfig`.
        num_samples: Overrides ``search.num_samples``.
        name: Overrides ``name``.
        storage: Where sweeps live: a directory, ``file:///shared/mount``, ``s3://bucket/prefix`` or
            ``gs://bucket/prefix`` (see :class:`hpo.storage.Storage`).
        mlflow_uri: Overrides ``tracking.mlflow_uri``.
        address: Ray address (``auto``, ``ray://host:10001``); default starts a local Ray.
        resume: Continue an interrupted sweep of the same name (a finished one is returned as it is).
        console: The ``rich`` console progress goes to (default: a new one, with ``progress``).
        warm_start: A previous sweep (name in ``storage`` or a ``summary.json`` path) whose best
            configurations seed this sweep's study.
        warm_start_k: How many of them.
        warm_start_mode: ``prior`` (their results are told to the searcher) or ``reevaluate`` (they are
            trained again first); None: ``prior`` for ``optuna-tpe``/``optuna-gp``, ``reevaluate`` for
            ``random``, which models nothing (``prior`` with it is a :class:`~hpo.errors.ConfigError`).
        overwrite: Start the sweep again if its name already ran in ``storage`` (drops its Optuna study);
            without it (or ``resume``) a used name is an error.
        progress: Show a live view of the trials, the estimated time left and cost (in a notebook or on a
            terminal; plain lines elsewhere). False: quiet.
        options: All run options at once (a :class:`RunOptions`); replaces storage … progress and deadline_s.
        deadline_s: Seconds from now by which the sweep should end (``--deadline``): ``p_meet`` in the
            progress, one warning below 0.5, the plan's nodes asked of a cluster's autoscaler; no trial is
            stopped for it (docs/plan.md). None: no deadline.

    Returns:
        The sweep's :class:`TuneResult`.

    Raises:
        ConfigError: Bad sweep file, data or model reference (nothing has run yet); also a sweep with
            ``data.partitions``, which :func:`tune_partitions` runs.
        SweepInterrupted: Ctrl-C (a notebook's interrupt) or SIGTERM stopped it; what finished is kept and
            ``resume=True`` continues it.
    """
    if progress and console is None:
        from rich.console import Console

        console = Console()
    options = options or RunOptions(
        storage, address, resume, console if progress else None,
        WarmStart.from_flags(warm_start, warm_start_k, warm_start_mode), overwrite=overwrite,
        deadline_at=None if deadline_s is None else time.time() + deadline_s,
    )
    return run(sweep, options, overrides=option_overrides(num_samples, name, mlflow_uri))


def plan(
    sweep: str | Path | SweepConfig,
    *,
    deadline_s: float | None = None,
    history: Sequence[Any] = (),
    shapes: Sequence[Shape] | None = None,
    confidence: float = 0.8,
    samples: int = 1000,
    cluster: str | Path | None = None,
    source: SourceKind | None = None,
) -> Plan:
    r"""Plans a sweep to a deadline: which shape ends it in time, how long it takes and what it costs.

    Reads past sweeps' progress journals only (no Ray, no TensorFlow); see :func:`hpo.plan.planner.plan`
    and docs/plan.md.

    Args:
        sweep: The sweep file (or its :class:`SweepConfig`).
        deadline_s: Seconds from the command's start by which it must end (None: no deadline).
        history: Past sweeps of the same model: state directories (``STORAGE/NAME``) or
            :class:`hpo.plan.SweepRecord`\ s (:func:`pilot` returns such directories).
        shapes: Candidate :class:`hpo.plan.Shape`\ s (default: workers per trial and trials at once varied).
        confidence: The least probability of meeting the deadline a recommended option has.
        samples: Monte-Carlo draws per option.
        cluster: A Ray cluster file whose node types the options are placed on (None: this machine).
        source: What the history is: ``earlier rounds``, ``from`` or ``pilot`` (default: from the names).

    Returns:
        The :class:`hpo.plan.Plan`: its ``options``, ``recommended`` and ``why``.
    """
    from hpo.plan.planner import plan as make_plan

    return make_plan(sweep, deadline_s=deadline_s, history=history, shapes=shapes, confidence=confidence,
                     samples=samples, cluster=cluster, source=source)


def pilot(
    sweep: str | Path | SweepConfig,
    trials: int,
    *,
    epochs: int = 3,
    storage: str | Path | Storage = DEFAULT_STORAGE,
    console: Any = None,
) -> list[Path]:
    """Runs a short pilot of a sweep for :func:`plan`: ``trials`` trials of ``epochs`` epochs at one or two shapes.

    The sweep's own shape, and where this machine holds it, the same with another worker count (1 where
    the file has more, else 2), each a real sweep named ``NAME-pilot-<workers>w-<time>`` in ``storage``.

    Returns:
        The pilot sweeps' state directories, to pass as ``history``.
    """
    import time

    from hpo.plan.capacity import Capacity
    from hpo.plan.history import shape_of

    config, _ = _load(sweep, {})
    own = shape_of(config)
    other = 1 if own.workers_per_trial > 1 else 2
    local = Capacity.local()
    workers = [own.workers_per_trial] + (
        [other] if local.place(Shape(other, 1, own.gpus_per_worker, own.cpus_per_worker)) else [])
    stamp = time.strftime("%Y%m%d-%H%M%S")
    store = Storage.parse(storage)
    out = []
    for count in workers:
        name = f"{config.name}-pilot-{count}w-{stamp}"[-100:]
        overrides = {"name": name, "search.num_samples": trials, "trial.workers": count,
                     "search.max_concurrent": min(config.search.max_concurrent, trials),
                     "trial.max_epochs": min(epochs, config.trial.max_epochs)}
        options = RunOptions(store, None, False, console, progress="auto" if console is not None else "off")
        run(config, options, overrides)
        out.append(store.state_dir(name))
    return out


def run(sweep: str | Path | SweepConfig, options: RunOptions, overrides: dict[str, Any] | None = None) -> TuneResult:
    """Runs one sweep with ready-made options (what :func:`tune` and the CLI call).

    Args:
        sweep: A sweep file path or a :class:`SweepConfig`.
        options: How to run it.
        overrides: Dotted sweep-file keys to replace, e.g. ``{"search.num_samples": 4}``.
    """
    from hpo.sweep import run_sweep

    config, source = _load(sweep, overrides or {})
    with _env.applied():
        return run_sweep(config, options, source=source)


def repeat(
    name: str,
    *,
    top: int = 3,
    repeats: int = 3,
    new_name: str | None = None,
    storage: str | Path | Storage = DEFAULT_STORAGE,
    mlflow_uri: str | None = None,
    address: str | None = None,
    console: Any = None,
) -> TuneResult:
    """Re-runs the ``top`` best configurations of finished sweep ``name`` ``repeats`` times each, with new seeds.

    The repeats run as a new sweep (``NAME-repeat`` unless ``new_name``) with the first sweep's settings,
    every repeat to its own end (FIFO, no goal), linked to the first sweep by ``repeat_of`` in its summary
    and the ``hpo.repeat_of`` tag of its MLflow parent run. Its summary compares the configurations over
    their repeats (:mod:`hpo.stats`).

    Args:
        name: The finished sweep (in ``storage``).
        top: How many of its best configurations (by mean over their repeats, if it had repeats).
        repeats: Runs of each (2 or more).
        new_name: The repeat sweep's name.
        storage: Where both sweeps live.
        mlflow_uri: Overrides the first sweep's ``tracking.mlflow_uri``.
        address: Ray address; default starts a local Ray.
        console: A ``rich`` console for progress lines; None keeps quiet.

    Returns:
        The repeat sweep's :class:`TuneResult`.

    Raises:
        ConfigError: Unknown or unfinished sweep, or bad ``top`` / ``repeats``.
    """
    from hpo.repeats import load_config, repeat_config

    storage = Storage.parse(storage)
    SweepSummary.load(storage, name)  # finished: the best configurations are known
    config = repeat_config(load_config(storage, name), top, repeats, new_name)
    options = RunOptions(storage, address, False, console, WarmStart(name, top, "reevaluate"))
    return run(config, options, overrides=option_overrides(mlflow_uri=mlflow_uri))


def tune_partitions(
    sweep: str | Path | SweepConfig,
    *,
    partitions: Mapping[str, str] | Sequence[str] | None = None,
    partition_by: str | None = None,
    num_samples: int | None = None,
    name: str | None = None,
    mlflow_uri: str | None = None,
    options: RunOptions | None = None,
) -> dict[str, TuneResult]:
    """Runs one sweep per data partition (e.g. per region) and returns each partition's result.

    The partitions are the sweep's ``data.partitions``, or ``partitions`` (which replace ``data.train``
    and ``data.partitions``), or the values of the column ``partition_by`` of ``data.train``. Partition
    ``P`` runs as the sweep ``NAME-P`` with its own Optuna study, MLflow parent run and
    ``STORAGE/NAME-P/summary.json``. Every partition is checked before the first trial starts.

    Args:
        sweep: A sweep file path or a :class:`SweepConfig`.
        partitions: Partition name → data URL, or a list of URLs (each named after its last path
            component; ``…/region=eu`` gives ``eu``).
        partition_by: A column of ``data.train`` to split by (one partition per value); not with
            ``partitions`` or ``data.partitions``.
        num_samples: Overrides ``search.num_samples`` (per partition).
        name: Overrides ``name`` (the partitions' prefix).
        mlflow_uri: Overrides ``tracking.mlflow_uri``.
        options: Storage, Ray address (default: one local Ray for all partitions), resume (each partition
            continues where it stopped), console, warm start (a previous partitioned sweep's name seeds
            partition ``P`` from ``NAME-P``; a ``summary.json`` path seeds every partition). Default:
            ``RunOptions()``.

    Returns:
        Partition name → :class:`TuneResult`, in the order the partitions ran.

    Raises:
        ConfigError: Both or neither of ``partitions``/``partition_by`` given, or a partition whose data,
            model or tracking store is unusable (nothing has run yet).
    """
    return run_partitioned(
        sweep, options or RunOptions(), partitions=partitions, partition_by=partition_by,
        overrides=option_overrides(num_samples, name, mlflow_uri),
    )


def run_partitioned(
    sweep: str | Path | SweepConfig,
    options: RunOptions,
    *,
    partitions: Mapping[str, str] | Sequence[str] | None = None,
    partition_by: str | None = None,
    overrides: dict[str, Any] | None = None,
    partitions_option: str = "partitions",
) -> dict[str, TuneResult]:
    """Runs one sweep per partition with ready-made options (what :func:`tune_partitions` and the CLI call).

    Args:
        sweep: A sweep file path or a :class:`SweepConfig`.
        options: How to run each partition.
        partitions: Partition name → data URL, or ``[NAME=]URL`` strings (see :func:`tune_partitions`).
        partition_by: A column of ``data.train`` to split by.
        overrides: Dotted sweep-file keys to replace.
        partitions_option: What error messages call ``partitions`` (the CLI: ``--partition``).
    """
    from hpo.errors import ConfigError
    from hpo.partition import named_urls, run_partitions, split

    overrides = dict(overrides or {})
    if partitions is not None:
        where = _source(sweep)
        if partition_by:
            raise ConfigError(f"{where}: partition_by: cannot be combined with partitions; pass one of them")
        if isinstance(partitions, str) or not isinstance(partitions, (Mapping, Sequence)):
            raise ConfigError(f"{where}: partitions: expected a mapping name → URL or a list of URLs; pass one")
        overrides["data.partitions"] = named_urls(partitions, where, partitions_option)
        overrides["data.train"] = None
    config, source = _load(sweep, overrides)
    parts = split(config, partition_by=partition_by, storage=options.storage, source=source)
    with _env.applied():
        return run_partitions(parts, options, source=source)
