"""Progress of a sweep on the console, as plain lines (fit for a terminal, a CI log or a pipe).

A header when the sweep starts; a line for a trial's first epoch and then at most one every
``interval_s`` seconds, with the epoch, the metric, the trial's best and the Monte-Carlo estimate of its
length and time left (:func:`hpo.progress.estimate_trial`); one line per trial that ends.
"""

from __future__ import annotations

import math
import time
from dataclasses import dataclass
from typing import Any

from ray.tune import Callback

from hpo.progress.trial import estimate_trial
from hpo.trial.protocol import trial_status


class ConsoleProgress(Callback):
    """Prints each trial's outcome as it ends (Tune's own reporter is turned off).

    Args:
        console: A ``rich.console.Console``.
        metric: The objective metric.
        planned: Number of trials the sweep plans to run.
    """

    def __init__(
        self, console: Any, metric: str, planned: int, plan: EpochPlan | None = None, header: str = "",
        interval_s: float = 5.0,
    ) -> None:
        self.console = console
        self.metric = metric
        self.planned = planned
        self.plan = plan
        self.header = header
        self.interval_s = interval_s
        self.ended = 0
        self.started = time.time()
        self.last_line = 0.0
        self.history: dict[str, tuple[list[float], list[float]]] = {}

    def setup(self, **info: Any) -> None:
        """Prints the header as the sweep starts."""
        self.started = time.time()
        if self.header:
            self.console.print(self.header, highlight=False)

    def on_trial_result(self, iteration: int, trials: list, trial: Any, result: dict, **info: Any) -> None:
        """Prints a trial's first epoch, then at most one epoch line every ``interval_s`` seconds."""
        values, times = self.history.setdefault(trial.trial_id, ([], []))
        value = result.get(self.metric)
        values.append(float(value) if isinstance(value, (int, float)) else float("nan"))
        if isinstance(result.get("epoch_time_s"), (int, float)):
            times.append(float(result["epoch_time_s"]))
        now = time.time()
        if len(values) > 1 and now - self.last_line < self.interval_s:
            return
        self.last_line = now
        self.console.print(
            f"  {trial.trial_id} epoch {result.get('epoch', len(values))}{self._of_epochs()} "
            f"{self.metric}={_shown(value)} best={_shown(self._best(values))}{self._estimate(values, times)}  "
            f"({now - self.started:.0f}s)",
            highlight=False,
        )

    def _of_epochs(self) -> str:
        return f"/{self.plan.max_epochs}" if self.plan else ""

    def _best(self, values: list[float]) -> float | None:
        finite = [v for v in values if math.isfinite(v)]
        if not finite:
            return None
        return min(finite) if self.plan and self.plan.mode == "min" else max(finite)

    def _estimate(self, values: list[float], times: list[float]) -> str:
        """``, est. 7 epochs [5-9], 12s left [6-18]`` (``prior`` when there is too little to fit)."""
        if self.plan is None:
            return ""
        plan = self.plan
        est = estimate_trial(values, mode=plan.mode, patience=plan.patience, min_delta=plan.min_delta,
                             max_epochs=plan.max_epochs, epoch_seconds=times or None, goal=plan.goal, samples=200)
        text = f", est. {est.epochs_median} epochs [{est.epochs_low}-{est.epochs_high}]"
        if est.remaining_s_median is not None:
            text += (f", {est.remaining_s_median:.0f}s left [{est.remaining_s_low:.0f}-"
                     f"{est.remaining_s_high:.0f}]")
        return text + (" (prior)" if est.method == "prior" else "")

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
        elapsed = time.time() - self.started
        self.console.print(
            f"[{self.ended}/{self.planned}] {trial.trial_id} {status:<14} epochs={last.get('epoch', 0):<3} "
            f"{self.metric}={_shown(last.get(self.metric))}  ({elapsed:.0f}s){why}",
            highlight=False,
        )

    def on_trial_complete(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        """Prints a completed or scheduler-stopped trial."""
        self._line(trial, trial_status(trial.last_result, False).replace("_", " "))

    def on_trial_error(self, iteration: int, trials: list, trial: Any, **info: Any) -> None:
        """Prints a failed trial with the last line of its error."""
        self._line(trial, "failed", f"  {error_line(trial)}")


@dataclass(frozen=True)
class EpochPlan:
    """What the estimate of a trial's length needs from the sweep: its stopping rules."""

    mode: str
    patience: int
    min_delta: float
    max_epochs: int
    goal: float | None = None


def _shown(value: Any) -> str:
    return f"{value:.4f}" if isinstance(value, (int, float)) else "-"


def error_line(trial: Any, limit: int = 300) -> str:
    """The last non-empty line of a Tune trial's error (its ``error.txt``), or '' if there is none."""
    try:
        with open(trial.error_file) as f:
            lines = [line.strip() for line in f if line.strip()]
    except (OSError, TypeError):
        return ""
    return lines[-1][:limit] if lines else ""
