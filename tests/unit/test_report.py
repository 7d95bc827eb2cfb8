"""The HTML report from a sweep's files: finished (summary.json) and live (trial directories only)."""

from __future__ import annotations

import json
import re

import pytest

from hpo.config import SweepConfig
from hpo.errors import ConfigError
from hpo.repeats import save_config
from hpo.report import TITLE, SweepView, TrialView, figures, write_report
from hpo.storage import Storage
from hpo.summary import build_summary
from hpo.trial.protocol import TrialRow
from tests.conftest import base_sweep, hpo_cli

CURVES = {"a1": (0.01, 0, [0.5, 0.7, 0.72], True), "a2": (0.01, 1, [0.55, 0.69, 0.70], True),
          "b1": (0.1, 0, [0.4, 0.45], False), "b2": (0.1, 1, [0.42, 0.5], False)}


def make_sweep(tmp_path, finished: bool) -> Storage:
    """A sweep's files as hpo and Tune leave them: sweep.yaml, trial directories, summary.json if finished."""
    storage = Storage.parse(tmp_path / "runs")
    config = SweepConfig.model_validate(base_sweep(name="rep", search={"repeats": 2, "num_samples": 2}))
    save_config(storage.state_dir("rep"), config)
    rows = []
    for trial_id, (lr, repeat, values, done) in CURVES.items():
        trial_dir = tmp_path / "runs" / "rep" / f"hpo_trial_{trial_id}_1_lr"
        trial_dir.mkdir(parents=True)
        (trial_dir / "params.json").write_text(json.dumps({"learning_rate": lr, "__trial_index__": repeat}))
        lines = ["epoch,val_accuracy,trial_finished,time_total_s"]
        lines += [f"{i + 1},{v},{done and i == len(values) - 1},{3.0 * (i + 1)}" for i, v in enumerate(values)]
        (trial_dir / "progress.csv").write_text("\n".join(lines) + "\n")
        status = "completed" if done else "stopped_early"
        rows.append(TrialRow(trial_id, {"learning_rate": lr}, status, len(values), max(values), not done, None, None,
                             repeat=repeat))
    if finished:
        build_summary(config, rows, {}, 1.0, None).write(tmp_path / "runs" / "rep" / "summary.json")
    return storage


def plots(page: str) -> list[str]:
    return re.findall(r"<h2>([^<]+)</h2>", page)


def test_finished_sweep_report_has_every_figure_and_no_network_reference(tmp_path):
    storage = make_sweep(tmp_path, finished=True)
    page = write_report(storage, "rep", tmp_path / "out" / "report.html").read_text()
    assert plots(page) == [
        "Optimisation history", "Parallel coordinates",
        "Learning curves (marker: where each trial ended; x = stopped by the scheduler)",
        "Repeats of the top configurations (mean and 95 % interval)", "Time and resources per trial"]
    assert page.count("Plotly.newPlot") == 5 and "<script src=" not in page  # plotly.js inline, once
    assert len(page) > 3_000_000  # plotly.js itself is in the file
    assert all(trial_id in page for trial_id in CURVES)
    assert "best is significantly better than every other configuration" in page and "4 trials; finished." in page


def test_live_sweep_report_reads_the_trial_directories(tmp_path):
    storage = make_sweep(tmp_path, finished=False)
    page = write_report(storage, "rep", tmp_path / "live.html").read_text()
    assert "4 trials; running (live state; reload for more)." in page
    assert "Repeats of the top configurations" not in page and "Learning curves" in page
    assert '"diamond-open"' in page  # trials without a finished flag are drawn as still running


def test_report_never_overwrites_a_file_it_did_not_write(tmp_path):
    storage = make_sweep(tmp_path, finished=True)
    mine = tmp_path / "notes.html"
    mine.write_text("<html>my notes</html>")
    with pytest.raises(ConfigError) as err:
        write_report(storage, "rep", mine)
    assert str(err.value) == f"{mine}: -o: exists and is not an hpo report; choose another path or move it away"
    assert mine.read_text() == "<html>my notes</html>"
    again = tmp_path / "r.html"
    write_report(storage, "rep", again)
    assert TITLE in write_report(storage, "rep", again).read_text()  # its own report is replaced


