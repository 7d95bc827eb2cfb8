"""The live side of progress: the sweep record, its snapshot, the three views, the monitor and hpo status."""

from __future__ import annotations

import io
import json
import time
from types import SimpleNamespace

import pytest
from rich.console import Console

from hpo.progress import SweepPlan
from hpo.progress import views as views_module
from hpo.progress.live import PROGRESS_FILE, Snapshot, SweepProgress, read_live
from hpo.progress.monitor import SweepMonitor, trial_error_line
from hpo.progress.views import Header, JsonView, LiveView, PlainView, duration, money, sweep_text

HEADER = Header("s", "4 trials × 2 workers, optuna-tpe + asha, up to 10 epochs each", "hpo ui --mlflow-uri x",
                "optuna-dashboard sqlite:///y")


def _plan(**changes) -> SweepPlan:
    settings = dict(planned_trials=4, max_concurrent=2, max_epochs=10, mode="max", patience=2,
                    cpus_per_trial=2.0, scheduler="fifo")
    settings.update(changes)
    return SweepPlan(**settings)


def _trial(trial_id: str, **config) -> SimpleNamespace:
    return SimpleNamespace(trial_id=trial_id, config=config, last_result={}, status="RUNNING")


def _monitor(tmp_path, console=None, plan=None, **kwargs) -> SweepMonitor:
    progress = SweepProgress("s", "val_accuracy", plan or _plan(), samples_per_epoch=1000, started=time.time())
    views = [PlainView(console, interval_s=5)] if console is not None else []
    return SweepMonitor(progress, HEADER, views, tmp_path / PROGRESS_FILE, tick_s=0.0, estimate_share=None, **kwargs)


def test_snapshot_counts_trials_best_speed_and_cost():
    now = 1000.0
    progress = SweepProgress("s", "val_accuracy", _plan(cost_per_cpu_hour=3.6), samples_per_epoch=500, started=now)
    progress.start("a", {"lr": 0.1}, now=now)
    progress.start("b", {"lr": 0.01}, now=now)
    for epoch, value in enumerate([0.5, 0.7, 0.8], start=1):
        progress.result("a", epoch, value, 2.0)
    progress.end("a", "completed", now=now + 6)
    for epoch, value in enumerate([0.4, 0.6], start=1):
        progress.result("b", epoch, value, 2.0)
    snap = progress.snapshot(now=now + 60)
    assert (snap.completed, snap.running, snap.pending, snap.ended, snap.planned) == (1, 1, 2, 1, 4)
    assert snap.best_trial_id == "a" and snap.best_value == 0.8
    assert snap.epochs_per_min == 5.0 and snap.samples_per_s == pytest.approx(5 * 500 / 60, abs=0.1)
    # 5 epochs × 2 s × 2 CPUs at 3.6 per CPU hour = 0.02 spent; the total adds the estimated rest
    assert snap.cost_spent == pytest.approx(0.02)
    assert snap.cost_total_low <= snap.cost_total_median <= snap.cost_total_high and snap.cost_total_low > 0.02
    assert snap.remaining_s_low <= snap.remaining_s_median <= snap.remaining_s_high
    running = snap.trials[0]
    assert running.trial_id == "b" and running.status == "running" and running.epoch == 2
    assert 2 <= running.epochs_low <= running.epochs_median <= running.epochs_high <= 10
    assert running.percent_done == pytest.approx(100 * 2 / running.epochs_median, abs=0.1)
    assert snap.trials[1].epochs_median is None  # an ended trial has no estimate
    assert Snapshot.from_dict(json.loads(json.dumps(snap.to_dict()))) == snap


def test_no_price_no_cost_and_nan_values_never_raise():
    progress = SweepProgress("s", "val_loss", _plan(mode="min"), started=0.0)
    progress.result("x", 1, float("nan"))
    progress.result("x", 3, "junk")  # a skipped epoch is filled in, junk is NaN
    snap = progress.snapshot(now=10.0)
    assert snap.cost_spent is None and snap.cost_total_median is None
    assert snap.trials[0].epoch == 3 and snap.trials[0].value is None and snap.best_value is None
    assert snap.remaining_s_median is None  # no timings yet
    assert "time left: after the first timed epochs" in sweep_text(snap)


