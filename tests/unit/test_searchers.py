"""What the searcher is told a trial scored: its best epoch, the value summary.json ranks by."""

from __future__ import annotations


def test_the_searcher_is_told_each_trials_best_epoch_as_the_summary_ranks_it():
    from hpo.search.searchers import BestEpochs

    bests = BestEpochs("val_accuracy", "max")
    for value in (0.5, 0.8, 0.7):
        bests.see("t1", {"val_accuracy": value})
    assert bests.final("t1", {"val_accuracy": 0.6, "epoch": 4}) == {"val_accuracy": 0.8, "epoch": 4}
    assert bests.final("t1", {"val_accuracy": 0.6}) == {"val_accuracy": 0.6}  # forgotten once told
    low = BestEpochs("val_loss", "min")
    low.see("t2", {"val_loss": float("nan")})
    assert low.final("t2", {"val_loss": 0.3}) == {"val_loss": 0.3} and low.final("t3", None) is None


def test_a_trial_the_restored_searcher_never_handed_out_is_taken_up_not_a_crash(tmp_path):
    """Tune restored a trial whose searcher state was saved before it: the study's RUNNING trial is taken up."""
    import optuna

    import hpo
    from hpo import compat
    from hpo.results import FINISHED_KEY
    from hpo.search import build_searcher
    from hpo.search.budget import TIME_ATTR
    from tests.conftest import base_sweep

    config = hpo.SweepConfig.model_validate(base_sweep(search={"algorithm": "random", "num_samples": 2, "seed": 1}))
    searcher = build_searcher(config, tmp_path)
    params = searcher.suggest("a")
    compat.optuna_search_trials(searcher).pop("a")  # as restored from a state saved before "a" was handed out
    flat = {f"config/{k}": v for k, v in params.items()}
    searcher.on_trial_result("a", {**flat, "val_accuracy": 0.5, TIME_ATTR: 1})
    searcher.on_trial_complete("a", {"config": params, "val_accuracy": 0.4, TIME_ATTR: 2, FINISHED_KEY: True})
    study = compat.optuna_search_study(searcher)
    (trial,) = study.get_trials()
    assert trial.state == optuna.trial.TrialState.COMPLETE and trial.value == 0.5  # its best epoch
    assert trial.intermediate_values == {1: 0.5}
    # A trial neither the searcher nor the study knows: its results and end are not told, and nothing raises.
    searcher.on_trial_result("z", {"config/learning_rate": 0.01, "val_accuracy": 0.9, TIME_ATTR: 1})
    searcher.on_trial_complete("z", {"val_accuracy": 0.9, TIME_ATTR: 1, FINISHED_KEY: True})
    assert len(study.get_trials()) == 1


def test_optuna_tpe_models_conditional_parameters_with_the_others_and_warns_nothing():
    """``group``: a parameter only some trials have is modelled with the rest, not drawn at random."""
    import warnings

    import optuna

    import hpo
    from hpo.search.searchers import _tpe
    from tests.conftest import base_sweep

    config = hpo.SweepConfig.model_validate(base_sweep(search={"algorithm": "optuna-tpe", "seed": 3}))
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        ours = _tpe(config)

    def proposals(sampler):
        """The last 4 of 20 trials whose best points need a conditional parameter near 0.8; 2 in 3 pruned."""
        optuna.logging.set_verbosity(optuna.logging.ERROR)
        study = optuna.create_study(sampler=sampler)
        asked = []
        for number in range(20):
            trial = study.ask()
            kind = trial.suggest_categorical("kind", ["a", "b"])
            x = trial.suggest_float("x", 0, 1)
            m = trial.suggest_float("m", 0, 1) if kind == "a" else None
            value = (x - 0.3) ** 2 + ((m - 0.8) ** 2 if m is not None else 0.5)
            trial.report(value, 1)
            if number % 3:  # as ASHA stops most trials: hpo tells them PRUNED
                study.tell(trial, state=optuna.trial.TrialState.PRUNED)
            else:
                study.tell(trial, value)
            asked.append((kind, x, m))
        return asked[-4:]

    from hpo.search.matched import BudgetMatched

    def grouped(matched):
        with warnings.catch_warnings():
            warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)
            model = optuna.samplers.TPESampler(seed=3, multivariate=True, group=True)
        return BudgetMatched(model) if matched else model

    assert proposals(ours) == proposals(grouped(True))
    assert proposals(grouped(False)) != proposals(optuna.samplers.TPESampler(seed=3))  # group changes proposals
    assert proposals(grouped(True)) != proposals(grouped(False))  # all at epoch 1: ranked by value, not state
