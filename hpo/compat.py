"""Every private API hpo uses: Ray, Optuna (through Ray's ``OptunaSearch``), MLflow, Horovod, Petastorm, TensorFlow.

These are the reason the stack is pinned exactly. Each accessor names the version it was checked
against (:data:`CHECKED`); ``tests/unit/test_compat.py`` checks every one against the installed
packages and fails with a message naming the accessor to update when an upgrade moves something.
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Iterator
from typing import Any

#: The versions every accessor below was checked against.
CHECKED = {
    "ray": "2.60.0",
    "optuna": "5.0.0",
    "mlflow": "3.17.2",
    "horovod": "0.28.1",
    "petastorm": "0.13.1",
    "tensorflow": "2.21.0",
}


# -- Ray Tune schedulers (ray 2.60.0) ---------------------------------------------------------------


def asha_bracket_base() -> type:
    """``ray.tune.schedulers.async_hyperband._Bracket``: ASHA's bracket, subclassed for ``bootstrap_count``."""
    from ray.tune.schedulers.async_hyperband import _Bracket

    return _Bracket


def bracket_rungs(bracket: Any) -> list[tuple[int, dict[str, float]]]:
    """An ASHA bracket's rungs: ``(milestone, {trial_id: value})``, highest milestone first."""
    return bracket._rungs


def asha_stop_last_trials(scheduler: Any) -> bool:
    """ASHA's ``stop_last_trials`` setting (passed on to a replacement bracket)."""
    return scheduler._stop_last_trials


def asha_brackets(scheduler: Any) -> list[Any]:
    """ASHA's brackets, lowest first rung first."""
    return scheduler._brackets


def set_asha_brackets(scheduler: Any, brackets: list[Any]) -> None:
    """Replaces ASHA's brackets (brackets of hpo's kind instead of Tune's)."""
    scheduler._brackets = brackets


def hyperband_time_attr_and_max_t(scheduler: Any) -> tuple[str, int]:
    """HyperBand's time attribute and ``max_t``."""
    return scheduler._time_attr, scheduler._max_t_attr


def hyperband_bracket_of(scheduler: Any, trial: Any) -> Any:
    """The HyperBand bracket a trial belongs to."""
    return scheduler._trial_info[trial][0]


# -- Ray Tune result files (ray 2.60.0) ---------------------------------------------------------------


def _keep_driver_copy(base: type) -> type:
    """``base`` (a Tune result logger) without its restore-time copy over a result file the driver has.

    Tune 2.60's loggers write a trial's ``result.json`` / ``progress.csv`` in the driver's staging
    directory and sync it to the storage every so often. When a paused trial starts again (the median
    rule and HyperBand pause trials; a failed attempt restarts from its checkpoint) they copy the
    storage's copy back over the staging one (``LoggerCallback._restore_from_remote``); a copy older
    than the last sync loses the results in between, and an empty one leaves the trial with no metric
    history (the summary's metric came out None). The driver's own copy, when it exists, is the newest:
    keep it; restore from the storage only when the driver has none (a resumed sweep on a fresh disk).
    """

    def _restore_from_remote(self: Any, file_name: str, trial: Any) -> None:
        from pathlib import Path

        if Path(trial.local_path, file_name).exists():
            return
        base._restore_from_remote(self, file_name, trial)

    return type(f"HpoKeep{base.__name__}", (base,), {"_restore_from_remote": _restore_from_remote})


def result_loggers() -> list[Any]:
    """Tune's CSV and JSON result loggers with the restore fix above (Tune then adds no default ones)."""
    from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback

    return [_keep_driver_copy(CSVLoggerCallback)(), _keep_driver_copy(JsonLoggerCallback)()]