def test_best_after_each_trial_is_the_optimisation_history():
    progress = SweepProgress("s", "val_loss", _plan(mode="min"), started=0.0)
    for trial_id, values, status in [("a", [0.9, 0.5], "completed"), ("b", [0.7], "stopped_early"),
                                     ("c", [0.1], "failed"), ("d", [0.3, 0.2], "completed")]:
        for epoch, value in enumerate(values, start=1):
            progress.result(trial_id, epoch, value)
        progress.end(trial_id, status)
    assert progress.best_after_each_trial() == [0.5, 0.5, 0.5, 0.2]  # a failed trial never counts


def test_plain_view_first_epoch_at_once_then_blocks_at_most_every_interval(tmp_path, monkeypatch):
    clock = [100.0]
    monkeypatch.setattr(views_module.time, "monotonic", lambda: clock[0])
    console = Console(record=True, width=400)
    monitor = _monitor(tmp_path, console)
    monitor.begin()
    trial = _trial("t1", learning_rate=0.1)
    monitor.on_trial_start(0, [], trial)
    for epoch, value in enumerate([0.5, 0.6, 0.7, 0.75], start=1):
        clock[0] = 100.0 + [0, 1, 2, 7][epoch - 1]
        monitor.on_trial_result(0, [], trial, {"val_accuracy": value, "epoch": epoch, "epoch_time_s": 1.0})
    lines = console.export_text().strip().splitlines()
    assert lines[:3] == HEADER.lines()
    epoch_lines = [line for line in lines if line.startswith("  t1 epoch ")]
    # epoch 1 at once (with the prior), 2 and 3 within 5 s of it skipped, 4 at +7 s shown with the sweep line
    assert [line.split()[2] for line in epoch_lines] == ["1/10", "4/10"]
    assert "val_accuracy=0.5000 best=0.5000, est. " in epoch_lines[0] and "(prior)" in epoch_lines[0]
    assert "val_accuracy=0.7500 best=0.7500, est. " in epoch_lines[1] and "s left [" in epoch_lines[1]
    sweep_lines = [line for line in lines if line.startswith("sweep: ")]
    assert len(sweep_lines) == 2  # with the first epoch (t=100) and at t=107, none at 101 and 102
    assert "0/4 ended" in sweep_lines[1] and "1 running, 3 pending" in sweep_lines[1] and " left [" in sweep_lines[1]
    assert "\x1b[" not in console.export_text(styles=False)


def test_plain_view_shows_the_first_estimate_at_once(monkeypatch):
    """The sweep line waits for the interval, except the first one that can say how long is left."""
    clock = [100.0]
    monkeypatch.setattr(views_module.time, "monotonic", lambda: clock[0])
    console = Console(record=True, width=400)
    view = PlainView(console, interval_s=5)
    progress = SweepProgress("s", "val_accuracy", _plan(), started=0.0)
    progress.start("a", {}, now=0.0)
    progress.result("a", 1, 0.5)  # no timing yet: nothing to estimate from
    view.update(progress.snapshot(now=1.0))
    clock[0] = 101.0
    progress.result("a", 2, 0.6, 1.0)
    view.update(progress.snapshot(now=2.0))  # 1 s later: printed, it is the first estimate
    clock[0] = 102.0
    progress.result("a", 3, 0.7, 1.0)
    view.update(progress.snapshot(now=3.0))  # within the interval: not printed
    sweep_lines = [line for line in console.export_text().splitlines() if line.startswith("sweep: ")]
    assert len(sweep_lines) == 2, sweep_lines
    assert "time left: after the first timed epochs" in sweep_lines[0] and " left [" in sweep_lines[1]


