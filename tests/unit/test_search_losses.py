"""``benchmarks/search_losses.py``: where a method is behind a peer beyond the noise, at each budget."""

from __future__ import annotations

from pathlib import Path

import pytest

from tests.conftest import benchmark_script

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    return benchmark_script("benchmarks/search_losses.py", "search_losses")


def _method(regrets: dict[str, list[float]], ratio: float | None) -> dict:
    seeds = len(next(iter(regrets.values())))
    return {"ratio_median": ratio, "per_seed": {str(s): {f"regret_{b}": regrets[b][s] for b in regrets}
                                                for s in range(seeds)}}


def _report() -> dict:
    level = [0.3 + 0.01 * s for s in range(12)]
    lower = [v - 0.1 - 0.001 * s for s, v in enumerate(level)]  # lower on every seed
    return {"tasks": {
        "a": {"by_concurrency": {"2": {"methods": {
            "cand": _method({"25": level, "50": level, "100": level}, 0.2),
            "peer": _method({"25": level, "50": level, "100": lower}, 0.3),  # ahead at 100 % only
        }}}},
        "b": {"by_concurrency": {"8": {"methods": {
            "cand": _method({"25": lower, "50": lower, "100": lower}, None),  # never reached B
            "peer": _method({"25": level, "50": [*lower[:8], *level[8:]], "100": lower}, 0.1),
        }}}},
    }}


def test_a_peer_lower_on_every_seed_is_a_loss_and_equal_values_are_not_tested(bench):
    found = bench.losses(_report(), "cand", ["peer", "absent"])
    # a: 25 and 50 % equal on every seed (not tested), 100 % lower on all 12; b: 25 % cand lower (no loss),
    # 50 % four seeds differ (not tested), 100 % equal (not tested)
    assert (found.cells, found.cells_at_target, found.tests) == (2, 1, 2)
    [loss] = found.raw
    assert (loss.task, loss.concurrency, loss.budget, loss.peer) == ("a", "2", "100", "peer")
    assert loss.theirs < loss.mine and loss.p < 0.01
    assert found.holm == [loss] and loss.holm_p == pytest.approx(min(1.0, 2 * loss.p), abs=1e-4)


def test_the_peer_judged_against_the_candidate_is_behind_nowhere_it_is_ahead(bench):
    found = bench.losses(_report(), "peer", ["cand"])
    assert [(x.task, x.budget) for x in found.raw] == [("b", "25")]  # cand lower there
    with pytest.raises(KeyError, match="nobody is in no cell"):
        bench.losses(_report(), "nobody", ["cand"])
