"""A sweep: sweep file → data → Ray Tune ``Tuner`` over Horovod trials → MLflow + ``summary.json``."""

from __future__ import annotations

import json
import math
import os
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import hpo._env as _env
from hpo.config import FINISHED_KEY, REPEAT_KEY, SweepConfig, configuration_key, reaches_goal, repeats_reach_goal
from hpo.data import (
    DatasetInfo,
    builtin_digits,
    describe,
    path_to_url,
    split_dataset,
)
from hpo.errors import ConfigError, SweepAborted
from hpo.outbox import SPOOL_NAME, update_summary, write_summary
from hpo.trial.spec import TrialSpec, resolve_model

DEFAULT_STORAGE = "hpo_runs"


@dataclass
class TuneResult:
    """What a finished sweep returns (and what ``summary.json`` holds).

    Attributes:
        name: Sweep name.
        best_params: Parameters of the best trial.
        best_metric: Its objective value (best epoch, whose weights EarlyStopping restores).
        best_trial_id: Its Tune trial id.
        trials: One row per trial: trial_id, status, epochs, metric, stopped_early, mlflow_run_id, params.
        summary_path: Path of ``summary.json``.
        summary: The summary as written.
    """

    name: str
    best_params: dict[str, Any]
    best_metric: float | None
    best_trial_id: str | None
    trials: Any
    summary_path: Path
    summary: dict[str, Any] = field(repr=False)


def resolve_data(config: SweepConfig, storage: Path, source: str) -> tuple[DatasetInfo, DatasetInfo]:
    """Materialises built-in data, splits off validation if needed, and checks both datasets.

    Raises:
        ConfigError: For a missing path, missing columns or an unusable dataset.
    """
    d = config.data
    data_root = storage / "_data"
    if d.train.startswith("builtin:"):
        if d.train != "builtin:digits":
            raise ConfigError(f"{source}: data.train: unknown built-in dataset '{d.train}'; use builtin:digits")
        train_url, val_url = builtin_digits(data_root, d.validation_fraction, config.search.seed or 0)
    elif d.validation:
        train_url, val_url = d.train, d.validation
    else:
        describe(d.train, features=d.features, label=d.label, task=d.task, source=source, key="data.train")
        train_url, val_url = _split(config, data_root / config.name)
    kw = {"features": d.features, "label": d.label, "task": d.task, "source": source}
    train = describe(train_url, key="data.train", **kw)
    validation = describe(val_url, key="data.validation", **kw)
    if train.input_shape != validation.input_shape:
        raise ConfigError(
            f"{source}: data.validation: features of shape {list(validation.input_shape)}, but train has "
            f"{list(train.input_shape)}; use datasets written with the same columns"
        )
    if train.num_classes is not None and validation.num_classes is not None:
        classes = max(train.num_classes, validation.num_classes)
        train = DatasetInfo(**{**train.__dict__, "num_classes": classes})
    workers = config.trial.workers
    for info, key in ((train, "data.train"), (validation, "data.validation")):
        if len(info.row_group_rows) < workers:
            raise ConfigError(
                f"{source}: {key}: {len(info.row_group_rows)} row groups cannot be sharded over "
                f"{workers} workers; rewrite it with 'hpo data convert' or use fewer workers"
            )
    return train, validation


def _split(config: SweepConfig, dest: Path) -> tuple[str, str]:
    """Splits a user dataset without a validation set into train/validation datasets (seeded)."""
    return split_dataset(
        config.data.train,
        path_to_url(dest / "train"),
        path_to_url(dest / "validation"),
        config.data.validation_fraction,
        config.search.seed or 0,
    )