def test_trial_end_lines_and_a_failed_trial_says_why(tmp_path):
    console = Console(record=True, width=300)
    monitor = _monitor(tmp_path, console)
    ok, bad = _trial("ok"), _trial("bad")
    error = tmp_path / "error.txt"
    error.write_text("Traceback (most recent call last):\n  File x\nRuntimeError: broken on purpose\n\n")
    bad.error_file = str(error)
    for trial in (ok, bad):
        monitor.on_trial_start(0, [], trial)
        monitor.on_trial_result(0, [], trial, {"val_accuracy": 0.5, "epoch": 1, "epoch_time_s": 1.0})
    ok.last_result = {"val_accuracy": 0.5, "epoch": 1, "trial_finished": True}
    monitor.on_trial_complete(0, [], ok)
    monitor.on_trial_error(0, [], bad)
    ended = [line for line in console.export_text().splitlines() if line.startswith("[")]
    assert ended[0].startswith("[1/4] ok completed") and "val_accuracy=0.5000" in ended[0]
    assert ended[1].startswith("[2/4] bad failed") and ended[1].endswith("RuntimeError: broken on purpose")


def test_error_line_falls_back_to_the_message():
    assert trial_error_line(SimpleNamespace(error_file=None, error_msg="boom\nValueError: bad")) == "ValueError: bad"
    assert trial_error_line(SimpleNamespace(error_file="/no/such/file")) == ""


def test_monitor_writes_progress_json_and_logs_the_forecast(tmp_path):
    logged = []
    monitor = _monitor(tmp_path, log_every_s=0.0)
    monitor.log = lambda metrics, step: logged.append((metrics, step))
    monitor.begin()
    assert not (tmp_path / PROGRESS_FILE).exists()  # nothing written before the sweep's checks pass
    monitor.checked()
    assert read_live(tmp_path / PROGRESS_FILE).state == "starting"
    trial = _trial("t1")
    monitor.on_trial_start(0, [], trial)
    for epoch in (1, 2, 3):
        monitor.on_trial_result(0, [], trial, {"val_accuracy": 0.1 * epoch, "epoch": epoch, "epoch_time_s": 0.5})
    live = read_live(tmp_path / PROGRESS_FILE)
    assert live.state == "running" and live.trials[0].epoch == 3 and live.remaining_s_median is not None
    trial.last_result = {"val_accuracy": 0.3, "epoch": 3}
    monitor.on_trial_complete(0, [], trial)
    assert ({"best_so_far_val_accuracy": pytest.approx(0.3)}, 1) in logged
    forecasts = [m for m, _ in logged if "forecast_remaining_s" in m]
    assert forecasts and all(m["forecast_remaining_s_low"] <= m["forecast_remaining_s_high"] for m in forecasts)
    final = monitor.close("interrupted")
    assert final.state == "interrupted" and read_live(tmp_path / PROGRESS_FILE).state == "interrupted"


def test_a_costly_estimate_comes_less_often_and_progress_json_keeps_its_counts_fresh(tmp_path, monkeypatch):
    monitor = _monitor(tmp_path, plan=_plan(planned_trials=50))
    monitor.estimate_share = 0.05
    estimates = []
    estimate = SweepProgress.snapshot

    def counted(self, *args, **kwargs):
        estimates.append(kwargs.get("estimate", True))
        return estimate(self, *args, **kwargs)

    monkeypatch.setattr(SweepProgress, "snapshot", counted)
    monitor.checked()
    for number in range(6):
        trial = _trial(f"t{number}")
        monitor.on_trial_start(0, [], trial)
        monitor.on_trial_result(0, [], trial, {"val_accuracy": 0.5, "epoch": 1, "epoch_time_s": 0.5})
        monitor.progress.estimate_cost_s = 3600.0  # an estimate costs an hour now: the next waits 20 hours
        trial.last_result = {"val_accuracy": 0.5, "epoch": 1}
        monitor.on_trial_complete(0, [], trial)
        monitor.on_step_end(0, [])
        live = read_live(tmp_path / PROGRESS_FILE)
        assert live.ended == number + 1 and len(live.trials) == number + 1  # written at every tick all the same
    assert estimates.count(True) == 2  # the checks' snapshot, then the first trial's epoch (no time left known)


