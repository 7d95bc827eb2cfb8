"""The Monte-Carlo progress estimator on synthetic curves whose stopping points are known.

The known stopping point of a whole curve comes from ``keras_stop`` below, written from Keras' EarlyStopping
(tf-keras) and hpo's goal rule independently of ``hpo.progress``.
"""

from __future__ import annotations

import math
import subprocess
import sys

import numpy as np
import pytest

from hpo.objective import reaches_goal
from hpo.progress import SweepPlan, TrialHistory, curves, draws, estimate_sweep, estimate_trial, pools
from tests.conftest import ROOT

EPOCHS = np.arange(1, 201)


def keras_stop(values, patience, min_delta, max_epochs, mode="max", goal=None):
    """The epoch a trial with this whole curve stops at: EarlyStopping, the goal, or max_epochs."""
    best = math.inf if mode == "min" else -math.inf
    wait = 0
    for epoch, value in enumerate(values[:max_epochs], start=1):
        wait += 1
        improved = value + min_delta < best if mode == "min" else value - min_delta > best
        if improved:
            best, wait = value, 0
        elif wait >= patience and epoch > 1:
            return epoch
        if goal is not None and reaches_goal(value, goal, mode):
            return epoch
    return max_epochs


def plateau(rate=0.3, noise=0.0, seed=0, top=0.9):
    rng = np.random.default_rng(seed)
    return top - 0.5 * np.exp(-rate * EPOCHS) + rng.normal(0.0, noise, len(EPOCHS))


def estimate(values, **kwargs):
    settings = {"mode": "max", "patience": 3, "min_delta": 0.0, "max_epochs": 100, **kwargs}
    return estimate_trial(list(values), **settings)


def test_a_smooth_plateau_stops_where_its_patience_runs_out():
    curve = plateau()
    truth = keras_stop(curve, patience=3, min_delta=0.002, max_epochs=100)
    assert truth == 22  # improvements fall below min_delta around epoch 19
    e = estimate(curve[:8], min_delta=0.002)
    assert e.method == "exp"
    assert e.epochs_done == 8
    assert (e.epochs_low, e.epochs_median, e.epochs_high) == (truth, truth, truth)


def test_a_noisy_plateau_falls_in_the_interval_about_as_often_as_it_should():
    covered, errors = 0, []
    for seed in range(40):
        curve = plateau(rate=0.15, noise=0.01, seed=seed)
        truth = keras_stop(curve, patience=5, min_delta=0.0, max_epochs=100)
        e = estimate(curve[:10], patience=5, samples=300)
        assert 10 <= e.epochs_low <= e.epochs_median <= e.epochs_high <= 100
        covered += e.epochs_low <= truth <= e.epochs_high
        errors.append(abs(e.epochs_median - truth) / truth)
    assert 0.65 <= covered / 40 <= 1.0
    assert np.median(errors) < 0.25


def test_the_interval_narrows_as_a_plateauing_curve_goes_on():
    curve = plateau(rate=0.15, noise=0.01, seed=3)
    truth = keras_stop(curve, patience=5, min_delta=0.0, max_epochs=100)
    widths = []
    for done in (8, 15, truth - 1):
        e = estimate(curve[:done], patience=5)
        widths.append(e.epochs_high - e.epochs_low)
        assert e.epochs_low <= truth <= e.epochs_high
    assert widths[0] > widths[1] > widths[2]


def test_a_flat_curve_stops_after_patience():
    e = estimate([0.7, 0.7], patience=4, max_epochs=50)
    assert e.method == "flat"
    assert (e.epochs_low, e.epochs_median, e.epochs_high) == (5, 5, 5)


def test_a_curve_that_ran_out_of_patience_has_stopped_at_the_current_epoch():
    e = estimate([0.5, 0.6, 0.6, 0.6, 0.6], patience=3, epoch_seconds=[1.0] * 5)
    assert e.method == "stopped"
    assert (e.epochs_low, e.epochs_median, e.epochs_high) == (5, 5, 5)
    assert e.remaining_s_median == 0.0