@contextlib.contextmanager
def tune_without_tensorboard() -> Iterator[None]:
    """Tune without its default TensorBoard logger (for a block): hpo's CSV and JSON loggers stay.

    Every metric of every epoch is in MLflow, so the per-trial ``events.out.tfevents`` files were a second
    copy nobody read, written to the storage (S3 too) at every result. Creating the logger also imports
    ``tensorboardX``, which imports ``torch`` when it is installed (the ``optuna-gp`` extra): ~5 CPU-seconds
    of the sweep driver's start. Ray 2.60 adds the missing default loggers in ``Tuner.fit`` unless
    ``TUNE_DISABLE_AUTO_CALLBACK_LOGGERS=1``; the variable is set for the block only and put back after.
    """
    import os

    name = "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"
    kept = os.environ.get(name)
    os.environ[name] = "1"
    try:
        yield
    finally:
        if kept is None:
            os.environ.pop(name, None)
        else:
            os.environ[name] = kept


# -- Optuna through Ray's OptunaSearch (ray 2.60.0, optuna 5.0.0) -------------------------------------


def optuna_search_study(searcher: Any) -> Any:
    """The ``optuna.Study`` behind an ``OptunaSearch``."""
    return searcher._ot_study


def optuna_search_trial(searcher: Any, trial_id: str) -> Any:
    """The ``optuna.Trial`` an ``OptunaSearch`` made for Tune trial ``trial_id``."""
    return optuna_search_trials(searcher)[trial_id]


def optuna_search_trials(searcher: Any) -> dict[str, Any]:
    """Tune trial id → the ``optuna.Trial`` an ``OptunaSearch`` made for it (mutable)."""
    return searcher._ot_trials


def optuna_trial_of(study: Any, frozen: Any) -> Any:
    """The live ``optuna.Trial`` of a study's trial (``FrozenTrial``), to report to and tell."""
    import optuna

    return optuna.trial.Trial(study, frozen._trial_id)


def optuna_search_told(searcher: Any) -> set[str]:
    """Tune trial ids an ``OptunaSearch`` has already told the study about (mutable)."""
    return searcher._completed_trials


#: Names of environment variables that hold credentials (matched against the upper-cased name).
CREDENTIAL_MARKERS = ("SECRET", "TOKEN", "PASSWORD", "ACCESS_KEY", "CREDENTIAL", "AWS_")


@contextlib.contextmanager
def tune_propagates_no_credentials() -> Iterator[None]:
    """Tune without its copy of the driver's credentials into every trial's ``runtime_env`` (for a block).

    Ray Tune 2.60 (``ray.tune.execution.class_cache.ENV_VARS_TO_PROPAGATE``) copies ``AWS_ACCESS_KEY_ID``,
    ``AWS_SECRET_ACCESS_KEY`` and the session tokens into the trainable's ``runtime_env``, and Ray writes
    every ``runtime_env`` in plain text to the session's ``logs/runtime_env_agent.log``. Trials get
    credentials the way Ray workers do anyway: inherited by a local Ray from the process that started it,
    from credential files or node roles on a cluster.
    """
    from ray.tune.execution import class_cache

    kept = class_cache.ENV_VARS_TO_PROPAGATE
    class_cache.ENV_VARS_TO_PROPAGATE = {
        name for name in kept if not any(marker in name.upper() for marker in CREDENTIAL_MARKERS)
    }
    try:
        yield
    finally:
        class_cache.ENV_VARS_TO_PROPAGATE = kept


# -- Ray Tune's run loop (ray 2.60.0) ----------------------------------------------------------------

#: The name of the handler ``ray.tune.tune._setup_signal_catching`` installs for SIGINT/SIGUSR1.
TUNE_STOP_HANDLER = "signal_interrupt_tune_run"


def _is_tune_stop_handler(handler: Any) -> bool:
    """True if ``handler`` is the one ``ray.tune.tune._setup_signal_catching`` installs."""
    return callable(handler) and getattr(handler, "__name__", "") == TUNE_STOP_HANDLER


