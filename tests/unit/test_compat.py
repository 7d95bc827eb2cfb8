"""Every private API hpo uses (hpo.compat) still exists in the installed Ray, Optuna, MLflow and Horovod.

A failure here after an upgrade names the accessor in hpo/compat.py to update, instead of a sweep
breaking half-way.
"""

from __future__ import annotations

import importlib.metadata
import inspect

import pytest

from hpo import compat
from tests.conftest import base_sweep


def _broken(accessor: str, package: str, what: str) -> str:
    installed = importlib.metadata.version(package)
    return (f"hpo.compat.{accessor}: {what} is gone in {package} {installed} "
            f"(checked against {compat.CHECKED[package]}); update the accessor")


def test_checked_versions_are_the_pinned_ones():
    for package, version in compat.CHECKED.items():
        assert importlib.metadata.version(package) == version, _broken("CHECKED", package, f"version {version}")


def test_asha_internals():
    from ray.tune.schedulers import AsyncHyperBandScheduler

    bracket_cls = compat.asha_bracket_base()
    assert "on_result" in vars(bracket_cls), _broken("asha_bracket_base", "ray", "_Bracket.on_result")
    scheduler = AsyncHyperBandScheduler(time_attr="training_iteration", max_t=9, grace_period=1, reduction_factor=3)
    assert isinstance(compat.asha_stop_last_trials(scheduler), bool), _broken(
        "asha_stop_last_trials", "ray", "AsyncHyperBandScheduler._stop_last_trials")
    bracket = bracket_cls(min_t=1, max_t=9, reduction_factor=3, s=0, stop_last_trials=True)
    rungs = compat.bracket_rungs(bracket)
    assert [m for m, _ in rungs] == [9, 3, 1] and all(r == {} for _, r in rungs), _broken(
        "bracket_rungs", "ray", "_Bracket._rungs")
    compat.set_asha_brackets(scheduler, [bracket])
    assert scheduler._brackets == [bracket], _broken("set_asha_brackets", "ray", "AsyncHyperBandScheduler._brackets")


def test_hyperband_internals():
    from ray.tune.schedulers import HyperBandScheduler

    scheduler = HyperBandScheduler(time_attr="training_iteration", max_t=9, reduction_factor=3)
    assert compat.hyperband_time_attr_and_max_t(scheduler) == ("training_iteration", 9), _broken(
        "hyperband_time_attr_and_max_t", "ray", "HyperBandScheduler._time_attr/_max_t_attr")
    assert isinstance(scheduler._trial_info, dict), _broken("hyperband_bracket_of", "ray", "_trial_info")


def test_optuna_search_internals(tmp_path):
    import optuna
    from ray.tune.search.optuna import OptunaSearch

    from hpo.config import parse_sweep
    from hpo.search import SearchSpace

    config = parse_sweep(base_sweep())
    searcher = OptunaSearch(space=SearchSpace(config).define_by_run(), metric="val_accuracy", mode="max",
                            sampler=optuna.samplers.RandomSampler(seed=0))
    assert searcher.suggest("t1") is not None
    assert isinstance(compat.optuna_search_study(searcher), optuna.Study), _broken(
        "optuna_search_study", "optuna", "OptunaSearch._ot_study")
    assert isinstance(compat.optuna_search_trial(searcher, "t1"), optuna.Trial), _broken(
        "optuna_search_trial", "optuna", "OptunaSearch._ot_trials")
    assert set(compat.optuna_search_trials(searcher)) == {"t1"}, _broken(
        "optuna_search_trials", "optuna", "OptunaSearch._ot_trials")
    study = compat.optuna_search_study(searcher)
    (frozen,) = study.get_trials(deepcopy=False)
    assert compat.optuna_trial_of(study, frozen).number == frozen.number, _broken(
        "optuna_trial_of", "optuna", "FrozenTrial._trial_id")
    told = compat.optuna_search_told(searcher)
    searcher.on_trial_complete("t1", {"val_accuracy": 0.5, "training_iteration": 1})
    assert "t1" in told, _broken("optuna_search_told", "optuna", "OptunaSearch._completed_trials")


