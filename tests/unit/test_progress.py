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
