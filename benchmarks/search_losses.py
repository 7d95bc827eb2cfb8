"""Where a method is behind a peer beyond the noise, at 25, 50 and 100 % of the budget, in a search benchmark result.

``python benchmarks/search_losses.py RESULTS.json --methods hpo,rf50 --peers random_fifo,random_asha`` prints,
for each method named, its cells (task × trials at once) whose median epochs to B is at most the target, and
every cell and budget where a peer's mean regret is lower with a Wilcoxon signed-rank p < 0.05 over the seeds
both ran: raw, and after Holm's adjustment over that method's tests (a pair where fewer than five seeds differ
is not tested). The result file's own tests are of hpo against each method; here any method can be the one
judged, which is how a candidate setting (a ``--variants`` column) is held against the peers.
"""

from __future__ import annotations

import argparse
import json
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

BUDGETS = ("25", "50", "100")
#: The epochs-to-B target, a share of the budget.
TARGET = 0.25
#: Fewer seeds than this that differ: no test.
MIN_DIFFERING = 5


@dataclass(frozen=True)
class Loss:
    """A cell and budget where ``peer``'s mean regret is lower than the judged method's."""

    task: str
    concurrency: str
    budget: str
    peer: str
    mine: float
    theirs: float
    p: float
    holm_p: float


@dataclass
class Losses:
    """What :func:`losses` found for one method."""

    method: str
    cells: int = 0
    cells_at_target: int = 0
    tests: int = 0
    raw: list[Loss] = field(default_factory=list)
    holm: list[Loss] = field(default_factory=list)


def losses(report: dict[str, Any], method: str, peers: list[str], alpha: float = 0.05) -> Losses:
    """``method``'s losses beyond the noise against ``peers`` in ``report`` (``search_peers.py``'s JSON).

    Raises:
        KeyError: ``method`` is in no cell of the report.
    """
    from scipy.stats import wilcoxon

    from hpo.stats import holm

    found = Losses(method)
    tested: list[tuple[float, str, str, str, str, float, float]] = []
    for task, entry in report["tasks"].items():
        for concurrency, result in entry["by_concurrency"].items():
            methods = result["methods"]
            if method not in methods:
                continue
            mine = methods[method]
            found.cells += 1
            ratio = mine.get("ratio_median")
            found.cells_at_target += ratio is not None and ratio <= TARGET
            for budget in BUDGETS:
                for peer in peers:
                    if peer == method or peer not in methods:
                        continue
                    seeds = sorted(set(mine["per_seed"]) & set(methods[peer]["per_seed"]), key=int)
                    pairs = [(mine["per_seed"][s][f"regret_{budget}"], methods[peer]["per_seed"][s][f"regret_{budget}"])
                             for s in seeds]
                    pairs = [(a, b) for a, b in pairs if a is not None and b is not None]
                    if sum(a != b for a, b in pairs) < MIN_DIFFERING:
                        continue
                    p = float(wilcoxon([a for a, _ in pairs], [b for _, b in pairs]).pvalue)
                    tested.append((p, task, concurrency, budget, peer, sum(a for a, _ in pairs) / len(pairs),
                                   sum(b for _, b in pairs) / len(pairs)))
    if not found.cells:
        raise KeyError(f"{method} is in no cell of the report")
    found.tests = len(tested)
    adjusted = holm({i: test[0] for i, test in enumerate(tested)})
    for i, (p, task, concurrency, budget, peer, a, b) in sorted(enumerate(tested), key=lambda it: it[1]):
        if b >= a or p >= alpha:
            continue
        loss = Loss(task, concurrency, budget, peer, round(a, 4), round(b, 4), round(p, 4), round(adjusted[i], 4))
        found.raw.append(loss)
        if adjusted[i] < alpha:
            found.holm.append(loss)
    return found


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("results", type=Path)
    parser.add_argument("--methods", default="hpo", help="the methods to judge, comma-separated")
    parser.add_argument("--peers", required=True, help="the methods each is held against, comma-separated")
    args = parser.parse_args()
    report = json.loads(args.results.read_text())
    peers = args.peers.split(",")
    for method in args.methods.split(","):
        found = losses(report, method, peers)
        print(f"{method}: {found.cells_at_target}/{found.cells} cells at or under {TARGET}; behind a peer beyond "
              f"the noise: {len(found.raw)} raw, {len(found.holm)} after Holm, of {found.tests} tests")
        for loss in found.raw:
            mark = "Holm" if loss in found.holm else "raw only"
            print(f"  {loss.task} x{loss.concurrency} at {loss.budget} %: {loss.peer} {loss.theirs:.3f} < "
                  f"{loss.mine:.3f} (p {loss.p:.4f}, Holm {loss.holm_p:.4f}; {mark})")


if __name__ == "__main__":
    main()