def test_mlflow_tracking_uri_switch(tmp_path):
    import mlflow

    before = mlflow.get_tracking_uri()
    uri = f"sqlite:///{tmp_path / 'm.db'}"
    with compat.use_tracking_uri(uri):
        assert mlflow.get_tracking_uri() == uri, _broken("use_tracking_uri", "mlflow", "_use_tracking_uri")
    assert mlflow.get_tracking_uri() == before


def test_autograph_skips_horovod_and_nothing_else(monkeypatch):
    import horovod.tensorflow as hvd_tf
    from tensorflow.python.autograph.core import config
    from tensorflow.python.autograph.impl import conversion

    monkeypatch.setattr(config, "CONVERSION_RULES", config.CONVERSION_RULES)  # restored after the test
    before = len(config.CONVERSION_RULES)
    assert not conversion.is_allowlisted(hvd_tf.allreduce)
    compat.autograph_skips_horovod()
    compat.autograph_skips_horovod()
    assert conversion.is_allowlisted(hvd_tf.allreduce), _broken(
        "autograph_skips_horovod", "tensorflow", "autograph.core.config.CONVERSION_RULES")
    assert len(config.CONVERSION_RULES) == before + 1  # once, however often it is called

    def user_step(x):
        return x

    assert not conversion.is_allowlisted(user_step)  # the user's own code is still converted


def test_horovod_executor_adapter():
    from horovod.ray import RayExecutor

    source = inspect.getsource(RayExecutor)
    assert "self.adapter" in source, _broken("horovod_worker_actors", "horovod", "RayExecutor.adapter")


def test_horovod_rendezvous_binds_the_given_address_only():
    import socket

    from horovod.ray import runner
    from horovod.runner.http.http_server import RendezvousServer

    assert "ray.util.get_node_ip_address()" in inspect.getsource(runner.Coordinator.establish_rendezvous), _broken(
        "horovod_rendezvous_on", "horovod", "the address workers reach the rendezvous at")
    import ray.util

    original = ray.util.get_node_ip_address
    server = RendezvousServer()
    with compat.horovod_rendezvous_on("127.0.0.1"):
        port = server.start()
        assert ray.util.get_node_ip_address() == "127.0.0.1"  # what the workers are told
    assert ray.util.get_node_ip_address is original  # given back
    try:
        assert server._httpd.server_address == ("127.0.0.1", port), _broken(
            "horovod_rendezvous_on", "horovod", "RendezvousServer.start's find_port")
    finally:
        server.stop()
    unpatched = RendezvousServer()  # outside the block: Horovod's own behaviour (every interface)
    port = unpatched.start()
    try:
        assert unpatched._httpd.server_address == ("0.0.0.0", port)
        with socket.create_connection(("127.0.0.1", port), timeout=5):
            pass
    finally:
        unpatched.stop()


def test_ray_core_internals():
    from ray._private.authentication import authentication_token_setup as auth

    assert "warn_if_disabled" in inspect.signature(auth.maybe_enable_token_auth_if_token_available).parameters, \
        _broken("enable_ray_token_auth_if_available", "ray", "maybe_enable_token_auth_if_token_available")
    prepare, validate = compat.ray_cluster_config_tools()
    assert callable(prepare) and callable(validate)
    from ray._private.state import state

    assert hasattr(state, "get_cluster_config"), _broken("gcs_cluster_config", "ray", "state.get_cluster_config")


