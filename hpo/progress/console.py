"""Live progress of a sweep on the console: one line per finished trial."""

from __future__ import annotations

import time
from typing import Any

from ray.tune import Callback

from hpo.trial.protocol import trial_status


class ConsoleProgress(Callback):
    """Prints each trial's outcome as it ends (Tune's own reporter is turned off).

    Args:
        console: A ``rich.console.Console``.
        metric: The objective metric.
        planned: Number of trials the sweep plans to run.
    """

    def __init__(self, console: Any, metric: str, planned: int) -> None:
        self.console = console
        self.metric = metric
        self.planned = planned
        self.ended = 0
        self.started = time.time()

    def __getstate__(self) -> dict[str, Any]:
        # Tune pickles its callbacks with the experiment state; a console holds locks.
        return {**self.__dict__, "console": None}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__dict__.update(state)
        if self.console is None:
            from rich.console import Console

            self.console = Console()

    def _line(self, trial: Any, status: str, why: str = "") -> None:
        self.ended += 1
        last = trial.last_result or {}
        value = last.get(self.metric)
        shown = f"{value:.4f}" if isinstance(value, (int, float)) else "-"
        elapsed = time.time() - self.started
        self.console.print(
            f"[{self.ended}/{self.planned}] {trial.trial_id} {status:<14} epochs={last.get('epoch', 0):<3} "
            f"{self.metric}={shown}  ({elapsed:.0f}s){why}",
            highlight=False,
        )

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        """Prints a completed or scheduler-stopped trial."""
        self._line(trial, trial_status(trial.last_result, False).replace("_", " "))

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        """Prints a failed trial with the last line of its error."""
        self._line(trial, "failed", f"  {error_line(trial)}")


def error_line(trial: Any, limit: int = 300) -> str:
    """The last non-empty line of a Tune trial's error (its ``error.txt``), or '' if there is none."""
    try:
        with open(trial.error_file) as f:
            lines = [line.strip() for line in f if line.strip()]
    except (OSError, TypeError):
        return ""
    return lines[-1][:limit] if lines else ""