def preflight(config: SweepConfig, storage: Path, source: str) -> TrialSpec:
    """Every check that can fail on user input, before Ray starts: tracking server, data, model import.

    Raises:
        ConfigError: On the first problem found (one line), or for a config with ``data.partitions``
            (each partition is checked on its own; see :mod:`hpo.partition`).
    """
    from hpo.mlflow_server import check_reachable
    from hpo.tracking import normalize_uri

    if config.data.partitions:
        raise ConfigError(
            f"{source}: data.partitions: this sweep runs one sweep per partition ({len(config.data.partitions)}); "
            "run it with hpo.tune_partitions() or 'hpo tune', which give one result per partition"
        )
    check_reachable(normalize_uri(config.tracking.mlflow_uri), source)
    if config.search.algorithm == "optuna-gp":
        import importlib.util

        if importlib.util.find_spec("torch") is None:
            raise ConfigError(
                f"{source}: search.algorithm: optuna-gp needs torch, which is not installed; "
                "run '.venv/bin/pip install torch==2.13.0' or use optuna-tpe"
            )
    train, validation = resolve_data(config, storage, source)
    resolve_model(config.model, source)
    return TrialSpec.from_config(config, train, validation)


def start_ray(address: str | None = None, num_cpus: int | None = None) -> bool:
    """Starts (or connects to) Ray quietly; returns True if this call started it."""
    import ray

    if ray.is_initialized():
        return False
    env = _env.apply()
    path = os.pathsep.join(p for p in [os.getcwd(), os.environ.get("PYTHONPATH", "")] if p)
    kwargs: dict[str, Any] = {
        "include_dashboard": False,
        "log_to_driver": bool(os.environ.get("HPO_DEBUG")),
        "logging_level": "ERROR",
        "runtime_env": {"env_vars": {**env, "PYTHONPATH": path}},
    }
    if address:
        _use_token_auth_if_available(address)
        ray.init(address=address, **kwargs)
    else:
        ray.init(address="local", num_cpus=num_cpus, **kwargs)
    return True


def _use_token_auth_if_available(address: str) -> None:
    """Turns Ray token auth on for this process when connecting to a running cluster with a token at hand.

    ``ray.init`` enables token auth by itself only for a cluster it finds on its own; an explicit
    address, ``RAY_ADDRESS`` included (which ``ray job submit`` sets), is tried without a token unless
    ``RAY_AUTH_MODE=token`` is set, and a cluster started by ``ray start`` rejects that. An explicit
    ``RAY_AUTH_MODE`` is left alone; Ray Client (``ray://``) addresses authenticate differently.
    """
    if address.startswith("ray://") or "RAY_AUTH_MODE" in os.environ:
        return
    import logging

    from ray._private.authentication import authentication_token_setup as auth

    log = logging.getLogger(auth.__name__)
    level = log.level
    log.setLevel(logging.ERROR)  # its "token authentication is enabled" notice is for new clusters
    try:
        auth.maybe_enable_token_auth_if_token_available(warn_if_disabled=False)
    finally:
        log.setLevel(level)


def _best(values: list[float], mode: str) -> float | None:
    finite = [v for v in values if isinstance(v, (int, float)) and math.isfinite(v)]
    if not finite:
        return None
    return max(finite) if mode == "max" else min(finite)


def _trial_rows(results: Any, config: SweepConfig, run_ids: dict[str, str]) -> list[dict[str, Any]]:
    metric, mode = config.objective.metric, config.objective.mode
    rows = []
    for result in results:
        trial_id = result.metrics.get("trial_id") if result.metrics else None
        trial_id = trial_id or Path(result.path).name
        history = result.metrics_dataframe
        values = list(history[metric]) if history is not None and metric in history else []
        last = result.metrics or {}
        epochs = int(last.get("epoch", 0) or 0)
        if result.error is not None:
            status = "failed"
        elif last.get(FINISHED_KEY):
            status = "completed"
        else:
            status = "stopped_early"
        config_ = dict(result.config or {})
        repeat = int(config_.pop(REPEAT_KEY, 0))
        row = {
            "trial_id": trial_id,
            "params": config_,
            "status": status,
            "epochs": epochs,
            "metric": _best(values, mode),
            "stopped_early": status == "stopped_early",
            "mlflow_run_id": run_ids.get(trial_id),
            "checkpoint": result.checkpoint.path if result.checkpoint else None,
            "repeat": repeat,
        }
        if result.error is not None:
            row["error"] = str(result.error).strip().splitlines()[-1][:500]
        rows.append(row)
    return sorted(rows, key=lambda r: r["trial_id"])


