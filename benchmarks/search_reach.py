"""Which cells of the search benchmark any method, of every run recorded, reaches B on within the target.

The search benchmark's first figure is the median over seeds of epochs to random + FIFO's final best B, as a
share of the budget, with a target of at most 0.25 on every table (task × trials at once: a cell). This reads
every ``search_peers`` result in ``benchmarks/results/`` whose answers are the surrogate's with the neighbours'
clip (the answers of every run since it came in; earlier files are left out, their answers differ), and for each
cell lists every method any of them ran there over at least ``--min-seeds`` seeds (20), hpo's settings and peers
alike: its median, the median's 95 % interval (bootstrap, as the result file has it) and the seeds. It writes,
per cell, the lowest median and who had it, and the present defaults' median, then counts the cells where the
present defaults, and where any method, meet the target, and the cells where every method's interval lies above
it (no method can be said to reach it even within the noise); per method, the cells it ran and met the target
on, each cell read from the method's run over the most seeds. A cell's lowest median is the lowest over every
run, so "no method meets it" is said of the most favourable reading.

The present defaults' column is the one whose setting is theirs: ``hpo`` in a file run with them, or the
``--variants`` column of the same setting in a file run with the defaults before.

``python benchmarks/search_reach.py`` → ``benchmarks/results/search_reach.json``.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

from _report import write_report

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
#: The epochs-to-B target, a share of the budget.
TARGET = 0.25
#: The present defaults' search keys, as a file's ``hpo_defaults`` or a ``--variants`` column names them.
PRESENT = {"random_fraction": 0.5, "random_after": 60}
#: Result files whose ``hpo`` column is not TPE (recorded before ``hpo_defaults`` named the searcher): the round
#: that ran random search as the default searcher (docs/search-benchmark.md, "hpo's default searcher, screened
#: again under the neighbours' clip"). Every other file's ``hpo`` column is TPE + ASHA with the defaults then.
HPO_COLUMN = {name: "hpo (random + ASHA, the round's candidate)" for name in (
    "search_peers_heldout_random_default.json", "search_peers_heldout_random_default_quantiles_mlp.json",
    "search_peers_heldout_random_default_synth_linear.json")}


@dataclass(frozen=True)
class Entry:
    """One method's epochs to B on one cell, in one result file."""

    file: str
    method: str
    seeds: int
    ratio_median: float | None
    ci95: tuple[float | None, float | None]
    at_or_under_target: int


def present_column(result: dict[str, Any]) -> str | None:
    """The method column of ``result`` that ran the present defaults, or None."""
    defaults = result.get("hpo_defaults", {})
    if all(defaults.get(k) == v for k, v in PRESENT.items()):
        return "hpo"
    for variant in filter(None, (result.get("variants") or "").split(";")):
        label, _, keys = variant.partition(":")
        values = dict(pair.split("=", 1) for pair in keys.split(","))
        if (values.keys() == {f"search.{k}" for k in PRESENT}
                and all(float(values[f"search.{k}"]) == v for k, v in PRESENT.items())):
            return label
    return None


def entries(result: dict[str, Any], name: str) -> dict[tuple[str, str], list[Entry]]:
    """Every method's entry on every cell of one result file."""
    out: dict[tuple[str, str], list[Entry]] = {}
    present = present_column(result)
    for task, table in result.get("tasks", {}).items():
        for concurrency, cell in table.get("by_concurrency", {}).items():
            for method, row in cell["methods"].items():
                ratios = [s.get("ratio") for s in row.get("per_seed", {}).values()]
                low, high = row.get("ratio_median_ci95") or (None, None)
                label = ("present defaults" if method == present
                         else HPO_COLUMN.get(name, "hpo (earlier defaults)") if method == "hpo" else method)
                out.setdefault((task, concurrency), []).append(Entry(
                    file=name, method=label,
                    seeds=int(row["seeds"]), ratio_median=row.get("ratio_median"), ci95=(low, high),
                    at_or_under_target=sum(r is not None and r <= TARGET for r in ratios)))
    return out


