"""hpo.stats.compare: per-configuration statistics, Welch + Holm, and the false-winner rate by simulation."""

from __future__ import annotations

import math

import numpy as np
import pytest
from scipy import stats as sps

from hpo.stats import TEST_NAME, compare, group_stats, holm


def test_group_stats_match_scipy():
    values = [0.66, 0.68, 0.65, 0.67]
    g = group_stats(values)
    assert g.n == 4 and g.mean == pytest.approx(np.mean(values))
    assert g.std == pytest.approx(np.std(values, ddof=1))
    low, high = sps.t.interval(0.95, 3, loc=np.mean(values), scale=sps.sem(values))
    assert (g.ci_low, g.ci_high) == (pytest.approx(low), pytest.approx(high))


def test_one_repeat_has_no_spread_and_no_test():
    result = compare({"a": [0.7], "b": [0.6]}, mode="max")
    assert result.winner == "a" and not result.significant
    assert result.std == {"a": None, "b": None} and result.p_values == {"b": None}
    assert "noise is unknown" in result.verdict() and "hpo repeat NAME --top 3 --repeats 5" in result.verdict()


def test_winner_by_mean_not_by_luckiest_repeat():
    # "lucky" has the single best run, "steady" the better mean.
    result = compare({"lucky": [0.60, 0.61, 0.70], "steady": [0.66, 0.665, 0.67]}, mode="max")
    assert result.winner == "steady" and result.ranking == ["steady", "lucky"]
    assert result.mean["steady"] == pytest.approx(0.665)


def test_min_mode_picks_the_lowest_mean():
    result = compare({"a": [1.0, 1.1, 0.9], "b": [0.5, 0.52, 0.48]}, mode="min")
    assert result.winner == "b" and result.significant


def test_p_values_are_welch_two_sided_and_holm_corrected():
    groups = {"w": [0.80, 0.81, 0.79, 0.80], "b": [0.70, 0.72, 0.69, 0.71], "c": [0.78, 0.80, 0.77, 0.79]}
    result = compare(groups, mode="max")
    raw = {k: sps.ttest_ind(groups["w"], groups[k], equal_var=False).pvalue for k in ("b", "c")}
    assert result.raw_p_values == {k: pytest.approx(v) for k, v in raw.items()}
    assert result.p_values == {k: pytest.approx(v) for k, v in holm(raw).items()}
    assert result.test == TEST_NAME


def test_holm_step_down():
    assert holm({"a": 0.01, "b": 0.04, "c": 0.03}) == pytest.approx({"a": 0.03, "b": 0.06, "c": 0.06})
    assert holm({"a": 0.6, "b": 0.9}) == pytest.approx({"a": 1.0, "b": 1.0})


def test_noise_level_difference_is_not_significant_and_says_so():
    # One run of 0.68 against 0.66 +- 0.015 proves nothing: with three repeats each it stays unproven.
    result = compare({"a": [0.68, 0.66, 0.67], "b": [0.66, 0.67, 0.65]}, mode="max")
    assert result.winner == "a" and not result.significant
    text = result.verdict()
    assert text.startswith("best is not significantly better than #2 (p = ") and "consider more repeats" in text


def test_clear_winner_is_significant_and_says_so():
    result = compare({"a": [0.90, 0.91, 0.92], "b": [0.70, 0.71, 0.69], "c": [0.5, 0.52, 0.51]}, mode="max")
    assert result.significant
    assert result.verdict().startswith("best is significantly better than every other configuration")


def test_a_single_configuration_is_never_significant():
    result = compare({"only": [0.5, 0.6]}, mode="max")
    assert result.winner == "only" and not result.significant and result.p_values == {}


@pytest.mark.parametrize("bad", [{}, {"a": []}, {"a": [math.nan, 1.0]}, {"a": [math.inf]}])
def test_bad_groups_are_refused(bad):
    with pytest.raises(ValueError):
        compare(bad, mode="max")


def test_bad_mode_and_alpha_are_refused():
    with pytest.raises(ValueError, match="mode"):
        compare({"a": [1.0]}, mode="maximize")
    with pytest.raises(ValueError, match="alpha"):
        compare({"a": [1.0]}, mode="max", alpha=1.5)


def test_to_dict_is_json_ready():
    import json

    result = compare({"a": [0.9, 0.91], "b": [0.5, 0.52]}, mode="max")
    data = json.loads(json.dumps(result.to_dict()))
    assert data["winner"] == "a" and data["groups"]["a"]["n"] == 2 and data["verdict"] == result.verdict()


