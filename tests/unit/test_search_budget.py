"""search.max_trials and search.startup_trials: validation, the planned trial count, the samplers built."""

from __future__ import annotations

import pytest
from ray.tune.experiment import Experiment

from hpo import kinds
from hpo.config import parse_sweep
from hpo.errors import ConfigError
from hpo.search import CappedGrid, SearchSpace, planned_trials
from tests.conftest import base_sweep


def as_rows(rows):
    from hpo.trial.protocol import TrialRow

    return [TrialRow.from_dict({"status": "completed", "epochs": 1, "stopped_early": False, **r}) for r in rows]


def sweep(**search):
    return parse_sweep(base_sweep(search={"algorithm": "random", "num_samples": 6, **search}), "s.yaml")


def test_max_trials_caps_the_planned_trials():
    assert planned_trials(sweep()) == 6
    assert planned_trials(sweep(max_trials=4)) == 4
    assert planned_trials(sweep(max_trials=40)) == 6
    assert planned_trials(sweep(repeats=2)) == 12
    assert planned_trials(sweep(repeats=2, max_trials=8)) == 8


def test_max_trials_must_keep_repeats_whole():
    with pytest.raises(ConfigError) as info:
        sweep(repeats=3, max_trials=7)
    assert str(info.value) == (
        "s.yaml: search.max_trials: 7 is not a multiple of search.repeats (3): a configuration would run "
        "fewer repeats than asked; use a multiple of 3"
    )


def test_startup_trials_only_for_model_based_samplers():
    with pytest.raises(ConfigError) as info:
        sweep(startup_trials=3)
    assert "search.startup_trials: only optuna-tpe and optuna-gp have random start-up trials" in str(info.value)


@pytest.mark.parametrize("algorithm", ["optuna-tpe", "optuna-gp"])
def test_startup_trials_reach_the_optuna_sampler(algorithm):
    config = sweep(algorithm=algorithm, startup_trials=3, random_fraction=0.0, seed=1)
    sampler = kinds.searcher(algorithm).factory.resolve().sampler
    assert sampler(config).model._n_startup_trials == 3  # the model inside BudgetMatched
    assert sampler(sweep(algorithm=algorithm, random_fraction=0.0)).model._n_startup_trials == 10  # Optuna's


def test_capped_grid_hands_out_at_most_max_trials():
    config = parse_sweep(base_sweep(
        search={"algorithm": "grid", "num_samples": 4},
        space={"units": {"type": "grid", "values": [8, 16]},
               "optimizer": {"type": "grid", "values": ["adam", "sgd"]}},
    ), "s.yaml")

    def handed_out(cap):
        grid = CappedGrid(cap, random_state=0)
        grid.add_configurations([Experiment("g", lambda config: None, config=SearchSpace(config).param_space())])
        trials = []
        while (trial := grid.next_trial()) is not None:
            trials.append(trial.config)
        return trials, grid.is_finished()

    every, finished = handed_out(None)
    assert len(every) == 4 and finished
    assert {(t["units"], t["optimizer"]) for t in every} == {(8, "adam"), (8, "sgd"), (16, "adam"), (16, "sgd")}
    capped, finished = handed_out(3)
    assert capped == every[:3] and finished


