"""A sweep run to a deadline (``--deadline``): p_meet from the forecast's draws, the one warning, the nodes asked
of a cluster's autoscaler, the summary's ``deadline``, the rounds ``hpo report`` shows, and the flags (no Ray)."""

from __future__ import annotations

import io
import json
import math

import numpy as np
import pytest
from rich.console import Console

from hpo.cluster.shapes import NodeShape
from hpo.errors import ConfigError
from hpo.plan import Capacity
from hpo.plan.deadline import advice, node_bundles, plan_at_start
from hpo.plan.history import read_sweep
from hpo.plan.rounds import ROUNDS_FILE, Round, read_rounds, record_round
from hpo.progress.deadline import WARN_BELOW, DeadlineWatch, p_meet
from hpo.progress.journal import read_events
from hpo.progress.live import SweepProgress, read_live
from hpo.progress.sweep import SweepPlan, TrialHistory, estimate_sweep
from hpo.progress.views import PlainView, sweep_text
from hpo.sweep_summary import DeadlineSection, SweepSummary
from tests.conftest import hpo_cli
from tests.unit.plan_journals import past_sweep, sweep_file

# -- p_meet -------------------------------------------------------------------------------------------------


def test_p_meet_is_the_share_of_draws_that_end_by_the_deadline():
    draws = np.array([10.0, 20.0, 30.0, 40.0])
    assert p_meet(draws, 100.0, 125.0) == 0.5  # 110 and 120 end by 125; 130 and 140 do not
    assert p_meet(draws, 100.0, 140.0) == 1.0  # ending at the deadline itself meets it
    assert p_meet(draws, 100.0, 109.0) == 0.0
    assert p_meet(np.arange(1.0, 101.0), 0.0, 37.0) == pytest.approx(0.37)


def test_p_meet_without_draws_is_unknown_and_with_nothing_left_is_whether_now_is_in_time():
    assert p_meet(None, 100.0, 200.0) is None
    assert p_meet(np.zeros(0), 100.0, 200.0) == 1.0
    assert p_meet(np.zeros(0), 300.0, 200.0) == 0.0


def test_p_meet_counts_the_commands_tail_after_the_last_trial():
    draws = np.array([10.0, 20.0, 30.0, 40.0])
    assert p_meet(draws, 100.0, 124.0, tail_s=5.0) == 0.25  # only 110 + 5 ends by 124
    assert p_meet(np.zeros(0), 100.0, 104.0, tail_s=5.0) == 0.0  # no trial left, but 5 s of the command


def test_the_sweep_estimate_keeps_its_draws_and_its_quantiles_come_from_them():
    plan = SweepPlan(planned_trials=6, max_concurrent=2, max_epochs=5, patience=50)
    trials = [TrialHistory([0.1, 0.2], [1.0, 1.0], "running"), TrialHistory([0.1, 0.2, 0.3, 0.4, 0.5],
                                                                             [1.0] * 5, "finished")]
    est = estimate_sweep(trials, plan, samples=400)
    assert est.remaining_s_draws is not None and est.remaining_s_draws.shape == (400,)
    assert est.remaining_s_median == pytest.approx(float(np.quantile(est.remaining_s_draws, 0.5)), rel=1e-6)
    done = estimate_sweep([TrialHistory([0.5], [1.0], "finished")], SweepPlan(1, 1, 5))
    assert done.method == "done" and done.remaining_s_draws is not None and done.remaining_s_draws.size == 0


def _progress(deadline_at: float | None, t0: float = 1_000.0) -> SweepProgress:
    progress = SweepProgress("s", "m", SweepPlan(planned_trials=4, max_concurrent=1, max_epochs=5, patience=50),
                             started=t0, samples=200)
    progress.deadline_at = deadline_at
    progress.start("a", {}, now=t0)
    for epoch in (1, 2):
        progress.result("a", epoch, 0.1 * epoch, 1.0, now=t0 + epoch)
    return progress


def test_a_snapshot_reads_p_meet_from_its_estimates_draws_and_a_cheap_one_reuses_them():
    progress = _progress(deadline_at=1_010.0)
    snap = progress.snapshot(now=1_002.0)
    draws = progress._estimate.remaining_s_draws
    assert snap.deadline_at == 1_010.0
    assert snap.p_meet == pytest.approx(round(float(np.mean(1_002.0 + draws <= 1_010.0)), 3))
    later = progress.snapshot(now=1_005.0, estimate=False)  # no new simulation: the same draws, the same time
    assert later.p_meet == snap.p_meet
    assert _progress(deadline_at=None).snapshot(now=1_002.0).p_meet is None


