"""The replay of a sweep on a table of recorded curves: lookups, the simulated clock, and the rules it runs."""

from __future__ import annotations

import math

import numpy as np
import pytest

import hpo
from hpo.replay import Curve, CurveTable, Task, replay_sweep

SPACE = {
    "learning_rate": {"type": "float", "low": 0.0001, "high": 0.1, "log": True},
    "units": {"type": "int", "low": 8, "high": 64, "step": 8},
    "optimizer": {"type": "categorical", "choices": ["adam", "sgd"]},
}


def table(configs: int = 12, epochs: int = 6, epoch_s: float = 1.0, shape=None) -> CurveTable:
    """``configs`` configurations over the space, each a rising curve with its own ceiling, one seed."""
    rng = np.random.default_rng(0)
    params, curves = [], {}
    for i in range(configs):
        params.append({"learning_rate": float(10 ** rng.uniform(-4, -1)), "units": int(rng.integers(1, 9) * 8),
                       "optimizer": ["adam", "sgd"][i % 2]})
        values = shape(i) if shape else [0.5 + 0.04 * i * (1 - 0.5 ** e) for e in range(1, epochs + 1)]
        curves[(i, 0)] = Curve(np.array(values, dtype=float), np.full(epochs, epoch_s))
    return CurveTable(Task("toy", "val_accuracy", "max", epochs, SPACE, "synthetic"), params, curves)


def sweep(algorithm="random", scheduler="fifo", samples=4, concurrent=2, epochs=6, patience=10, **extra):
    data = {
        "name": "toy", "model": "hpo.models.mlp:build", "data": {"train": "builtin:digits"},
        "search": {"algorithm": algorithm, "num_samples": samples, "max_concurrent": concurrent, "seed": 3},
        "scheduler": {"type": scheduler, "grace_period": 1, "reduction_factor": 2},
        "trial": {"max_epochs": epochs, "early_stopping": {"patience": patience}, "backend": "simulated"},
        "space": SPACE,
    }
    for key, value in extra.items():
        section, _, name = key.partition("__")
        data.setdefault(section, {})[name] = value
    return hpo.SweepConfig.model_validate(data)


def test_a_table_reads_back_what_was_written(tmp_path):
    written = table(configs=3, epochs=4)
    written.curves[(1, 7)] = Curve(np.array([0.1, math.nan, 0.3, 0.4]), np.array([1.0, 2.0, 3.0, 4.0]))
    written.write(tmp_path / "toy.parquet")
    read = CurveTable.read(tmp_path / "toy.parquet")
    assert read.task == written.task
    assert read.params == written.params
    assert read.seeds(1) == [0, 7]
    assert np.array_equal(read.curves[(1, 7)].values, written.curves[(1, 7)].values, equal_nan=True)
    assert read.curves[(2, 0)].epoch_s.tolist() == [1.0] * 4


def test_a_file_without_the_task_is_refused(tmp_path):
    import pyarrow as pa
    import pyarrow.parquet as pq

    pq.write_table(pa.table({"config_id": [0]}), tmp_path / "x.parquet")
    with pytest.raises(ValueError, match=r"no 'hpo\.replay' task metadata"):
        CurveTable.read(tmp_path / "x.parquet")


def test_a_proposal_is_answered_by_the_nearest_recorded_configuration():
    t = table(configs=2)
    t.params[:] = [{"learning_rate": 0.001, "units": 16, "optimizer": "adam"},
                   {"learning_rate": 0.01, "units": 16, "optimizer": "adam"}]
    t._coords = None
    # 0.003 is nearer 0.001 than 0.01 on the log scale the space declares (on a linear one it would not be)
    assert t.nearest({"learning_rate": 0.003, "units": 16, "optimizer": "adam"}) == 0
    assert t.nearest({"learning_rate": 0.004, "units": 16, "optimizer": "adam"}) == 1
    # a different categorical outweighs any numeric distance inside the space
    t.params[1] = {"learning_rate": 0.1, "units": 64, "optimizer": "sgd"}
    t._coords = None
    assert t.nearest({"learning_rate": 0.1, "units": 64, "optimizer": "adam"}) == 0


def test_concurrent_trials_advance_the_simulated_clock_together():
    result = replay_sweep(sweep(samples=4, concurrent=2), table(epochs=6, epoch_s=1.0), startup_s=0.5)
    assert [t.trial_id for t in result.trials] == [f"replay_{i:05d}" for i in range(4)]
    # two slots: trials 0 and 1 train 6 epochs of 1 s after a 0.5 s start, 2 and 3 take the freed slots
    assert [(t.started_s, t.ended_s) for t in result.trials] == [(0.0, 6.5), (0.0, 6.5), (6.5, 13.0), (6.5, 13.0)]
    assert result.epochs == 24 and result.wall_s == 13.0
    assert all(t.stopped_by == "max_epochs" and len(t.values) == 6 for t in result.trials)
    assert [done for _, done, _, _ in result.events] == list(range(1, 25))


