"""The search benchmark's peer adapters: each peer library runs a few trials on a tiny table, in its venv."""

from __future__ import annotations

import json
import math
import os
import re
import subprocess
import sys
from pathlib import Path

import numpy as np
import pytest

from tests.conftest import benchmark_script
from tests.unit.test_replay import table

ROOT = Path(__file__).resolve().parents[2]
ADAPTERS = ROOT / "benchmarks" / "peers" / "adapters.py"
PEERS_PYTHON = Path(os.environ.get("HPO_PEERS_PYTHON", ROOT / "benchmarks" / ".peers-venv" / "bin" / "python"))
SYNE_GP = ROOT / "benchmarks" / "peers" / "syne_gp.py"
SYNE_GP_PYTHON = Path(os.environ.get("HPO_SYNE_GP_PYTHON", ROOT / "benchmarks" / ".syne-gp-venv" / "bin" / "python"))


def adapters():
    return benchmark_script(str(ADAPTERS.relative_to(ROOT)), "peer_adapters")


def test_answers_name_the_surrogate_with_its_clip_or_the_nearest_recorded_curve():
    module, tiny = adapters(), table(configs=12, epochs=6)
    params = tiny.params[3]
    assert module.surrogate(tiny, "surrogate").clip == "neighbours"
    assert module.surrogate(tiny, "surrogate-table").clip == "table"
    assert module.surrogate(tiny, "nearest") is None
    assert module.answerer(tiny, "nearest")(params, 0).values.tolist() == tiny.curve(3, 0).values.tolist()
    assert module.answerer(tiny, "surrogate")(params, 5).values.tolist() == (
        module.Surrogate(tiny).curve(params, 5).values.tolist())


def test_the_codec_decodes_flat_samples_into_the_space_dropping_inactive_parameters():
    codec = adapters().Codec({
        "units": {"type": "int", "low": 16, "high": 64, "step": 16},
        "optimizer": {"type": "categorical", "choices": ["adam", "sgd"]},
        "momentum": {"type": "float", "low": 0.5, "high": 0.99, "when": {"optimizer": "sgd"}},
    })
    assert codec.kinds() == {"units": ("int", 0, 3, False), "optimizer": ("int", 0, 1, False),
                             "momentum": ("float", 0.5, 0.99, False)}
    assert codec.decode({"units": 2, "optimizer": 0, "momentum": 0.7}) == {"units": 48, "optimizer": "adam"}
    assert codec.decode({"units": 3, "optimizer": 1, "momentum": 0.7}) == {"units": 64, "optimizer": "sgd",
                                                                           "momentum": 0.7}


def run_peers(python: Path, script: Path, tmp_path: Path, methods: str, seeds: str, budget: int) -> dict:
    """Runs ``methods`` of ``script`` (``adapters.py``'s CLI) on a tiny table; checks every run's events.

    Every run trains the budget, epoch by epoch, in time order, with values in the table's recorded range (the
    surrogate's). Returns the script's output (``versions``, ``runs``).
    """
    tiny = table(configs=12, epochs=6)
    adapters().write_json(tiny, tmp_path / "table.json")
    subprocess.run([str(python), str(script), "--table", str(tmp_path / "table.json"), "--methods", methods,
                    "--seeds", seeds, "--concurrency", "2", "--budget", str(budget),
                    "--out", str(tmp_path / "events.json")],
                   check=True, env={**os.environ, "PYTHONPATH": str(ROOT)}, timeout=600, capture_output=True)
    data = json.loads((tmp_path / "events.json").read_text())
    assert set(data["runs"]) == set(methods.split(","))
    recorded = np.concatenate([c.values for c in tiny.curves.values()])
    for name, per_seed in data["runs"].items():
        assert set(per_seed) == set(seeds.split(",")), name
        for events in per_seed.values():
            assert [done for _, done, _ in events] == list(range(1, budget + 1)), name
            assert [t for t, _, _ in events] == sorted(t for t, _, _ in events), name
            values = np.array([v for _, _, v in events])
            assert recorded.min() <= values.min() and values.max() <= recorded.max(), name
    return data


@pytest.mark.skipif(not PEERS_PYTHON.exists(),
                    reason=f"no peers venv at {PEERS_PYTHON}: make it with benchmarks/peers/make_venv.sh "
                           "(or point HPO_PEERS_PYTHON at one)")
def test_each_peer_runs_a_few_trials_on_a_tiny_table(tmp_path):
    data = run_peers(PEERS_PYTHON, ADAPTERS, tmp_path, ",".join(adapters().PEERS), "0", 24)
    assert all(data["versions"][p] != "missing" for p in ("syne-tune", "dehb", "smac"))


