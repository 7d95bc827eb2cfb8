"""``summary.json`` as ``SweepSummary``: round trip, files of earlier hpo versions, versions it refuses."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from hpo.config import SweepConfig
from hpo.errors import ConfigError
from hpo.summary import TuneResult, build_summary, goal_status
from hpo.sweep_summary import SCHEMA_VERSION, SweepSummary
from hpo.tracking.outbox import Outbox, update_summary
from hpo.trial.protocol import TrialRow
from tests.conftest import base_sweep, hpo_cli

#: summary.json files written by hpo before summaries had a version (simulated sweeps of digits): four grid
#: points without repeats, and two configurations with two repeats each and a goal none reached.
FIXTURES = Path(__file__).parent / "fixtures"
GRID, REPEATS = FIXTURES / "summary_v0_grid.json", FIXTURES / "summary_v0_repeats.json"
NOISE_UNKNOWN = ("the winner's noise is unknown (one run per configuration); run `hpo repeat {} --top 3 "
                 "--repeats 5` (or set search.repeats) to test it")


def _config(name: str, repeats: int = 1, **objective) -> SweepConfig:
    search = {"repeats": repeats, "num_samples": 2} if repeats > 1 else {"num_samples": 2}
    return SweepConfig.model_validate(base_sweep(name=name, search=search,
                                                 objective={"metric": "val_accuracy", **objective}))


def _rows(values: dict[float, list[float]]) -> list[TrialRow]:
    rows, n = [], 0
    for lr, repeats in values.items():
        for repeat, value in enumerate(repeats):
            rows.append(TrialRow(f"t{n:02d}", {"learning_rate": lr}, "completed", 3, value, False, f"run{n}",
                                 f"/ckpt/t{n:02d}", repeat=repeat))
            n += 1
    return rows


def test_a_summary_written_and_read_back_is_the_same(tmp_path):
    config = _config("again", repeats=2, goal=0.7)
    rows = _rows({0.1: [0.60, 0.62], 0.01: [0.70, 0.72]})
    rows.append(TrialRow("t04", {"learning_rate": 0.5}, "failed", 1, None, False, None, None, error="OOM"))
    mlflow = {"uri": "sqlite:///m.db", "experiment_id": "1", "parent_run_id": "p"}
    summary = build_summary(config, rows, mlflow, 12.345, goal_status(config, rows))
    summary.write(tmp_path / "summary.json")
    written = json.loads((tmp_path / "summary.json").read_text())
    assert list(written) == ["schema_version", "name", "status", "objective", "best", "statistics", "trials",
                             "mlflow", "wall_time_s", "goal"]
    assert written["schema_version"] == SCHEMA_VERSION == 1 and written["wall_time_s"] == 12.35
    assert set(written["best"]) == {"trial_id", "params", "metric", "mean", "std", "ci_low", "ci_high", "n"}
    assert written["goal"] == {"value": 0.7, "reached": True, "trial_id": "t02", "trial_ids": ["t02", "t03"]}
    assert "error" not in written["trials"][0] and written["trials"][4]["error"] == "OOM"
    back = SweepSummary.read(tmp_path / "summary.json")
    assert back == summary and back.to_json() == written
    assert back.trials[4] == rows[4] and back.best is not None and back.best.trial_id == "t03"


def test_keys_a_sweep_did_not_produce_stay_out_of_the_file():
    rows = _rows({0.1: [0.75], 0.01: [0.70]})
    written = build_summary(_config("plain"), rows, {"uri": "u", "experiment_id": "1", "parent_run_id": "p"}, 1.0,
                            None).to_json()
    assert "goal" not in written and "repeat_of" not in written
    assert set(written["best"]) == {"trial_id", "params", "metric"}
    assert set(written["mlflow"]) == {"uri", "experiment_id", "parent_run_id"}


def test_the_verdict_names_the_sweep_in_the_command_it_suggests(tmp_path):
    summary = build_summary(_config("digits-mlp"), _rows({0.1: [0.75], 0.01: [0.70]}),
                            {"uri": "sqlite:///x.db", "experiment_id": "1", "parent_run_id": "p"}, 1.0, None)
    assert summary.statistics is not None
    assert summary.statistics.verdict == NOISE_UNKNOWN.format("digits-mlp")
    summary.write(tmp_path / "runs" / "digits-mlp" / "summary.json")
    out = hpo_cli("report", "digits-mlp", "--storage", str(tmp_path / "runs"), cwd=tmp_path).stdout
    assert f"verdict: {NOISE_UNKNOWN.format('digits-mlp')}\n" in out


@pytest.mark.parametrize("fixture", [GRID, REPEATS])
def test_a_summary_from_before_versions_reads_as_it_was_written(fixture):
    original = json.loads(fixture.read_text())
    assert "schema_version" not in original
    summary = SweepSummary.read(fixture)
    document = summary.to_json()
    assert document.pop("schema_version") == SCHEMA_VERSION
    if fixture == GRID:  # hpo wrote a placeholder for the sweep's name into this verdict
        assert original["statistics"]["verdict"] == NOISE_UNKNOWN.format("NAME")
        original["statistics"]["verdict"] = NOISE_UNKNOWN.format("digits-grid")
    assert document == original and list(document) == list(original)


def test_the_typed_summary_carries_what_the_file_says():
    grid, repeats = SweepSummary.read(GRID), SweepSummary.read(REPEATS)
    assert (grid.name, grid.status, grid.objective.metric, grid.objective.mode) == (
        "digits-grid", "finished", "val_accuracy", "max")
    assert grid.best is not None and grid.best.trial_id == "cc5d2_00002" and grid.best.n is None
    assert [t.trial_id for t in grid.trials] == [f"cc5d2_0000{i}" for i in range(4)]
    assert grid.status_counts() == {"completed": 3, "stopped_early": 1}
    assert grid.goal is None and grid.repeat_of is None and grid.mlflow.model is None
    assert repeats.best is not None and repeats.best.n == 2 and repeats.best.mean == pytest.approx(0.5161469)
    assert repeats.goal is not None and (repeats.goal.value, repeats.goal.reached, repeats.goal.trial_ids) == (
        0.99, False, None)
    assert repeats.statistics is not None and [c.rank for c in repeats.statistics.configurations] == [1, 2]
    assert sorted(t.repeat for t in repeats.trials) == [0, 0, 1, 1]


def test_the_first_summaries_lacked_status_statistics_checkpoints_and_repeats(tmp_path):
    """The shape of the first hpo's summary.json: what it lacked is filled in as those sweeps ran."""
    first = json.loads(GRID.read_text())
    for key in ("status", "statistics"):
        del first[key]
    for row in first["trials"]:
        del row["checkpoint"], row["repeat"]
    first["mlflow"] = {k: first["mlflow"][k] for k in ("uri", "experiment_id", "parent_run_id")}
    (tmp_path / "summary.json").write_text(json.dumps(first))
    summary = SweepSummary.read(tmp_path / "summary.json")
    assert summary.status == "finished" and summary.statistics is None
    assert {(t.checkpoint, t.repeat) for t in summary.trials} == {(None, 0)}
    assert summary.to_json()["trials"][0] == {**first["trials"][0], "checkpoint": None, "repeat": 0}