@pytest.mark.parametrize(("configs", "repeats"), [(2, 3), (3, 5), (5, 3)])
def test_false_winner_rate_stays_at_alpha_when_all_configurations_are_equal(configs, repeats):
    """All configurations equal: how often is a winner declared significant? At most alpha (+ simulation noise)."""
    rng = np.random.default_rng(configs * 100 + repeats)
    trials, alpha = 1500, 0.05
    hits = 0
    for _ in range(trials):
        draws = rng.normal(0.66, 0.015, size=(configs, repeats))
        hits += compare({str(i): list(row) for i, row in enumerate(draws)}, mode="max", alpha=alpha).significant
    bound = alpha + 3 * math.sqrt(alpha * (1 - alpha) / trials)
    assert hits / trials <= bound, (hits / trials, bound)


def test_a_real_difference_is_found_most_of_the_time():
    """Power check: a 3-sigma better configuration with 5 repeats is declared the significant winner."""
    rng = np.random.default_rng(7)
    found = sum(
        compare({"better": list(rng.normal(0.705, 0.015, 5)), "base": list(rng.normal(0.66, 0.015, 5))},
                mode="max").significant
        for _ in range(300)
    )
    assert found / 300 > 0.9


def _rows(values_by_lr):
    from hpo.trial.protocol import TrialRow

    rows, n = [], 0
    for lr, values in values_by_lr.items():
        for repeat, value in enumerate(values):
            n += 1
            rows.append(TrialRow(f"t{n:02d}", {"learning_rate": lr}, "completed", 3, value, False, None, None,
                                 repeat=repeat))
    return rows


def _config(repeats):
    from hpo.config import SweepConfig
    from tests.conftest import base_sweep

    return SweepConfig.model_validate(base_sweep(search={"repeats": repeats, "num_samples": 2}))


def test_with_repeats_the_summary_names_the_best_mean_and_its_best_repeat():
    from hpo.summary import build_summary

    # lr 0.1 has the luckiest single run (0.75), lr 0.01 the better mean.
    rows = _rows({0.1: [0.60, 0.75, 0.58], 0.01: [0.70, 0.71, 0.72]})
    summary = build_summary(_config(3), rows, {}, 1.0, None).to_json()
    best, stats = summary["best"], summary["statistics"]
    assert best["params"] == {"learning_rate": 0.01} and best["metric"] == 0.72 and best["trial_id"] == "t06"
    assert best["n"] == 3 and best["mean"] == pytest.approx(0.71) and best["ci_low"] < 0.71 < best["ci_high"]
    assert [c["params"] for c in stats["configurations"]] == [{"learning_rate": 0.01}, {"learning_rate": 0.1}]
    assert stats["test"] == TEST_NAME and stats["verdict"].startswith("best is not significantly better than #2")
    assert stats["configurations"][1]["p_value"] > 0.05


def test_without_repeats_the_best_is_the_best_trial_and_its_noise_is_unknown():
    from hpo.summary import build_summary

    summary = build_summary(_config(1), _rows({0.1: [0.75], 0.01: [0.70]}), {}, 1.0, None).to_json()
    assert summary["best"]["params"] == {"learning_rate": 0.1} and "mean" not in summary["best"]
    assert "noise is unknown" in summary["statistics"]["verdict"]


def test_report_prints_each_top_configuration_and_the_verdict(tmp_path):
    from hpo.summary import build_summary
    from tests.conftest import hpo_cli

    rows = _rows({0.1: [0.60, 0.62, 0.61], 0.01: [0.70, 0.71, 0.72]})
    summary = build_summary(_config(3), rows, {"uri": "sqlite:///x.db", "experiment_id": "1",
                                                "parent_run_id": "p"}, 1.0, None)
    summary.write(tmp_path / "runs" / "t" / "summary.json")
    out = hpo_cli("report", "t", "--storage", str(tmp_path / "runs"), cwd=tmp_path).stdout
    assert "#1 mean 0.7100 ± 0.0100 (95% CI 0.6852–0.7348, n=3) {'learning_rate': 0.01}" in out
    assert "#2 mean 0.6100 ± 0.0100" in out and ", p vs best = " in out
    assert "verdict: best is significantly better than every other configuration (p <= " in out



def test_one_run_per_configuration_needs_no_scipy_stats():
    """A sweep without repeats (the common case) does not pay for importing scipy.stats in its driver."""
    import subprocess
    import sys

    code = ("import sys; from hpo.stats import compare; c = compare({'a': [0.9], 'b': [0.8]}, mode='max'); "
            "print(c.winner, 'scipy.stats' in sys.modules)")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["a", "False"]