def test_an_exploding_loss_stops_when_patience_runs_out_after_its_best_epoch():
    loss = [0.9, 0.6, 0.5, 0.55, 0.8, 1.4, 3.0, 9.0]
    truth = 3 + 8  # best at epoch 3, patience 8
    e = estimate(loss, mode="min", patience=8)
    assert e.method == "diverged"
    assert (e.epochs_low, e.epochs_median, e.epochs_high) == (truth, truth, truth)


def test_a_curve_turning_down_stops_when_patience_runs_out_after_its_best_epoch():
    accuracy = [0.5, 0.7, 0.8, 0.82, 0.8, 0.78, 0.76, 0.74, 0.72, 0.70, 0.68]  # overfitting since epoch 4
    e = estimate(accuracy, patience=10)
    assert e.method in ("log", "pow", "exp")
    assert e.epochs_low == e.epochs_median == 4 + 10


@pytest.mark.parametrize(
    ("values", "mode", "stop"),
    [
        ([1.0, 0.8, math.nan], "min", 2 + 3),  # NaN never improves: patience counts from epoch 2
        ([1.0, 0.8, math.inf], "min", 2 + 3),  # a loss that overflowed
        ([math.nan, math.nan], "max", 3),  # nothing ever improved
    ],
)
def test_a_curve_ending_in_nan_or_inf_has_diverged(values, mode, stop):
    e = estimate(values, mode=mode, patience=3)
    assert e.method == "diverged"
    assert (e.epochs_low, e.epochs_median, e.epochs_high) == (stop, stop, stop)


def test_nan_inf_and_junk_inside_a_curve_are_left_out_of_the_fit():
    e = estimate([0.5, math.nan, 0.62, None, "x", 0.7, 0.72, 0.73], patience=5, max_epochs=40)
    assert e.method in ("flat", "log", "pow", "exp")
    assert 8 < e.epochs_low <= e.epochs_median <= e.epochs_high <= 40


@pytest.mark.parametrize(("values", "earliest"), [([], 4), ([0.5], 4), ([math.nan, 0.5], 5)])
def test_fewer_than_two_values_give_the_prior(values, earliest):
    e = estimate(values, patience=3, max_epochs=30, epoch_seconds=[2.0] * len(values) or None)
    assert e.method == "prior"
    assert (e.epochs_low, e.epochs_median, e.epochs_high) == (earliest, 30, 30)


def test_the_prior_counts_remaining_seconds_from_max_epochs():
    e = estimate([0.5], max_epochs=30, epoch_seconds=[2.0])
    assert (e.remaining_s_median, e.remaining_s_high) == (58.0, 58.0)


@pytest.mark.parametrize("mode", ["max", "min"])
def test_a_goal_reached_already_stops_at_the_current_epoch(mode):
    values = [0.5, 0.8, 0.95] if mode == "max" else [0.5, 0.2, 0.05]
    e = estimate(values, mode=mode, patience=10, goal=0.9 if mode == "max" else 0.1)
    assert e.method == "stopped"
    assert e.epochs_median == 3


def test_a_goal_ahead_stops_the_trial_where_the_curve_reaches_it():
    curve = plateau()
    truth = keras_stop(curve, patience=3, min_delta=0.0, max_epochs=100, goal=0.85)
    assert truth == next(i for i, v in enumerate(curve, 1) if reaches_goal(v, 0.85, "max"))
    e = estimate(curve[:6], goal=0.85)
    assert (e.epochs_low, e.epochs_median, e.epochs_high) == (truth, truth, truth)


def test_a_loss_in_min_mode_is_the_negated_curve_in_max_mode():
    loss = 0.3 + 0.5 * np.exp(-0.3 * EPOCHS)
    truth = keras_stop(loss, patience=3, min_delta=0.002, max_epochs=100, mode="min")
    as_min = estimate(loss[:8], mode="min", min_delta=0.002)
    as_max = estimate(-loss[:8], mode="max", min_delta=0.002)
    assert as_min.epochs_median == truth
    assert as_min == as_max


