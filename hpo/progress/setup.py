"""A sweep's monitor, built from its sweep file and run options: plan, header and views."""

from __future__ import annotations

import importlib.util
from typing import TYPE_CHECKING, Any

from hpo.config import SweepConfig
from hpo.config.tracking_uri import masked
from hpo.options import RunOptions
from hpo.progress.journal import EVENTS_FILE
from hpo.progress.live import PROGRESS_FILE, SweepProgress
from hpo.progress.sweep import SweepPlan
from hpo.progress.views import Header, JsonView, LiveView, PlainView, View

if TYPE_CHECKING:  # the monitor is a Ray Tune callback: imported when one is built, so sweep_plan needs no Ray
    from hpo.progress.monitor import SweepMonitor


def sweep_plan(config: SweepConfig, planned: int) -> SweepPlan:
    """The estimator's view of a sweep file (its rules, trial shape and prices)."""
    trial, scheduler = config.trial, config.scheduler
    return SweepPlan(
        planned_trials=planned, max_concurrent=config.search.max_concurrent, max_epochs=trial.max_epochs,
        mode=config.objective.mode, patience=trial.early_stopping.patience, min_delta=trial.early_stopping.min_delta,
        goal=config.objective.goal, scheduler=scheduler.type, grace_period=scheduler.grace_period,
        reduction_factor=scheduler.reduction_factor, brackets=scheduler.brackets,
        time_budget_s=config.search.time_budget_s,
        cpus_per_trial=trial.workers * trial.cpus_per_worker, gpus_per_trial=trial.workers * trial.gpus_per_worker,
        cost_per_cpu_hour=config.cost.per_cpu_hour, cost_per_gpu_hour=config.cost.per_gpu_hour,
    )


def header(config: SweepConfig, options: RunOptions, planned: int) -> Header:
    """The sweep, and the commands that show its MLflow runs and its Optuna study."""
    from hpo.search import study_url
    from hpo.tracking import is_server, normalize_uri

    trial, uri = config.trial, masked(normalize_uri(config.tracking.mlflow_uri))
    description = (f"{planned} trials × {trial.workers} workers, {config.search.algorithm} + "
                   f"{config.scheduler.type}, up to {trial.max_epochs} epochs each")
    # the optuna-dashboard command only where it is installed (it is no dependency of hpo)
    dashboard = config.search.kind.study and importlib.util.find_spec("optuna_dashboard") is not None
    study = f"optuna-dashboard {study_url(options.sweep_dir(config.name))}" if dashboard else ""
    mlflow = f"open {uri}" if is_server(uri) else f"hpo ui --mlflow-uri {uri}"
    return Header(config.name, description, mlflow, study, config.cost.currency)


def views(options: RunOptions) -> list[View]:
    """The views ``options.progress`` asks for on ``options.console``."""
    mode, console = options.progress, options.console
    if mode == "json":
        return [JsonView()]
    if mode == "off" or console is None:
        return []
    if mode == "live" or (mode == "auto" and (console.is_terminal or _notebook_widgets(console))):
        return [LiveView(console)]
    return [PlainView(console)]


def _notebook_widgets(console: Any) -> bool:
    """In Jupyter, rich redraws in place through ipywidgets; without them a notebook gets plain lines."""
    import importlib.util

    return bool(getattr(console, "is_jupyter", False)) and importlib.util.find_spec("ipywidgets") is not None


def monitor_for(config: SweepConfig, options: RunOptions, planned: int, started: float | None = None) -> SweepMonitor:
    """The sweep's monitor (``progress.json`` and the journal in its state directory, the views of ``options``)."""
    from hpo.progress.monitor import SweepMonitor

    progress = SweepProgress(config.name, config.objective.metric, sweep_plan(config, planned), started=started)
    state = options.sweep_dir(config.name)
    return SweepMonitor(progress, header(config, options, planned), views(options), state / PROGRESS_FILE,
                        events_file=state / EVENTS_FILE)


def samples_per_epoch(spec: Any) -> int | None:
    """Training examples in one epoch of one trial (all its workers together), from the trial spec."""
    rows = getattr(getattr(spec, "train", None), "num_rows", None)
    return int(rows) if isinstance(rows, int) else None