def test_unknown_keys_are_kept(tmp_path):
    data = json.loads(GRID.read_text()) | {"team": "forecasting"}
    data["trials"][0]["note"] = "rerun"
    (tmp_path / "summary.json").write_text(json.dumps(data))
    summary = SweepSummary.read(tmp_path / "summary.json")
    summary.write(tmp_path / "again.json")
    again = json.loads((tmp_path / "again.json").read_text())
    assert again["team"] == "forecasting"
    assert "note" not in again["trials"][0]  # a trial row has exactly TrialRow's fields


@pytest.mark.parametrize(("version", "message"), [
    (2, "schema_version: summary version 2 is newer than this hpo reads (up to 1); upgrade hpo to read it"),
    ("1", "schema_version: '1' is not a summary version (a whole number up to 1); pass the summary.json hpo wrote"),
    (-1, "schema_version: -1 is not a summary version (a whole number up to 1); pass the summary.json hpo wrote"),
])
def test_a_version_it_cannot_read_is_one_line_naming_the_file(tmp_path, version, message):
    path = tmp_path / "summary.json"
    path.write_text(json.dumps(json.loads(GRID.read_text()) | {"schema_version": version}))
    with pytest.raises(ConfigError) as err:
        SweepSummary.read(path)
    assert str(err.value) == f"{path}: {message}"


