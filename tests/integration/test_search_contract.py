"""Every searcher x scheduler through the same path: suggest -> train -> report -> complete.

The trials run on the simulated backend (``trial.backend: simulated``): real Ray, Tune, searchers,
schedulers, the trial driver, MLflow and ``summary.json``, with synthetic learning curves instead of
Horovod training, so every pair takes seconds. ``test_schedulers_real.py`` runs each scheduler family
with real Horovod trials.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import subprocess
import time
from pathlib import Path

import optuna
import pandas as pd
import pytest

import hpo
from hpo import kinds
from hpo.search import study_url
from tests.conftest import ROOT
from tests.integration.contract import check_pair, tiny, with_goal

pytestmark = pytest.mark.slow
#: Every registered kind (hpo/kinds.py): a searcher or scheduler registered there runs here with every other.
SEARCHERS = list(kinds.SEARCHERS)
SCHEDULERS = list(kinds.SCHEDULERS)


@pytest.fixture(scope="module")
def ray_session(tmp_path_factory):
    import ray

    from hpo.ray_session import start_ray

    start_ray(num_cpus=2)
    yield
    ray.shutdown()


@pytest.mark.parametrize(("algorithm", "scheduler"), list(itertools.product(SEARCHERS, SCHEDULERS)))
def test_searcher_scheduler_pair(ray_session, tmp_path, monkeypatch, algorithm, scheduler):
    monkeypatch.chdir(tmp_path)
    check_pair(tmp_path, algorithm, scheduler)


def test_seed_makes_the_suggestions_reproducible(ray_session, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    runs = [hpo.tune(tiny("seeded", "random", "fifo"), storage=tmp_path / f"runs{i}") for i in range(2)]
    params = [sorted(json.dumps(t["params"], sort_keys=True) for t in r.summary["trials"]) for r in runs]
    assert params[0] == params[1]


def test_conditional_parameter_only_when_its_parent_matches(ray_session, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = tiny("conditional", "random", "fifo")
    data = config.model_dump()
    data["space"]["momentum"] = {"type": "float", "low": 0.5, "high": 0.9, "when": {"optimizer": "sgd"}}
    data["search"]["num_samples"] = 6
    result = hpo.tune(hpo.SweepConfig.model_validate(data), storage=tmp_path / "runs")
    trials = result.summary["trials"]
    assert {t["params"]["optimizer"] for t in trials} == {"adam", "sgd"}  # seeded: both drawn
    for t in trials:
        assert ("momentum" in t["params"]) == (t["params"]["optimizer"] == "sgd")


def test_repeats_run_each_config_with_different_seeds(ray_session, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = tiny("repeats", "optuna-tpe", "fifo", num_samples=2, repeats=2)
    result = hpo.tune(config, storage=tmp_path / "runs")
    trials = result.summary["trials"]
    assert len(trials) == 4
    by_config: dict[str, list] = {}
    for t in trials:
        by_config.setdefault(json.dumps(t["params"], sort_keys=True), []).append(t)
    assert len(by_config) == 2
    for group in by_config.values():
        assert sorted(t["repeat"] for t in group) == [0, 1]
        assert group[0]["metric"] != group[1]["metric"]  # different init and data order
    # The best is the configuration with the best mean over its repeats, and of it the best repeat.
    means = {key: sum(t["metric"] for t in group) / 2 for key, group in by_config.items()}
    winner = max(means, key=means.get)
    best = result.summary["best"]
    assert json.dumps(best["params"], sort_keys=True) == winner and best["mean"] == pytest.approx(means[winner])
    assert best["metric"] == max(t["metric"] for t in by_config[winner]) and best["n"] == 2
    stats = result.summary["statistics"]
    assert stats["winner"] == winner and stats["configurations"][0]["n"] == 2 and stats["verdict"]
    study = optuna.load_study(study_name="repeats", storage=study_url(tmp_path / "runs" / "repeats"))
    told = [t for t in study.trials if t.state == optuna.trial.TrialState.COMPLETE]
    assert len(told) == 2  # the searcher saw one value (the mean) per configuration
    for t in told:
        group = by_config[json.dumps({k: t.params[k] for k in sorted(t.params)}, sort_keys=True)]
        bests = []
        for trial in group:  # one rule with the summary: each repeat's best epoch, from its own history
            (trial_dir,) = (tmp_path / "runs" / "repeats").glob(f"hpo_trial_{trial['trial_id']}_*")
            bests.append(float(pd.read_csv(trial_dir / "progress.csv")["val_accuracy"].max()))
        assert bests == pytest.approx([trial["metric"] for trial in group])
        assert t.value == pytest.approx(sum(bests) / 2)


def test_warm_start_from_a_previous_sweep(ray_session, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    storage = tmp_path / "runs"
    first = hpo.tune(tiny("daily-1", "random", "fifo", num_samples=3), storage=storage)
    ranked = sorted(first.summary["trials"], key=lambda t: t["metric"], reverse=True)

    prior = hpo.tune(tiny("daily-2", "optuna-tpe", "fifo", num_samples=2), storage=storage,
                     warm_start="daily-1", warm_start_k=2, warm_start_mode="prior")
    study = optuna.load_study(study_name="daily-2", storage=study_url(storage / "daily-2"))
    seeded = [(t.params, t.value) for t in study.trials[:2]]
    assert seeded == [(t["params"], t["metric"]) for t in ranked[:2]]  # told, not rerun
    assert len(prior.summary["trials"]) == 2 and len(study.trials) == 4

    again = hpo.tune(tiny("daily-3", "optuna-tpe", "fifo", num_samples=2), storage=storage,
                     warm_start=str(first.summary_path), warm_start_k=1, warm_start_mode="reevaluate")
    rerun = [t["params"] for t in again.summary["trials"]]
    assert ranked[0]["params"] in rerun  # the previous best was trained again


def test_random_proposals_among_tpes_keep_the_contract(ray_session, tmp_path, monkeypatch):
    # search.random_fraction wraps TPE in a sampler of hpo's own: Ray's OptunaSearch runs it (define-by-run
    # space, stops told as PRUNED) and the study is told every trial, as with TPE alone.
    monkeypatch.chdir(tmp_path)
    config = tiny("interleaved", "optuna-tpe", "asha", startup_trials=1, random_fraction=0.5)
    trials = hpo.tune(config, storage=tmp_path / "runs").summary["trials"]
    assert len(trials) == 4 and all(t["status"] in ("completed", "stopped_early") for t in trials), trials
    study = optuna.load_study(study_name="interleaved", storage=study_url(tmp_path / "runs" / "interleaved"))
    states = (optuna.trial.TrialState.COMPLETE, optuna.trial.TrialState.PRUNED)
    assert sorted(round(t.params["learning_rate"], 10) for t in study.trials if t.state in states) == sorted(
        round(t["params"]["learning_rate"], 10) for t in trials)


def test_max_trials_is_honoured_exactly(ray_session, tmp_path, monkeypatch):
    # A 4-point grid capped at 3 trials: exactly 3 run, the first 3 points of the grid, all to the end.
    monkeypatch.chdir(tmp_path)
    config = tiny("capped", "grid", "fifo", max_trials=3)
    result = hpo.tune(config, storage=tmp_path / "runs")
    trials = result.summary["trials"]
    assert len(trials) == 3 and all(t["status"] == "completed" for t in trials)
    assert len({(t["params"]["units"], t["params"]["optimizer"]) for t in trials}) == 3
    assert len(list((tmp_path / "runs" / "capped").glob("hpo_trial_*"))) == 3


def test_time_budget_ends_the_sweep(ray_session, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    budget = 6
    config = tiny("budget", "random", "fifo", num_samples=200, time_budget_s=budget)
    # The budget runs from the Tuner's start; the checks before it (the first TensorFlow import and dataset
    # write, seconds when this test runs alone) are done here first so they do not count.
    from hpo.preflight import preflight

    preflight(config, tmp_path / "runs", "<test>")
    started = time.time()
    result = hpo.tune(config, storage=tmp_path / "runs")
    trials = result.summary["trials"]
    assert 1 <= len(trials) < 200  # the budget, not num_samples, ended it
    # No trial started after the budget ran out (results carry each trial's start time).
    for progress in (tmp_path / "runs" / "budget").glob("*/progress.csv"):
        first = pd.read_csv(progress).iloc[0]
        assert first["timestamp"] - first["time_total_s"] <= started + budget + 2


def test_goal_ends_the_sweep_at_the_first_epoch_that_reaches_it(ray_session, tmp_path, monkeypatch):
    # Random search, one trial at a time: the first trial's first epoch has some accuracy a > 0; a goal
    # just under it is reached right there, so no further epoch or trial runs.
    monkeypatch.chdir(tmp_path)
    config = with_goal(tiny("goal", "random", "fifo", num_samples=6, max_concurrent=1), 1e-6)
    result = hpo.tune(config, storage=tmp_path / "runs")
    trials = result.summary["trials"]
    # The trial ends as finished at that epoch (not cut by Tune); with real training its model is saved and
    # registered (test_schedulers_real.py).
    assert len(trials) == 1 and trials[0]["epochs"] == 1 and trials[0]["status"] == "completed"
    assert result.summary["goal"] == {"value": 1e-6, "reached": True, "trial_id": trials[0]["trial_id"]}
    from mlflow.tracking import MlflowClient

    client = MlflowClient(result.summary["mlflow"]["uri"])
    parent = client.get_run(result.summary["mlflow"]["parent_run_id"])
    assert parent.data.tags["hpo.goal_reached"] == "true"
    assert parent.data.tags["hpo.goal_trial_id"] == trials[0]["trial_id"]
    child = client.get_run(trials[0]["mlflow_run_id"])
    assert child.data.tags["hpo.status"] == "completed" and child.data.tags["hpo.stop_reason"] == "goal"


def test_unreachable_goal_runs_the_whole_budget(ray_session, tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    config = with_goal(tiny("nogoal", "random", "fifo", num_samples=2), 1.5)  # accuracy never exceeds 1
    result = hpo.tune(config, storage=tmp_path / "runs")
    trials = result.summary["trials"]
    assert len(trials) == 2 and all(t["status"] == "completed" and t["epochs"] == 3 for t in trials)
    assert result.summary["goal"] == {"value": 1.5, "reached": False, "trial_id": None}


def test_with_repeats_the_goal_waits_for_every_repeat_of_a_configuration(ray_session, tmp_path, monkeypatch):
    # Reached at the first epoch as above, but with 2 repeats: neither repeat is cut at that epoch (one
    # seed is not the configuration), both train to the end, and the sweep ends after them on their mean.
    monkeypatch.chdir(tmp_path)
    config = with_goal(tiny("goal-rep", "random", "fifo", num_samples=4, max_concurrent=1, repeats=2), 1e-6)
    result = hpo.tune(config, storage=tmp_path / "runs")
    trials = result.summary["trials"]
    assert len(trials) == 2 and sorted(t["repeat"] for t in trials) == [0, 1]
    assert trials[0]["params"] == trials[1]["params"]
    assert all(t["status"] == "completed" and t["epochs"] == 3 for t in trials)
    ids = [t["trial_id"] for t in trials]
    assert result.summary["goal"] == {"value": 1e-6, "reached": True, "trial_id": ids[0], "trial_ids": ids}
    from mlflow.tracking import MlflowClient

    client = MlflowClient(result.summary["mlflow"]["uri"])
    for t in trials:
        assert client.get_run(t["mlflow_run_id"]).data.tags.get("hpo.stop_reason") != "goal"


def test_asha_bootstrap_count_stops_the_first_trial_at_its_first_rung(ray_session, tmp_path, monkeypatch):
    # Tune's ASHA would let the first trial train to max_epochs (nothing to compare it with at rung 1). On the
    # simulated clock the stop reaches the trial before its next epoch ends: it stops exactly at its first rung.
    monkeypatch.chdir(tmp_path)
    config = tiny("bootstrap", "optuna-tpe", "asha", num_samples=2, max_concurrent=1)
    config = hpo.SweepConfig.model_validate({
        **config.model_dump(),
        "scheduler": {"type": "asha", "grace_period": 1, "reduction_factor": 3, "bootstrap_count": 1},
        "trial": {**config.trial.model_dump(), "max_epochs": 20, "early_stopping": {"patience": 20}},
    })
    result = hpo.tune(config, storage=tmp_path / "runs")
    first = result.summary["trials"][0]
    assert first["status"] == "stopped_early" and first["epochs"] == 1
    study = optuna.load_study(study_name="bootstrap", storage=study_url(tmp_path / "runs" / "bootstrap"))
    assert study.trials[0].state == optuna.trial.TrialState.PRUNED  # told to TPE, as ASHA's own stops are


def test_paused_trials_keep_every_epoch_of_their_history(ray_session, tmp_path, monkeypatch):
    # The median rule pauses a trial while too few others reached its epoch and trials wait; the trial
    # starts again from its checkpoint. Tune used to copy the storage's stale result file over the
    # driver's on that restart, leaving trials with a partial or empty history (no metric in the summary).
    monkeypatch.chdir(tmp_path)
    config = tiny("paused", "grid", "median")
    config = hpo.SweepConfig.model_validate(
        {**config.model_dump(), "trial": {**config.trial.model_dump(), "simulated_epoch_s": 0.05}})
    resumed = []
    for attempt in range(2):
        storage = tmp_path / f"runs{attempt}"
        result = hpo.tune(config, storage=storage)
        for trial in result.summary["trials"]:
            assert trial["metric"] is not None, trial
            (trial_dir,) = (storage / "paused").glob(f"hpo_trial_{trial['trial_id']}_*")
            lines = (trial_dir / "result.json").read_text().splitlines()
            history = [json.loads(line) for line in lines]
            assert [r["epoch"] for r in history] == list(range(1, trial["epochs"] + 1)), trial
            assert len(pd.read_csv(trial_dir / "progress.csv")) == trial["epochs"]
            resumed += [r["resumed_from_epoch"] for r in history if r["resumed_from_epoch"]]
    assert resumed  # some trial was paused and started again


def test_the_simulator_host_belongs_to_no_trials_placement_group(ray_session, tmp_path, monkeypatch):
    """The host is started by some trial; in that trial's placement group it would die when the trial ends."""
    import ray

    from hpo.trial.simhost import HOST_NAME, HOST_NAMESPACE

    monkeypatch.chdir(tmp_path)
    hpo.tune(tiny("host", "random", "fifo", num_samples=2), storage=tmp_path / "runs")
    host = ray.get_actor(HOST_NAME, namespace=HOST_NAMESPACE)
    assert ray.get(host.run.remote(lambda: ray.util.get_current_placement_group(), []), timeout=30) is None


