"""What pending trials are drawn from: the started trials replayed under today's cut-offs, at their mean cost."""

from __future__ import annotations

import numpy as np
import pytest

from hpo import kinds
from hpo.progress import SweepPlan, TrialHistory, estimate_sweep, pools


def replayed_stops(scheduler: str, ys: list, grace_period: int, reduction_factor: float, max_epochs: int):
    """The scheduler kind's forecast rule replaying ``ys`` (as many trials at once as HyperBand's brackets hold)."""
    plan = SweepPlan(planned_trials=len(ys), max_concurrent=100, max_epochs=max_epochs, scheduler=scheduler,
                     grace_period=grace_period, reduction_factor=reduction_factor)
    return kinds.scheduler(scheduler).forecast.replayed(ys, plan)


def flat(value: float, epochs: int = 8) -> np.ndarray:
    return np.full(epochs, value)


def test_asha_replay_cuts_a_trial_that_passed_a_rung_unopposed():
    ys = [flat(0.1), flat(0.6), flat(0.5), flat(0.55)]  # the first, poor one reached every rung alone
    cuts = replayed_stops("asha", ys, grace_period=1, reduction_factor=2, max_epochs=8)
    # rung 1: the others' median is the cut-off; 0.1 and 0.5 fall below theirs, 0.6 and 0.55 do not
    assert list(cuts) == [1, np.inf, 1, np.inf]
    assert list(replayed_stops("hyperband", ys, 3, 2, 8)) == [1, np.inf, 1, np.inf]  # hyperband: grace 1
    assert np.isinf(replayed_stops("fifo", ys, 1, 2, 8)).all()


def test_asha_replay_leaves_a_trial_that_ended_before_the_rung():
    ys = [flat(0.1, 1), flat(0.6, 8), flat(0.5, 8), flat(0.55, 8)]
    cuts = replayed_stops("asha", ys, grace_period=2, reduction_factor=2, max_epochs=8)
    assert np.isinf(cuts[0])  # one epoch: it never reached rung 2
    assert cuts[2] == 2


def test_median_replay_needs_three_others_and_cuts_below_their_median():
    ys = [flat(0.1), flat(0.6), flat(0.5), flat(0.55)]
    cuts = replayed_stops("median", ys, grace_period=3, reduction_factor=2, max_epochs=8)
    assert cuts[0] == 3 and np.isinf(cuts[1])  # from the grace period on
    assert np.isinf(replayed_stops("median", ys[:3], 1, 2, 8)).all()  # two others only


@pytest.mark.parametrize("scheduler", ["asha", "hyperband", "median", "fifo"])
def test_replay_never_raises_on_odd_curves(scheduler):
    odd = [np.array([]), np.array([np.nan, np.inf]), np.array([-np.inf, 1.0, np.nan]), flat(1e308, 60)]
    for ys, max_epochs in ((odd, 50), (odd, 1), ([], 10), (odd, 0)):
        cuts = replayed_stops(scheduler, ys, grace_period=5, reduction_factor=3, max_epochs=max_epochs)
        assert cuts.shape == (len(ys),)


def test_pending_trials_of_an_asha_sweep_meet_the_cut_offs_the_first_ones_did_not(monkeypatch):
    monkeypatch.setattr(pools, "PRIOR_WEIGHT", 0.0)
    ended = [TrialHistory(list(flat(v, 20)), [1.0] * 20, "finished") for v in (0.1, 0.6, 0.5, 0.55)]
    kwargs = {"planned_trials": 12, "max_concurrent": 1, "max_epochs": 20}
    fifo = estimate_sweep(ended, SweepPlan(**kwargs, scheduler="fifo"))
    asha = estimate_sweep(ended, SweepPlan(**kwargs, scheduler="asha"))
    assert fifo.epochs_median == 80 + 8 * 20
    # replayed, two of the four stop at rung 1: the eight pending trials train about 8 × 10.5 epochs
    assert 80 + 8 * 5 < asha.epochs_median < 80 + 8 * 16
    assert asha.remaining_s_median < 0.8 * fifo.remaining_s_median


