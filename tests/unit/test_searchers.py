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