def tune_stop_gracefully() -> bool:
    """Asks a running ``Tuner.fit`` to end as after Ctrl-C: trials stop, the experiment state is saved.

    Tune 2.60 installs one handler for SIGINT and SIGUSR1 while its loop runs; it sets the event the loop
    checks and puts the previous SIGINT handler back. Calling it is what Ctrl-C does, without a signal.

    Returns:
        False when no Tune loop is running in this process (the handler is not installed).
    """
    import signal

    handler = signal.getsignal(signal.SIGUSR1) if hasattr(signal, "SIGUSR1") else None
    if not _is_tune_stop_handler(handler):
        return False
    handler(signal.SIGUSR1, None)
    return True


def clear_tune_stop_handler() -> Any:
    """Removes a SIGUSR1 handler an earlier ``Tuner.fit`` in this process left behind; returns what was there.

    Tune 2.60 installs its stop handler when its loop starts and never removes it: after one sweep in a
    process (a notebook, the test suite), :func:`tune_stop_gracefully` would find the old loop's handler
    and report a stop that no running loop hears. The caller puts the returned handler back when done.
    """
    import signal

    if not hasattr(signal, "SIGUSR1"):
        return None
    previous = signal.getsignal(signal.SIGUSR1)
    if _is_tune_stop_handler(previous):
        signal.signal(signal.SIGUSR1, signal.SIG_DFL)
    return previous


def tune_trial_statuses(results: Any) -> list[tuple[str, str]]:
    """``(trial id, Tune status)`` of every trial of a ``ResultGrid``, in the grid's order.

    ``Result`` objects carry neither (a trial that never reported has no id in its metrics); a sweep that
    was interrupted needs the status (``RUNNING``, ``PENDING``, ``TERMINATED``, ``ERROR``…) to tell the
    trials it stopped from those that had ended.
    """
    return [(trial.trial_id, trial.status) for trial in results._experiment_analysis.trials]


def tune_trial_configs(results: Any) -> list[dict[str, Any]]:
    """Each trial's own config in a ``ResultGrid``, in the grid's order (``Result.config`` is its last result's)."""
    return [dict(trial.config or {}) for trial in results._experiment_analysis.trials]


def set_tuner_callbacks(tuner: Any, callbacks: list[Any]) -> None:
    """Gives a restored ``Tuner`` this run's callbacks instead of the ones pickled with the first run."""
    tuner._local_tuner.get_run_config().callbacks = callbacks


# -- MLflow (3.17.2) ---------------------------------------------------------------------------------


@contextlib.contextmanager
def use_tracking_uri(uri: str) -> Iterator[None]:
    """MLflow's fluent API pointed at ``uri`` for a block, without changing the process-wide setting."""
    from mlflow.tracking._tracking_service.utils import _use_tracking_uri

    with _use_tracking_uri(uri):
        yield


@contextlib.contextmanager
def mlflow_skips_requirement_check() -> Iterator[None]:
    """``mlflow.<flavor>.log_model`` without its check of the model's requirements against this environment.

    hpo pins the requirements to the versions this very process runs, so the check can never warn; it
    maps every installed package to its modules first (``importlib_metadata.packages_distributions``),
    ~5 CPU-seconds at the end of every sweep. MLflow 3.17 calls
    ``mlflow.utils.environment.warn_dependency_requirement_mismatches`` unconditionally in
    ``_process_pip_requirements``.
    """
    from mlflow.utils import environment

    kept = environment.warn_dependency_requirement_mismatches
    environment.warn_dependency_requirement_mismatches = lambda requirements: None
    try:
        yield
    finally:
        environment.warn_dependency_requirement_mismatches = kept


def mlflow_create_tables(engine: Any) -> None:
    """``mlflow.store.db.utils._initialize_tables``: MLflow's schema, every migration applied, in an empty database.

    It is what ``SqlAlchemyStore`` runs on a database without MLflow's tables; it creates no experiment.
    """
    from mlflow.store.db.utils import _initialize_tables

    _initialize_tables(engine)


# -- TensorFlow (2.21.0) ------------------------------------------------------------------------------


