"""Anytime-regret plots of the search benchmark (``benchmarks/results/search_peers.json``), one PNG per task.

``python benchmarks/search_peers_plot.py [--results FILE] [--out docs/images]`` writes
``search_peers_<task>.png``: mean normalised regret over the seeds against the share of the budget trained,
one panel per trials-at-once, every method a line (hpo's defaults thick); and prints the docs' table
(Markdown: per task and trials-at-once, each method's median epochs-to-B ratio with its bootstrap 95 %
interval, mean regret at 25/50/100 % of the budget with theirs, and the test of hpo's regret at 25 % against it).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--results", type=Path, default=ROOT / "benchmarks" / "results" / "search_peers.json")
    parser.add_argument("--out", type=Path, default=ROOT / "docs" / "images")
    args = parser.parse_args()
    report = json.loads(args.results.read_text())
    args.out.mkdir(parents=True, exist_ok=True)
    points = [0.05 * i for i in range(1, 21)]
    print(markdown(report))
    for task, entry in report["tasks"].items():
        panels = entry["by_concurrency"]
        fig, axes = plt.subplots(1, len(panels), figsize=(4.2 * len(panels), 3.2), sharey=True, squeeze=False)
        for ax, (concurrency, result) in zip(axes[0], panels.items(), strict=True):
            for name, method in result["methods"].items():
                ax.plot(points, method["anytime"], label=f"{name} ({method['seeds']})",
                        linewidth=2.5 if name == "hpo" else 1.2)
            ax.set_title(f"{task}{' (held out)' if entry['held_out'] else ''}, {concurrency} at once", fontsize=9)
            ax.set_xlabel("share of the budget (50 × max_epochs epochs)", fontsize=8)
            ax.set_yscale("symlog", linthresh=0.05)
            ax.grid(alpha=0.3)
        axes[0][0].set_ylabel("mean normalised regret", fontsize=8)
        axes[0][-1].legend(fontsize=6, title="method (seeds)", title_fontsize=6)
        fig.tight_layout()
        path = args.out / f"search_peers_{task}.png"
        fig.savefig(path, dpi=72)
        plt.close(fig)
        print(f"wrote {path} ({path.stat().st_size // 1024} KiB)")


def markdown(report: dict) -> str:
    """The results as a Markdown table, development tasks first.

    Epochs to B: median over seeds, its bootstrap 95 % interval, then the interquartile range (∞: B not
    reached). Last column: the Wilcoxon p of hpo's regret at 25 % against the method's, seed by seed, and
    in brackets Holm's adjusted p over every such test in the report.
    """
    lines = ["| task | at once | method (seeds) | epochs to B: median (95 % CI) [IQR] | regret 25 % | regret 50 % "
             "| regret 100 % | p vs hpo at 25 % (Holm) |",
             "|---|---|---|---|---|---|---|---|"]
    tasks = sorted(report["tasks"].items(), key=lambda item: (item[1]["held_out"], item[0]))
    for task, entry in tasks:
        label = f"{task} ({'held out' if entry['held_out'] else 'dev'})"
        for concurrency, result in entry["by_concurrency"].items():
            for name, m in result["methods"].items():
                iqr = "–".join(_share(v) for v in m["ratio_iqr"])
                ci = f" ({'–'.join(_share(v) for v in m['ratio_median_ci95'])})" if "ratio_median_ci95" in m else ""
                cells = [f"{m[f'regret_{f}']['mean']:.3f} [{m[f'regret_{f}']['ci95'][0]:.3f}, "
                         f"{m[f'regret_{f}']['ci95'][1]:.3f}]" for f in (25, 50, 100)]
                raw = m.get("hpo_vs_this_regret_25_wilcoxon_p")
                adjusted = m.get("hpo_vs_this_regret_25_wilcoxon_holm_p")
                test = "" if raw is None else f"{raw:.2f}" + ("" if adjusted is None else f" ({adjusted:.2f})")
                name = f"**{name}**" if name == "hpo" else name
                lines.append(f"| {label} | {concurrency} | {name} ({m['seeds']}) | {_share(m['ratio_median'])}{ci} "
                             f"[{iqr}] | " + " | ".join(cells) + f" | {test} |")
    return "\n".join(lines)


def _share(value: float | None) -> str:
    """A share of the budget with two decimals, ∞ for None (never reached)."""
    return "∞" if value is None else f"{value:.2f}"


if __name__ == "__main__":
    main()
