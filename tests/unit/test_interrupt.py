"""Ctrl-C and SIGTERM handling around a sweep (hpo.interrupt) and the resume command the CLI prints."""

from __future__ import annotations

import os
import signal

import pytest

from hpo.cli.errors import resume_command
from hpo.errors import SweepInterrupted
from hpo.interrupt import Interruption, exit_code


def test_a_signal_before_tunes_loop_stops_at_once_and_is_remembered():
    before = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGTERM)}
    env = os.environ.get("TUNE_DISABLE_SIGINT_HANDLER")
    calls = []
    with pytest.raises(KeyboardInterrupt), Interruption(on_stop=lambda: calls.append("stop")) as interrupt:
        assert os.environ["TUNE_DISABLE_SIGINT_HANDLER"] == "1"
        os.kill(os.getpid(), signal.SIGTERM)
        signal.sigtimedwait([], 0.1)
    assert interrupt.signum == signal.SIGTERM and interrupt.count == 1 and calls == ["stop"]
    assert {sig: signal.getsignal(sig) for sig in before} == before  # handlers given back
    assert os.environ.get("TUNE_DISABLE_SIGINT_HANDLER") == env


def test_a_handler_left_by_an_earlier_tune_run_is_not_taken_for_a_running_loop():
    """Tune never removes its SIGUSR1 handler: a second sweep in the process must not call the first's."""
    from ray.tune import tune as tune_module

    saved = {sig: signal.getsignal(sig) for sig in (signal.SIGINT, signal.SIGUSR1)}
    try:
        stale = tune_module._setup_signal_catching()  # what an earlier Tuner.fit in this process left
        left = signal.getsignal(signal.SIGUSR1)
        with pytest.raises(KeyboardInterrupt), Interruption() as interrupt:
            os.kill(os.getpid(), signal.SIGINT)  # Ctrl-C in the checks, before this sweep's Tune loop
            signal.sigtimedwait([], 0.1)
        assert interrupt.signum == signal.SIGINT and not stale.is_set()
        assert signal.getsignal(signal.SIGUSR1) is left  # the caller's process as it was
    finally:
        for sig, handler in saved.items():
            signal.signal(sig, handler)


def test_the_first_signal_asks_tune_to_stop_and_the_second_raises():
    from ray.tune import tune as tune_module

    saved = signal.getsignal(signal.SIGUSR1)
    try:
        with Interruption() as interrupt:
            event = tune_module._setup_signal_catching()  # what Tuner.fit installs while its loop runs
            os.kill(os.getpid(), signal.SIGINT)
            signal.sigtimedwait([], 0.1)
            assert event.is_set() and interrupt.interrupted and interrupt.signum == signal.SIGINT
            with pytest.raises(KeyboardInterrupt):
                os.kill(os.getpid(), signal.SIGINT)
                signal.sigtimedwait([], 0.1)
            assert interrupt.count == 2
    finally:
        signal.signal(signal.SIGUSR1, saved)


def test_exit_codes_are_the_shells():
    assert exit_code(signal.SIGINT) == 130 and exit_code(signal.SIGTERM) == 143


def test_resume_command_repeats_the_tune_command_with_resume():
    stopped = SweepInterrupted(signal.SIGINT, "s", "/x/runs/s/summary.json")
    assert resume_command(["hpo", "tune", "my sweep.yaml", "--storage", "runs"], stopped) == (
        "hpo tune 'my sweep.yaml' --storage runs --resume")
    assert resume_command(["hpo", "tune", "s.yaml", "--overwrite"], stopped) == "hpo tune s.yaml --resume"
    assert resume_command(["hpo", "tune", "s.yaml", "--resume"], stopped) == "hpo tune s.yaml --resume"
    assert resume_command(["hpo", "repeat", "base", "--storage", "r"], stopped) == (
        "hpo tune /x/runs/s/sweep.yaml --resume --storage r")