def test_credentials_in_the_drivers_environment_reach_no_file(ray_session, tmp_path, monkeypatch):
    """Tune copies AWS credentials into every trial's runtime_env, which Ray logs in plain text; hpo stops that."""
    import subprocess

    import ray

    monkeypatch.chdir(tmp_path)
    secret = f"hpo-test-secret-{time.time_ns()}"
    monkeypatch.setenv("AWS_SECRET_ACCESS_KEY", secret)
    monkeypatch.setenv("AWS_SESSION_TOKEN", secret + "-token")
    hpo.tune(tiny("secrets", "random", "fifo", num_samples=2), storage=tmp_path / "runs")
    session = ray._private.worker._global_node.get_session_dir_path()
    found = subprocess.run(["grep", "-rl", secret, session, str(tmp_path)], capture_output=True, text=True)
    assert found.returncode == 1 and found.stdout == "", found.stdout  # 1: grep found nothing


def test_repeat_reruns_the_best_configurations_with_new_seeds_as_a_linked_sweep(ray_session, tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    monkeypatch.chdir(tmp_path)
    storage = tmp_path / "runs"
    first = hpo.tune(tiny("first", "random", "fifo", num_samples=4), storage=storage)
    ranked = sorted(first.summary["trials"], key=lambda t: t["metric"], reverse=True)
    again = hpo.repeat("first", top=2, repeats=2, storage=storage)
    summary = again.summary
    assert summary["name"] == "first-repeat" and summary["repeat_of"] == "first"
    trials = summary["trials"]
    assert len(trials) == 4 and all(t["status"] == "completed" and t["epochs"] == 3 for t in trials)
    configs = sorted(json.dumps(t["params"], sort_keys=True) for t in trials)
    assert configs == sorted(2 * [json.dumps(t["params"], sort_keys=True) for t in ranked[:2]])
    assert sorted(t["repeat"] for t in trials) == [0, 0, 1, 1]
    stats = summary["statistics"]
    assert [c["n"] for c in stats["configurations"]] == [2, 2] and stats["verdict"]
    assert summary["best"]["n"] == 2
    client = MlflowClient(summary["mlflow"]["uri"])
    parent = client.get_run(summary["mlflow"]["parent_run_id"])
    assert parent.data.tags["hpo.repeat_of"] == "first" and parent.data.tags["hpo.verdict"] == stats["verdict"]
    # The sweep wrote its HTML report and logged it on the parent run; a browser draws every figure.
    report = tmp_path / "runs" / "first-repeat" / "report.html"
    assert report.is_file() and "report.html" in [a.path for a in client.list_artifacts(parent.info.run_id)]
    _browser_draws_every_figure(report, tmp_path / "profile")


def _chromium(page: Path, profile: Path, *args: str) -> subprocess.CompletedProcess:
    """Headless chromium on a local page, its console messages on stderr (``:CONSOLE`` lines)."""
    return subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
                           "--disable-background-networking", "--enable-unsafe-swiftshader",
                           f"--user-data-dir={profile}", "--enable-logging=stderr", "--v=0",
                           "--virtual-time-budget=10000", *args, page.as_uri()],
                          capture_output=True, text=True, timeout=180)