def test_a_resumed_sweep_counts_the_trials_that_ended_before(tmp_path):
    monitor = _monitor(tmp_path)
    done = SimpleNamespace(trial_id="old", config={"lr": 1}, status="TERMINATED",
                           last_result={"val_accuracy": 0.9, "epoch": 4, "trial_finished": True})
    failed = SimpleNamespace(trial_id="err", config={}, status="ERROR", last_result={})
    monitor.on_step_end(0, [done, failed, _trial("new")])
    snap = monitor.snapshot
    assert (snap.completed, snap.failed, snap.best_trial_id) == (1, 1, "old")
    assert monitor.progress.trials["old"].values == [0.9] * 4


def test_json_view_writes_one_object_per_line_without_nan():
    stream = io.StringIO()
    view = JsonView(stream, interval_s=0)
    progress = SweepProgress("s", "val_accuracy", _plan(), started=0.0)
    progress.result("t", 1, float("nan"), 1.0)
    snap = progress.snapshot(now=5.0)
    view.start(HEADER)
    view.update(snap)
    view.trial_event(snap, snap.trials[0], "first_epoch")
    view.close(snap.with_state("finished"))
    events = [json.loads(line) for line in stream.getvalue().splitlines()]
    assert [e["event"] for e in events] == ["start", "progress", "trial", "end"]
    assert events[1]["trials"][0]["value"] is None and events[3]["state"] == "finished"
    assert "NaN" not in stream.getvalue()


def test_live_view_draws_the_running_trials_in_place():
    console = Console(record=True, width=160, force_terminal=True)
    view = LiveView(console, refresh_s=0)
    progress = SweepProgress("s", "val_accuracy", _plan(), started=0.0)
    for epoch, value in enumerate([0.3, 0.5, 0.6], start=1):
        progress.result("abc", epoch, value, 1.0)
    snap = progress.snapshot(now=9.0)
    view.start(HEADER)
    view.update(snap)
    view.close(snap.with_state("finished"))
    text = console.export_text()
    assert "abc" in text and "3/10" in text and "val_accuracy" in text and "sweep: 0/4 ended" in text


def test_durations_and_money_read_like_a_person_would_write_them():
    assert [duration(s) for s in (None, 4.4, 65, 3725)] == ["?", "4s", "1m05s", "1h02m"]
    assert [money(a) for a in (0, 0.0031, 0.25, 12.4)] == ["$0.00", "$0.0031", "$0.25", "$12.40"]


def test_status_reads_the_live_state_while_running_and_the_summary_after(tmp_path):
    from tests.conftest import hpo_cli

    runs = tmp_path / "runs"
    progress = SweepProgress("live", "val_accuracy", _plan(), started=time.time() - 30)
    progress.result("t1", 1, 0.4, 2.0)
    progress.result("t1", 2, 0.6, 2.0)
    (runs / "live").mkdir(parents=True)
    (runs / "live" / PROGRESS_FILE).write_text(json.dumps(progress.snapshot().to_dict()))
    shown = hpo_cli("status", "live", "--storage", str(runs), cwd=tmp_path)
    assert shown.returncode == 0, shown.stderr
    assert shown.stdout.startswith("live: running (updated ") and "  t1 epoch 2/10" in shown.stdout
    data = json.loads(hpo_cli("status", "live", "--storage", str(runs), "--json", cwd=tmp_path).stdout)
    assert data["state"] == "running" and data["running"] == 1 and data["trials"][0]["epoch"] == 2

    summary = {"name": "live", "status": "finished", "objective": {"metric": "val_accuracy", "mode": "max"},
               "best": {"trial_id": "t1", "metric": 0.6, "params": {}}, "wall_time_s": 31.0,
               "trials": [{"trial_id": "t1", "status": "completed"}]}
    (runs / "live" / "summary.json").write_text(json.dumps(summary))
    after = hpo_cli("status", "live", "--storage", str(runs), cwd=tmp_path)
    assert after.stdout.splitlines() == ["live: finished, 1 trials (1 completed)", "best: t1 val_accuracy=0.6000"]
    missing = hpo_cli("status", "nothing", "--storage", str(runs), cwd=tmp_path)
    assert missing.returncode == 2 and "no sweep 'nothing'" in missing.stderr