def test_remaining_seconds_are_remaining_epochs_times_the_recent_epoch_time():
    curve = plateau(rate=0.15, noise=0.01, seed=1)[:7]
    e = estimate(curve, patience=5, epoch_seconds=[10.0, 2.0, 2.0, 2.2, 1.8, 2.0, 2.0])  # the first compiled
    assert e.epoch_seconds == 2.0
    assert e.remaining_s_median == (e.epochs_median - 7) * 2.0
    assert e.remaining_s_low == (e.epochs_low - 7) * 2.0
    assert e.remaining_s_high == (e.epochs_high - 7) * 2.0
    untimed = estimate(curve, patience=5)
    assert (untimed.remaining_s_median, untimed.remaining_s_low, untimed.remaining_s_high) == (None, None, None)
    assert untimed.epoch_seconds is None


def test_the_same_seed_gives_the_same_estimate():
    curve = plateau(rate=0.15, noise=0.02, seed=2)[:9]
    assert estimate(curve, seed=7) == estimate(curve, seed=7)


def test_arguments_no_estimate_can_be_made_with_raise():
    with pytest.raises(ValueError, match="mode must be 'max' or 'min'"):
        estimate([0.5, 0.6], mode="maximize")


def test_importing_the_estimator_imports_no_ray():
    probe = "import sys, hpo.progress; assert 'ray' not in sys.modules, 'ray imported'; print('clean')"
    proc = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0 and "clean" in proc.stdout, proc.stderr[-2000:]


# --- the sweep ---


def finished(epochs, seconds=1.0, status="finished"):
    return TrialHistory(values=list(plateau()[:epochs]), epoch_seconds=[seconds] * epochs, status=status)


def test_a_sweep_whose_trials_all_ended_has_nothing_left():
    plan = SweepPlan(planned_trials=3, max_concurrent=2, max_epochs=30, cost_per_cpu_hour=3600.0)
    e = estimate_sweep([finished(4), finished(6, status="stopped"), finished(5)], plan)
    assert e.method == "done"
    assert (e.remaining_s_low, e.remaining_s_median, e.remaining_s_high) == (0.0, 0.0, 0.0)
    assert (e.epochs_done, e.epochs_median, e.trials_projected) == (15, 15, 3)
    assert e.cost_median == 0.0
    assert e.cost_spent == 15.0  # 15 epochs of 1 s at 1 per CPU-second


def test_pending_trials_queue_for_the_concurrent_slots(monkeypatch):
    monkeypatch.setattr(pools, "PRIOR_WEIGHT", 0.0)  # lengths from the started trials only
    plan = SweepPlan(planned_trials=10, max_concurrent=2, max_epochs=30, scheduler="fifo")
    e = estimate_sweep([finished(4), finished(6)], plan)  # trials of 5 epochs on average, 1 s each
    assert e.method == "monte-carlo"
    assert (e.trials_pending, e.trials_projected) == (8, 10)
    assert e.remaining_s_low <= 8 / 2 * 5 <= e.remaining_s_high
    assert 16 <= e.remaining_s_median <= 24
    assert e.epochs_median == pytest.approx(10 + 8 * 5, abs=4)


def test_the_time_budget_caps_the_remaining_time():
    plan = SweepPlan(planned_trials=10, max_concurrent=2, max_epochs=30, time_budget_s=10.0, elapsed_s=4.0)
    e = estimate_sweep([finished(4), finished(6)], plan)
    assert (e.remaining_s_low, e.remaining_s_median, e.remaining_s_high) == (6.0, 6.0, 6.0)
    assert e.trials_projected < 10


def test_the_cost_is_remaining_time_times_resources_times_price():
    running = TrialHistory(list(plateau(rate=0.15, noise=0.01)[:6]), [5.0] * 6, "running", cpus=2, gpus=1)
    plan = SweepPlan(planned_trials=1, max_concurrent=1, max_epochs=50, cost_per_cpu_hour=0.5, cost_per_gpu_hour=3.0)
    e = estimate_sweep([running], plan)
    per_second = (2 * 0.5 + 1 * 3.0) / 3600
    assert e.remaining_s_median > 0
    assert e.cost_median == pytest.approx(e.remaining_s_median * per_second)
    assert e.cost_high == pytest.approx(e.remaining_s_high * per_second)
    assert e.cost_spent == pytest.approx(30 * per_second)
    free = estimate_sweep([running], SweepPlan(planned_trials=1, max_concurrent=1, max_epochs=50))
    assert (free.cost_median, free.cost_spent) == (None, None)


