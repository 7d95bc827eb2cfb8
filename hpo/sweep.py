"""A sweep, top to bottom: checks → Ray → tracker → Ray Tune ``Tuner`` over the trials → ``summary.json``."""

from __future__ import annotations

import dataclasses
import logging
import signal
import time
from pathlib import Path
from typing import Any

from hpo import compat, deadline, kinds
from hpo.config import SweepConfig
from hpo.driver import check_not_running, recorded_driver
from hpo.errors import ConfigError, SweepAborted, SweepInterrupted
from hpo.interrupt import Interruption
from hpo.memory import ReleaseFreeMemory, release_free_memory
from hpo.options import RunOptions, summary_path
from hpo.preflight import check_fits_cluster, preflight
from hpo.ray_session import start_ray, stop_ray
from hpo.repeats import save_config
from hpo.rerun import prepare_rerun
from hpo.results import ENDED_TUNE_STATUSES
from hpo.summary import TuneResult, build_summary, failure_line, goal_status, trial_rows
from hpo.sweep_summary import SweepSummary
from hpo.tracking.tracker import Tracker, TrackerStart
from hpo.trial.spec import TrialSpec
from hpo.tuner import build_tuner, can_restore

logger = logging.getLogger(__name__)

#: Seconds between saves of Tune's experiment state (what ``--resume`` restarts from), at least.
STATE_SAVE_EVERY_S = 2.0
#: The most of the driver's time those saves may take (a sweep of thousands of trials saves less often).
STATE_SAVE_SHARE = 0.05


def run_sweep(
    config: SweepConfig, options: RunOptions, *, source: str = "<sweep>", spec: TrialSpec | None = None
) -> TuneResult:
    """Runs a whole sweep and writes ``STORAGE/NAME/summary.json``.

    Args:
        config: The validated sweep.
        options: Storage, Ray address, resume, console, warm start.
        source: Where the config came from (for error messages).
        spec: The result of :func:`~hpo.preflight.preflight` for this config and storage, when the caller
            already has it (partitioned sweeps check every partition before the first one runs).

    Returns:
        The sweep's result.

    Raises:
        ConfigError: Bad input found before any trial started.
        SweepAborted: The sweep itself could not go on.
    """
    check_not_running(options.sweep_dir(config.name), config.name, source)
    earlier = deadline.earlier_round(config, options)  # the plan's history, before a rerun clears the journal
    finished = prepare_rerun(config.name, options, source)
    if finished is not None:
        return _report_finished(finished, options)
    with Interruption() as interrupt:
        spec = spec or preflight(config, options.storage, source)  # nothing is written or announced before
        # driver.json: where `hpo stop NAME` finds this process (removed when the sweep ends)
        with recorded_driver(options.sweep_dir(config.name)):
            return _run(config, options, source, spec, interrupt, earlier)