def run_sweep(
    config: SweepConfig,
    *,
    source: str = "<sweep>",
    storage: str | Path = DEFAULT_STORAGE,
    address: str | None = None,
    resume: bool = False,
    console: Any = None,
    warm_start: str | None = None,
    warm_start_k: int = 5,
    warm_start_mode: str = "prior",
    spec: TrialSpec | None = None,
) -> TuneResult:
    """Runs a whole sweep and writes ``STORAGE/NAME/summary.json``.

    Args:
        config: The validated sweep.
        source: Where the config came from (for error messages).
        storage: Directory that holds sweeps.
        address: Ray address to connect to (``auto``, ``ray://…``); default: a new local Ray.
        resume: Continue an interrupted sweep of the same name.
        console: A ``rich`` console for progress lines (None: quiet).
        warm_start: A previous sweep (name in ``storage``, or its ``summary.json`` path) to seed the study.
        warm_start_k: How many of its best configurations to take.
        warm_start_mode: ``prior`` (use their results) or ``reevaluate`` (train them again first).
        spec: The result of :func:`preflight` for this config and storage, when the caller already has it
            (partitioned sweeps check every partition before the first one runs); None runs it here.

    Returns:
        The sweep's result.
    """
    from ray import tune

    from hpo import tracking
    from hpo.cluster import check_trial_fits_cluster
    from hpo.progress import ConsoleProgress
    from hpo.search import build_scheduler, build_searcher, build_stopper, planned_trials, tune_num_samples
    from hpo.space import to_param_space
    from hpo.trial.driver import make_trainable, worker_bundle

    storage = Path(storage).resolve()
    sweep_dir = storage / config.name
    spec = spec or preflight(config, storage, source)
    warm_points = None
    if warm_start:
        from hpo.warmstart import previous_best

        if config.search.algorithm == "grid":
            raise ConfigError(
                f"{source}: search.algorithm: --warm-start needs an Optuna-backed searcher "
                "(optuna-tpe, optuna-gp, random), not grid"
            )
        previous = Path(warm_start)
        previous = previous if previous.suffix == ".json" else storage / warm_start / "summary.json"
        warm_points = previous_best(previous, config, warm_start_k)
    uri = tracking.normalize_uri(config.tracking.mlflow_uri)
    started_ray = start_ray(address)
    try:
        check_trial_fits_cluster(worker_bundle(spec), spec.workers, source=source, local=not address)
    except ConfigError:
        if started_ray:
            _shutdown_ray()
        raise
    started = time.time()
    state_path = sweep_dir / "hpo_state.json"
    resume = resume and tune.Tuner.can_restore(str(sweep_dir)) and state_path.is_file()
    if resume:
        sweep_run = tracking.resume_sweep_run(tracking.SweepRun(**json.loads(state_path.read_text())["mlflow"]))
    else:
        sweep_run = tracking.start_sweep_run(
            uri,
            config.tracking.experiment or config.name,
            config.name,
            params=_flat_params(config),
            tags={
                "hpo.sweep_file": source,
                "hpo.searcher": config.search.algorithm,
                "hpo.scheduler": config.scheduler.type,
                "hpo.objective": f"{config.objective.metric} ({config.objective.mode})",
                **tracking.git_tags(os.getcwd()),
            },
            artifact_location=(storage / "_mlflow_artifacts").as_uri() if tracking.is_local(uri) else None,
        )
        sweep_file = Path(source) if not source.startswith("<") else None
        tracking.log_sweep_file(sweep_run, sweep_file, _config_yaml(config))
        sweep_dir.mkdir(parents=True, exist_ok=True)
        state_path.write_text(json.dumps({"mlflow": sweep_run.__dict__}))
    nesting = tracking.MlflowNesting(
        sweep_run, config.objective.metric, config.objective.mode, config.name, sweep_dir / SPOOL_NAME
    )
    callbacks: list[Any] = [nesting]
    if console is not None:
        planned = planned_trials(config)
        callbacks.append(ConsoleProgress(console, config.objective.metric, planned))
    trainable = make_trainable(spec)
    stopper = build_stopper(config)
    if stopper is not None:
        callbacks.append(stopper)  # it hears when the trial that reached the goal has ended
    run_config = tune.RunConfig(
        name=config.name,
        storage_path=str(storage),
        callbacks=callbacks,
        verbose=0,
        failure_config=tune.FailureConfig(max_failures=config.trial.max_failures),
        checkpoint_config=tune.CheckpointConfig(num_to_keep=2),
        stop=stopper,
    )
    if resume:
        tuner = tune.Tuner.restore(str(sweep_dir), trainable=trainable, resume_errored=True)
    else:
        tuner = tune.Tuner(
            trainable,
            param_space=to_param_space(config) if config.search.algorithm == "grid" else {},
            tune_config=tune.TuneConfig(
                metric=config.objective.metric,
                mode=config.objective.mode,
                search_alg=build_searcher(config, sweep_dir, False, warm_points, warm_start_mode),
                scheduler=build_scheduler(config),
                num_samples=tune_num_samples(config),
                max_concurrent_trials=config.search.max_concurrent,
                time_budget_s=_remaining_budget(config.search.time_budget_s, started),
                reuse_actors=True,
            ),
            run_config=run_config,
        )
    outbox = nesting.outbox
    failed = True
    try:
        results = tuner.fit()
        failed = False
    except Exception as exc:
        raise SweepAborted(f"sweep '{config.name}' stopped: {failure_line(exc)}") from exc
    finally:
        if failed:
            outbox.log("sweep", tags={"hpo.status": "failed"})
            outbox.terminate("sweep", "FAILED")
            if started_ray:
                _shutdown_ray()
    run_ids = {} if outbox.down else tracking.trial_run_ids(sweep_run)  # incl. runs of a resumed sweep
    rows = _trial_rows(results, config, run_ids)
    if not outbox.down:  # a resumed sweep: close the runs of trials the crash took away
        tracking.close_lost_runs(sweep_run, set(run_ids) - {r["trial_id"] for r in rows})
    scored = [r for r in rows if r["metric"] is not None]
    pick = max if config.objective.mode == "max" else min
    best = pick(scored, key=lambda r: r["metric"]) if scored else None
    goal = goal_status(config, rows) if config.objective.goal is not None else None
    _close_parent(config, spec, outbox, rows, best, goal)
    pending = outbox.flush() if outbox.down else 0  # sends what was spooled, if the server is back
    summary = {
        "name": config.name,
        "objective": {"metric": config.objective.metric, "mode": config.objective.mode},
        "best": {"trial_id": best["trial_id"], "params": best["params"], "metric": best["metric"]} if best else None,
        "trials": rows,
        "mlflow": {"uri": uri, "experiment_id": sweep_run.experiment_id, "parent_run_id": sweep_run.parent_run_id},
        "wall_time_s": round(time.time() - started, 2),
    }
    if goal is not None:
        summary["goal"] = goal
    update_summary(summary, outbox, pending)
    if pending and console is not None:
        console.print(
            f"mlflow: {pending} writes could not be sent to {uri}; kept in {outbox.spool_path}; "
            f"run 'hpo sync {config.name}' when the server is back",
            highlight=False,
        )
    sweep_dir.mkdir(parents=True, exist_ok=True)
    summary_path = sweep_dir / "summary.json"
    write_summary(summary_path, summary)
    if started_ray:
        _shutdown_ray()
    import pandas as pd

    frame = pd.DataFrame([{**{k: v for k, v in r.items() if k != "params"}, **r["params"]} for r in rows])
    return TuneResult(
        name=config.name,
        best_params=best["params"] if best else {},
        best_metric=best["metric"] if best else None,
        best_trial_id=best["trial_id"] if best else None,
        trials=frame,
        summary_path=summary_path,
        summary=summary,
    )