@pytest.mark.skipif(not SYNE_GP_PYTHON.exists(),
                    reason=f"no Syne Tune 0.13 venv at {SYNE_GP_PYTHON}: make it with benchmarks/peers/make_venv.sh "
                           "(or point HPO_SYNE_GP_PYTHON at one)")
def test_mobster_and_hypertune_run_the_budget_on_a_tiny_table_seed_by_seed(tmp_path):
    data = run_peers(SYNE_GP_PYTHON, SYNE_GP, tmp_path, "syne_mobster,syne_hypertune", "0,1", 36)
    assert data["versions"]["syne-tune (MOBSTER, Hyper-Tune venv)"] == "0.13.0"
    for name, per_seed in data["runs"].items():
        assert per_seed["0"] != per_seed["1"], name  # the seed draws the proposals


def test_the_gp_peers_run_by_their_own_script_and_outside_the_default_methods():
    bench = search_peers()
    assert [bench.peer_script(n).name for n in ("syne_mobster", "syne_hypertune", "syne_asha", "dehb")] == [
        "syne_gp.py", "syne_gp.py", "adapters.py", "adapters.py"]
    assert set(bench.GP_PEERS) <= set(bench.SLOW_PEERS)


def search_peers():
    return benchmark_script("benchmarks/search_peers.py", "search_peers_bench")


def test_the_peer_cache_answers_the_seeds_it_keeps_and_keys_them_by_table_and_settings(tmp_path):
    bench, tiny = search_peers(), table(configs=12, epochs=6)
    nowhere = tmp_path / "no-venv" / "python"  # a seed the cache lacks would need it, and fail
    args = dict(names=["dehb"], concurrency=2, budget=24, patience=3, answers="nearest")
    assert bench.cached_peers(tmp_path / "cache", nowhere, tiny, seeds=[], **args) == ({}, {})
    [where] = (tmp_path / "cache").iterdir()
    kept = {0: [[1.0, 1, 0.5], [2.0, 2, 0.6]], 1: [[1.0, 1, 0.4]]}
    for seed, events in kept.items():
        (where / f"dehb-{seed}.json").write_text(json.dumps({"events": events, "versions": {"dehb": "0.1.2"}}))

    runs, versions = bench.cached_peers(tmp_path / "cache", nowhere, tiny, seeds=[0, 1], **args)
    assert runs == {"dehb": {s: [tuple(e) for e in events] for s, events in kept.items()}}
    assert versions == {"dehb": "0.1.2"}
    with pytest.raises(FileNotFoundError):  # seed 2 is not kept: the venv is asked for it
        bench.cached_peers(tmp_path / "cache", nowhere, tiny, seeds=[0, 1, 2], **args)
    bench.cached_peers(tmp_path / "cache", nowhere, tiny, seeds=[], **{**args, "concurrency": 8})
    bench.cached_peers(tmp_path / "cache", nowhere, table(configs=13, epochs=6), seeds=[], **args)
    assert len(list((tmp_path / "cache").iterdir())) == 3  # other settings, another table: other keys
    other_surrogate = tmp_path / "surrogate.py"  # the surrogate's code changed: its answers may have too
    other_surrogate.write_text(bench.SURROGATE.read_text() + "\n# changed\n")
    bench.SURROGATE = other_surrogate
    bench.cached_peers(tmp_path / "cache", nowhere, tiny, seeds=[], **args)
    assert len(list((tmp_path / "cache").iterdir())) == 4
    bench.SURROGATE = ROOT / "hpo" / "replay" / "surrogate.py"

    (where / "dehb-1.json").write_text(json.dumps({"events": kept[1], "versions": {"dehb": "0.1.3"}}))
    with pytest.raises(SystemExit, match=re.escape("dehb seed 1 ran with dehb 0.1.3, others with 0.1.2")):
        bench.cached_peers(tmp_path / "cache", nowhere, tiny, seeds=[0, 1], **args)


@pytest.mark.skipif(not PEERS_PYTHON.exists(), reason=f"no peers venv at {PEERS_PYTHON}")
def test_a_peer_seed_run_once_is_answered_from_the_cache_the_same(tmp_path):
    bench, tiny = search_peers(), table(configs=12, epochs=6)
    args = dict(names=["dehb"], seeds=[0], concurrency=2, budget=24, patience=3, answers="nearest")
    first = bench.cached_peers(tmp_path / "cache", PEERS_PYTHON, tiny, **args)
    again = bench.cached_peers(tmp_path / "cache", tmp_path / "no-venv" / "python", tiny, **args)
    assert again == first and len(first[0]["dehb"][0]) == 24


