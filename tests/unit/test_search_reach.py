"""``benchmarks/search_reach.py``: which cells any recorded method reaches B on within the target."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tests.conftest import benchmark_script

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    return benchmark_script("benchmarks/search_reach.py", "search_reach")


def _method(ratios: list[float | None], median: float | None, ci: list[float | None]) -> dict:
    return {"seeds": len(ratios), "ratio_median": median, "ratio_median_ci95": ci,
            "per_seed": {str(s): {"ratio": r} for s, r in enumerate(ratios)}}


def _result(path: Path, defaults: dict, variants: str, methods: dict, clip: str = "neighbours") -> Path:
    path.write_text(json.dumps({"benchmark": "search_peers", "noise_clip": clip, "hpo_defaults": defaults,
                                "variants": variants, "tasks": {"t": {"by_concurrency": {"2": {"methods": methods}}}}}))
    return path


def test_the_present_defaults_are_found_as_hpo_or_as_their_variant_column(bench):
    assert bench.present_column({"hpo_defaults": {"random_fraction": 0.5, "random_after": 60}}) == "hpo"
    before = {"hpo_defaults": {"random_fraction": 0.0}, "variants": "rf50a90:search.random_fraction=0.5,"
              "search.random_after=90;rf50a60:search.random_fraction=0.5,search.random_after=60"}
    assert bench.present_column(before) == "rf50a60"
    other = {"hpo_defaults": {"random_fraction": 0.0}, "variants": "rf50:search.random_fraction=0.5"}
    assert bench.present_column(other) is None


def test_cells_count_the_lowest_median_of_any_method_and_leave_out_few_seeds_and_other_answers(bench, tmp_path):
    twenty = [0.1] * 12 + [0.5] * 8
    files = [
        _result(tmp_path / "search_a.json", {"random_fraction": 0.0}, "new:search.random_fraction=0.5,"
                "search.random_after=60", {"hpo": _method([0.4] * 20, 0.4, [0.3, 0.5]),
                                           "new": _method([0.3] * 20, 0.3, [0.26, 0.35])}),
        _result(tmp_path / "search_b.json", {"random_fraction": 0.0}, "",
                {"peer": _method(twenty, 0.1, [0.1, 0.5]), "lucky": _method([0.01] * 10, 0.01, [0.0, 0.1])}),
        _result(tmp_path / "search_c.json", {}, "", {"old_clip": _method([0.0] * 20, 0.0, [0.0, 0.0])}, clip="table"),
    ]
    report = bench.reach(files, min_seeds=20)
    assert report["files"] == ["search_a.json", "search_b.json"]
    [cell] = report["by_cell"]
    assert cell["best"]["method"] == "peer" and cell["best"]["at_or_under_target"] == 12
    assert cell["present_defaults"]["ratio_median"] == 0.3
    assert [m["method"] for m in cell["methods"]] == ["peer", "present defaults", "hpo (earlier defaults)"]
    assert (report["present_defaults_at_or_under_target"], report["any_method_at_or_under_target"]) == (0, 1)
    assert report["every_interval_above_target"] == []
    assert report["by_method"]["present defaults"] == {"cells": 1, "at_or_under_target": 0, "missed": ["t x2"]}
    everything = bench.reach(files, min_seeds=1)
    assert everything["by_cell"][0]["best"]["method"] == "lucky"  # 10 seeds count only when asked
    without_peer = bench.reach(files[:1], min_seeds=20)
    assert without_peer["no_method_at_or_under_target"] == without_peer["every_interval_above_target"] == ["t x2"]