def _console_messages(stderr: str) -> list[str]:
    """What the page wrote to the browser console (log, warning, error, uncaught exception alike).

    Left out: the software GL driver's performance notes on WebGL figures (``GL Driver Message … GPU stall``),
    which the browser itself writes on a machine without a GPU.
    """
    lines = [line.split("] ", 1)[-1] for line in stderr.splitlines() if ":CONSOLE" in line]
    return [line for line in lines if "GL Driver Message (OpenGL, Performance" not in line]


def _browser_draws_every_figure(report: Path, profile: Path) -> None:
    """Every figure drawn, nothing on the console, and a screenshot in ``test-artifacts/`` (or $HPO_TEST_ARTIFACTS)."""
    if shutil.which("chromium") is None:
        pytest.skip("Debian's chromium is not installed (make install-dev installs it as root)")
    # The console check can fail: a page with a script error is caught by it.
    broken = profile.parent / "broken.html"
    broken.write_text("<html><body><script>undefinedFunction();</script></body></html>")
    assert any("Uncaught ReferenceError" in m for m in _console_messages(_chromium(broken, profile).stderr))

    proc = _chromium(report, profile, "--dump-dom")
    assert proc.returncode == 0, proc.stderr[-2000:]
    figures = len(re.findall(r"<h2>", proc.stdout))
    drawn = len(re.findall(r'class="main-svg"', proc.stdout))
    assert figures >= 5 and drawn >= figures, (figures, drawn)  # plotly draws 2 svg layers per figure
    assert _console_messages(proc.stderr) == []
    artifacts = Path(os.environ.get("HPO_TEST_ARTIFACTS", ROOT / "test-artifacts"))
    artifacts.mkdir(parents=True, exist_ok=True)
    shot = artifacts / "report.png"
    taken = _chromium(report, profile, "--window-size=1280,3000", f"--screenshot={shot}")
    assert taken.returncode == 0 and shot.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n" and shot.stat().st_size > 50_000