def _run(
    config: SweepConfig, options: RunOptions, source: str, spec: TrialSpec, interrupt: Interruption,
    earlier: Any = None,
) -> TuneResult:
    """:func:`run_sweep` once the name is cleared and the checks passed, with SIGINT/SIGTERM held."""
    from hpo.progress.placement_watch import PlacementWatch
    from hpo.progress.setup import monitor_for, samples_per_epoch
    from hpo.search import planned_trials
    from hpo.tracking.kinds import tracker_kind
    from hpo.trial.simtime import SweepClock

    monitor = monitor_for(config, options, planned_trials(config))
    monitor.begin()  # the header (its "MLflow: open …" names a store the checks found working)
    monitor.progress.samples_per_epoch = samples_per_epoch(spec)
    warm_points = _warm_points(config, options, source)
    started_ray = start_ray(options.address)
    if started_ray and not options.address:  # every trial on this machine: Horovod's rendezvous on loopback
        spec = dataclasses.replace(spec, rendezvous_host="127.0.0.1")
    interrupt.rearm()
    try:
        check_fits_cluster(spec, source, local=not options.address, storage=options.storage)
    except ConfigError:
        stop_ray(started_ray)
        raise
    started = monitor.progress.started = time.time()
    spec, clock = SweepClock.open(spec, started, config.search.max_concurrent)  # a simulated sweep's (or None)
    if clock is not None:
        monitor.progress.clock = clock.now
    sweep_dir = options.sweep_dir(config.name)
    save_config(sweep_dir, config)  # what `hpo repeat` re-runs
    say = options.console.print if options.console is not None else None
    to_deadline = deadline.start(config, options, monitor, earlier, say)
    monitor.checked()
    deadline.journal(to_deadline, monitor)
    if options.storage.remote:  # the views say when the object storage stops answering (uploads then wait)
        monitor.watch_storage(options.storage.probe)
    kind = tracker_kind()
    resume = options.resume and can_restore(options, config.name) and kind.resumable(sweep_dir)
    tracker = kind.open(TrackerStart(
        config, source, sweep_dir, options.storage.state_root / "_mlflow_artifacts", resume,
        sample=(spec.validation.url, spec.features), storage=options.storage,
    ))
    interrupt.on_stop = tracker.mark_interrupted
    monitor.log = tracker.log_progress
    watchers = [*([clock] if clock is not None else []), tracker.callback, monitor,  # the clock first: it reads results
                ReleaseFreeMemory()]
    # On a cluster, nodes come and go: trials whose placement group stays unplaced are seen to (a local Ray
    # loses no node).
    placement = None
    if options.address:
        from hpo.cluster.fit import autoscaler_node_types, never_fits

        placement = PlacementWatch(monitor.resources_changed, node_types=autoscaler_node_types, never_fits=never_fits)
    if placement is not None:
        watchers.append(placement)
    tuner = build_tuner(config, options, spec, watchers, warm_points, started, resume)

    def seen(controller: Any) -> None:
        # Tune's experiment state saved every 2 s, less often once a save (which grows with the trials held)
        # would take more than 5 % of the driver
        compat.tune_state_saves_within_share(controller, STATE_SAVE_EVERY_S, STATE_SAVE_SHARE)
        if placement is not None:
            placement.bind(controller)

    try:
        # Trial runtime_envs are logged in plain text; metrics go to MLflow, not to TensorBoard files.
        with compat.tune_propagates_no_credentials(), compat.tune_without_tensorboard(), \
                compat.tune_controller_seen(seen):
            results = tuner.fit()
    except KeyboardInterrupt:  # a second Ctrl-C: stop at once (finished trials are in Tune's state and MLflow)
        monitor.close("interrupted")
        tracker.interrupt(None)
        _push_state(options, config.name)
        deadline.release(to_deadline)
        stop_ray(started_ray)
        raise SweepInterrupted(interrupt.signum or signal.SIGINT, config.name) from None
    except Exception as exc:
        if _storage_down(options, exc):  # Tune could not read or save its state: resumable once it answers
            monitor.close("interrupted")
            tracker.interrupt(None)
            deadline.release(to_deadline)
            stop_ray(started_ray)
            raise SweepAborted(
                f"sweep '{config.name}' interrupted: {options.storage} does not answer ({failure_line(exc)}); "
                f"its state is kept in {options.sweep_dir(config.name)}: run 'hpo tune {source} --resume' with "
                "the same --storage once it answers"
            ) from exc
        tracker.fail()
        _push_state(options, config.name)
        deadline.release(to_deadline)
        stop_ray(started_ray)
        raise SweepAborted(f"sweep '{config.name}' stopped: {failure_line(exc)}") from exc
    release_free_memory()  # what Tune's loop freed, before the write-up allocates its own
    storage_stopped = set(monitor.storage_interrupted)  # ended because the storage did not answer: resumable
    interrupted = interrupt.interrupted or bool(storage_stopped)
    monitor.close("interrupted" if interrupted else "finished")
    path, summary = _write_up(config, options, results, tracker, started, interrupted, storage_stopped,
                              lambda status: deadline.section(to_deadline, monitor, sweep_dir, status))
    deadline.release(to_deadline)
    stop_ray(started_ray)
    if interrupt.signum is not None:
        raise SweepInterrupted(interrupt.signum, config.name, path)
    if storage_stopped:
        raise SweepAborted(
            f"sweep '{config.name}' interrupted: {len(storage_stopped)} trial(s) stopped because "
            f"{options.storage} did not answer ({', '.join(sorted(storage_stopped))}); run 'hpo tune {source} "
            "--resume' with the same --storage once it answers"
        )
    return TuneResult.from_summary(summary, path)


