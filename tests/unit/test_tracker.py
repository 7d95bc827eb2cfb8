"""The tracker seam: MLflow is a :class:`Tracker`, the sweep uses only what the protocol declares, kinds register."""

from __future__ import annotations

import ast
import inspect
import json
from pathlib import Path

import pytest

from hpo.config import SweepConfig
from hpo.errors import ConfigError
from hpo.storage import Storage
from hpo.tracking.kinds import TRACKERS, tracker_kind
from hpo.tracking.tracker import Tracker, TrackerKind, TrackerStart
from hpo.tracking.ui import store_to_serve
from tests.conftest import ROOT, base_sweep


def _members(protocol: type) -> set[str]:
    """The members a protocol declares (methods and annotated attributes)."""
    names = {n for n in vars(protocol) if not n.startswith("_")}
    return names | set(getattr(protocol, "__annotations__", {}))


def test_the_mlflow_tracker_is_a_tracker_and_reopens_its_parent_run(tmp_path):
    from mlflow.tracking import MlflowClient

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    config = SweepConfig.model_validate(base_sweep(name="seam", tracking={"mlflow_uri": uri}))
    kind = tracker_kind("mlflow")
    sweep_dir = tmp_path / "runs" / "seam"
    start = TrackerStart(config, "<sweep>", sweep_dir, tmp_path / "artifacts", False, ("", "features"),
                         Storage.parse(tmp_path / "runs"))
    assert not kind.resumable(sweep_dir)
    tracker = kind.open(start)
    assert isinstance(tracker, Tracker)
    assert kind.resumable(sweep_dir)
    section = tracker.summary_section()
    assert section["uri"] == uri and tracker.open_trials() == [] and tracker.run_ids() == {}
    assert tracker.unsent_note(3).startswith(f"mlflow: 3 writes could not be sent to {uri}; kept in ")
    assert tracker.unsent_note(3).endswith("; run 'hpo sync seam' when the server is back")
    tracker.fail()
    client = MlflowClient(tracking_uri=uri)
    assert client.get_run(section["parent_run_id"]).info.status == "FAILED"
    again = kind.open(TrackerStart(**{**start.__dict__, "resume": True}))
    assert again.summary_section() == section  # the same parent run, reopened


def test_the_mlflow_tracker_takes_what_the_protocol_declares():
    from hpo.tracking.sweep_tracker import MlflowTracker

    for name in sorted(_members(Tracker) - {"callback"}):
        declared, actual = inspect.signature(getattr(Tracker, name)), inspect.signature(getattr(MlflowTracker, name))
        assert list(actual.parameters) == list(declared.parameters), name
        assert [p.default for p in actual.parameters.values()] == [p.default for p in declared.parameters.values()]


def test_the_sweep_calls_only_what_the_tracker_protocol_declares():
    tree = ast.parse((ROOT / "hpo" / "sweep.py").read_text())
    used, chained = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name) and node.value.id == "tracker":
            used.add(node.attr)
        if (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Attribute)
                and isinstance(node.value.value, ast.Name) and node.value.value.id == "tracker"):
            chained.add(f"tracker.{node.value.attr}.{node.attr}")
    assert {"finish", "interrupt", "fail", "run_ids"} <= used  # the scan sees the sweep's tracker
    assert sorted(used - _members(Tracker)) == [], "declare these on hpo.tracking.tracker.Tracker"
    assert sorted(chained) == [], "reach into no member of the tracker; declare what the sweep needs on Tracker"
    annotated = {a.arg: ast.unparse(a.annotation) for f in ast.walk(tree) if isinstance(f, ast.FunctionDef)
                 for a in f.args.args if a.arg == "tracker" and a.annotation is not None}
    assert annotated == {"tracker": "Tracker"}


def test_every_registered_tracker_is_complete_and_a_new_one_is_one_entry(monkeypatch):
    for name, kind in TRACKERS.items():
        assert isinstance(kind, TrackerKind), name
        assert all(callable(getattr(kind, f)) for f in ("open", "resumable", "sync", "serve")), name
    toy = TrackerKind(open=lambda start: None, resumable=lambda d: False, sync=lambda s, p: (0, 0),  # type: ignore
                      serve=lambda uri, root, port: None)
    monkeypatch.setitem(TRACKERS, "toy", toy)
    assert tracker_kind("toy") is toy
    with pytest.raises(ConfigError) as err:
        tracker_kind("nope")
    assert str(err.value) == "tracker: 'nope' is not registered; use one of mlflow, toy"


def test_hpo_ui_serves_only_a_local_store_that_exists(tmp_path):
    with pytest.raises(ConfigError) as err:
        store_to_serve("http://127.0.0.1:5000/")
    assert str(err.value) == ("--mlflow-uri: http://127.0.0.1:5000 is already a server; open it in a browser "
                              "instead of 'hpo ui'")
    with pytest.raises(ConfigError) as err:
        store_to_serve(f"sqlite:///{tmp_path}/none.db")
    assert str(err.value) == (f"sqlite:///{tmp_path}/none.db: (file): no MLflow database there; run 'hpo tune' "
                              "first or pass --mlflow-uri")
    assert store_to_serve(str(tmp_path / "mlruns")) == f"file://{tmp_path}/mlruns"


def test_hpo_sync_without_a_spool_sends_nothing_and_leaves_the_summary(tmp_path):
    from hpo.cli.sync import sync_sweep

    sweep_dir = tmp_path / "runs" / "quiet"
    sweep_dir.mkdir(parents=True)
    summary = json.loads((Path(__file__).parent / "fixtures" / "summary_v0_grid.json").read_text())
    summary["mlflow"] = {"uri": "http://127.0.0.1:9", "experiment_id": "1", "parent_run_id": "p"}
    (sweep_dir / "summary.json").write_text(json.dumps(summary))
    before = (sweep_dir / "summary.json").stat().st_mtime_ns
    assert sync_sweep(Storage.parse(tmp_path / "runs"), "quiet") == (0, 0)
    assert (sweep_dir / "summary.json").stat().st_mtime_ns == before
