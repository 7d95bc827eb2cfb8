"""Three ways to show a running sweep: plain lines, a live terminal/notebook view, JSON lines.

Every view gets the same :class:`~hpo.progress.live.Snapshot`s from the monitor and decides itself how
often to show one: :class:`PlainView` (a pipe, a CI log: lines, no escape codes, at most one status block
every ``interval_s``), :class:`LiveView` (``rich.live`` on a terminal or in Jupyter: redrawn in place),
:class:`JsonView` (``--json-progress``: one JSON object per update on stdout).
"""

from __future__ import annotations

import json
import math
import sys
import time
from dataclasses import dataclass
from typing import Any, Protocol, TextIO

from hpo.progress.deadline import clock_time
from hpo.progress.live import Snapshot, TrialLine


@dataclass(frozen=True)
class Header:
    """What a sweep is and where to watch it (shown once, when it starts).

    Attributes:
        name: The sweep.
        description: ``8 trials × 2 workers, optuna-tpe + asha, up to 8 epochs each``.
        mlflow: The command or URL that shows its MLflow runs.
        study: The optuna-dashboard command for its study ('' for grid search).
        currency: Shown before costs.
    """

    name: str
    description: str
    mlflow: str
    study: str = ""
    currency: str = "$"

    def lines(self) -> list[str]:
        """The header as plain lines."""
        out = [f"sweep {self.name}: {self.description}", f"  MLflow: {self.mlflow}"]
        if self.study:
            out.append(f"  study:  {self.study}")
        return out


class View(Protocol):
    """What the monitor calls; each view throttles itself."""

    def start(self, header: Header) -> None:
        """The sweep starts."""
        ...

    def update(self, snapshot: Snapshot) -> None:
        """A new snapshot (about every second)."""
        ...

    def trial_event(self, snapshot: Snapshot, trial: TrialLine, event: str, detail: str = "") -> None:
        """``first_epoch`` or ``ended`` (``detail``: a failed trial's error line)."""
        ...

    def note(self, snapshot: Snapshot, text: str) -> None:
        """A line about the sweep said once (``p_meet`` fell below 0.5 for its deadline)."""
        ...

    def close(self, snapshot: Snapshot) -> None:
        """The sweep ended (``snapshot.state``: finished or interrupted)."""
        ...


def duration(seconds: float | None) -> str:
    """``45s``, ``3m05s``, ``2h10m`` (``?`` for None)."""
    if seconds is None or not math.isfinite(seconds):
        return "?"
    seconds = max(0, round(seconds))
    if seconds < 60:
        return f"{seconds}s"
    if seconds < 3600:
        return f"{seconds // 60}m{seconds % 60:02d}s"
    return f"{seconds // 3600}h{seconds % 3600 // 60:02d}m"


def money(amount: float, currency: str = "$") -> str:
    """``$12.40``; small amounts keep two significant digits (``$0.0031``)."""
    if amount == 0 or abs(amount) >= 1:
        return f"{currency}{amount:.2f}"
    return f"{currency}{amount:.{max(2, 1 - math.floor(math.log10(abs(amount))))}f}"


def number(value: Any) -> str:
    """A metric value with four decimals, or ``-``."""
    return f"{value:.4f}" if isinstance(value, (int, float)) and math.isfinite(value) else "-"


def trial_text(snapshot: Snapshot, trial: TrialLine) -> str:
    """``abc123 epoch 5/8 val_accuracy=0.8807 best=0.8807, est. 8 epochs [7-8], 6s left [4-9]  (14s)``."""
    text = (f"{trial.trial_id} epoch {trial.epoch}/{snapshot.max_epochs} {snapshot.metric}={number(trial.value)} "
            f"best={number(trial.best)}")
    if trial.epochs_median is not None:
        text += f", est. {trial.epochs_median} epochs [{trial.epochs_low}-{trial.epochs_high}]"
        if trial.remaining_s_median is not None:
            text += (f", {trial.remaining_s_median:.0f}s left [{trial.remaining_s_low:.0f}-"
                     f"{trial.remaining_s_high:.0f}]")
        if trial.method == "prior":
            text += " (prior)"
    return f"{text}  ({snapshot.elapsed_s:.0f}s)"