def test_ray_cluster_node_provider(monkeypatch):
    """``hpo cluster up/down`` and the autostop find and terminate nodes through the provider Ray's launcher builds."""
    import yaml
    from ray.autoscaler._private.commands import _bootstrap_config
    from ray.autoscaler.tags import NODE_KIND_HEAD, TAG_RAY_NODE_KIND

    from tests.conftest import ROOT

    assert "no_config_cache" in inspect.signature(_bootstrap_config).parameters, \
        _broken("ray_cluster_node_provider", "ray", "commands._bootstrap_config")
    monkeypatch.setenv("RAY_FAKE_CLUSTER", "1")  # the fake provider is the one that needs no cloud
    config = yaml.safe_load((ROOT / "cluster" / "local-fake.yaml").read_text())
    provider = compat.ray_cluster_node_provider(config, bootstrap=False)
    assert len(provider.non_terminated_nodes({TAG_RAY_NODE_KIND: NODE_KIND_HEAD})) == 1
    assert callable(provider.terminate_nodes) and callable(provider.node_tags)


@pytest.mark.parametrize("accessor", [name for name, f in vars(compat).items()
                                      if inspect.isfunction(f) and f.__module__ == compat.__name__])
def test_every_accessor_has_a_docstring(accessor):
    assert getattr(compat, accessor).__doc__


def test_result_loggers_keep_the_drivers_copy(tmp_path):
    from ray.tune.logger import CSVLoggerCallback, JsonLoggerCallback
    from ray.tune.logger.logger import LoggerCallback

    restore = inspect.signature(LoggerCallback._restore_from_remote)
    assert list(restore.parameters) == ["self", "file_name", "trial"], _broken(
        "result_loggers", "ray", "LoggerCallback._restore_from_remote(file_name, trial)")
    csv_logger, json_logger = compat.result_loggers()
    assert isinstance(csv_logger, CSVLoggerCallback) and isinstance(json_logger, JsonLoggerCallback)

    class Trial:  # what the restore reads of a trial: its staging directory
        local_path = str(tmp_path)

    (tmp_path / "result.json").write_text('{"epoch": 1}\n{"epoch": 2}\n')
    json_logger._restore_from_remote("result.json", Trial())  # would copy the storage's copy over it
    assert (tmp_path / "result.json").read_text() == '{"epoch": 1}\n{"epoch": 2}\n'


def test_tune_propagates_no_credentials_inside_the_block_only(monkeypatch):
    from ray.tune.execution import class_cache

    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", "s3cr3t")
    before = set(class_cache.ENV_VARS_TO_PROPAGATE)
    assert {"AWS_SECRET_ACCESS_KEY", "AWS_ACCESS_KEY_ID"} <= before, (
        "Tune no longer copies AWS credentials into trial runtime_envs: "
        "hpo.compat.tune_propagates_no_credentials may go"
    )
    with compat.tune_propagates_no_credentials():
        inside = set(class_cache.ENV_VARS_TO_PROPAGATE)
        assert not any("AWS" in n or "TOKEN" in n or "SECRET" in n for n in inside)
        assert inside  # Tune's own variables still travel
    assert set(class_cache.ENV_VARS_TO_PROPAGATE) == before


def test_tune_stop_handler():
    import signal

    from ray.tune import tune as tune_module

    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGUSR1)}
    try:
        signal.signal(signal.SIGUSR1, signal.SIG_DFL)  # a Tune run earlier in this process leaves its handler
        assert compat.tune_stop_gracefully() is False  # no Tune loop: nothing to ask
        event = tune_module._setup_signal_catching()
        handler = signal.getsignal(signal.SIGUSR1)
        assert getattr(handler, "__name__", "") == compat.TUNE_STOP_HANDLER, _broken(
            "tune_stop_gracefully", "ray", "ray.tune.tune._setup_signal_catching's SIGUSR1 handler")
        assert compat.tune_stop_gracefully() is True
        assert event.is_set(), _broken("tune_stop_gracefully", "ray", "the handler setting the loop's event")
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def test_tuner_callbacks_and_trial_statuses(tmp_path):
    from ray import tune

    def trainable(config):
        tune.report({"score": config["x"]})

    tuner = tune.Tuner(trainable, param_space={"x": 1}, run_config=tune.RunConfig(storage_path=str(tmp_path)))
    marker = tune.Callback()
    compat.set_tuner_callbacks(tuner, [marker])
    assert tuner._local_tuner.get_run_config().callbacks == [marker], _broken(
        "set_tuner_callbacks", "ray", "Tuner._local_tuner.get_run_config()")
    assert inspect.signature(compat.tune_trial_statuses)
    from ray.tune.result_grid import ResultGrid

    assert "_experiment_analysis" in inspect.getsource(ResultGrid.__init__), _broken(
        "tune_trial_statuses", "ray", "ResultGrid._experiment_analysis")