def test_merge_keeps_the_first_runs_figures_adds_the_others_and_refuses_other_settings(tmp_path):
    bench = search_peers()

    def run(name, methods, variants, wall_s, seeds=40, peer_seeds=40):
        report = {"benchmark": "search_peers", "answers": "surrogate", "budget_x_max_epochs": 50, "patience": 3,
                  "seeds": seeds, "peer_seeds": peer_seeds, "methods": methods, "variants": variants,
                  "machine": "m", "versions": {"optuna": "5.0.0"}, "wall_s": wall_s,
                  "tasks": {"t": {"held_out": False, "by_concurrency": {"2": {
                      "oracle": 0.9, "methods": {m: {"ratio_median": wall_s} for m in methods}}}}}}
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(report))
        return path

    first = run("first", ["hpo", "boot1"], "boot1:scheduler.bootstrap_count=1", 10.0)
    second = run("second", ["hpo", "eta3"], "eta3:scheduler.reduction_factor=3", 20.0)
    bench.merge([first, second], tmp_path / "out.json")
    out = json.loads((tmp_path / "out.json").read_text())
    assert out["methods"] == ["hpo", "boot1", "eta3"]
    assert {m: f["ratio_median"] for m, f in out["tasks"]["t"]["by_concurrency"]["2"]["methods"].items()} == {
        "hpo": 10.0, "boot1": 10.0, "eta3": 20.0}
    assert out["peer_seeds"] == 40
    assert out["variants"] == "boot1:scheduler.bootstrap_count=1;eta3:scheduler.reduction_factor=3"
    assert [(m["file"], m["variants"]) for m in out["merged_from"]] == [
        ("first.json", "boot1:scheduler.bootstrap_count=1"), ("second.json", "eta3:scheduler.reduction_factor=3")]
    assert out["wall_s"] == 30.0
    fewer = run("fewer", ["hpo", "dehb"], "", 5.0, peer_seeds=10)
    bench.merge([first, fewer], tmp_path / "out.json")
    assert json.loads((tmp_path / "out.json").read_text())["peer_seeds"] == 10  # dehb's figures: 10 seeds
    bench.merge([first, second, fewer], tmp_path / "out.json")
    assert json.loads((tmp_path / "out.json").read_text())["peer_seeds"] == 10
    split = run("split", ["hpo", "boot1"], "boot1:scheduler.bootstrap_count=1", 10.0)  # the same run, other tasks
    bench.merge([first, split, second], tmp_path / "out.json")
    assert json.loads((tmp_path / "out.json").read_text())["variants"] == out["variants"]  # each variant once
    with pytest.raises(SystemExit, match=re.escape("other.json: seeds differ from")):
        bench.merge([first, run("other", ["hpo"], "", 5.0, seeds=10, peer_seeds=10)], tmp_path / "refused.json")
    assert not (tmp_path / "refused.json").exists()


def test_merge_refuses_runs_whose_surrogate_noise_was_clipped_otherwise(tmp_path):
    bench = search_peers()

    def run(name, **clip):
        report = {"benchmark": "search_peers", "answers": "surrogate", "budget_x_max_epochs": 50, "patience": 3,
                  "seeds": 40, "peer_seeds": 40, "methods": ["hpo"], "variants": "", "machine": "m",
                  "versions": {}, "wall_s": 1.0, **clip, "tasks": {"t": {"held_out": False, "by_concurrency": {
                      "2": {"oracle": 0.9, "methods": {"hpo": {"ratio_median": 0.5}}}}}}}
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(report))
        return path

    old = run("old")  # written before noise_clip was recorded: its answers were clipped to the table's range
    with pytest.raises(SystemExit, match=re.escape("new.json: noise_clip differ from")):
        bench.merge([old, run("new", noise_clip="neighbours")], tmp_path / "out.json")
    bench.merge([old, run("also_table", noise_clip="table")], tmp_path / "out.json")
    assert json.loads((tmp_path / "out.json").read_text())["noise_clip"] == "table"