def test_a_trials_start_up_is_measured_and_a_cold_one_is_not_paid_by_pending_trials():
    progress = SweepProgress("s", "val_accuracy", _plan(planned_trials=3, max_concurrent=1), started=0.0)
    progress.start("a", now=0.0)
    for epoch, (value, at) in enumerate([(0.5, 12.0), (0.6, 13.0), (0.7, 14.0)], start=1):
        progress.result("a", epoch, value, 3.0 if epoch == 1 else 1.0, now=at)
    progress.end("a", "completed", now=14.0)
    assert progress.trials["a"].startup_s == 9.0  # first epoch reported at 12 s, having taken 3 s
    snap = progress.snapshot(now=14.0)
    # a, the first trial, started the workers; the two trials still to start reuse them: each pays at most
    # a's 2 s first-epoch extra (not its 9 s start-up) and about 3 epochs of 1 s
    assert 2 * 1 <= snap.remaining_s_median <= 2 * (2 + 10) and snap.remaining_s_median < 2 * (9 + 1)


def test_the_first_trials_start_cold_and_pending_trials_pay_a_warm_start():
    progress = SweepProgress("s", "val_accuracy", _plan(planned_trials=4, max_concurrent=1), started=0.0)
    for trial_id, begin, startup in (("a", 0.0, 20.0), ("b", 24.0, 0.5)):  # a starts the workers, b reuses them
        progress.start(trial_id, now=begin)
        for epoch in (1, 2, 3):
            progress.result(trial_id, epoch, 0.5, 1.0, now=begin + startup + epoch)
        progress.end(trial_id, "completed", now=begin + startup + 3)
    snap = progress.snapshot(now=27.5)
    # two trials to start, each 0.5 s on the warm workers and about 3 epochs of 1 s (not 20 s to start)
    assert 2 * (0.5 + 1) <= snap.remaining_s_median <= 2 * (0.5 + 10)


def test_the_kept_counts_best_history_and_lines_equal_a_rebuild_from_every_trial():
    import random

    rng = random.Random(5)
    progress = SweepProgress("s", "val_accuracy", _plan(planned_trials=80), started=0.0)
    clock = 0.0
    for step in range(600):
        clock += 1.0
        trial_id = f"t{rng.randrange(60):02d}"
        track = progress.trials.get(trial_id)
        roll = rng.random()
        if track is None or roll < 0.6:  # a result, now and then from a trial that ended already
            epoch = len(track.values) + 1 if track else 1
            value = rng.choice([rng.random(), rng.random(), float("nan"), 0.5])
            progress.result(trial_id, epoch, value, 1.0, now=clock)
        elif roll < 0.95 or track.ended is not None:
            progress.end(trial_id, rng.choice(["completed", "stopped_early", "failed", "diverged"]), now=clock)
        if step % 50 == 0:
            progress.snapshot(now=clock)
    kept = progress.snapshot(now=clock, estimate=False)
    history = progress.best_after_each_trial()
    progress._stale = True  # rebuilt from every trial, as after a trial reported again once it had ended
    rebuilt = progress.snapshot(now=clock, estimate=False)
    assert kept == rebuilt and progress.best_after_each_trial() == history
    scored = [(t.trial_id, max(v for v in t.values if v == v)) for t in progress.trials.values()
              if t.status in ("completed", "stopped_early", "running") and any(v == v for v in t.values)]
    best = max(scored, key=lambda item: item[1])  # the first of equals, in the order the trials started
    assert (kept.best_trial_id, kept.best_value) == best
    assert kept.ended == sum(t.status != "running" for t in progress.trials.values())
    ordered = sorted(progress.trials.values(), key=lambda t: (t.status != "running", t.started))
    assert [line.trial_id for line in kept.trials] == [t.trial_id for t in ordered]