def test_tune_without_tensorboard_adds_no_tensorboard_logger_inside_the_block_only(monkeypatch):
    from ray.tune.logger import TBXLoggerCallback
    from ray.tune.utils.callback import _create_default_callbacks

    monkeypatch.delenv("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", raising=False)
    assert "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS" in inspect.getsource(_create_default_callbacks), _broken(
        "tune_without_tensorboard", "ray", "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS in _create_default_callbacks")
    with compat.tune_without_tensorboard():
        callbacks = _create_default_callbacks(compat.result_loggers())
    assert not any(isinstance(c, TBXLoggerCallback) for c in callbacks)
    assert len([c for c in callbacks if type(c).__name__.startswith("HpoKeep")]) == 2  # hpo's CSV and JSON
    assert "TUNE_DISABLE_AUTO_CALLBACK_LOGGERS" not in __import__("os").environ  # put back as it was
    monkeypatch.setenv("TUNE_DISABLE_AUTO_CALLBACK_LOGGERS", "0")
    with compat.tune_without_tensorboard():
        pass
    assert __import__("os").environ["TUNE_DISABLE_AUTO_CALLBACK_LOGGERS"] == "0"


def test_mlflow_skips_requirement_check_inside_the_block_only(monkeypatch):
    from mlflow.utils import environment

    assert "warn_dependency_requirement_mismatches(" in inspect.getsource(environment._process_pip_requirements), (
        _broken("mlflow_skips_requirement_check", "mlflow",
                "the requirement check in mlflow.utils.environment._process_pip_requirements"))
    checked: list[list[str]] = []
    monkeypatch.setattr(environment, "warn_dependency_requirement_mismatches", checked.append)
    with compat.mlflow_skips_requirement_check():
        environment._process_pip_requirements([], pip_requirements=["numpy==0.0.1"])
    assert checked == []
    environment._process_pip_requirements([], pip_requirements=["numpy==0.0.1"])
    assert len(checked) == 1 and "numpy==0.0.1" in checked[0]


def test_mlflow_create_tables_builds_the_latest_schema(tmp_path):
    import sqlalchemy
    from mlflow.store.db.utils import _get_latest_schema_revision

    engine = sqlalchemy.create_engine(f"sqlite:///{tmp_path}/s.db")
    try:
        compat.mlflow_create_tables(engine)
        with engine.connect() as conn:
            version = conn.execute(sqlalchemy.text("SELECT version_num FROM alembic_version")).scalar()
            experiments = conn.execute(sqlalchemy.text("SELECT count(*) FROM experiments")).scalar()
    finally:
        engine.dispose()
    assert version == _get_latest_schema_revision(), _broken(
        "mlflow_create_tables", "mlflow", "the latest schema from mlflow.store.db.utils._initialize_tables")
    assert experiments == 0


def test_petastorm_dummy_pool_internals():
    from petastorm.workers_pool.dummy_pool import DummyPool
    from petastorm.workers_pool.worker_base import WorkerBase

    class Echo(WorkerBase):
        def process(self, value):
            self.publish_func(value)

    pool = DummyPool()
    items, results = compat.dummy_pool_queues(pool)
    assert items == [] and results == [], _broken("dummy_pool_queues", "petastorm", "DummyPool's queues")
    pool.ventilate(value=3)
    assert items == [((), {"value": 3})], _broken("dummy_pool_queues", "petastorm", "DummyPool._ventilator_queue")
    pool.start(Echo)
    worker, ventilator = compat.dummy_pool_worker_and_ventilator(pool)
    assert isinstance(worker, Echo) and ventilator is None, _broken(
        "dummy_pool_worker_and_ventilator", "petastorm", "DummyPool._worker/_ventilator")
    assert pool.get_results() == 3 and results == [] and items == [], _broken(
        "dummy_pool_queues", "petastorm", "DummyPool._results_queue")