def test_p_meet_is_in_the_sweep_line_and_progress_json(tmp_path):
    progress = _progress(deadline_at=1_010.0)
    snap = progress.snapshot(now=1_002.0)
    assert f"p_meet {snap.p_meet:.2f} for " in sweep_text(snap)
    (tmp_path / "progress.json").write_text(json.dumps(snap.to_dict()))
    back = read_live(tmp_path / "progress.json")
    assert back is not None and back.p_meet == snap.p_meet and back.deadline_at == 1_010.0
    assert "p_meet" not in sweep_text(_progress(deadline_at=None).snapshot(now=1_002.0))


# -- the warning --------------------------------------------------------------------------------------------


def test_the_warning_is_given_once_when_p_meet_first_falls_below_one_half():
    asked = []

    def advise(p: float) -> str:
        asked.append(p)
        return "4 trials at once × 1 worker on 1 local would give 0.90"

    watch = DeadlineWatch(2_000_000_000.0, advise)
    assert watch.check(None) is None and watch.check(0.9) is None and watch.check(WARN_BELOW) is None
    line = watch.check(0.31)
    assert line is not None and line.startswith("p_meet 0.31 < 0.5 for the deadline ")
    assert line.endswith(": 4 trials at once × 1 worker on 1 local would give 0.90")
    assert watch.check(0.2) is None and watch.check(0.9) is None and watch.check(0.1) is None
    assert asked == [0.31] and watch.warned == line and watch.last == 0.1


def test_no_warning_once_nothing_is_left_and_a_failing_advice_still_warns():
    watch = DeadlineWatch(1.0, lambda p: 1 / 0)  # type: ignore[arg-type,return-value]
    assert watch.check(0.0, done=True) is None and watch.last is None
    line = watch.check(0.2)
    assert line is not None and "no plan (division by zero)" in line


def test_the_monitor_says_it_once_on_its_views_and_in_its_journal(tmp_path):
    from hpo.progress.monitor import SweepMonitor
    from hpo.progress.views import Header

    out = io.StringIO()
    progress = _progress(deadline_at=1_003.0)  # the sweep cannot end by then
    monitor = SweepMonitor(progress, Header("s", "d", "m", ""), [PlainView(Console(file=out, width=300))],
                           tmp_path / "progress.json", events_file=tmp_path / "events.jsonl")
    monitor.deadline = DeadlineWatch(1_003.0, lambda p: "more slots", started_at=990.0)
    monitor.checked()
    progress.clock = lambda: 1_002.5
    for _ in range(3):
        monitor._tick(force=True)
        monitor.last_tick = -math.inf  # every tick fresh
    assert out.getvalue().count("< 0.5 for the deadline") == 1
    assert "more slots" in out.getvalue()
    events = read_events(tmp_path / "events.jsonl")
    assert [e["event"] for e in events].count("deadline_warning") == 1
    predictions = [e for e in events if e["event"] == "prediction"]
    assert len(predictions) == 1 and predictions[0]["source"] == "forecast"
    assert predictions[0]["wall_s_median"] > 1_002.5 - 990.0  # from the command's start, what is left added
    assert events[0]["event"] == "sweep" and events[0]["deadline_at"] == 1_003.0


# -- the plan at the start, the advice, the nodes asked for --------------------------------------------------


def test_the_plan_at_the_start_predicts_the_own_shape_and_the_advice_names_the_recommended_one(tmp_path):
    history = past_sweep(tmp_path / "p", epochs=[[2.0]] * 8)
    config_file = sweep_file(tmp_path / "s.yaml", trials=8, at_once=1)
    from hpo.config import load_sweep

    config = load_sweep(config_file)
    nodes = Capacity((NodeShape("n1", {"CPU": 1.0}, 8),), 8, "nodes.yaml")
    start = plan_at_start(config, read_sweep(history), deadline_s=10.0, capacity=nodes)
    assert start is not None and start.own is not None
    assert (start.own.max_concurrent, start.own.workers_per_trial) == (1, 1)
    assert start.own.wall_s_median == pytest.approx(16.0, rel=0.05)  # 8 trials × 2 s one after the other
    assert start.prediction()["source"] == "plan"  # type: ignore[index]
    text = advice(config, history, 10.0, nodes)
    best = start.plan.recommended
    assert best is not None and best.max_concurrent >= 2  # 10 s needs at least two at once
    shape = f"{best.max_concurrent} trials at once × 1 worker on {best.nodes['n1']} n1"
    assert text == f"{shape} would give {best.p_meet:.2f}"
    hopeless = advice(config, history, 1.0, nodes)  # 8 trials of 2 s cannot end within 1 s
    assert hopeless.startswith("none meets it with 80%; the likeliest, ") and hopeless.endswith("would give 0.00")