def test_without_timings_epochs_are_projected_but_not_seconds(monkeypatch):
    monkeypatch.setattr(pools, "PRIOR_WEIGHT", 0.0)
    untimed = TrialHistory(list(plateau()[:4]), None, "finished")
    e = estimate_sweep([untimed], SweepPlan(planned_trials=3, max_concurrent=1, max_epochs=30))
    assert e.remaining_s_median is None and e.cost_median is None
    assert e.epochs_median == 12


def test_a_sweep_with_no_trial_started_is_a_prior():
    e = estimate_sweep([], SweepPlan(planned_trials=4, max_concurrent=2, max_epochs=30))
    assert e.method == "prior"
    assert (e.trials_pending, e.epochs_median, e.remaining_s_median) == (4, 120, None)


def low_trial(done):
    return TrialHistory([0.3 + 0.001 * i for i in range(done)], [1.0] * done, "running")


def test_asha_stops_a_trial_below_the_cut_off_at_its_next_rung():
    ended = [finished(12, status="finished") for _ in range(3)]
    for scheduler, stop in (("asha", 4), ("fifo", None)):
        plan = SweepPlan(planned_trials=4, max_concurrent=4, max_epochs=30, patience=20, scheduler=scheduler)
        e = estimate_sweep([*ended, low_trial(3)], plan)
        if stop is not None:
            assert e.epochs_median == 36 + stop
        else:
            assert e.epochs_median > 36 + 4


def test_the_median_rule_stops_a_trial_worse_than_the_others():
    ended = [finished(12, status="finished") for _ in range(3)]
    plan = SweepPlan(planned_trials=4, max_concurrent=4, max_epochs=30, patience=20, scheduler="median", grace_period=5)
    e = estimate_sweep([*ended, low_trial(3)], plan)
    assert e.epochs_median == 36 + 5


def test_a_running_trial_reaching_the_goal_ends_the_sweep():
    running = TrialHistory(list(plateau()[:6]), [1.0] * 6, "running")
    truth = keras_stop(plateau(), patience=3, min_delta=0.0, max_epochs=100, goal=0.85)
    plan = SweepPlan(planned_trials=20, max_concurrent=2, max_epochs=100, goal=0.85, scheduler="fifo")
    low = TrialHistory([0.3 + 0.001 * i for i in range(30)], [1.0] * 30, "finished")
    e = estimate_sweep([running, low], plan)
    assert e.remaining_s_median == truth - 6
    reached = estimate_sweep([running, low], SweepPlan(planned_trials=20, max_concurrent=2, max_epochs=100, goal=0.8))
    assert (reached.method, reached.remaining_s_median) == ("done", 0.0)


def test_pending_trials_draw_from_the_started_ones_and_a_prior(monkeypatch):
    untimed = TrialHistory(list(plateau()[:4]), None, "finished")
    plan = SweepPlan(planned_trials=3, max_concurrent=1, max_epochs=30)
    e = estimate_sweep([untimed], plan)  # one trial of 4 epochs does not rule out longer ones
    assert 4 + 2 * 4 < e.epochs_median < 4 + 2 * 30
    assert e.epochs_high >= 4 + 30
    monkeypatch.setattr(pools, "PRIOR_WEIGHT", 0.0)
    e = estimate_sweep([untimed], plan)
    assert (e.epochs_low, e.epochs_median, e.epochs_high) == (12, 12, 12)


