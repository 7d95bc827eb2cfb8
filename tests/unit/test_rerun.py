"""A sweep name is used once per storage: resume, overwrite, refuse, or report a finished sweep."""

from __future__ import annotations

import json

import pytest

from hpo.errors import ConfigError
from hpo.options import RunOptions
from hpo.rerun import check_rerun, prepare_rerun, sweep_state


def test_states_from_what_the_directory_holds(tmp_path):
    sweep_dir = tmp_path / "s"
    assert sweep_state(sweep_dir) == "new"
    sweep_dir.mkdir()
    (sweep_dir / "notes.txt").write_text("x")
    assert sweep_state(sweep_dir) == "new"
    for started in ("hpo_state.json", "optuna.db", "tuner.pkl", "experiment_state-2026-11-25.json"):
        (sweep_dir / started).write_text("{}")
        assert sweep_state(sweep_dir) == "interrupted"
        (sweep_dir / started).unlink()
    (sweep_dir / "summary.json").write_text("{}")
    assert sweep_state(sweep_dir) == "finished"


def test_a_used_name_is_refused_without_resume_or_overwrite(tmp_path):
    (tmp_path / "s").mkdir()
    (tmp_path / "s" / "optuna.db").write_text("")
    with pytest.raises(ConfigError) as err:
        check_rerun("s", RunOptions(tmp_path), "sweep.yaml")
    assert str(err.value) == (
        f"sweep.yaml: name: sweep 's' started and did not finish in {tmp_path / 's'}; pass --resume to continue it, "
        "--name to start another one, or --overwrite to start it again (its Optuna study is dropped)"
    )
    assert check_rerun("s", RunOptions(tmp_path, resume=True), "sweep.yaml") == "interrupted"
    assert check_rerun("s", RunOptions(tmp_path, overwrite=True), "sweep.yaml") == "interrupted"
    assert (tmp_path / "s" / "optuna.db").is_file()  # checking changes nothing


def test_resume_with_nothing_to_resume_is_an_error(tmp_path):
    with pytest.raises(ConfigError) as err:
        check_rerun("s", RunOptions(tmp_path, resume=True), "sweep.yaml")
    assert str(err.value) == (
        f"sweep.yaml: --resume: there is no sweep 's' in {tmp_path} to resume; run it without --resume "
        "(or pass the --storage it ran with)"
    )


def test_finished_sweep_resume_reports_it_and_overwrite_drops_only_the_summary(tmp_path):
    sweep_dir = tmp_path / "s"
    sweep_dir.mkdir()
    (sweep_dir / "summary.json").write_text(json.dumps({"name": "s"}))
    (sweep_dir / "optuna.db").write_text("study")
    with pytest.raises(ConfigError, match="sweep 's' finished in"):
        prepare_rerun("s", RunOptions(tmp_path), "sweep.yaml")
    assert prepare_rerun("s", RunOptions(tmp_path, resume=True), "sweep.yaml") == sweep_dir / "summary.json"
    assert (sweep_dir / "summary.json").is_file()
    assert prepare_rerun("s", RunOptions(tmp_path, overwrite=True), "sweep.yaml") is None
    assert not (sweep_dir / "summary.json").exists() and (sweep_dir / "optuna.db").read_text() == "study"


def test_resume_and_overwrite_together_are_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"^--resume: cannot be combined with --overwrite; pass one of them$"):
        RunOptions(tmp_path, resume=True, overwrite=True)


def test_a_study_trial_handed_out_before_a_crash_is_closed_when_the_sweep_ends(tmp_path):
    import optuna

    from hpo.config import parse_sweep
    from hpo.search import close_study, study_url
    from tests.conftest import base_sweep

    config = parse_sweep(base_sweep(name="s"))
    study = optuna.create_study(study_name="s", storage=study_url(tmp_path), direction="maximize")
    study.tell(study.ask(), 0.5)
    study.ask()  # handed out, then the driver died before Tune recorded it
    assert close_study(config, tmp_path) == 1
    states = [t.state for t in optuna.load_study(study_name="s", storage=study_url(tmp_path)).trials]
    assert states == [optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.FAIL]
    assert close_study(config, tmp_path) == 0  # nothing else to close
    assert close_study(config, tmp_path / "no-study") == 0