def _storage_down(options: RunOptions, exc: BaseException) -> bool:
    """True if ``exc`` is a storage error and the object storage does not answer now."""
    if not isinstance(exc, OSError) or not options.storage.remote:
        return False
    try:
        options.storage.probe()
    except OSError:
        return True
    return False


def _push_state(options: RunOptions, name: str) -> None:
    """Copies the driver's state to the storage; a storage that does not answer leaves it on this machine."""
    try:
        options.storage.push_state(name)
    except OSError as exc:
        logger.warning("the state of %s stays in %s: %s", name, options.sweep_dir(name), exc)


def _write_up(
    config: SweepConfig, options: RunOptions, results: Any, tracker: Tracker, started: float, interrupted: bool,
    storage_stopped: set[str] | frozenset[str] = frozenset(), deadline_section: Any = None,
) -> tuple[Path, SweepSummary]:
    """Closes the study and the MLflow runs, writes ``summary.json`` and copies the driver state to the storage.

    An interrupted sweep keeps its study open for ``--resume`` and registers no model.
    """
    from hpo.search import close_study

    trials = compat.tune_trial_statuses(results)
    stopped: set[str] = set()
    if interrupted:  # trials not started, and those Tune stopped for Ctrl-C (it calls no trial hook for them)
        stopped = {tid for tid, status in trials if status not in ENDED_TUNE_STATUSES}
        stopped |= set(tracker.open_trials()) | set(storage_stopped)
    else:
        close_study(config, options.sweep_dir(config.name))  # a trial handed out just before a crash never ran
    rows = trial_rows(results, config, tracker.run_ids(), [tid for tid, _ in trials], stopped, storage_stopped,
                      compat.tune_trial_configs(results))
    goal = goal_status(config, rows) if config.objective.goal is not None else None
    summary = build_summary(config, rows, tracker.summary_section(), time.time() - started, goal,
                            "interrupted" if interrupted else "finished")
    if deadline_section is not None and (section := deadline_section(summary.status)) is not None:
        summary.deadline = section
    report = _report(config, options, summary)
    release_free_memory()  # the report's figures and the study it read
    best_id = summary.best.trial_id if summary.best else None  # the summary's rule (best mean with repeats)
    best = next((r for r in rows if r.trial_id == best_id), None)
    pending = tracker.interrupt(summary) if interrupted else tracker.finish(rows, best, goal, summary, report)
    if pending and options.console is not None:
        options.console.print(tracker.unsent_note(pending), highlight=False)
    path = summary_path(options.storage, config.name)
    summary.write(path)
    _push_state(options, config.name)
    return path, summary


def _report(config: SweepConfig, options: RunOptions, summary: SweepSummary) -> Path | None:
    """Writes the sweep's HTML report (``STATE/NAME/report.html``); a report that cannot be drawn is not fatal."""
    from hpo.report import REPORT_FILE, write_report

    path = options.sweep_dir(config.name) / REPORT_FILE
    try:
        return write_report(options.storage, config.name, path, summary=summary)
    except Exception as exc:  # noqa: BLE001 - the results are in summary.json and MLflow; the plots are extra
        if options.console is not None:
            options.console.print(f"report: not written ({type(exc).__name__}: {exc})", highlight=False)
        return None


def _report_finished(path: Path, options: RunOptions) -> TuneResult:
    """The result of a finished sweep asked to resume: read from its summary; nothing runs or is logged."""
    summary = SweepSummary.read(path)
    if options.console is not None:
        options.console.print(f"sweep '{summary.name}' finished already; nothing to resume", highlight=False)
    return TuneResult.from_summary(summary, path)


def _warm_points(config: SweepConfig, options: RunOptions, source: str) -> list[tuple[dict[str, Any], float]] | None:
    """The previous sweep's best ``(params, metric)`` to seed the study with (None without a warm start)."""
    warm = options.warm_start
    if warm is None:
        return None
    if not config.search.kind.warm_start:
        able = ", ".join(name for name, kind in kinds.SEARCHERS.items() if kind.warm_start)
        raise ConfigError(
            f"{source}: search.algorithm: --warm-start needs an Optuna-backed searcher ({able}), "
            f"not {config.search.algorithm}"
        )
    warm.mode_for(config.search, source)  # refused before any work
    from hpo.search import previous_best

    return previous_best(warm.summary_path(options.storage), config, warm.k)