def test_many_pending_trials_keep_the_uncertainty_of_the_few_started(monkeypatch):
    monkeypatch.setattr(pools, "PRIOR_WEIGHT", 0.0)
    plan = SweepPlan(planned_trials=43, max_concurrent=1, max_epochs=30, scheduler="fifo")
    e = estimate_sweep([finished(4), finished(6), finished(20)], plan)
    # 40 independent draws from {4, 6, 20} would give an 80 % interval of about ±15 % (338-458 s)
    assert (e.remaining_s_high - e.remaining_s_low) / e.remaining_s_median > 0.5
    assert e.remaining_s_low < 40 * 10 < e.remaining_s_high


# --- the trend and its continuations ---


def test_an_accuracy_lies_on_a_grid_and_a_loss_does_not():
    accuracy = np.float32(np.array([9, 20, 27, 31, 31, 33, 32]) / 38).astype(float)
    origin, step = curves.lattice(accuracy)
    assert origin == pytest.approx(9 / 38) and step == pytest.approx(1 / 38, rel=1e-4)
    assert curves.lattice(0.3 + 0.5 * np.exp(-0.3 * np.arange(1.0, 8))) is None
    assert curves.lattice(np.array([0.5, 0.75, 0.5])) is None  # two values always lie on a grid


def test_a_curve_on_a_grid_is_continued_on_it():
    accuracy = np.float32(np.array([9, 20, 27, 31, 31, 33, 32]) / 38).astype(float)
    trend = curves.fit_trend(np.arange(1.0, 8), accuracy)
    rng = np.random.default_rng(0)
    values = draws.draw(trend, 200, rng).values(np.arange(8.0, 20), rng)
    steps = (values - 9 / 38) * 38
    assert np.allclose(steps, np.round(steps), atol=1e-4)
    assert len(np.unique(np.round(steps))) > 2


def test_a_plateau_on_a_grid_ties_its_best_as_often_as_observed_and_stops_sooner(monkeypatch):
    # ties with the best are no improvement; continued on the grid, the simulated epochs tie it as the
    # observed ones did, where continuous values would beat it half the time
    accuracy = np.array([10, 20, 25, 27, 28, 28, 27, 28, 28, 27, 28, 28]) / 30
    on_grid = estimate(accuracy, patience=10, max_epochs=60)
    monkeypatch.setattr(curves, "lattice", lambda y: None)
    off_grid = estimate(accuracy, patience=10, max_epochs=60)
    assert on_grid.epochs_median + 5 <= off_grid.epochs_median


def test_the_fits_follow_the_recent_epochs_more_closely(monkeypatch):
    x = np.arange(1.0, 16)
    y = np.where(x <= 5, 0.1 * x, 0.5 + 0.01 * (x - 5))  # a fast start, then a slow climb
    recent = abs(curves.fit_trend(x, y).fits[0].residuals[-5:]).mean()
    monkeypatch.setattr(curves, "RECENCY", 0.0)
    assert recent < abs(curves.fit_trend(x, y).fits[0].residuals[-5:]).mean()


def flat_trend(noise=1.0, last=0.0):
    fit = curves.Fit("flat", np.array([0.0]), None, np.zeros(3), 0.0)
    return curves.Trend((fit,), np.array([1.0]), noise, 0.0, 1.0, -100.0, 100.0, last)


def test_the_simulated_noise_carries_over_from_one_epoch_to_the_next():
    rng = np.random.default_rng(0)
    drawn = draws.draw(flat_trend(), 20000, rng)
    first, second = drawn.values(np.arange(1.0, 11), rng), drawn.values(np.arange(11.0, 21), rng)
    assert draws.NOISE_MEMORY > 0.2  # a curve below its trend stays below it for a while
    assert np.corrcoef(first[:, -1], second[:, 0])[0, 1] == pytest.approx(draws.NOISE_MEMORY, abs=0.03)
    assert np.corrcoef(first[:, 0], first[:, 5])[0, 1] == pytest.approx(draws.NOISE_MEMORY**5, abs=0.03)
    assert second.std() == pytest.approx(1.0, rel=0.05)