def test_the_cli_refuses_a_newer_summary_in_one_line(tmp_path):
    path = tmp_path / "runs" / "digits-grid" / "summary.json"
    path.parent.mkdir(parents=True)
    path.write_text(json.dumps(json.loads(GRID.read_text()) | {"schema_version": 7}))
    proc = hpo_cli("report", "digits-grid", "--storage", str(tmp_path / "runs"), cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (f"error: {path}: schema_version: summary version 7 is newer than this hpo reads "
                                   "(up to 1); upgrade hpo to read it")


@pytest.mark.parametrize(("text", "message"), [
    ("[1, 2]", "(file): not a sweep summary (a JSON object is expected); pass the summary.json hpo wrote"),
    ('{"name": "s", "objective": {"metric": "m", "mode": "max"}, "trials": [{"trial_id": "a", "params": {}, '
     '"status": "lost", "epochs": 1, "metric": null}]}',
     "trials.0.status: Input should be 'completed', 'stopped_early', 'diverged', 'failed' or 'interrupted'; "
     "pass the summary.json hpo wrote"),
    ('{"name": "s", "trials": []}', "objective: Field required; pass the summary.json hpo wrote"),
])
def test_a_file_that_is_no_summary_is_one_line_naming_the_file_and_key(tmp_path, text, message):
    path = tmp_path / "summary.json"
    path.write_text(text)
    with pytest.raises(ConfigError) as err:
        SweepSummary.read(path)
    assert str(err.value) == f"{path}: {message}"


def test_a_sweep_without_a_summary_is_named(tmp_path):
    with pytest.raises(ConfigError) as err:
        SweepSummary.load(tmp_path / "runs", "nope")
    path = tmp_path / "runs" / "nope" / "summary.json"
    assert str(err.value) == f"{path}: (file): no summary for sweep 'nope'; run 'hpo tune' first or pass --storage"


def test_the_tracker_hands_the_summary_its_run_ids_model_and_unsent_writes(tmp_path):
    rows = _rows({0.1: [0.75], 0.01: [0.70]})
    summary = build_summary(_config("tracked"), [TrialRow(**{**vars(rows[0]), "mlflow_run_id": None}), rows[1]],
                            {"uri": "sqlite:///x.db", "experiment_id": "1", "parent_run_id": "p"}, 1.0, None)
    outbox = Outbox("sqlite:///x.db", tmp_path / "spool.jsonl", "p", "1")
    outbox.run_ids["trial:t00"] = "new-run"
    outbox.model = {"trial_id": "t00", "model_uri": "runs:/p/model", "registered_name": "tracked", "version": "3"}
    update_summary(summary, outbox, pending=4)
    mlflow = summary.to_json()["mlflow"]
    assert mlflow == {"uri": "sqlite:///x.db", "experiment_id": "1", "parent_run_id": "p", "model": outbox.model,
                      "pending_writes": 4, "spool": str(tmp_path / "spool.jsonl")}
    assert [t.mlflow_run_id for t in summary.trials] == ["new-run", "run1"]  # a trial it does not know keeps its run
    update_summary(summary, Outbox("sqlite:///x.db", tmp_path / "spool.jsonl", "p", "1"), pending=0)
    assert summary.mlflow.model is not None and summary.to_json()["mlflow"]["spool"] is None  # the model stays


def test_a_tune_result_gives_the_document_and_the_typed_summary(tmp_path):
    summary = SweepSummary.read(REPEATS)
    result = TuneResult.from_summary(summary, REPEATS)
    assert result.sweep_summary is summary and result.summary == summary.to_json()
    assert result.summary["trials"][0]["trial_id"] == "1974dac8" and result.best_trial_id == "4aae5c35"
    assert result.best_params == {"learning_rate": 0.0023831958769104477, "units": 32, "optimizer": "sgd"}
    assert list(result.trials["trial_id"]) == [t.trial_id for t in summary.trials] and "units" in result.trials