def autograph_skips_horovod() -> None:
    """Puts ``horovod`` on AutoGraph's do-not-convert list (``tensorflow.python.autograph.core.config``).

    Horovod runs its gradient allreduce in a ``tf.function`` of its own, and AutoGraph then converts every
    Horovod function that one calls (``allreduce``, ``_allreduce_cond``, the process-set look-ups) once per
    worker process: ~0.7 CPU-s of source transformation in the first training step, for code whose only
    tensor-dependent branch is an explicit ``tf.cond``. TensorFlow and tf-keras are on the list already.
    Calling it again changes nothing.
    """
    from tensorflow.python.autograph.core import config

    if not any(isinstance(rule, config.DoNotConvert) and rule.matches("horovod") for rule in config.CONVERSION_RULES):
        config.CONVERSION_RULES = (config.DoNotConvert("horovod"), *config.CONVERSION_RULES)


# -- Horovod (0.28.1) ---------------------------------------------------------------------------------


def horovod_worker_actors(executor: Any) -> list[Any]:
    """The worker actors a started ``horovod.ray.RayExecutor`` runs (rank order)."""
    return list(executor.adapter.workers)


@contextlib.contextmanager
def horovod_rendezvous_on(address: str) -> Iterator[None]:
    """Puts the rendezvous HTTP server a ``RayExecutor.start()`` in the block opens on ``address`` only.

    Horovod's ``RendezvousServer.start`` takes its port from ``find_port``, which binds ``('', port)``: every
    interface, without authentication. Its workers are told to connect to ``ray.util.get_node_ip_address()``
    (``horovod/ray/runner.py``, ``establish_rendezvous``), which in a Ray worker process is the address the
    default route leaves from, not the node's. In the block the server binds ``address`` and the workers are
    told ``address``.
    """
    import ray.util
    from horovod.runner.http import http_server

    original_find_port, original_ip = http_server.find_port, ray.util.get_node_ip_address

    def find_port(server_factory: Any) -> Any:
        return original_find_port(lambda addr: server_factory((address, addr[1])))

    http_server.find_port = find_port
    ray.util.get_node_ip_address = lambda *args, **kwargs: address
    try:
        yield
    finally:
        http_server.find_port, ray.util.get_node_ip_address = original_find_port, original_ip


# -- Petastorm (0.13.1, patched: patches/petastorm-0.13.1.patch) --------------------------------------


def dummy_pool_queues(pool: Any) -> tuple[list[Any], list[Any]]:
    """A ``petastorm.workers_pool.dummy_pool.DummyPool``'s queues: ventilated items, decoded results.

    Both are lists made once by the pool's constructor and mutated in place (``pop(0)`` takes the oldest):
    ``ventilate`` appends ``(args, kwargs)`` to the first, the worker's publish function appends to the second.
    """
    return pool._ventilator_queue, pool._results_queue


def dummy_pool_worker_and_ventilator(pool: Any) -> tuple[Any, Any]:
    """A started ``DummyPool``'s worker (``process(*args, **kwargs)``) and its ventilator (None without one)."""
    return pool._worker, pool._ventilator


# -- Ray core (2.60.0) ---------------------------------------------------------------------------------


def ray_node_address() -> str:
    """The address the Ray node of this (driver or worker) process registered: ``--node-ip-address``.

    ``ray.util.get_node_ip_address()`` gives it only in a driver; in a worker it is the default route's.
    """
    import ray

    return ray._private.worker.global_worker.node_ip_address


def enable_ray_token_auth_if_available() -> None:
    """Ray's own "use the token if there is one" step, which ``ray.init`` skips for an explicit address."""
    from ray._private.authentication import authentication_token_setup as auth

    log = logging.getLogger(auth.__name__)
    level = log.level
    log.setLevel(logging.ERROR)  # its "token authentication is enabled" notice is for new clusters
    try:
        auth.maybe_enable_token_auth_if_token_available(warn_if_disabled=False)
    finally:
        log.setLevel(level)