def test_a_run_records_what_hpo_meant_and_merge_refuses_runs_of_other_defaults(tmp_path):
    bench = search_peers()
    from hpo import kinds

    now = bench.hpo_defaults()
    assert now["searcher"] == kinds.DEFAULT_SEARCHER and now["scheduler"] == kinds.DEFAULT_SCHEDULER
    assert (now["random_fraction"], now["random_after"], now["match_budget"]) == (0.5, 60, True)

    def run(name, **defaults):
        report = {"benchmark": "search_peers", "answers": "surrogate", "noise_clip": "neighbours",
                  "budget_x_max_epochs": 50, "patience": 3, "seeds": 40, "peer_seeds": 40, "methods": ["hpo"],
                  "variants": "", "machine": "m", "versions": {}, "wall_s": 1.0, **defaults,
                  "tasks": {"t": {"held_out": False, "by_concurrency": {"2": {"methods": {"hpo": {}}}}}}}
        path = tmp_path / f"{name}.json"
        path.write_text(json.dumps(report))
        return path

    other = {**now, "random_fraction": 0.25}
    with pytest.raises(SystemExit, match="hpo_defaults differ"):
        bench.merge([run("now", hpo_defaults=now), run("other", hpo_defaults=other)], tmp_path / "out.json")
    bench.merge([run("older"), run("now", hpo_defaults=now)], tmp_path / "out.json")  # older: not recorded
    assert [m["hpo_defaults"] for m in json.loads((tmp_path / "out.json").read_text())["merged_from"]] == [None, now]


def test_merge_marks_held_out_tasks_as_record_py_does_now_and_keeps_each_runs_marking(tmp_path):
    bench = search_peers()
    from record import TASKS

    now = {t.name: t.held_out for t in TASKS}
    dev, held = next(n for n, h in now.items() if not h), next(n for n, h in now.items() if h)
    report = {"benchmark": "search_peers", "answers": "surrogate", "budget_x_max_epochs": 50, "patience": 3,
              "seeds": 40, "peer_seeds": 40, "methods": ["hpo"], "variants": "", "machine": "m",
              "versions": {}, "wall_s": 1.0,
              "tasks": {task: {"held_out": True, "by_concurrency": {"2": {"methods": {"hpo": {}}}}}
                        for task in (dev, held)}}
    (tmp_path / "old.json").write_text(json.dumps(report))
    bench.merge([tmp_path / "old.json"], tmp_path / "out.json")
    out = json.loads((tmp_path / "out.json").read_text())
    assert {task: e["held_out"] for task, e in out["tasks"].items()} == {dev: False, held: True}
    assert out["merged_from"][0]["held_out"] == [dev, held]


def test_holm_adjusts_each_figures_tests_as_one_family():
    bench = search_peers()
    raw = {"a": 0.01, "b": 0.04, "c": 0.03, "d": None}
    report = {"tasks": {"t": {"by_concurrency": {"2": {"methods": {
        "hpo": {}, **{m: {"hpo_vs_this_regret_25_wilcoxon_p": p, "hpo_vs_this_ratio_sign_p": 0.5}
                      for m, p in raw.items()}}}}}}}
    bench.holm(report)
    methods = report["tasks"]["t"]["by_concurrency"]["2"]["methods"]
    # sorted 0.01, 0.03, 0.04 times 3, 2, 1, kept increasing: 0.03, 0.06, 0.06
    assert {m: f.get("hpo_vs_this_regret_25_wilcoxon_holm_p") for m, f in methods.items()} == {
        "hpo": None, "a": 0.03, "b": 0.06, "c": 0.06, "d": None}
    assert {f.get("hpo_vs_this_ratio_sign_holm_p") for m, f in methods.items() if m != "hpo"} == {1.0}


def test_variants_read_json_values_and_take_any_other_value_as_a_string():
    bench = search_peers()
    tiny = table(configs=12, epochs=8)
    methods = bench.parse_variants("r3:search.algorithm=random,scheduler.reduction_factor=3;tpe:"
                                   "search.algorithm=optuna-tpe,search.match_budget=false,search.random_fraction=0.5")
    assert list(methods) == ["r3", "tpe"]
    expected = {"r3": bench.hpo_method("random", None, {"scheduler.reduction_factor": 3}),
                "tpe": bench.hpo_method("optuna-tpe", None,
                                        {"search.match_budget": False, "search.random_fraction": 0.5})}
    for name, method in methods.items():
        assert method(tiny, None, 5, 2, 60, 3) == expected[name](tiny, None, 5, 2, 60, 3)
    assert methods["r3"](tiny, None, 5, 2, 60, 3) != bench.METHODS["random_asha"](tiny, None, 5, 2, 60, 3)


