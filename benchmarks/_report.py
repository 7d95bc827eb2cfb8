"""Shared by the benchmark scripts: write a result as JSON under benchmarks/results/ and print it."""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any


def write_report(report: dict[str, Any], out: str | Path) -> None:
    """Writes ``report`` to ``out`` (creating its folder) and prints it."""
    path = Path(out)
    path.parent.mkdir(parents=True, exist_ok=True)
    text = json.dumps(report, indent=2)
    path.write_text(text)
    print(text)


def finite(value: float) -> float | None:
    """``value`` rounded, or None for infinity (a seed, or a median over seeds, that never reached B)."""
    return None if math.isinf(value) else round(value, 4)