#: Packages whose private names (``_name``) hpo may use only in hpo/compat.py.
DEPENDENCIES = ("ray", "optuna", "mlflow", "horovod", "petastorm", "tensorflow", "tf_keras", "keras")


def private_uses(source: str) -> list[str]:
    """Where a module uses a private name of a dependency: ``line: what``.

    Three ways are found: importing a private module or name (``from ray._private import x``,
    ``from petastorm.x import _Y``); an attribute ``_name`` reached from a name imported from a dependency
    (``tune._foo``, ``keras.backend._x``); in a class derived from a dependency's class, ``self._name``
    that the class itself never sets or defines (the base class's private state).
    """
    import ast

    tree = ast.parse(source)
    found = []
    imported: set[str] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.name.split(".")[0] in DEPENDENCIES:
                    imported.add((alias.asname or alias.name).split(".")[0])
                    if any(part.startswith("_") for part in alias.name.split(".")):
                        found.append(f"{node.lineno}: import {alias.name}")
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            if node.module.split(".")[0] not in DEPENDENCIES:
                continue
            imported.update(alias.asname or alias.name for alias in node.names)
            private = [a.name for a in node.names if a.name.startswith("_")]
            if any(part.startswith("_") for part in node.module.split(".")) or private:
                found.append(f"{node.lineno}: from {node.module} import {', '.join(a.name for a in node.names)}")
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and _private(node.attr):
            root = node.value
            while isinstance(root, ast.Attribute):
                root = root.value
            if isinstance(root, ast.Name) and root.id in imported:
                found.append(f"{node.lineno}: {ast.unparse(node)}")
        elif isinstance(node, ast.ClassDef) and any(ast.unparse(b).split(".")[0] in imported for b in node.bases):
            own = {n.name for n in ast.walk(node) if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef))}
            own |= {n.attr for n in ast.walk(node) if isinstance(n, ast.Attribute) and _is_self(n.value)
                    and isinstance(n.ctx, ast.Store)}
            found += [f"{n.lineno}: {ast.unparse(n)} (of {node.name}'s base)" for n in ast.walk(node)
                      if isinstance(n, ast.Attribute) and _is_self(n.value) and _private(n.attr) and n.attr not in own]
    return sorted(set(found), key=lambda line: int(line.split(":")[0]))


def _private(name: str) -> bool:
    return name.startswith("_") and not name.startswith("__")


def _is_self(node) -> bool:
    import ast

    return isinstance(node, ast.Name) and node.id == "self"


def test_no_private_api_of_a_dependency_outside_compat():
    from tests.conftest import ROOT

    found = {
        str(path.relative_to(ROOT)): uses
        for path in sorted((ROOT / "hpo").rglob("*.py"))
        if path.name != "compat.py" and (uses := private_uses(path.read_text()))
    }
    assert not found, f"private APIs of dependencies belong in hpo/compat.py, with a test here: {found}"


def test_the_private_api_scan_finds_each_kind_of_use():
    source = '''
import ray._private.state
from ray.tune.schedulers.async_hyperband import _Bracket
from petastorm.workers_pool.dummy_pool import DummyPool
from ray import tune
import optuna


class InlinePool(DummyPool):
    def __init__(self):
        super().__init__()
        self._mine = []

    def get_results(self):
        self._mine.append(1)
        self._helper()
        return self._results_queue.pop(0)

    def _helper(self):
        return None


def f(searcher, trial):
    study = optuna.trial._trial_id
    tune.report({})
    return searcher._ot_study, trial.public
'''
    assert private_uses(source) == [
        "2: import ray._private.state",
        "3: from ray.tune.schedulers.async_hyperband import _Bracket",
        "17: self._results_queue (of InlinePool's base)",
        "24: optuna.trial._trial_id",
    ]