def test_a_slot_that_frees_early_starts_the_next_trial_at_that_moment():
    slow_and_fast = table(configs=2, epochs=4)
    slow_and_fast.curves[(0, 0)] = Curve(np.array([0.5, 0.6, 0.7, 0.8]), np.full(4, 3.0))
    slow_and_fast.curves[(1, 0)] = Curve(np.array([0.5, 0.6, 0.7, 0.8]), np.full(4, 1.0))
    result = replay_sweep(sweep(samples=6, concurrent=2, epochs=4), slow_and_fast)
    ends: dict[int, float] = {}
    for trial in result.trials:  # each trial starts when the earliest busy slot frees up
        slot = min(ends, key=ends.get) if len(ends) == 2 else len(ends)
        assert trial.started_s == ends.get(slot, 0.0)
        ends[slot] = trial.started_s + 4 * (3.0 if trial.config_id == 0 else 1.0)
        assert trial.ended_s == ends[slot]


def test_patience_stops_a_trial_as_keras_early_stopping_would():
    peaked = table(configs=1, epochs=6, shape=lambda i: [0.5, 0.7, 0.6, 0.65, 0.9, 0.9])
    result = replay_sweep(sweep(samples=1, concurrent=1, patience=2), peaked)
    (trial,) = result.trials
    # epoch 2 is the best; 3 and 4 do not improve on it: with patience 2 training stops after epoch 4
    assert trial.values == (0.5, 0.7, 0.6, 0.65) and trial.stopped_by == "patience"
    assert result.best() == 0.7


def _asha_decisions(values_in_order: list[tuple[float, ...]], milestones=(1, 2, 4), rf=2) -> list[int]:
    """Tune's asynchronous successive halving, written out: epochs each sequential trial gets."""
    recorded: dict[int, list[float]] = {m: [] for m in milestones}
    epochs = []
    for curve in values_in_order:
        trained = len(curve)
        for epoch, value in enumerate(curve, start=1):
            if epoch in recorded and epoch < max(milestones):
                before = recorded[epoch]
                cutoff = float(np.nanpercentile(before, (1 - 1 / rf) * 100)) if before else None
                before.append(value)
                if cutoff is not None and value < cutoff:
                    trained = epoch
                    break
        epochs.append(trained)
    return epochs


def test_asha_stops_what_its_rule_says():
    ceilings = table(configs=12, epochs=4, shape=lambda i: [0.3 + 0.05 * ((i * 7) % 12) + 0.01 * e
                                                             for e in range(4)])
    result = replay_sweep(sweep(scheduler="asha", samples=10, concurrent=1, epochs=4), ceilings)
    full = [tuple(ceilings.curves[(t.config_id, 0)].values) for t in result.trials]
    expected = _asha_decisions(full)
    assert [len(t.values) for t in result.trials] == expected
    assert any(n < 4 for n in expected) and any(n == 4 for n in expected)  # the case decides something
    assert all((t.stopped_by == "scheduler") == (len(t.values) < 4) for t in result.trials)


def test_the_epoch_budget_cuts_the_running_trials_and_starts_nothing_more():
    result = replay_sweep(sweep(samples=10, concurrent=2), table(epochs=6), budget_epochs=9)
    assert result.epochs == 9
    assert [t.stopped_by for t in result.trials] == ["budget", "budget"]
    assert result.best_after(4) <= result.best_after(9)


def test_the_goal_ends_the_sweep_at_the_first_epoch_that_reaches_it():
    rising = table(configs=4, epochs=6, shape=lambda i: [0.1 * e for e in range(1, 7)])
    result = replay_sweep(sweep(samples=8, concurrent=2, objective__goal=0.3), rising)
    assert [t.stopped_by for t in result.trials] == ["goal", "goal"]
    assert result.epochs_to_reach(0.3) == result.epochs == 5  # trial 0 reached it at its 3rd epoch


def test_the_same_seed_replays_the_same_sweep():
    t = table(configs=40, epochs=4)
    first = replay_sweep(sweep("optuna-tpe", "asha", samples=16, concurrent=4, epochs=4), t)
    again = replay_sweep(sweep("optuna-tpe", "asha", samples=16, concurrent=4, epochs=4), t)
    assert first == again
    assert len(first.trials) == 16 and len({t.config_id for t in first.trials}) > 4