def goal_status(config: SweepConfig, rows: list[dict[str, Any]]) -> dict[str, Any]:
    """``{value, reached, trial_id}``: whether a trial's best epoch reached ``objective.goal``, and the first that did.

    "First" is in trial-id order (Tune's ids count up as trials start), which is the order trials ran in
    when they run one at a time. With ``search.repeats`` > 1 a configuration reaches the goal when the mean
    of its repeats' best epochs does (all repeats ended with a value); ``trial_id`` is its first trial and
    ``trial_ids`` lists all of them.
    """
    goal, mode, repeats = config.objective.goal, config.objective.mode, config.search.repeats
    if goal is None:
        return {"value": None, "reached": False, "trial_id": None}
    if repeats == 1:
        hit = [r["trial_id"] for r in rows if reaches_goal(r["metric"], goal, mode)]
        return {"value": goal, "reached": bool(hit), "trial_id": hit[0] if hit else None}
    groups: dict[str, list[dict[str, Any]]] = {}
    for row in sorted(rows, key=lambda r: r["trial_id"]):
        groups.setdefault(configuration_key(row["params"]), []).append(row)
    reaching = []
    for group in groups.values():
        for i in range(0, len(group) - repeats + 1, repeats):  # the same configuration drawn again: a new group
            if repeats_reach_goal([r["metric"] for r in group[i:i + repeats]], goal, mode):
                reaching.append([r["trial_id"] for r in group[i:i + repeats]])
    first = min(reaching, default=None)
    return {"value": goal, "reached": first is not None, "trial_id": first[0] if first else None,
            "trial_ids": first}