def test_storage_watch_says_since_when_the_storage_is_down_and_which_trials_wait():
    from hpo.progress.monitor import SweepMonitor
    from hpo.progress.storage_watch import StorageWatch
    from hpo.progress.views import sweep_text

    answers = [None, OSError("AWS Error NETWORK_CONNECTION"), OSError("still down"), None]
    changes: list[float | None] = []

    def probe() -> None:
        answer = answers.pop(0)
        if answer is not None:
            raise answer

    watch = StorageWatch(probe, changes.append, every_s=3600)
    assert watch.check() is None
    down = watch.check()
    assert down is not None and watch.last_error == "AWS Error NETWORK_CONNECTION"
    assert watch.check() == down  # still down: since the first failed probe
    assert watch.check() is None
    assert changes == [down, None]

    from hpo.progress.live import Snapshot, TrialLine

    snapshot = Snapshot(name="s", state="running", time=down + 75, elapsed_s=100.0, metric="val_accuracy", mode="max",
                        max_epochs=8, planned=4, running=2, pending=2,
                        trials=(TrialLine("a", "running", 3, None, None, 10.0),
                                TrialLine("b", "running", 1, None, None, 5.0)))
    monitor = SweepMonitor.__new__(SweepMonitor)
    monitor.storage_watch, monitor.reported_at = watch, {"a": down - 10, "b": down + 5}
    watch.down_since = down
    shown = monitor._with_storage(snapshot)
    assert (shown.storage_down_since, shown.storage_waiting) == (down, 1)  # b reported after the outage began
    since = time.strftime("%H:%M:%S", time.localtime(down))
    assert f"storage unreachable since {since} (1m15s), 1 running trial waiting on it" in sweep_text(shown)
    watch.down_since = None
    assert "storage" not in sweep_text(monitor._with_storage(snapshot))


def test_a_sweep_on_a_simulated_clock_is_timed_on_it_and_its_snapshot_carries_the_wall_time():
    # A simulated sweep: 30 simulated seconds pass in no real time; elapsed, the trial's times and the journal
    # are on the simulated clock; the snapshot's time (what `hpo status` compares with files) is the wall's.
    events = []
    progress = SweepProgress("s", "val_accuracy", _plan(planned_trials=1, max_concurrent=1), started=1000.0)
    progress.recorder = events.append
    sim = [1000.0]
    progress.clock = lambda: sim[0]
    progress.start("a", {"units": 8})
    sim[0] = 1010.0
    progress.result("a", 1, 0.5, 10.0)
    sim[0] = 1030.0
    progress.result("a", 2, 0.6, 20.0)
    progress.end("a", "completed")
    snap = progress.snapshot(state="finished")
    assert snap.elapsed_s == 30.0 and abs(snap.time - time.time()) < 60
    assert (progress.trials["a"].started, progress.trials["a"].ended) == (1000.0, 1030.0)
    assert progress.trials["a"].startup_s == 0.0
    assert [e["t"] for e in events] == [1000.0, 1010.0, 1030.0, 1030.0]


def test_progress_json_says_no_trial_waits_the_moment_the_last_planned_trial_starts(tmp_path):
    monitor = _monitor(tmp_path)
    monitor.tick_s, monitor.last_tick = 3600.0, time.monotonic()  # no refresh writes it in this test's time
    for trial_id in "abc":
        monitor.on_trial_start(0, [], _trial(trial_id, lr=0.1))
    assert read_live(tmp_path / PROGRESS_FILE) is None  # one of the four planned trials still waits
    monitor.on_trial_start(0, [], _trial("d", lr=0.2))
    live = read_live(tmp_path / PROGRESS_FILE)
    assert live is not None and live.state == "running" and (live.pending, live.running) == (0, 4)