def test_the_advice_without_an_ended_trial_says_so(tmp_path):
    from hpo.config import load_sweep

    config = load_sweep(sweep_file(tmp_path / "s.yaml"))
    assert advice(config, tmp_path / "nothing", 10.0).startswith("no plan yet")


def test_the_autoscaler_is_asked_for_one_bundle_per_recommended_node():
    capacity = Capacity((NodeShape("cpu8", {"CPU": 8.0, "GPU": 0.0}, 4),
                         NodeShape("gpu", {"CPU": 4.0, "GPU": 1.0, "memory": 1e9}, 2)), 6, "c.yaml")
    assert node_bundles({"cpu8": 2, "gpu": 1}, capacity) == [
        {"CPU": 8.0}, {"CPU": 8.0}, {"CPU": 4.0, "GPU": 1.0, "memory": 1e9}]
    assert node_bundles({}, capacity) == []
    with pytest.raises(KeyError):
        node_bundles({"tpu": 1}, capacity)


def test_a_local_sweep_asks_no_autoscaler(tmp_path):
    from hpo import deadline
    from hpo.config import load_sweep
    from hpo.options import RunOptions

    asked = []
    config = load_sweep(past_sweep(tmp_path / "runs" / "p", epochs=[[2.0]] * 8, after_s=3.0) / "sweep.yaml")
    options = RunOptions(tmp_path / "runs", deadline_at=2_000_000_000.0)

    class Monitor:
        progress = _progress(None)
        deadline = None

    original = deadline.request_nodes
    deadline.request_nodes = lambda nodes, capacity: asked.append(nodes)  # type: ignore[assignment]
    try:
        run = deadline.start(config, options, Monitor, deadline.earlier_round(config, options))
    finally:
        deadline.request_nodes = original
    assert run is not None and run.start_plan is not None and run.requested is None and asked == []
    assert Monitor.progress.deadline_at == 2_000_000_000.0 and Monitor.deadline is run.watch
    assert run.watch.prediction is not None and run.watch.prediction["source"] == "plan"
    assert Monitor.progress.tail_s == pytest.approx(3.0)  # the earlier round's end after its last trial


# -- summary.json, the rounds -------------------------------------------------------------------------------


def _summary(**extra):
    return {"schema_version": 1, "name": "s", "status": "finished", "objective": {"metric": "m", "mode": "max"},
            "trials": [], **extra}


def test_the_summarys_deadline_round_trips_and_older_files_read_without_it():
    section = {"deadline_at": 1_800_000_000.0, "deadline_s": 21600.0, "p_meet": 0.31, "met": False,
               "warning": "p_meet 0.31 < 0.5 for the deadline 06:00: more slots", "predicted_wall_s": 25000.0,
               "requested": {"gpu": 2}}
    summary = SweepSummary.from_json(_summary(deadline=section), "x")
    assert isinstance(summary.deadline, DeadlineSection) and summary.deadline.requested == {"gpu": 2}
    again = SweepSummary.from_json(json.loads(json.dumps(summary.to_json())), "y")
    assert again.to_json()["deadline"] == section
    old = SweepSummary.from_json(_summary(), "old")
    assert old.deadline is None and "deadline" not in old.to_json()
    old.deadline = DeadlineSection(deadline_at=1.0, deadline_s=1.0, met=True)  # as the sweep sets it
    assert old.to_json()["deadline"]["met"] is True