def slowest_first(ratio_median: float | None) -> float:
    """A median as a number to sort and compare: one that never reached B is the slowest."""
    return float("inf") if ratio_median is None else ratio_median


def by_method(rows: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """Per method: the cells it ran, and those where it meets the target, each cell read from its run over the
    most seeds (of equal ones, the lowest median)."""
    ratios: dict[str, dict[str, float]] = {}
    for row in rows:
        cell = f"{row['task']} x{row['concurrency']}"
        for method in dict.fromkeys(e["method"] for e in row["methods"]):
            # a row's entries are sorted by median: max keeps the lowest of those over the most seeds
            kept = max((e for e in row["methods"] if e["method"] == method), key=lambda e: e["seeds"])
            ratios.setdefault(method, {})[cell] = slowest_first(kept["ratio_median"])
    return {method: {"cells": len(cells), "at_or_under_target": sum(r <= TARGET for r in cells.values()),
                     "missed": sorted(c for c, r in cells.items() if r > TARGET)}
            for method, cells in sorted(ratios.items(), key=lambda m: -sum(r <= TARGET for r in m[1].values()))}


def reach(paths: list[Path], min_seeds: int) -> dict[str, Any]:
    """The report over the result files ``paths``, of the entries with at least ``min_seeds`` seeds."""
    cells: dict[tuple[str, str], list[Entry]] = {}
    used = []
    for path in paths:
        result = json.loads(path.read_text())
        if result.get("benchmark") != "search_peers" or result.get("noise_clip") != "neighbours":
            continue
        used.append(path.name)
        for key, found in entries(result, path.name).items():
            cells.setdefault(key, []).extend(e for e in found if e.seeds >= min_seeds)
    rows = []
    for (task, concurrency), found in sorted(cells.items()):
        # merged files repeat the columns they were merged from: one entry each
        unique: dict[tuple[Any, ...], Entry] = {}
        for e in found:
            unique.setdefault((e.method, e.seeds, e.ratio_median, e.ci95), e)
        found = sorted(unique.values(), key=lambda e: slowest_first(e.ratio_median))
        best = found[0]
        present = [e for e in found if e.method == "present defaults"]
        rows.append({
            "task": task, "concurrency": int(concurrency),
            "best": asdict(best),
            "present_defaults": asdict(max(present, key=lambda e: e.seeds)) if present else None,
            "any_at_or_under_target": slowest_first(best.ratio_median) <= TARGET,
            # every method's interval above the target: none reaches it even within the noise
            "every_interval_above_target": all(e.ci95[0] is not None and e.ci95[0] > TARGET for e in found),
            "methods": [asdict(e) for e in found],
        })
    ran = [r for r in rows if r["present_defaults"]]
    return {
        "benchmark": "search_reach",
        "target": TARGET,
        "min_seeds": min_seeds,
        "files": used,
        "cells": len(rows),
        "cells_with_present_defaults": len(ran),
        "present_defaults_at_or_under_target": sum(
            slowest_first(r["present_defaults"]["ratio_median"]) <= TARGET for r in ran),
        "any_method_at_or_under_target": sum(r["any_at_or_under_target"] for r in rows),
        "no_method_at_or_under_target": [f"{r['task']} x{r['concurrency']}" for r in rows
                                         if not r["any_at_or_under_target"]],
        "every_interval_above_target": [f"{r['task']} x{r['concurrency']}" for r in rows
                                        if r["every_interval_above_target"]],
        "by_method": by_method(rows),
        "by_cell": rows,
    }


def main() -> None:
    """Reads the result files and writes the report."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--results", nargs="*", type=Path, default=None,
                        help="result files (default: every search_*.json in benchmarks/results/)")
    parser.add_argument("--min-seeds", type=int, default=20,
                        help="leave out entries over fewer seeds (a median over 10 seeds is too noisy to count)")
    parser.add_argument("--out", default=str(RESULTS / "search_reach.json"))
    args = parser.parse_args()
    paths = args.results or sorted(p for p in RESULTS.glob("search_*.json") if p.name != Path(args.out).name)
    write_report(reach(paths, args.min_seeds), args.out)


if __name__ == "__main__":
    main()