def test_tune_placement_group_internals():
    """What the placement watch reads and changes of Tune's trial executor, checked without starting Ray."""
    from ray._private import state
    from ray.air.execution._internal.actor_manager import RayActorManager
    from ray.air.execution.resources.placement_group import PlacementGroupResourceManager
    from ray.tune.execution.tune_controller import TuneController
    from ray.tune.experiment.trial import Trial

    assert callable(state.available_resources_per_node), _broken("ray_available_per_node", "ray", "state")
    resources = PlacementGroupResourceManager()
    for name in ("_request_to_staged_pgs", "_request_to_ready_pgs", "_pg_to_request", "_pg_to_staging_future",
                 "_staging_future_to_pg"):
        assert hasattr(resources, name), _broken("tune_restage", "ray", f"PlacementGroupResourceManager.{name}")
    assert callable(resources.request_resources)
    manager = RayActorManager(resources)
    assert manager._resource_manager is resources and hasattr(manager, "_live_actors_to_ray_actors_resources"), \
        _broken("tune_placement_groups", "ray", "RayActorManager")
    assert callable(manager._actor_start_failed) and callable(manager.is_actor_started), \
        _broken("tune_retry_start", "ray", "RayActorManager._actor_start_failed")
    init = inspect.getsource(TuneController.__init__)
    assert "self._actor_manager =" in init and "self._trial_to_actor" in init, \
        _broken("tune_controller_seen", "ray", "TuneController.__init__")
    assert list(inspect.signature(TuneController._process_trial_failure).parameters) == ["self", "trial", "exception"]
    assert "run_metadata.num_failures" in inspect.getsource(Trial.should_recover), \
        _broken("tune_retry_start", "ray", "Trial.should_recover")


def test_tune_controller_seen_hands_over_each_controller_inside_the_block_only():
    from ray.tune.execution.tune_controller import TuneController

    original = TuneController.__init__
    seen: list = []
    with compat.tune_controller_seen(seen.append):
        assert TuneController.__init__ is not original
    assert TuneController.__init__ is original and seen == []


def test_tune_state_saves_within_share_lengthens_the_period_of_a_costly_save(tmp_path, monkeypatch):
    from types import SimpleNamespace

    from ray.tune.execution import experiment_state
    from ray.tune.execution.experiment_state import _ExperimentCheckpointManager

    syncer = SimpleNamespace(sync_up=lambda *_: True, wait=lambda: None)  # the upload is not what is checked
    storage = SimpleNamespace(experiment_driver_staging_path=str(tmp_path), experiment_fs_path=str(tmp_path),
                              syncer=syncer)
    manager = _ExperimentCheckpointManager(storage=storage, checkpoint_period=2)  # TUNE_GLOBAL_CHECKPOINT_S=2
    compat.tune_state_saves_within_share(SimpleNamespace(_checkpoint_manager=manager), every_s=2.0, share=0.05)
    clock = [100.0]
    monkeypatch.setattr(experiment_state, "time", SimpleNamespace(monotonic=lambda: clock[0]))

    def save(seconds: float) -> None:
        clock[0] += manager._checkpoint_period  # the period since the last save has passed

        def save_fn() -> None:
            clock[0] += seconds  # a save of the experiment state that takes ``seconds``
        manager.sync_up_experiment_state(save_fn=save_fn, wait=True)

    save(0.01)
    assert manager._checkpoint_period == 2.0, _broken("tune_state_saves_within_share", "ray",
                                                      "_ExperimentCheckpointManager._update_auto_checkpoint_time")
    save(1.0)  # a sweep of thousands of trials: the next save comes 19 s later, not 2
    assert manager._checkpoint_period == pytest.approx(19.0)
    clock[0] += 10.0
    saved = []
    manager.sync_up_experiment_state(save_fn=lambda: saved.append(1))
    assert saved == []  # 10 s after a save that took 1 s: not yet