def ray_cluster_config_tools() -> tuple[Any, Any]:
    """``(prepare_config, validate_config)`` of Ray's autoscaler: defaults merged as ``ray up`` does, schema check."""
    from ray.autoscaler._private.util import prepare_config, validate_config

    logging.getLogger("ray.autoscaler._private.util").setLevel(logging.WARNING)  # "setting max workers ..."
    return prepare_config, validate_config


def ray_cluster_node_provider(config: dict[str, Any], *, bootstrap: bool) -> Any:
    """The node provider of a cluster file's config, as ``ray up``/``ray down`` build it.

    Args:
        config: The cluster file's contents.
        bootstrap: True on the user's machine (Ray resolves the provider's settings from the cloud, as ``ray
            up`` does); False for a config that is already bootstrapped (the head's
            ``~/ray_bootstrap_config.yaml``, which the autoscaler on the head uses as it is).
    """
    from ray.autoscaler._private.commands import _bootstrap_config
    from ray.autoscaler._private.providers import _get_node_provider

    resolved = _bootstrap_config(dict(config)) if bootstrap else config
    return _get_node_provider(resolved["provider"], resolved["cluster_name"])


def gcs_cluster_config() -> Any:
    """The cluster config an autoscaler v2 publishes in the GCS (None if there is none)."""
    from ray._private.state import state

    return state.get_cluster_config()


def ray_available_per_node() -> dict[str, dict[str, float]]:
    """Node id → the resources free on it now (the GCS's view; a placement group's reserved bundles included)."""
    from ray._private.state import available_resources_per_node

    return {node: {k: float(v) for k, v in free.items()} for node, free in available_resources_per_node().items()}


# -- Ray Tune's trial executor (2.60.0): its placement groups -------------------------------------------


@contextlib.contextmanager
def tune_controller_seen(on_controller: Any) -> Iterator[None]:
    """Inside the block, each ``TuneController`` Tune builds is handed to ``on_controller`` once built.

    Tune gives its callbacks the trials, not its controller; a placement group it waits for (or a trial
    whose actor waits for one) is reached only through the controller.
    """
    from ray.tune.execution.tune_controller import TuneController

    original = TuneController.__init__

    def init(self: Any, *args: Any, **kwargs: Any) -> None:
        original(self, *args, **kwargs)
        on_controller(self)

    TuneController.__init__ = init
    try:
        yield
    finally:
        TuneController.__init__ = original


def tune_state_saves_within_share(controller: Any, every_s: float, share: float) -> None:
    """Tune's controller saves its experiment state every ``every_s`` seconds, or less often where a save costs more.

    With ``TUNE_GLOBAL_CHECKPOINT_S`` set, Ray Tune 2.60 saves the whole experiment state (every trial, the
    searcher) at that fixed period however long a save takes, and a save's cost grows with the trials the
    sweep has held: at a few thousand trials every 2 s became most of the driver's time. Tune's own ``auto``
    period adapts but waits at least 10 s. Here the period is ``max(every_s, save time × (1/share − 1))``: a
    save takes at most ``share`` of the driver's time (Tune's ``auto`` rule, with hpo's floor).
    """
    manager = controller._checkpoint_manager
    factor = 1.0 / share - 1.0

    def update(time_taken: float) -> None:
        manager._checkpoint_period = max(every_s, time_taken * factor)

    manager._checkpoint_period = every_s
    manager._update_auto_checkpoint_time = update


def tune_placement_groups(controller: Any) -> list[tuple[Any, str, Any]]:
    """Every placement group Tune's controller holds: ``(group, where, trial)``.

    ``where`` is ``staged`` (Tune waits for it to be placed), ``ready`` (placed, not handed to a trial yet)
    or ``acquired`` (a trial's actor runs, or waits to start, in it; ``trial`` is that trial, else None).
    """
    manager = controller._actor_manager
    resources = manager._resource_manager
    found: list[tuple[Any, str, Any]] = []
    for pgs in list(resources._request_to_staged_pgs.values()):
        found += [(pg, "staged", None) for pg in list(pgs)]
    for pgs in list(resources._request_to_ready_pgs.values()):
        found += [(pg, "ready", None) for pg in list(pgs)]
    trial_of = {tracked: trial for trial, tracked in list(controller._trial_to_actor.items())}
    for tracked, (_, acquired) in list(manager._live_actors_to_ray_actors_resources.items()):
        found.append((acquired.placement_group, "acquired", trial_of.get(tracked)))
    return found