def test_cli_report_table_sorted_by_the_objective_with_a_column_per_parameter_and_json(tmp_path):
    make_sweep(tmp_path, finished=True)
    out = hpo_cli("report", "rep", "--storage", str(tmp_path / "runs"), cwd=tmp_path).stdout
    ranks = [line.split("│")[2].strip() for line in out.splitlines() if line.startswith("│ ")]
    assert ranks == ["a1", "a2", "b2", "b1"] and "learning_rate" in out
    summary = json.loads(hpo_cli("report", "rep", "--json", "--storage", str(tmp_path / "runs"), cwd=tmp_path).stdout)
    assert summary["name"] == "rep" and len(summary["trials"]) == 4
    made = hpo_cli("report", "rep", "-o", "r.html", "--storage", str(tmp_path / "runs"), cwd=tmp_path)
    assert made.returncode == 0 and (tmp_path / "r.html").is_file()


def _many_trials(n: int) -> SweepView:
    config = SweepConfig.model_validate(base_sweep(name="big"))
    trials = [TrialView(f"{i:05d}", {"learning_rate": 0.001 * (i % 7 + 1)}, "completed" if i % 3 else "stopped_early",
                        0.5 + (i % 11) / 100, [(e, 0.4 + e / 20 + (i % 5) / 100) for e in range(1, 5)], 3.0 + i % 4)
              for i in range(n)]
    return SweepView("big", config, trials, None, True)


def test_the_report_builds_no_plotly_object_per_trial():
    """Drawn at a sweep's end, in its driver: thousands of trials must not mean thousands of plotly objects."""
    import gc

    from plotly.basedatatypes import BasePlotlyType

    def plotly_objects_made(n: int) -> tuple[int, int]:
        view = _many_trials(n)
        gc.collect()
        before = sum(isinstance(o, BasePlotlyType) for o in gc.get_objects())
        made = figures(view, None)
        curves = dict(made)["Learning curves (marker: where each trial ended; x = stopped by the scheduler)"]
        return sum(isinstance(o, BasePlotlyType) for o in gc.get_objects()) - before, len(curves["data"])

    plotly_objects_made(2)  # plotly's caches filled
    few, many = plotly_objects_made(20), plotly_objects_made(400)
    assert few[1] == 40 and many[1] == 800  # still a curve and an end marker per trial
    assert many[0] == few[0]


def test_parameter_importance_reads_the_completed_trials_only_and_matches_optuna_on_the_whole_study(tmp_path):
    import optuna

    from hpo.report import param_importance
    from hpo.search import study_url

    storage = Storage.parse(tmp_path / "runs")
    config = SweepConfig.model_validate(base_sweep(name="imp"))
    save_config(storage.state_dir("imp"), config)
    study = optuna.create_study(study_name="imp", storage=study_url(storage.state_dir("imp")), direction="maximize",
                                sampler=optuna.samplers.RandomSampler(seed=0))
    space = {"learning_rate": optuna.distributions.FloatDistribution(1e-4, 1e-1, log=True),
             "units": optuna.distributions.IntDistribution(16, 128)}
    for i in range(40):
        trial = study.ask(space)
        for epoch in range(1, 4):
            trial.report(trial.params["units"] / 128 + epoch / 10, epoch)
        if i % 3:
            study.tell(trial, state=optuna.trial.TrialState.PRUNED)  # most trials stopped by the scheduler
        else:
            study.tell(trial, trial.params["units"] / 128 - trial.params["learning_rate"])
    view = SweepView("imp", config, [], None, True)
    assert param_importance(storage, view) == optuna.importance.get_param_importances(
        optuna.load_study(study_name="imp", storage=study_url(storage.state_dir("imp"))))
