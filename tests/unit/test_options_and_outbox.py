"""Run options are validated once; the outbox spools only what an unreachable store could not take."""

from __future__ import annotations

from pathlib import Path

import pytest

import hpo
from hpo.config.sections import SearchConfig
from hpo.errors import ConfigError
from hpo.options import RunOptions, Storage, WarmStart
from hpo.tracking import free_port
from hpo.tracking.outbox import Outbox
from hpo.tracking.transport import TrackingError, is_connection_error
from tests.conftest import base_sweep

TPE = SearchConfig(algorithm="optuna-tpe")
RANDOM = SearchConfig(algorithm="random")


def test_an_unknown_warm_start_mode_is_a_config_error_not_a_silent_default():
    with pytest.raises(ConfigError, match=r"^--warm-start-mode: 'bogus' is not allowed; use prior or reevaluate$"):
        hpo.tune(hpo.SweepConfig.model_validate(base_sweep()), warm_start="x", warm_start_mode="bogus")
    with pytest.raises(ConfigError, match="warm-start-mode"):
        WarmStart.from_flags(None, 5, "bogus")
    with pytest.raises(ConfigError, match=r"^--warm-start-k: 0 is not a positive whole number"):
        WarmStart("prev", k=0)


def test_the_warm_start_mode_follows_the_searcher_and_prior_is_refused_where_nothing_models():
    assert WarmStart("prev").mode_for(TPE, "s.yaml") == "prior"
    assert WarmStart("prev").mode_for(RANDOM, "s.yaml") == "reevaluate"
    assert WarmStart("prev", mode="reevaluate").mode_for(TPE, "s.yaml") == "reevaluate"
    with pytest.raises(ConfigError) as info:
        WarmStart("prev", mode="prior").mode_for(RANDOM, "s.yaml")
    assert str(info.value) == (
        "s.yaml: search.algorithm: --warm-start-mode prior tells a model the previous results, and random does not "
        "model; use --warm-start-mode reevaluate (trains them again first) or set search.algorithm: optuna-tpe")


def test_run_options_are_frozen_and_absolute(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    options = RunOptions("runs", warm_start=WarmStart.from_flags("daily", 2))
    assert options.storage == Storage("local", str(tmp_path / "runs"), (), tmp_path / "runs")
    assert options.sweep_dir("s") == tmp_path / "runs" / "s"
    assert options.warm_start == WarmStart("daily", 2, None)  # the mode follows the searcher (mode_for)
    assert options.warm_start.summary_path(options.storage) == tmp_path / "runs" / "daily" / "summary.json"
    assert options.warm_start.for_partition("eu").source == "daily-eu"
    assert WarmStart("/x/summary.json").for_partition("eu").source == "/x/summary.json"
    with pytest.raises(AttributeError):
        options.resume = True  # type: ignore[misc]


def test_connection_errors_are_told_apart_from_real_ones():
    import requests
    from mlflow.exceptions import MlflowException

    assert is_connection_error(ConnectionRefusedError())
    assert is_connection_error(requests.exceptions.ConnectionError("refused"))
    assert is_connection_error(MlflowException("API request to /api/2.0/mlflow/runs/create failed: Max retries "
                                               "exceeded with url (Caused by NewConnectionError)"))
    assert not is_connection_error(MlflowException("RESOURCE_DOES_NOT_EXIST: Run 'x' not found"))
    assert not is_connection_error(ConfigError("x.yaml: data.train: no such file; check the path"))
    assert not is_connection_error(KeyError("features"))


def _outbox(uri: str, tmp_path: Path) -> Outbox:
    from mlflow.tracking import MlflowClient

    if uri.startswith("sqlite"):
        client = MlflowClient(uri)
        experiment = client.create_experiment("e")
        parent = client.create_run(experiment).info.run_id
    else:
        experiment, parent = "0", "parent"
    return Outbox(uri, tmp_path / "spool.jsonl", parent, experiment, retries=2, backoff_s=0.01)


def test_a_real_error_is_raised_not_spooled(tmp_path):
    outbox = _outbox(f"sqlite:///{tmp_path / 'm.db'}", tmp_path)
    with pytest.raises(TrackingError, match="log_model"):
        outbox.log_model(str(tmp_path / "none.keras"), (tmp_path / "no-data").as_uri(), "features", "m", "t1")
    assert not outbox.down and not (tmp_path / "spool.jsonl").exists()


def test_an_unreachable_server_spools_every_write_in_order(tmp_path):
    outbox = _outbox(f"http://127.0.0.1:{free_port()}", tmp_path)
    outbox.log("sweep", tags={"a": "1"})
    outbox.terminate("sweep", "FINISHED")
    assert outbox.down
    ops = (tmp_path / "spool.jsonl").read_text().splitlines()
    assert len(ops) == 2 and '"op": "log"' in ops[0] and '"op": "terminate"' in ops[1]