def tune_restage(controller: Any, pg: Any) -> bool:
    """Removes a group Tune waits for (staged or ready, not a trial's) and asks Tune's manager for a new one.

    Returns:
        False if the group is not one Tune waits for (a trial holds it, or it is gone).
    """
    import ray
    from ray.util.placement_group import remove_placement_group

    resources = controller._actor_manager._resource_manager
    request = resources._pg_to_request.get(pg)
    if request is None:
        return False
    if pg in resources._request_to_staged_pgs[request]:
        resources._request_to_staged_pgs[request].discard(pg)
        future = resources._pg_to_staging_future.pop(pg, None)
        if future is not None:
            resources._staging_future_to_pg.pop(future, None)
            ray.cancel(future)
    elif pg in resources._request_to_ready_pgs[request]:
        resources._request_to_ready_pgs[request].discard(pg)
    else:
        return False
    resources._pg_to_request.pop(pg, None)
    remove_placement_group(pg)
    resources.request_resources(request)
    return True


def tune_actor_started(controller: Any, trial: Any) -> bool:
    """True if the trial's actor has started (False: it waits to be placed, or the trial has none)."""
    tracked = controller._trial_to_actor.get(trial)
    return tracked is not None and controller._actor_manager.is_actor_started(tracked)


def tune_retry_start(controller: Any, trial: Any, reason: str) -> bool:
    """A trial whose actor waits in a group that is not placed: its start fails and Tune retries it.

    The actor (never started) is killed and its group removed, as when Ray fails an actor's creation; the
    trial is recovered from its last checkpoint on a new group, and this does not count as one of its
    failures (``FailureConfig.max_failures``): the trial did nothing wrong.

    Returns:
        False if the trial has no actor waiting to start.
    """
    import ray
    from ray.tune.error import TuneError

    manager = controller._actor_manager
    tracked = controller._trial_to_actor.get(trial)
    live = manager._live_actors_to_ray_actors_resources
    if tracked is None or tracked not in live or manager.is_actor_started(tracked):
        return False
    actor = live[tracked][0]
    trial.run_metadata.num_failures -= 1  # Tune counts the failure below; this one is not the trial's
    manager._actor_start_failed(tracked, TuneError(reason))
    with contextlib.suppress(Exception):
        ray.kill(actor)
    return True


def tune_trial_placed(controller: Any, trial: Any) -> bool:
    """True if the trial's actor has its resources (it runs, or starts, in a placed group)."""
    tracked = controller._trial_to_actor.get(trial)
    return tracked is not None and tracked in controller._actor_manager._live_actors_to_ray_actors_resources


def tune_fail_pending(controller: Any, trial: Any, reason: str) -> None:
    """Fails a trial that waits for resources (``PENDING``), with ``reason`` as its error.

    Tune retries only a trial that was running: this one ends failed.
    """
    from ray.tune.error import TuneError

    controller._process_trial_failure(trial, TuneError(reason))


# -- CPython's own exit (3.11, 3.12) -------------------------------------------------------------------


def run_python_exit_steps() -> None:
    """What CPython does at exit before it tears the interpreter down, in its order.

    ``threading._shutdown`` runs the threading module's exit callbacks (``concurrent.futures`` waits for its
    queued work there) and joins the non-daemon threads; ``atexit._run_exitfuncs`` runs the ``atexit``
    handlers, last registered first.
    """
    import atexit
    import threading

    threading._shutdown()  # type: ignore[attr-defined]
    atexit._run_exitfuncs()
