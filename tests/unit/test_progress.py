"""The console line of a failed trial carries the last line of its error."""

from __future__ import annotations

from types import SimpleNamespace

from rich.console import Console

from hpo.progress.console import ConsoleProgress, error_line


def test_failed_trial_line_shows_why(tmp_path):
    error = tmp_path / "error.txt"
    error.write_text("Traceback (most recent call last):\n  File x\nRuntimeError: broken on purpose\n\n")
    trial = SimpleNamespace(trial_id="abc123", last_result={}, error_file=str(error))
    console = Console(record=True, width=200)
    ConsoleProgress(console, "val_accuracy", planned=3).on_trial_error(0, [], trial)
    line = console.export_text().strip()
    assert line.startswith("[1/3] abc123 failed")
    assert line.endswith("RuntimeError: broken on purpose")


def test_no_error_file_gives_nothing(tmp_path):
    assert error_line(SimpleNamespace(error_file=str(tmp_path / "missing"))) == ""
    assert error_line(SimpleNamespace(error_file=None)) == ""


def test_epoch_lines_come_from_the_first_epoch_on_with_an_estimate_then_at_most_every_interval(monkeypatch):
    from hpo.progress import console as progress

    clock = iter([0.0, 100.0, 100.0, 101.0, 102.0, 107.0])  # init, setup, then one per epoch
    monkeypatch.setattr(progress.time, "time", lambda: next(clock))
    console = Console(record=True, width=300)
    plan = progress.EpochPlan(mode="max", patience=2, min_delta=0.0, max_epochs=10)
    callback = ConsoleProgress(console, "val_accuracy", planned=4, plan=plan, header="sweep s: 4 trials", interval_s=5)
    callback.setup()  # t=100
    trial = SimpleNamespace(trial_id="t1", last_result={})
    for epoch, value in enumerate([0.5, 0.6, 0.7, 0.75], start=1):
        callback.on_trial_result(0, [], trial, {"val_accuracy": value, "epoch": epoch, "epoch_time_s": 1.0})
    lines = console.export_text().strip().splitlines()
    assert lines[0] == "sweep s: 4 trials"
    # epoch 1 at t=100 (first), epoch 2 at 101 and 3 at 102 skipped (within 5 s), epoch 4 at 107 shown
    assert [line.split()[2] for line in lines[1:]] == ["1/10", "4/10"]
    assert "val_accuracy=0.5000 best=0.5000, est. " in lines[1] and "(prior)" in lines[1]
    assert "val_accuracy=0.7500 best=0.7500, est. " in lines[2] and "s left [" in lines[2] and lines[2].endswith("(7s)")
    low, high = lines[2].split("epochs [")[1].split("]")[0].split("-")
    assert 4 <= int(low) <= int(high) <= 10


def test_epoch_lines_without_a_plan_or_a_metric_still_print():
    console = Console(record=True, width=200)
    callback = ConsoleProgress(console, "val_loss", planned=1)
    callback.on_trial_result(0, [], SimpleNamespace(trial_id="t2", last_result={}), {"epoch": 1})
    assert console.export_text().strip().startswith("t2 epoch 1 val_loss=- best=-")