def test_the_simulated_noise_starts_from_the_last_residual():
    rng = np.random.default_rng(0)
    below = draws.draw(flat_trend(last=-2.0), 20000, rng).values(np.array([1.0, 2.0]), rng)
    assert below[:, 0].mean() == pytest.approx(-2.0 * draws.NOISE_MEMORY, abs=0.03)
    assert below[:, 1].mean() == pytest.approx(-2.0 * draws.NOISE_MEMORY**2, abs=0.03)


def test_drawn_parameters_spread_by_the_fits_covariance_widened():
    cov = np.diag([0.01, 0.04, 0.0])
    fit = curves.Fit("exp", np.array([1.0, 0.5, 0.0]), cov, np.zeros(5), 0.0)
    drawn = draws._draw_params(fit, 40000, np.random.default_rng(0))
    assert draws.COV_INFLATION > 1  # the fit's own covariance treats epochs as independent: too narrow
    assert drawn.mean(axis=0) == pytest.approx([1.0, 0.5, 0.0], abs=0.01)
    assert drawn.std(axis=0)[:2] == pytest.approx(np.sqrt(np.diag(cov)[:2] * draws.COV_INFLATION), rel=0.03)
    assert np.abs(drawn[:, 2]).max() < 1e-9  # a rate held fixed (no variance) stays fixed


def test_a_running_trial_with_no_epoch_yet_pays_the_first_epochs_extra(monkeypatch):
    monkeypatch.setattr(pools, "PRIOR_WEIGHT", 0.0)
    ended = [TrialHistory(list(plateau()[:4]), [5.0, 1.0, 1.0, 1.0], "finished") for _ in range(2)]
    just_started = TrialHistory([], None, "running")
    plan = SweepPlan(planned_trials=3, max_concurrent=1, max_epochs=30, scheduler="fifo")
    e = estimate_sweep([*ended, just_started], plan)
    assert e.remaining_s_median == 4 * 1.0 + (5.0 - 1.0)  # four steady epochs and the first one's extra
    assert e.epochs_median == 8 + 4


@pytest.mark.parametrize(("max_epochs", "factor", "first_bracket"), [(8, 2, 4), (15, 2, 5), (20, 3, 4), (100, 3, 5)])
def test_hyperband_with_fewer_trials_at_once_than_its_first_bracket_holds_stops_nothing(max_epochs, factor,
                                                                                        first_bracket):
    from ray.tune.schedulers import HyperBandScheduler

    tune_band = HyperBandScheduler(max_t=max_epochs, reduction_factor=factor)
    assert tune_band._get_n0(0) == first_bracket  # Tune's first bracket: that many trials, no halving

    def replayed(concurrent):
        plan = SweepPlan(planned_trials=30, max_concurrent=concurrent, max_epochs=max_epochs, scheduler="hyperband",
                         reduction_factor=factor)
        return plan.rule.replayed(curves, plan)

    curves = [np.full(max_epochs, v) for v in (0.1, 0.6, 0.5, 0.55)]  # the poor ones fall below the first rung
    assert np.isinf(replayed(first_bracket - 1)).all()  # as fifo
    assert list(replayed(first_bracket)) == [1, np.inf, 1, np.inf]  # as its rungs from epoch 1


def test_hyperband_forecast_as_fifo_or_as_cut_by_its_rungs():
    # a good curve and a poor one that HyperBand-as-ASHA would cut at its first milestones
    ended = [TrialHistory(list(plateau(top=t)[:8]), [1.0] * 8, "finished") for t in (0.9, 0.3, 0.9, 0.3)]

    def forecast(scheduler, concurrent):
        plan = SweepPlan(planned_trials=10, max_concurrent=concurrent, max_epochs=8, scheduler=scheduler)
        return estimate_sweep(ended, plan).remaining_s_median

    assert forecast("hyperband", 3) == forecast("fifo", 3)
    assert forecast("hyperband", 4) < forecast("fifo", 4)