def failure_line(exc: BaseException) -> str:
    """The line that says what went wrong: the last line of the innermost cause (Tune wraps tracebacks)."""
    while exc.__cause__ is not None:
        exc = exc.__cause__
    text = str(exc)
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    if "Traceback (most recent call last)" in text and not lines[-1].startswith("Traceback"):
        return lines[-1]  # already "SomeError: message"
    return f"{type(exc).__name__}: {lines[-1]}" if lines else type(exc).__name__


def _remaining_budget(budget_s: float | None, started: float) -> float | None:
    """``search.time_budget_s`` less what the sweep spent before Tune starts (MLflow run, Ray, checks).

    Tune counts its budget from its own start; the sweep's budget counts from the sweep's.
    """
    if budget_s is None:
        return None
    return max(budget_s - (time.time() - started), 0.001)


def _shutdown_ray() -> None:
    import ray

    ray.shutdown()


def _flat_params(config: SweepConfig) -> dict[str, Any]:
    """The sweep's settings as flat ``section.key`` MLflow params (the space is logged as one JSON)."""
    out: dict[str, Any] = {"model": config.model, "space": json.dumps(config.model_dump()["space"])}
    for section in ("data", "objective", "search", "scheduler", "trial"):
        for key, value in getattr(config, section).model_dump().items():
            out[f"{section}.{key}"] = value
    return out


def _config_yaml(config: SweepConfig) -> str:
    import yaml

    return yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False)


def _close_parent(
    config: SweepConfig,
    spec: TrialSpec,
    outbox: Any,
    rows: list[dict[str, Any]],
    best: dict[str, Any] | None,
    goal: dict[str, Any] | None,
) -> None:
    """Logs the best finished trial's model (registered under the sweep name), the final best and the goal."""
    from hpo import best_model
    from hpo.tracking import finite

    picked = best_model.pick_model_trial(rows, config.objective.mode)
    if picked is not None:
        row, path = picked
        outbox.log_model(str(path), spec.validation.url, spec.features, config.name, row["trial_id"])
    final = {f"best_{config.objective.metric}": best["metric"]} if best else {}
    final.update(
        trials=len(rows),
        trials_stopped_early=sum(r["stopped_early"] for r in rows),
        trials_failed=sum(r["status"] == "failed" for r in rows),
    )
    now = int(time.time() * 1000)
    tags = {"hpo.best_trial_id": best["trial_id"] if best else ""}
    if best:
        tags["hpo.best_params"] = json.dumps(best["params"], default=str)
    if goal is not None:
        tags["hpo.goal_reached"] = "true" if goal["reached"] else "false"
        tags["hpo.goal_trial_id"] = goal["trial_id"] or ""
    metrics = [(k, float(v), now, 0) for k, v in final.items() if finite(v)]
    outbox.log("sweep", metrics=metrics, tags=tags)
    outbox.terminate("sweep", "FAILED" if best is None else "FINISHED")