def test_an_epoch_costs_the_mean_of_the_epochs_after_the_first():
    assert pools.mean_cost([2.0, 1.0, 1.0, 4.0]) == 2.0
    assert pools.mean_cost([3.0]) is None and pools.mean_cost(None) is None


def test_a_pending_trial_pays_the_mean_epoch_cost(monkeypatch):
    monkeypatch.setattr(pools, "PRIOR_WEIGHT", 0.0)
    ended = TrialHistory([0.5, 0.6, 0.7, 0.8], [2.0, 1.0, 1.0, 4.0], "finished")  # a slow epoch among steady ones
    plan = SweepPlan(planned_trials=2, max_concurrent=1, max_epochs=30, scheduler="fifo")
    e = estimate_sweep([ended], plan)
    assert e.remaining_s_median == pytest.approx(1.0 + 4 * 2.0)  # first epoch's extra + 4 epochs at the mean


def test_measured_costs_count_as_half_a_draw(monkeypatch):
    known = np.array([1.0, 2.0, 4.0])
    spread = {}
    for concentration in (1.0, pools.COST_CONCENTRATION):
        monkeypatch.setattr(pools, "COST_CONCENTRATION", concentration)
        means = pools.draw_costs(known, 40, 4000, np.random.default_rng(0)).mean(axis=1)
        spread[concentration] = np.percentile(means, 90) - np.percentile(means, 10)
    assert pools.COST_CONCENTRATION == 0.5
    assert spread[0.5] > 1.15 * spread[1.0]


def test_the_median_replay_takes_the_median_of_an_even_number_of_others():
    ys = [flat(0.1), flat(0.2), flat(0.4), flat(0.6), flat(0.8)]  # for 0.4: others' median is (0.2 + 0.6) / 2
    cuts = replayed_stops("median", ys, grace_period=1, reduction_factor=2, max_epochs=8)
    assert list(cuts) == [1, 1, np.inf, np.inf, np.inf]
    ys[2] = flat(0.39)
    assert replayed_stops("median", ys, 1, 2, 8)[2] == 1


def test_asha_with_brackets_splits_trials_and_futures_in_tunes_proportions():
    from hpo import cutoffs

    shares = cutoffs.bracket_shares(1, 2, 16, 3)  # rung counts 5, 4, 3 (16 included, as Tune counts them)
    assert np.allclose(shares, np.exp([0, -1, -2]) / np.exp([0, -1, -2]).sum())
    assert list(cutoffs.bracket_rungs(1, 2, 16, 2)) == [4, 8]
    split = cutoffs.split_by_share(100, shares)
    assert [int((split == s).sum()) for s in range(3)] == [67, 24, 9]
    # late bloomers, poor at epoch 1 only, among steady trials: bracket 0 cuts them at rung 1, bracket 1 does not
    late, steady = np.array([0.1] + [0.9] * 7), flat(0.5)
    ys = [late if i % 2 else steady for i in range(20)]
    plan = SweepPlan(planned_trials=20, max_concurrent=4, max_epochs=8, grace_period=1, reduction_factor=2,
                     brackets=2)
    cuts = kinds.scheduler("asha").forecast.replayed(ys, plan)
    blooms = np.arange(20) % 2 == 1
    assert (replayed_stops("asha", ys, grace_period=1, reduction_factor=2, max_epochs=8)[blooms] == 1).all()
    later = cutoffs.split_by_share(20, cutoffs.bracket_shares(1, 2, 8, 2)) == 1
    assert (later & blooms).any() and (~later & blooms).any()
    assert np.isinf(cuts[later & blooms]).all() and (cuts[~later & blooms] == 1).all()
    rng = np.random.default_rng(0)
    paths = np.tile([0.1, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9, 0.9], (1000, 1)) + rng.normal(0, 1e-3, (1000, 8))
    stops = kinds.scheduler("asha").forecast.stops(np.full(1000, 8), paths, np.array([]), [flat(0.5)] * 5, plan)
    assert abs((stops == 1).mean() - cutoffs.bracket_shares(1, 2, 8, 2)[0]) < 0.01  # the rest train on
    assert set(np.unique(stops)) == {1, 8}
