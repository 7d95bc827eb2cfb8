"""The real-training search benchmark (``benchmarks/search.py``): what ``--hpo-defaults`` leaves to hpo."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import pytest

import hpo
from hpo.config.sections import SchedulerConfig, SearchConfig
from tests.conftest import benchmark_script

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def bench():
    return benchmark_script("benchmarks/search.py", "search_bench")


def test_hpo_defaults_leave_the_searcher_and_the_schedulers_settings_to_hpo(bench):
    data = bench.sweep("m", None, "asha", 1000, 30, 9, startup=4, hpo_defaults=True, conditional=True)
    config = hpo.SweepConfig.model_validate(data)
    assert "algorithm" not in data["search"] and "startup_trials" not in data["search"]
    assert config.search.algorithm == SearchConfig().algorithm
    assert config.scheduler == SchedulerConfig(type="asha")
    assert "momentum" in config.space


def test_without_hpo_defaults_the_model_side_is_tpe_with_its_own_start_up_and_asha_at_three(bench):
    data = bench.sweep("m", "optuna-tpe", "asha", 1000, 30, 9, startup=4, bootstrap=1)
    config = hpo.SweepConfig.model_validate(data)
    assert (config.search.algorithm, config.search.startup_trials) == ("optuna-tpe", 4)
    assert (config.scheduler.reduction_factor, config.scheduler.bootstrap_count) == (3, 1)


def test_the_settings_name_the_searcher_and_merge_reads_an_older_run_as_tpe(bench, tmp_path):
    args = argparse.Namespace(hpo_defaults=True, trials=12, tpe_trials=30, epochs=9, startup_trials=4,
                              validation_fraction=0.2, bootstrap_count=1, conditional=True, random_fraction=None)
    settings = bench.settings(args)
    assert settings["searcher"] == SearchConfig().algorithm
    assert settings["tpe_match_budget"] == settings["searcher"].startswith("optuna")
    row = {"seed": 0, "ratio": 0.5, "best_after_third": {"random_fifo": 0.9, "tpe_asha": 0.95}}

    def write(i: int, searcher: str | None) -> str:
        run = {"task": "t", "when": "w", "wall_s": 1.0, "seeds": 1, "first_seed": i,
               **{k: v for k, v in settings.items() if k != "searcher"}, "per_seed": [{**row, "seed": i}],
               **({"searcher": searcher} if searcher else {})}
        (tmp_path / f"{i}.json").write_text(json.dumps(run))
        return str(tmp_path / f"{i}.json")

    tpe, older, random = write(0, "optuna-tpe"), write(1, None), write(2, "random")
    bench.merge([tpe, older], str(tmp_path / "out.json"))
    merged = json.loads((tmp_path / "out.json").read_text())
    assert merged["searcher"] == "optuna-tpe" and [s["seed"] for s in merged["per_seed"]] == [0, 1]
    with pytest.raises(SystemExit, match="searcher differ"):
        bench.merge([tpe, random], str(tmp_path / "refused.json"))
    assert not (tmp_path / "refused.json").exists()


def test_a_random_fraction_goes_to_the_model_side_only_and_is_recorded(bench, tmp_path):
    data = bench.sweep("m", None, "asha", 1000, 30, 9, hpo_defaults=True, random_fraction=0.5)
    assert hpo.SweepConfig.model_validate(data).search.random_fraction == 0.5
    assert "random_fraction" not in bench.sweep("b", "random", "fifo", 0, 12, 9)["search"]  # the baseline
    args = argparse.Namespace(hpo_defaults=True, trials=12, tpe_trials=30, epochs=9, startup_trials=4,
                              validation_fraction=0.2, bootstrap_count=0, conditional=True, random_fraction=0.5)
    settings = bench.settings(args)
    assert settings["tpe_random_fraction"] == (0.5 if settings["searcher"].startswith("optuna") else None)
    row = {"seed": 0, "ratio": 0.5, "best_after_third": {"random_fifo": 0.9, "tpe_asha": 0.95}}
    paths = []
    for i, fraction in enumerate((0.5, "older", 0.0)):
        run = {"task": "t", "when": "w", "wall_s": 1.0, "seeds": 1, "first_seed": i, **settings,
               "searcher": "optuna-tpe", "per_seed": [{**row, "seed": i}], "tpe_random_fraction": fraction}
        if fraction == "older":
            del run["tpe_random_fraction"]  # recorded before the key was: the default then, 0
        paths.append(tmp_path / f"{i}.json")
        paths[-1].write_text(json.dumps(run))
    with pytest.raises(SystemExit, match="tpe_random_fraction differ"):
        bench.merge([str(paths[0]), str(paths[1])], str(tmp_path / "refused.json"))
    bench.merge([str(paths[1]), str(paths[2])], str(tmp_path / "out.json"))
    assert json.loads((tmp_path / "out.json").read_text())["tpe_random_fraction"] == 0.0