def test_the_replay_of_hyperband_ends_each_trial_where_tune_did(ray_session, tmp_path, monkeypatch):
    """The replay's loop for pausing schedulers (what the search benchmark's HyperBand and BOHB peers run on)
    against Tune's own controller: the same sweep, the same synthetic curves, the same trials cut where."""
    from types import SimpleNamespace

    import numpy as np

    from hpo.replay import Curve, CurveTable, Task, replay_sweep
    from hpo.trial.simulated import SyntheticCurve

    monkeypatch.chdir(tmp_path)
    data = tiny("hyperband-replay", "random", "hyperband", num_samples=6, max_concurrent=6).model_dump()
    data["trial"].update(max_epochs=4, cpus_per_worker=0.25)  # six trials at once on the two CPUs
    data["scheduler"]["reduction_factor"] = 2  # brackets of r0 = 4 (three trials) and r0 = 2 (three, keeps two)
    config = hpo.SweepConfig.model_validate(data)
    real = hpo.tune(config, storage=tmp_path / "runs").summary["trials"]

    spec = SimpleNamespace(seed=config.search.seed or 0, max_epochs=4)
    params = [t["params"] for t in real]
    curves = {(i, 0): Curve(np.array([SyntheticCurve.for_trial(spec, p).accuracy(e) for e in range(1, 5)]),
                            np.full(4, 0.1)) for i, p in enumerate(params)}
    table = CurveTable(Task("simulated", config.objective.metric, config.objective.mode, 4, data["space"], "test"),
                       params, curves)
    replayed = replay_sweep(config, table)
    assert sorted(json.dumps(x.params, sort_keys=True) for x in replayed.trials) == sorted(
        json.dumps(p, sort_keys=True) for p in params)  # the same seeded proposals
    ends = {x.config_id: (len(x.values), x.stopped_by == "scheduler") for x in replayed.trials}
    assert [ends[i] for i in range(len(real))] == [(t["epochs"], t["status"] == "stopped_early") for t in real]
    assert sorted(ends.values()) == [(2, True)] + [(4, False)] * 5  # Tune halved the second bracket