def sweep_text(snapshot: Snapshot, currency: str = "$") -> str:
    """One line: counts, time, cost, speed and the best trial so far."""
    s = snapshot
    interrupted = f", {s.interrupted} interrupted" if s.interrupted else ""
    parts = [f"{s.ended}/{s.planned} ended ({s.completed} completed, {s.stopped_early} stopped early, "
             f"{s.failed + s.diverged} failed/diverged{interrupted}), {s.running} running, {s.pending} pending"]
    if s.storage_down_since is not None:
        since = time.strftime("%H:%M:%S", time.localtime(s.storage_down_since))
        parts.append(f"storage unreachable since {since} ({duration(s.time - s.storage_down_since)}), "
                     f"{s.storage_waiting} running trial{'s' if s.storage_waiting != 1 else ''} waiting on it")
    if s.resources_waiting_since is not None:
        since = time.strftime("%H:%M:%S", time.localtime(s.resources_waiting_since))
        why = f" ({s.resources_note})" if s.resources_note else ""
        parts.append(f"waiting for resources since {since}{why} ({duration(s.time - s.resources_waiting_since)}), "
                     f"{s.resources_waiting} placement group{'s' if s.resources_waiting != 1 else ''} unplaced")
    left = (f"~{duration(s.remaining_s_median)} left [{duration(s.remaining_s_low)}-{duration(s.remaining_s_high)}]"
            if s.remaining_s_median is not None else "time left: after the first timed epochs")
    if s.method == "prior" and s.remaining_s_median is not None:
        left += " (prior)"
    if s.resources_waiting_since is not None and s.remaining_s_median is not None:
        left += " once placed"  # the estimate counts training time; the wait comes on top
    if s.p_meet is not None and s.deadline_at is not None:
        left += f", p_meet {s.p_meet:.2f} for {clock_time(s.deadline_at)}"
    parts.append(f"{duration(s.elapsed_s)} elapsed, {left}")
    if s.cost_spent is not None:
        cost = f"cost {money(s.cost_spent, currency)} so far"
        if s.cost_total_median is not None:
            cost += (f", ~{money(s.cost_total_median, currency)} in all "
                     f"[{money(s.cost_total_low, currency)}-{money(s.cost_total_high, currency)}]")
        parts.append(cost)
    speed = f"{s.epochs_per_min:.1f} epochs/min"
    if s.samples_per_s is not None:
        speed += f", {s.samples_per_s:.0f} samples/s"
    parts.append(speed)
    if s.best_trial_id is not None:
        parts.append(f"best {s.metric}={number(s.best_value)} ({s.best_trial_id})")
    return "sweep: " + " | ".join(parts)


def ended_text(snapshot: Snapshot, trial: TrialLine, detail: str = "") -> str:
    """``[3/8] abc123 stopped early  epochs=2   val_accuracy=0.6012  (41s)``."""
    status = trial.status.replace("_", " ")
    text = (f"[{snapshot.ended}/{snapshot.planned}] {trial.trial_id} {status:<14} epochs={trial.epoch:<3} "
            f"{snapshot.metric}={number(trial.best)}  ({snapshot.elapsed_s:.0f}s)")
    return f"{text}  {detail}" if detail else text


class PlainView:
    """Plain lines for a pipe or a CI log: no escape codes, at most one status block every ``interval_s``.

    A trial's first epoch and its end are printed when they happen; every ``interval_s`` the sweep line
    and the running trials that trained an epoch since the last block, and at once when the sweep's first
    estimate of the time left exists.
    """

    def __init__(self, console: Any, interval_s: float = 5.0, currency: str = "$") -> None:
        self.console = console
        self.interval_s = interval_s
        self.currency = currency
        self.last = 0.0
        self.shown: dict[str, int] = {}
        self.estimated = False

    def _print(self, text: str) -> None:
        self.console.print(text, highlight=False, markup=False, soft_wrap=True)

    def start(self, header: Header) -> None:
        """Prints the header."""
        self.currency = header.currency
        for line in header.lines():
            self._print(line)

    def update(self, snapshot: Snapshot) -> None:
        """Prints the sweep line and changed running trials, if ``interval_s`` has passed."""
        now = time.monotonic()
        first_estimate = not self.estimated and snapshot.remaining_s_median is not None
        if (now - self.last < self.interval_s and not first_estimate) or snapshot.ended + snapshot.running == 0:
            return
        self.last = now
        self.estimated = self.estimated or snapshot.remaining_s_median is not None
        for trial in snapshot.trials:
            if trial.status == "running" and trial.epoch > self.shown.get(trial.trial_id, 0):
                self.shown[trial.trial_id] = trial.epoch
                self._print("  " + trial_text(snapshot, trial))
        self._print(sweep_text(snapshot, self.currency))

    def trial_event(self, snapshot: Snapshot, trial: TrialLine, event: str, detail: str = "") -> None:
        """Prints a trial's first epoch or its end at once."""
        if event == "first_epoch":
            self.shown[trial.trial_id] = trial.epoch
            self._print("  " + trial_text(snapshot, trial))
        else:
            self._print(ended_text(snapshot, trial, detail))

    def note(self, snapshot: Snapshot, text: str) -> None:
        """Prints the line at once."""
        self._print(text)

    def close(self, snapshot: Snapshot) -> None:
        """Prints the last sweep line."""
        self._print(sweep_text(snapshot, self.currency))