def test_rounds_are_read_back_ending_at_the_commands_exit_where_the_journal_has_it(tmp_path):
    first = Round(started_at=100.0, sweep_started_at=110.0, source="plan", wall_s_median=50.0, wall_s_low=40.0,
                  wall_s_high=60.0, ended_at=150.0, deadline_at=200.0)
    second = Round(started_at=300.0, sweep_started_at=310.0, source="forecast", wall_s_median=50.0,
                   wall_s_low=45.0, wall_s_high=55.0, ended_at=400.0, deadline_at=380.0, status="interrupted")
    record_round(tmp_path, second)
    record_round(tmp_path, first)
    with (tmp_path / ROUNDS_FILE).open("a") as handle:
        handle.write('{"cut short\n')
    journal = [{"event": "sweep", "t": 110.0}, {"event": "exit", "t": 155.0},
               {"event": "sweep", "t": 310.0}]
    (tmp_path / "progress_events.jsonl").write_text("".join(json.dumps(e) + "\n" for e in journal))
    rounds = read_rounds(tmp_path)
    assert [r.source for r in rounds] == ["plan", "forecast"]  # oldest first
    assert rounds[0].wall_s == 55.0 and rounds[0].inside and rounds[0].met
    assert rounds[0].error == pytest.approx(50 / 55 - 1)
    assert rounds[1].wall_s == 100.0 and not rounds[1].inside and not rounds[1].met
    assert read_rounds(tmp_path / "none") == []


def test_hpo_report_shows_the_plan_table_only_with_rounds(tmp_path):
    runs = tmp_path / "runs"
    (runs / "s").mkdir(parents=True)
    (runs / "s" / "summary.json").write_text(json.dumps(_summary()))
    bare = hpo_cli("report", "s", "--storage", str(runs), cwd=tmp_path)
    assert bare.returncode == 0 and "predicted vs actual" not in bare.stdout
    record_round(runs / "s", Round(started_at=1_800_000_000.0, sweep_started_at=1_800_000_010.0, source="plan",
                                   wall_s_median=500.0, wall_s_low=400.0, wall_s_high=600.0,
                                   ended_at=1_800_000_550.0, deadline_at=1_800_003_600.0))
    shown = hpo_cli("report", "s", "--storage", str(runs), cwd=tmp_path)
    assert shown.returncode == 0 and "predicted vs actual" in shown.stdout
    assert "1 of 1 actual wall times inside the predicted 80% interval" in shown.stdout
    assert "-9%" in shown.stdout  # 500 s predicted, 550 s real


# -- the flags ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize("command", ["tune", "submit"])
def test_an_unreadable_deadline_is_one_line_and_exit_2(tmp_path, command):
    file = sweep_file(tmp_path / "s.yaml")
    extra = ["--address", "http://127.0.0.1:1"] if command == "submit" else []
    result = hpo_cli(command, str(file), "--deadline", "6x", *extra, "--storage", str(tmp_path / "runs"),
                     cwd=tmp_path)
    assert result.returncode == 2
    lines = [line for line in (result.stderr or result.stdout).splitlines() if line.strip()]
    assert lines == [f"error: {file}: --deadline: '6x' is neither a duration nor a time; write e.g. 6h, 1h30m or "
                     "2026-11-30T06:00"]


def test_a_deadline_is_a_duration_from_now_or_a_time_and_only_hpo_tune_takes_one_passed(tmp_path):
    from hpo.cli.plan import deadline_at, iso

    assert deadline_at(tmp_path, "90m", now=1_000.0) == 1_000.0 + 5400
    assert deadline_at(tmp_path, "2026-11-30T06:00:00+00:00", now=0.0) == 1_796_018_400.0
    passed = "2001-01-01T00:00:00+00:00"
    with pytest.raises(ConfigError, match=r"--deadline: .* has passed"):
        deadline_at(tmp_path, passed)
    assert deadline_at(tmp_path, passed, passed_ok=True) == 978_307_200.0  # a queued sweep that waited past it
    future = 4_102_444_800.0  # 2100-01-01: a time to come whenever the test runs
    assert deadline_at(tmp_path, iso(future)) == future  # what submit hands the job


def test_run_options_refuse_a_deadline_that_is_no_time(tmp_path):
    from hpo.options import RunOptions

    with pytest.raises(ConfigError, match="--deadline"):
        RunOptions(tmp_path, deadline_at=math.nan)


def test_hpo_status_of_an_ended_sweep_says_whether_it_met_its_deadline(tmp_path):
    runs = tmp_path / "runs"
    (runs / "s").mkdir(parents=True)
    section = {"deadline_at": 1_800_000_000.0, "deadline_s": 600.0, "p_meet": 0.42, "met": False}
    (runs / "s" / "summary.json").write_text(json.dumps(_summary(deadline=section)))
    shown = hpo_cli("status", "s", "--storage", str(runs), cwd=tmp_path)
    assert shown.returncode == 0 and "missed (the last forecast gave p_meet 0.42)" in shown.stdout
    (runs / "s" / "summary.json").write_text(json.dumps(_summary()))
    assert "deadline" not in hpo_cli("status", "s", "--storage", str(runs), cwd=tmp_path).stdout