def test_resumed_searcher_ignores_results_of_trials_the_study_already_finished(tmp_path):
    """A sweep killed between Tune's state save and the study's write resumes instead of stopping."""
    import optuna

    from hpo.search import build_searcher

    config = sweep(algorithm="optuna-tpe", seed=3)
    searcher = build_searcher(config, tmp_path)
    assert searcher.suggest("t1") is not None
    searcher.on_trial_result("t1", {"val_accuracy": 0.5, "training_iteration": 1})
    searcher.save(str(tmp_path / "searcher.pkl"))  # Tune's last experiment-state save before the kill
    searcher.on_trial_complete("t1", {"val_accuracy": 0.6, "training_iteration": 2})  # written to optuna.db

    resumed = build_searcher(config, tmp_path, resume=True)
    resumed.restore(str(tmp_path / "searcher.pkl"))
    resumed.on_trial_result("t1", {"val_accuracy": 0.55, "training_iteration": 2})  # Tune re-runs t1
    resumed.on_trial_complete("t1", {"val_accuracy": 0.61, "training_iteration": 2})
    assert resumed.suggest("t2") is not None  # the sweep goes on

    study = optuna.load_study(study_name=config.name, storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    first = study.trials[0]
    assert first.state == optuna.trial.TrialState.COMPLETE and first.value == 0.6  # told once, not changed
    assert first.intermediate_values == {1: 0.5}


def test_scheduler_stops_are_told_as_optuna_prunes_with_their_last_value(tmp_path):
    import optuna

    from hpo.search import build_searcher

    config = sweep(algorithm="optuna-tpe", seed=4)
    searcher = build_searcher(config, tmp_path)
    for trial_id in ("cut", "done", "failed"):
        assert searcher.suggest(trial_id) is not None
        searcher.on_trial_result(trial_id, {"val_accuracy": 0.4, "training_iteration": 1})
    # ASHA stops "cut" at its second epoch: Tune hands that result to on_trial_complete only.
    searcher.on_trial_complete("cut", {"val_accuracy": 0.5, "training_iteration": 2, "trial_finished": False})
    searcher.on_trial_complete("done", {"val_accuracy": 0.9, "training_iteration": 2, "trial_finished": True})
    searcher.on_trial_complete("failed", None, error=True)

    study = optuna.load_study(study_name=config.name, storage=f"sqlite:///{tmp_path / 'optuna.db'}")
    cut, done, failed = study.trials
    assert cut.state == optuna.trial.TrialState.PRUNED and cut.value == 0.5
    assert cut.intermediate_values == {1: 0.4, 2: 0.5}
    assert done.state == optuna.trial.TrialState.COMPLETE and done.value == 0.9
    assert failed.state == optuna.trial.TrialState.FAIL


def test_goal_stopper_ends_the_sweep_once_one_result_reaches_the_goal():
    from hpo.search import GoalStopper, build_stopper

    assert build_stopper(parse_sweep(base_sweep())) is None
    stopper = build_stopper(parse_sweep(base_sweep(objective={"metric": "val_accuracy", "goal": 0.9})))
    assert isinstance(stopper, GoalStopper) and not stopper.stop_all()
    assert stopper("a", {"val_accuracy": 0.89}) is False and not stopper.stop_all()
    assert stopper("b", {"val_accuracy": float("nan")}) is False and not stopper.stop_all()
    assert stopper("c", {"loss": 0.1}) is False and not stopper.stop_all()
    assert stopper("d", {"val_accuracy": 0.9}) is False  # single trials are not stopped; the sweep is
    assert stopper.reached_by == "d"
    stopper("e", {"val_accuracy": 0.95})
    assert stopper.reached_by == "d"  # the first one is kept

    class Trial:
        def __init__(self, trial_id: str) -> None:
            self.trial_id = trial_id

    # Not before "d" has ended: stopping it while Tune saves its last checkpoint would lose it.
    assert not stopper.stop_all()
    stopper.on_trial_complete(0, [], Trial("e"))
    assert not stopper.stop_all()
    stopper.on_trial_complete(0, [], Trial("d"))
    assert stopper.stop_all()
    failed = build_stopper(parse_sweep(base_sweep(objective={"metric": "val_accuracy", "goal": 0.9})))
    failed("d", {"val_accuracy": 0.91})
    failed.on_trial_error(0, [], Trial("d"))
    assert failed.stop_all()

    low = GoalStopper("val_loss", "min", 0.2)
    assert not low.reached(0.21) and low.reached(0.2) and low.reached(0.1)


def test_summary_goal_names_the_first_trial_that_reached_it():
    from hpo.summary import goal_status

    config = parse_sweep(base_sweep(objective={"metric": "val_accuracy", "goal": 0.9}))
    rows = [{"trial_id": "x_00000", "metric": 0.8}, {"trial_id": "x_00001", "metric": 0.92},
            {"trial_id": "x_00002", "metric": 0.95}, {"trial_id": "x_00003", "metric": None}]
    rows = as_rows(rows)
    assert goal_status(config, rows).model_dump(exclude_unset=True) == {"value": 0.9, "reached": True,
                                                                         "trial_id": "x_00001"}
    assert goal_status(config, rows[:1]).model_dump(exclude_unset=True) == {"value": 0.9, "reached": False,
                                                                             "trial_id": None}


def test_time_budget_counts_from_the_sweep_start_not_tunes():
    import time

    from hpo.tuner import remaining_budget

    assert remaining_budget(None, time.time()) is None
    left = remaining_budget(60, time.time() - 5)  # 5 s went to the MLflow run and checks before Tune
    assert 54 < left <= 55
    assert remaining_budget(3, time.time() - 10) == 0.001  # spent already: Tune starts no trial


def test_goal_check_takes_numpy_scalars_as_keras_logs_them():
    import numpy as np

    from hpo.objective import reaches_goal

    assert reaches_goal(np.float32(0.95), 0.9, "max") and not reaches_goal(np.float32(0.85), 0.9, "max")
    assert reaches_goal(np.float64(0.1), 0.2, "min") and not reaches_goal(np.float32("nan"), 0.2, "min")
    assert not reaches_goal(None, 0.9, "max")


class _Trial:
    """What the goal stopper reads of a Tune trial: its id and config."""

    def __init__(self, trial_id: str, repeat: int, **params: object) -> None:
        from hpo.results import REPEAT_KEY

        self.trial_id = trial_id
        self.config = {**params, REPEAT_KEY: repeat}


def test_with_repeats_the_goal_is_the_mean_of_a_configurations_repeats():
    from hpo.search import build_stopper

    config = parse_sweep(base_sweep(objective={"metric": "val_accuracy", "goal": 0.9},
                                    search={"algorithm": "random", "num_samples": 4, "repeats": 2}))
    stopper = build_stopper(config)
    # Configuration A: one lucky repeat (0.95) but a mean of 0.875, so the sweep goes on.
    stopper("a0", {"val_accuracy": 0.7})
    stopper("a0", {"val_accuracy": 0.95})
    stopper("a0", {"val_accuracy": 0.93})  # its best epoch (0.95) is what counts, not its last
    stopper("a1", {"val_accuracy": 0.8})
    assert stopper.reached_by is None  # no single epoch ends anything with repeats
    stopper.on_trial_complete(0, [], _Trial("a0", 0, lr=0.1))
    stopper.on_trial_complete(0, [], _Trial("a1", 1, lr=0.1))
    assert not stopper.stop_all() and stopper.reached_by is None
    # Configuration B: 0.91 and 0.9 → mean 0.905, reached once both repeats have ended.
    stopper("b0", {"val_accuracy": 0.91})
    stopper("b1", {"val_accuracy": 0.9})
    stopper("b1", {"val_accuracy": float("nan")})
    stopper.on_trial_complete(0, [], _Trial("b1", 1, lr=0.2))
    assert not stopper.stop_all()  # one repeat of B still running
    stopper.on_trial_complete(0, [], _Trial("b0", 0, lr=0.2))
    assert stopper.stop_all() and stopper.reached_by == "b0"


def test_with_repeats_a_failed_repeat_keeps_its_configuration_from_the_goal():
    from hpo.search import GoalStopper

    stopper = GoalStopper("val_loss", "min", 0.2, repeats=2)
    stopper("c0", {"val_loss": 0.1})
    stopper.on_trial_complete(0, [], _Trial("c0", 0, lr=0.3))
    stopper.on_trial_error(0, [], _Trial("c1", 1, lr=0.3))  # failed before its first epoch
    assert not stopper.stop_all() and stopper.reached_by is None


def test_with_repeats_the_worker_does_not_end_a_trial_at_the_goal():
    from hpo.trial.spec import TrialSpec

    objective = {"metric": "val_accuracy", "goal": 0.9}
    one = parse_sweep(base_sweep(objective=objective))
    two = parse_sweep(base_sweep(objective=objective, search={"algorithm": "random", "num_samples": 2,
                                                              "repeats": 2}))
    assert TrialSpec.from_config(one, None, None).goal == 0.9
    assert TrialSpec.from_config(two, None, None).goal is None


def test_summary_goal_with_repeats_takes_the_configurations_mean():
    from hpo.summary import goal_status

    config = parse_sweep(base_sweep(objective={"metric": "val_accuracy", "goal": 0.9},
                                    search={"algorithm": "random", "num_samples": 3, "repeats": 2}))
    rows = [{"trial_id": "x_00000", "params": {"lr": 1}, "metric": 0.95},  # lucky repeat, mean 0.875
            {"trial_id": "x_00001", "params": {"lr": 1}, "metric": 0.8},
            {"trial_id": "x_00002", "params": {"lr": 2}, "metric": 0.91},
            {"trial_id": "x_00003", "params": {"lr": 2}, "metric": 0.9},
            {"trial_id": "x_00004", "params": {"lr": 3}, "metric": 0.99},
            {"trial_id": "x_00005", "params": {"lr": 3}, "metric": None}]  # failed repeat
    rows = as_rows(rows)
    assert goal_status(config, rows).model_dump(exclude_unset=True) == {
        "value": 0.9, "reached": True, "trial_id": "x_00002", "trial_ids": ["x_00002", "x_00003"]}
    assert goal_status(config, rows[:2] + rows[4:]).reached is False


@pytest.mark.parametrize(("key", "value"), [("random_fraction", 0.3), ("random_after", 30)])
def test_random_trial_keys_only_for_model_based_samplers(key, value):
    with pytest.raises(ConfigError) as info:
        sweep(**{key: value})
    assert str(info.value) == (
        f"s.yaml: search.{key}: only optuna-tpe and optuna-gp model their proposals (not random); "
        "set search.algorithm: optuna-tpe, or remove it"
    )


@pytest.mark.parametrize("algorithm", ["optuna-tpe", "optuna-gp"])
def test_random_fraction_wraps_the_optuna_sampler(algorithm):
    from hpo.search.interleave import RandomInterleaved

    build = kinds.searcher(algorithm).factory.resolve().sampler
    sampler = build(sweep(algorithm=algorithm, startup_trials=3, random_fraction=0.25, seed=1))
    assert isinstance(sampler, RandomInterleaved)
    assert sampler.fraction == 0.25 and sampler.model.model._n_startup_trials == 3  # TPE in BudgetMatched
    assert not isinstance(build(sweep(algorithm=algorithm, random_fraction=0.0)), RandomInterleaved)  # the model alone


def test_tpe_has_half_its_trials_random_from_trial_60_unless_told_and_gp_none():
    tpe = sweep(algorithm="optuna-tpe").search
    assert (tpe.random_fraction, tpe.random_after, tpe.random_share, tpe.random_start) == (None, None, 0.5, 60)
    gp, random = sweep(algorithm="optuna-gp").search, sweep().search  # neither judged with one, or no model
    assert (gp.random_share, random.random_share) == (0.0, 0.0)
    sampler = kinds.searcher("optuna-tpe").factory.resolve().sampler(sweep(algorithm="optuna-tpe", seed=1))
    assert (sampler.fraction, sampler.after) == (0.5, 60)
    told = sweep(algorithm="optuna-tpe", random_fraction=0.25, random_after=0).search
    assert (told.random_share, told.random_start) == (0.25, 0)


def test_mlflow_params_name_the_random_share_and_matching_the_searcher_runs():
    from hpo.tracking.sweep_tracker import flat_params

    params = flat_params(sweep(algorithm="optuna-tpe"))  # the file leaves all three to TPE
    assert (params["search.random_fraction"], params["search.random_after"], params["search.match_budget"]) == (
        0.5, 60, True)
    told = flat_params(sweep(algorithm="optuna-gp", random_fraction=0.25, match_budget=False))
    assert (told["search.random_fraction"], told["search.random_after"], told["search.match_budget"]) == (
        0.25, 0, False)
    plain = flat_params(sweep())  # random search has none of them: logged as the file has them
    assert (plain["search.random_fraction"], plain["search.random_after"], plain["search.match_budget"]) == (
        None, None, None)


def test_random_after_only_with_a_random_fraction():
    with pytest.raises(ConfigError) as info:
        sweep(algorithm="optuna-tpe", random_fraction=0.0, random_after=30)
    assert str(info.value) == (
        "s.yaml: search.random_after: has no effect with search.random_fraction 0 (no trial is random); "
        "set search.random_fraction, or remove it"
    )
    with pytest.raises(ConfigError, match=r"search\.random_after"):
        sweep(algorithm="optuna-tpe", random_fraction=0.5, random_after=-1)


@pytest.mark.parametrize("algorithm", ["optuna-tpe", "optuna-gp"])
def test_random_after_reaches_the_interleaving_sampler(algorithm):
    build = kinds.searcher(algorithm).factory.resolve().sampler
    sampler = build(sweep(algorithm=algorithm, random_fraction=0.5, random_after=30, seed=1))
    assert (sampler.fraction, sampler.after) == (0.5, 30)
    assert build(sweep(algorithm=algorithm, random_fraction=0.5, random_after=0, seed=1)).after == 0


def test_match_budget_only_for_model_based_samplers():
    with pytest.raises(ConfigError) as info:
        sweep(match_budget=True)
    assert str(info.value) == (
        "s.yaml: search.match_budget: only optuna-tpe and optuna-gp model their proposals (not random); "
        "set search.algorithm: optuna-tpe, or remove it"
    )
    assert sweep().search.match_budget is None and sweep(match_budget=False).search.match_budget is False


@pytest.mark.parametrize("algorithm", ["optuna-tpe", "optuna-gp"])
def test_match_budget_shows_the_model_trials_compared_at_one_budget(algorithm):
    from hpo.search.interleave import RandomInterleaved
    from hpo.search.matched import BudgetMatched

    build = kinds.searcher(algorithm).factory.resolve().sampler
    sampler = build(sweep(algorithm=algorithm, startup_trials=3, match_budget=True, random_fraction=0.0, seed=1))
    assert isinstance(sampler, BudgetMatched) and sampler.model._n_startup_trials == 3
    both = build(sweep(algorithm=algorithm, match_budget=True, random_fraction=0.25, seed=1))
    assert isinstance(both, RandomInterleaved) and isinstance(both.model, BudgetMatched)  # random ones stay random
    default = build(sweep(algorithm=algorithm))  # TPE's random share wraps the matched model
    assert isinstance(default.model if algorithm == "optuna-tpe" else default, BudgetMatched)
    assert not isinstance(build(sweep(algorithm=algorithm, match_budget=False, random_fraction=0.0)), BudgetMatched)
    assert isinstance(build(sweep(algorithm=algorithm, random_fraction=0.25)).model, BudgetMatched)
