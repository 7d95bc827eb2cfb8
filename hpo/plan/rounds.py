"""How good were the plans: each round of a sweep run to a deadline, its predicted and its real wall time.

A sweep run with ``--deadline`` appends one line per run of its driver (a round: a first run, a resumed one,
a run again under ``--overwrite``) to ``STATE/NAME/plan_rounds.jsonl``: the prediction made at its start (the
plan from its earlier round, or where there was none the first Monte-Carlo forecast of its own run), its
deadline, and when it ended. ``hpo report`` shows them as a table (:func:`read_rounds`). Wall times count
from the command's start; a round's end is its progress journal's ``exit`` event (the command's end) where
the journal still holds it, else its summary's write. Pure Python: no Ray.
"""

from __future__ import annotations

import json
import logging
from dataclasses import asdict, dataclass
from pathlib import Path

from hpo.progress.journal import EVENTS_FILE, read_events, segments

logger = logging.getLogger(__name__)

#: The rounds, in the sweep's state directory (kept across ``--overwrite``: hpo writes it, only appends).
ROUNDS_FILE = "plan_rounds.jsonl"


@dataclass(frozen=True)
class Round:
    """One run of a sweep to a deadline.

    Attributes:
        started_at: The command's start (Unix time).
        sweep_started_at: The sweep's start in its journal (Unix time), which names its journal segment.
        source: ``plan`` (planned from the earlier round) or ``forecast`` (the run's own first forecast).
        wall_s_median: The predicted wall time (median), from the command's start.
        wall_s_low: Its 10th percentile.
        wall_s_high: Its 90th percentile.
        ended_at: When the run ended (its summary's write; Unix time).
        deadline_at: Its deadline (Unix time).
        status: ``finished`` or ``interrupted``.
    """

    started_at: float
    sweep_started_at: float
    source: str
    wall_s_median: float
    wall_s_low: float
    wall_s_high: float
    ended_at: float
    deadline_at: float
    status: str = "finished"

    @property
    def wall_s(self) -> float:
        """The real wall time: from the command's start to its end."""
        return self.ended_at - self.started_at

    @property
    def error(self) -> float:
        """Predicted over real, less one (+0.10: the prediction was 10 % too long)."""
        return self.wall_s_median / self.wall_s - 1 if self.wall_s > 0 else float("nan")

    @property
    def inside(self) -> bool:
        """Whether the real wall time fell inside the prediction's 80 % interval."""
        return self.wall_s_low <= self.wall_s <= self.wall_s_high

    @property
    def met(self) -> bool:
        """Whether the run ended by its deadline."""
        return self.ended_at <= self.deadline_at


def record_round(directory: Path, entry: Round) -> None:
    """Appends a round to the sweep's :data:`ROUNDS_FILE` (a write that fails is logged, not raised)."""
    try:
        directory.mkdir(parents=True, exist_ok=True)
        with (directory / ROUNDS_FILE).open("a") as handle:
            handle.write(json.dumps(asdict(entry)) + "\n")
    except OSError as exc:
        logger.warning("%s not written: %s", directory / ROUNDS_FILE, exc)


def read_rounds(directory: Path) -> list[Round]:
    """The sweep's rounds, oldest first, each ended at its command's end where its journal says when."""
    path = directory / ROUNDS_FILE
    if not path.is_file():
        return []
    exits = _exits(directory / EVENTS_FILE)
    rounds = []
    for line in path.read_text().splitlines():
        try:
            data = json.loads(line)
            entry = Round(**{k: data[k] for k in Round.__dataclass_fields__ if k in data})
        except (ValueError, TypeError):
            continue  # a line cut short by a crash, or of another shape
        end = exits.get(round(entry.sweep_started_at, 3))
        if end is not None and end >= entry.ended_at:
            entry = Round(**{**asdict(entry), "ended_at": end})
        rounds.append(entry)
    return sorted(rounds, key=lambda r: r.started_at)


def _exits(journal: Path) -> dict[float, float]:
    """The journal's segments' start → their ``exit`` event's time (segments with one only)."""
    if not journal.is_file():
        return {}
    out = {}
    for segment in segments(read_events(journal)):
        ends = [e["t"] for e in segment if e.get("event") == "exit"]
        if ends:
            out[round(segment[0]["t"], 3)] = ends[-1]
    return out