def test_pending_trials_pay_a_warm_start_once_one_is_measured(monkeypatch):
    monkeypatch.setattr(pools, "PRIOR_WEIGHT", 0.0)
    plan = SweepPlan(planned_trials=12, max_concurrent=1, max_epochs=30, scheduler="fifo")

    def ended(known):  # a cold first trial (30 s to start its workers), then one on the warm workers (1 s)
        first, second = (False, True) if known else (None, None)
        return [TrialHistory(list(plateau()[:4]), [1.0] * 4, "finished", startup_s=s, warm=w)
                for s, w in ((30.0, first), (1.0, second))]

    e = estimate_sweep(ended(known=True), plan)
    assert e.remaining_s_low == e.remaining_s_median == e.remaining_s_high == 10 * (1.0 + 4 * 1.0)
    unknown = estimate_sweep(ended(known=False), plan)  # who started warm unknown: every start-up is drawn from
    assert unknown.remaining_s_median > 10 * (1.0 + 4 * 1.0) + 60
    # only a cold start measured (30 s to start, a first epoch 2 s longer than the others): a warm start costs
    # between nothing and that first-epoch extra, not the start-up the reused workers skip
    only_cold = [TrialHistory(list(plateau()[:4]), [3.0, 1.0, 1.0, 1.0], "finished", startup_s=30.0, warm=False)]
    cold = estimate_sweep(only_cold, plan)
    assert 11 * 4 * 1.0 < cold.remaining_s_low < cold.remaining_s_median < cold.remaining_s_high < 11 * (4 * 1.0 + 2)


def test_a_warm_running_trial_with_no_epoch_yet_pays_a_warm_first_epochs_extra(monkeypatch):
    monkeypatch.setattr(pools, "PRIOR_WEIGHT", 0.0)
    cold = TrialHistory(list(plateau()[:4]), [9.0, 1.0, 1.0, 1.0], "finished", warm=False)
    warm = TrialHistory(list(plateau()[:4]), [2.0, 1.0, 1.0, 1.0], "finished", warm=True)
    just_started = TrialHistory([], None, "running", warm=True)
    plan = SweepPlan(planned_trials=3, max_concurrent=1, max_epochs=30, scheduler="fifo")
    assert estimate_sweep([cold, warm, just_started], plan).remaining_s_median == 4 * 1.0 + (2.0 - 1.0)


def test_many_pending_trials_keep_the_uncertainty_of_the_few_start_ups_measured(monkeypatch):
    monkeypatch.setattr(pools, "PRIOR_WEIGHT", 0.0)
    ended = [TrialHistory(list(plateau()[:4]), [1.0] * 4, "finished", startup_s=s) for s in (0.0, 0.0, 30.0)]
    plan = SweepPlan(planned_trials=43, max_concurrent=1, max_epochs=30, scheduler="fifo")
    e = estimate_sweep(ended, plan)
    # 40 independent start-ups from {0, 0, 30} would give an 80 % interval of about ±22 % (430-670 s)
    assert (e.remaining_s_high - e.remaining_s_low) / e.remaining_s_median > 0.8
    assert e.remaining_s_low < 40 * (4 + 10) < e.remaining_s_high


def test_a_rising_curve_too_short_for_a_saturating_family_is_half_log_half_plateau(monkeypatch):
    rising = np.array([0.5, 0.6, 0.7])
    trend = curves.fit_trend(np.arange(1.0, 4), rising)
    assert [fit.family for fit in trend.fits] == ["log", "flat"]
    assert trend.weights.tolist() == [0.5, 0.5] and trend.family == "log"
    four = curves.fit_trend(np.arange(1.0, 5), np.append(rising, 0.75))
    assert "flat" not in [fit.family for fit in four.fits]  # four points: the saturating families decide
    mixed = estimate(rising, patience=3, max_epochs=50)
    monkeypatch.setattr(curves, "PLATEAU_WEIGHT", 0.0)
    log_only = estimate(rising, patience=3, max_epochs=50)
    # half the futures level off now: the median moves towards the plateau's stop (3 + 3), and the
    # interval still reaches the log trend's longer runs
    assert mixed.epochs_low == 3 + 3 < mixed.epochs_median < log_only.epochs_median
    assert mixed.epochs_high >= log_only.epochs_median
