"""Searcher and scheduler kinds: one registration makes a kind, and everything hpo derives reads the kind."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import pytest

from hpo import kinds
from hpo.config import parse_sweep
from hpo.errors import ConfigError
from hpo.kinds import Extra, ForecastRule, SchedulerKind, SearcherKind
from hpo.progress import SweepPlan, TrialHistory, estimate_sweep, pools
from tests.conftest import base_sweep, hpo_cli


def toy_searcher(config, sweep_dir, resume, warm_points, warm_mode):
    return ("toy searcher", config.name)


def toy_scheduler(config):
    return ("toy scheduler", config.scheduler.grace_period)


@dataclass(frozen=True)
class StopAtTwo:
    """A toy forecast rule: the scheduler stops every trial at epoch 2."""

    def stops(self, stops, paths, observed, others, plan):
        return np.minimum(stops, max(2, len(observed)))

    def replayed(self, ys, plan):
        return np.array([2.0 if len(y) > 2 else np.inf for y in ys])


@pytest.fixture
def toys():
    """A toy searcher (no study, no grid, no warm start) and a toy scheduler, registered for one test."""
    searcher = kinds.register_searcher(SearcherKind("toy-search", toy_searcher, instead="random"))
    scheduler = kinds.register_scheduler(SchedulerKind("toy-stop", toy_scheduler, forecast=StopAtTwo()))
    yield searcher, scheduler
    del kinds.SEARCHERS[searcher.name], kinds.SCHEDULERS[scheduler.name]


def error_of(data: dict) -> str:
    with pytest.raises(ConfigError) as info:
        parse_sweep(data, "s.yaml")
    return str(info.value)


def test_a_scheduler_without_a_forecast_rule_is_refused_at_registration():
    with pytest.raises(ValueError) as info:
        kinds.register_scheduler(SchedulerKind("toy-stop", toy_scheduler))
    assert str(info.value) == (
        "scheduler 'toy-stop': no forecast rule (got None); pass forecast=, an object with stops() and replayed() "
        "(hpo.kinds.ForecastRule), or the progress forecast would not know where it stops trials"
    )
    with pytest.raises(ValueError, match="no forecast rule"):
        SchedulerKind("toy-stop", toy_scheduler, forecast=lambda ys, plan: ys)  # not a ForecastRule
    assert "toy-stop" not in kinds.SCHEDULERS


def test_a_registration_is_checked():
    with pytest.raises(ValueError, match=r"^searcher 'toy-search': it cannot queue configurations .* instead=NAME"):
        SearcherKind("toy-search", toy_searcher)
    with pytest.raises(ValueError, match=r"^searcher 'toy-search': instead 'grid' is not a registered searcher "
                                         r"that can queue configurations; use one of 'optuna-tpe', 'optuna-gp' or "
                                         r"'random'$"):
        kinds.register_searcher(SearcherKind("toy-search", toy_searcher, instead="grid"))
    with pytest.raises(ValueError, match=r"^searcher 'random' is registered already; pick another name$"):
        kinds.register_searcher(SearcherKind("random", toy_searcher, warm_start=True))
    with pytest.raises(ValueError, match=r"^scheduler name 'Toy Stop' is not lower-case"):
        SchedulerKind("Toy Stop", toy_scheduler, forecast=StopAtTwo())
    with pytest.raises(ValueError, match=r"^scheduler 'toy-stop': factory 'asha' is not callable"):
        SchedulerKind("toy-stop", "asha", forecast=StopAtTwo())  # type: ignore[arg-type]
    with pytest.raises(ValueError, match=r"^'hpo.search.schedulers.fifo' is not 'package.module:function'"):
        kinds.Ref("hpo.search.schedulers.fifo")
    assert "toy-search" not in kinds.SEARCHERS and kinds.SEARCHERS["random"].factory is not toy_searcher


def test_every_built_in_kind_has_its_tune_factory_and_forecast_rule():
    for kind in [*kinds.SEARCHERS.values(), *kinds.SCHEDULERS.values()]:
        assert callable(kind.factory.resolve()), kind.name  # the Ref names a function of hpo.search
    assert all(isinstance(k.forecast, ForecastRule) for k in kinds.SCHEDULERS.values())
    assert [n for n, k in kinds.SEARCHERS.items() if k.study] == ["optuna-tpe", "optuna-gp", "random"]
    assert [n for n, k in kinds.SEARCHERS.items() if k.grid] == ["grid"]


def test_a_toy_kind_is_a_sweep_file_value_and_hpo_derives_its_rules_from_it(toys):
    from hpo.repeats import repeat_config
    from hpo.search import SearchSpace, build_scheduler, build_searcher, tune_num_samples

    config = parse_sweep(base_sweep(search={"algorithm": "toy-search", "num_samples": 3, "repeats": 1},
                                    scheduler={"type": "toy-stop", "grace_period": 4}), "s.yaml")
    assert config.search.kind is toys[0] and config.scheduler.kind is toys[1]
    assert build_searcher(config, None) == ("toy searcher", "t")
    assert build_scheduler(config) == ("toy scheduler", 4)
    assert tune_num_samples(config) == 3 and SearchSpace(config).param_space() == {}  # not a grid
    repeat = repeat_config(config, top=2, repeats=3)
    assert repeat.search.algorithm == "random" and repeat.scheduler.type == "fifo"  # it cannot queue: instead

    msg = error_of(base_sweep(search={"algorithm": "bohb"}))
    assert msg == ("s.yaml: search.algorithm: 'bohb' is not allowed; use one of 'optuna-tpe', 'optuna-gp', 'random', "
                   "'grid' or 'toy-search'")
    assert error_of(base_sweep(search={"algorithm": "toy-search"}, space={"units": {"type": "grid", "values": [8]}})) \
        == ("s.yaml: space.units: grid parameters need search.algorithm: grid (not toy-search); set it, or make the "
            "parameter categorical")
    assert error_of(base_sweep(search={"algorithm": "toy-search", "startup_trials": 3})) == (
        "s.yaml: search.startup_trials: only optuna-tpe and optuna-gp have random start-up trials (not toy-search); "
        "set search.algorithm: optuna-tpe, or remove it")
    assert error_of(base_sweep(scheduler={"type": "toy-stop", "bootstrap_count": 2})) == (
        "s.yaml: scheduler.bootstrap_count: only the asha scheduler has it (not toy-stop); remove it or use type: asha")
    parse_sweep(base_sweep(scheduler={"type": "toy-stop", "grace_period": 50}), "s.yaml")  # no rungs: no limit


def test_warm_start_needs_a_kind_that_can_take_one(toys, tmp_path):
    from hpo.options import RunOptions, WarmStart
    from hpo.sweep import _warm_points

    config = parse_sweep(base_sweep(search={"algorithm": "toy-search"}), "s.yaml")
    with pytest.raises(ConfigError) as info:
        _warm_points(config, RunOptions(storage=tmp_path, warm_start=WarmStart("earlier")), "s.yaml")
    assert str(info.value) == ("s.yaml: search.algorithm: --warm-start needs an Optuna-backed searcher "
                               "(optuna-tpe, optuna-gp, random), not toy-search")
    random = parse_sweep(base_sweep(search={"algorithm": "random"}), "s.yaml")  # prior would tell it nothing
    with pytest.raises(ConfigError, match=r"^s\.yaml: search\.algorithm: --warm-start-mode prior tells a model"):
        _warm_points(random, RunOptions(storage=tmp_path, warm_start=WarmStart("earlier", mode="prior")), "s.yaml")


def test_preflight_names_the_extra_a_kind_needs(tmp_path, write_sweep):
    kinds.register_searcher(SearcherKind("toy-extra", toy_searcher, warm_start=True,
                                         needs=Extra("hpo_no_such_module", "hpo-no-such==1.0", instead="random")))
    try:
        path = write_sweep(base_sweep(search={"algorithm": "toy-extra"}))
        out = hpo_cli("validate", path, "--offline", cwd=tmp_path)
    finally:
        del kinds.SEARCHERS["toy-extra"]
    assert out.returncode == 2
    assert (f"{path.name}: search.algorithm: toy-extra needs hpo_no_such_module, which is not installed; run "
            "'.venv/bin/pip install hpo-no-such==1.0' or use random") in " ".join((out.stdout + out.stderr).split())


def test_the_forecast_replays_a_toy_schedulers_own_rule(toys, monkeypatch):
    monkeypatch.setattr(pools, "PRIOR_WEIGHT", 0.0)  # pending trials drawn from the started ones only
    ended = [TrialHistory([0.5 + 0.01 * e for e in range(10)], [1.0] * 10, "finished") for _ in range(4)]

    def epochs(scheduler: str) -> int:
        plan = SweepPlan(planned_trials=8, max_concurrent=2, max_epochs=10, scheduler=scheduler)
        return estimate_sweep(ended, plan).epochs_median

    assert epochs("fifo") == 8 * 10  # the pending four train as long as the ended ones did
    assert epochs("toy-stop") == 4 * 10 + 4 * 2  # replayed: the toy scheduler would stop them at epoch 2


def test_an_unregistered_scheduler_has_no_forecast():
    with pytest.raises(ValueError, match=r"^scheduler must be asha, hyperband, median or fifo, not 'toy-stop'$"):
        SweepPlan(planned_trials=1, max_concurrent=1, max_epochs=3, scheduler="toy-stop")