def test_random_proposals_among_tpes_replay_the_same_and_change_the_sweep():
    t = table(configs=40, epochs=4)
    interleaved = sweep("optuna-tpe", "asha", samples=30, concurrent=2, epochs=4, search__startup_trials=3,
                        search__random_fraction=0.5, search__random_after=0)
    first, again = replay_sweep(interleaved, t), replay_sweep(interleaved, t)
    assert first == again and len(first.trials) == 30
    alone = replay_sweep(sweep("optuna-tpe", "asha", samples=30, concurrent=2, epochs=4,
                               search__startup_trials=3, search__random_fraction=0.0), t)
    assert [x.config_id for x in first.trials] != [x.config_id for x in alone.trials]


def test_what_the_replay_does_not_do_is_a_clear_error():
    config = sweep(algorithm="grid").model_copy(update={"space": {"units": {"type": "grid", "values": [8, 16]}}})
    with pytest.raises(ValueError, match=r"search\.algorithm: 'grid' is not replayed"):
        replay_sweep(config, table())


def _epoch_ends(result) -> dict[int, list[float]]:
    """Each trial's epoch end times, from the result's events."""
    ends: dict[int, list[float]] = {}
    for when, _, index, _ in result.events:
        ends.setdefault(index, []).append(when)
    return ends


def test_hyperband_pauses_a_trial_at_its_rung_until_its_bracket_is_there_then_stops_the_worst():
    t = table(epochs=4)
    for (config_id, seed), curve in list(t.curves.items()):  # epochs of different lengths: pauses last a while
        t.curves[(config_id, seed)] = type(curve)(curve.values, np.full(4, 1.0 + 0.1 * config_id))
    result = replay_sweep(sweep(scheduler="hyperband", samples=6, concurrent=6, epochs=4), t)
    ends = _epoch_ends(result)
    first, second = range(3), range(3, 6)
    # Tune's HyperBand, max_t 4 and η 2: its first bracket (r0 = max_t, three trials) trains to the end; the
    # next three, started with them, make the bracket of r0 = 2 that keeps two of three
    assert [len(result.trials[i].values) for i in first] == [4, 4, 4]
    assert {result.trials[i].stopped_by for i in first} == {"max_epochs"}
    assert {result.trials[i].started_s for i in range(6)} == {0.0}
    stopped = [i for i in second if result.trials[i].stopped_by == "scheduler"]
    kept = [i for i in second if i not in stopped]
    assert len(stopped) == 1 and len(result.trials[stopped[0]].values) == 2
    assert all(result.trials[stopped[0]].values[1] <= result.trials[i].values[1] for i in kept)
    # a kept trial waited, paused, until the last of the three reached epoch 2, then trained to max_t
    rung_done = max(ends[i][1] for i in second)
    for i in kept:
        epoch_s = 1.0 + 0.1 * result.trials[i].config_id
        assert len(result.trials[i].values) == 4 and result.trials[i].stopped_by == "max_epochs"
        assert ends[i][2] == pytest.approx(rung_done + epoch_s)
    assert any(ends[i][1] < rung_done for i in kept)  # one of them did wait
    assert result.epochs == 3 * 4 + 2 + 2 * 4


def test_hyperband_with_fewer_trials_at_once_than_its_first_bracket_stops_nothing():
    from hpo.cutoffs import hyperband_halves

    result = replay_sweep(sweep(scheduler="hyperband", samples=8, concurrent=1, epochs=4), table(epochs=4))
    assert [len(x.values) for x in result.trials] == [4] * 8
    assert {x.stopped_by for x in result.trials} == {"max_epochs"}
    assert not hyperband_halves(1, 4, 2)  # the progress forecast's rule says the same


def test_trials_left_paused_with_nothing_to_resume_them_end_stalled_instead_of_waiting_for_ever():
    from ray.tune.schedulers import HyperBandScheduler, TrialScheduler

    class PausesForEver(HyperBandScheduler):
        """Pauses every trial after its first epoch and never picks one to run again."""

        def on_trial_result(self, tune_controller, trial, result):
            return TrialScheduler.PAUSE

        def choose_trial_to_run(self, tune_controller):
            return None

    result = replay_sweep(sweep(samples=10, concurrent=2, epochs=4), table(epochs=4),
                          scheduler=PausesForEver(time_attr="training_iteration", max_t=4))
    # two trials at once: both paused, and still live for Tune's ConcurrencyLimiter, so nothing new starts
    assert [(len(x.values), x.stopped_by) for x in result.trials] == [(1, "stalled"), (1, "stalled")]