def test_the_median_interval_keeps_unreached_seeds_as_infinite():
    bench = search_peers()
    low, high = bench.median_ci([0.1] * 10)
    assert low == high == 0.1
    low, high = bench.median_ci([0.1, 0.2, 0.3, math.inf, math.inf, math.inf, math.inf])
    assert 0.1 <= low <= 0.3 and high is None  # most resamples' median never reached B


def test_optunas_hyperband_peer_gives_the_same_run_for_a_seed():
    # Optuna's HyperbandPruner puts a trial in a bracket by a checksum of the study's name: the peer names it.
    bench = search_peers()
    tiny = table(configs=12, epochs=8)
    runs = [bench.optuna_hyperband(tiny, None, 5, 2, 60, 3) for _ in range(3)]
    assert runs[0] == runs[1] == runs[2] and len(runs[0]) == 60


def _tune_peer_runs(name: str) -> list:
    bench = search_peers()
    tiny = table(configs=12, epochs=8)
    return [bench.METHODS[name](tiny, None, 5, 4, 60, 3) for _ in range(2)]


def test_tunes_hyperband_peer_runs_the_budget_the_same_for_a_seed():
    first, again = _tune_peer_runs("tune_hyperband")
    assert first == again and [done for _, done, _ in first] == list(range(1, 61))


TUNE_BOHB_SITE = ROOT / "benchmarks" / ".tune-bohb-site"


@pytest.mark.skipif(not (TUNE_BOHB_SITE / "hpbandster").is_dir(),
                    reason=f"no HpBandSter at {TUNE_BOHB_SITE}: benchmarks/peers/make_venv.sh installs it")
def test_tunes_bohb_peer_runs_the_budget_the_same_for_a_seed_and_leaves_numpys_generator_alone():
    np.random.seed(123)
    before = np.random.get_state()[1].copy()
    first, again = _tune_peer_runs("tune_bohb")
    assert np.array_equal(np.random.get_state()[1], before)
    assert first == again and [done for _, done, _ in first] == list(range(1, 61))


def test_tune_bohbs_space_is_flat_and_decodes_into_the_sweep_files():
    sys.path.insert(0, str(ROOT / "benchmarks"))
    from peers import tune_bohb

    space = {"units": {"type": "int", "low": 16, "high": 64, "step": 16},
             "optimizer": {"type": "categorical", "choices": ["adam", "sgd"]},
             "momentum": {"type": "float", "low": 0.5, "high": 0.99, "when": {"optimizer": "sgd"}}}
    assert tune_bohb.decode(space, {"units": 2, "optimizer": "adam", "momentum": 0.7}) == {"units": 48,
                                                                                           "optimizer": "adam"}
    assert tune_bohb.decode(space, {"units": 3, "optimizer": "sgd", "momentum": 0.7}) == {
        "units": 64, "optimizer": "sgd", "momentum": 0.7}


@pytest.mark.skipif(not PEERS_PYTHON.exists(), reason=f"no peers venv at {PEERS_PYTHON}")
def test_the_reduction_factor_check_runs_the_benchmarks_syne_asha_at_three(tmp_path):
    """``syne_eta.py``'s reduction factor 3 is the benchmark's ``syne_asha`` seed for seed; 2 is another run."""
    module = adapters()
    tiny = table(configs=12, epochs=6)
    module.write_json(tiny, tmp_path / "table.json")
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    common = ["--table", str(tmp_path / "table.json"), "--seeds", "2", "--concurrency", "2"]
    subprocess.run([str(PEERS_PYTHON), str(ADAPTERS), *common[:2], "--methods", "syne_asha", "--seeds", "0,1",
                    "--concurrency", "2", "--budget", "24", "--out", str(tmp_path / "events.json")],
                   check=True, env=env, timeout=600, capture_output=True)
    subprocess.run([str(PEERS_PYTHON), str(ROOT / "benchmarks" / "peers" / "syne_eta.py"), *common, "--budget", "4",
                    "--out", str(tmp_path / "eta.json")], check=True, env=env, timeout=600, capture_output=True)
    events = json.loads((tmp_path / "events.json").read_text())["runs"]["syne_asha"]
    eta = json.loads((tmp_path / "eta.json").read_text())["runs"]
    best = [max(v for _, _, v in events[str(seed)]) if tiny.task.mode == "max" else
            min(v for _, _, v in events[str(seed)]) for seed in (0, 1)]
    assert [r["best"] for r in eta["x2_eta3"]["per_seed"]] == best
    assert all(r["trials"] >= 4 for r in eta["x2_eta3"]["per_seed"])  # 24 epochs of 6-epoch curves, ASHA stops some
    assert set(eta) == {"x2_eta2", "x2_eta3"}