class LiveView:
    """A view redrawn in place (``rich.live``) on a terminal or in a notebook; trial ends scroll above it."""

    def __init__(self, console: Any, refresh_s: float = 1.0, currency: str = "$") -> None:
        self.console = console
        self.refresh_s = refresh_s
        self.currency = currency
        self.header: Header | None = None
        self.live: Any = None
        self.last = 0.0

    def start(self, header: Header) -> None:
        """Prints the header and starts the live area."""
        from rich.live import Live

        self.header = header
        self.currency = header.currency
        for line in header.lines():
            self.console.print(line, highlight=False, markup=False, soft_wrap=True)
        self.live = Live(console=self.console, auto_refresh=False, transient=False, redirect_stdout=False,
                         redirect_stderr=False)
        self.live.start()

    def render(self, snapshot: Snapshot) -> Any:
        """The live area: the running trials' table and the sweep line."""
        from rich.console import Group
        from rich.table import Table
        from rich.text import Text

        table = Table(box=None, pad_edge=False, header_style="bold")
        for column in ("trial", "epoch", "projected", snapshot.metric, "best", "elapsed", "left", "done"):
            table.add_column(column, justify="left" if column == "trial" else "right")
        for t in snapshot.trials:
            if t.status != "running":
                continue
            projected = "-" if t.epochs_median is None else f"{t.epochs_median} [{t.epochs_low}-{t.epochs_high}]"
            if t.method == "prior":
                projected += " prior"
            left = ("-" if t.remaining_s_median is None else
                    f"{duration(t.remaining_s_median)} [{duration(t.remaining_s_low)}-{duration(t.remaining_s_high)}]")
            done = "-" if t.percent_done is None else f"{t.percent_done:.0f}%"
            table.add_row(t.trial_id, f"{t.epoch}/{snapshot.max_epochs}", projected, number(t.value), number(t.best),
                          duration(t.elapsed_s), left, done)
        return Group(table, Text(sweep_text(snapshot, self.currency)))

    def update(self, snapshot: Snapshot) -> None:
        """Redraws the live area (at most every ``refresh_s``)."""
        now = time.monotonic()
        if self.live is None or now - self.last < self.refresh_s:
            return
        self.last = now
        self.live.update(self.render(snapshot), refresh=True)

    def trial_event(self, snapshot: Snapshot, trial: TrialLine, event: str, detail: str = "") -> None:
        """A trial's end scrolls above the live area."""
        if event == "ended" and self.live is not None:
            self.live.console.print(ended_text(snapshot, trial, detail), highlight=False, markup=False)
            self.last = 0.0
            self.update(snapshot)

    def note(self, snapshot: Snapshot, text: str) -> None:
        """The line scrolls above the live area."""
        if self.live is not None:
            self.live.console.print(text, highlight=False, markup=False)
            self.last = 0.0
            self.update(snapshot)
        else:
            self.console.print(text, highlight=False, markup=False)

    def close(self, snapshot: Snapshot) -> None:
        """Draws the last state and leaves it on screen."""
        if self.live is not None:
            self.live.update(self.render(snapshot), refresh=True)
            self.live.stop()
            self.live = None


class JsonView:
    """``--json-progress``: one JSON object per line on stdout (``event``: start, progress, trial, end)."""

    def __init__(self, stream: TextIO | None = None, interval_s: float = 2.0) -> None:
        self.stream = stream
        self.interval_s = interval_s
        self.last = 0.0

    def _emit(self, data: dict[str, Any]) -> None:
        stream = self.stream or sys.stdout
        stream.write(json.dumps(data, default=str, allow_nan=False) + "\n")
        stream.flush()

    def start(self, header: Header) -> None:
        """``{"event": "start", "name", "description", "mlflow", "study"}``."""
        self._emit({"event": "start", "name": header.name, "description": header.description,
                    "mlflow": header.mlflow, "study": header.study})

    def update(self, snapshot: Snapshot) -> None:
        """``{"event": "progress", ...snapshot}`` at most every ``interval_s``."""
        now = time.monotonic()
        if now - self.last < self.interval_s:
            return
        self.last = now
        self._emit({"event": "progress", **_json_safe(snapshot.to_dict())})

    def trial_event(self, snapshot: Snapshot, trial: TrialLine, event: str, detail: str = "") -> None:
        """``{"event": "trial", "kind": "first_epoch" | "ended", "trial": {...}}``."""
        from dataclasses import asdict

        self._emit(_json_safe({"event": "trial", "kind": event, "trial": asdict(trial), "detail": detail}))

    def note(self, snapshot: Snapshot, text: str) -> None:
        """``{"event": "note", "text"}``."""
        self._emit({"event": "note", "text": text})

    def close(self, snapshot: Snapshot) -> None:
        """``{"event": "end", ...snapshot}``."""
        self._emit({"event": "end", **_json_safe(snapshot.to_dict())})


def _json_safe(data: Any) -> Any:
    """NaN and inf as null (JSON has neither)."""
    if isinstance(data, float) and not math.isfinite(data):
        return None
    if isinstance(data, dict):
        return {k: _json_safe(v) for k, v in data.items()}
    if isinstance(data, (list, tuple)):
        return [_json_safe(v) for v in data]
    return data
