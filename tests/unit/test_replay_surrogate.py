"""The surrogate that answers replayed proposals: exact where recorded, interpolating between, seeded noise."""

from __future__ import annotations

import numpy as np
import pytest

from hpo.replay import Curve, CurveTable, Surrogate, Task, replay_sweep
from tests.unit.test_replay import sweep

SPACE = {
    "learning_rate": {"type": "float", "low": 0.001, "high": 0.1, "log": True},
    "optimizer": {"type": "categorical", "choices": ["adam", "sgd"]},
}


def tiny() -> CurveTable:
    """Three configurations: two adam ones (lr 0.001 and 0.1), one sgd; config 1 recorded with two seeds."""
    params = [{"learning_rate": 0.001, "optimizer": "adam"}, {"learning_rate": 0.1, "optimizer": "adam"},
              {"learning_rate": 0.01, "optimizer": "sgd"}]
    curves = {
        (0, 0): Curve(np.array([0.2, 0.4, 0.6]), np.array([1.0, 1.0, 1.0])),
        (1, 0): Curve(np.array([0.5, 0.7, 0.9]), np.array([3.0, 3.0, 3.0])),
        (1, 1): Curve(np.array([0.4, 0.6, 0.7]), np.array([3.0, 3.0, 3.0])),
        (2, 0): Curve(np.array([0.1, 0.1, 0.1]), np.array([2.0, 2.0, 2.0])),
    }
    return CurveTable(Task("tiny", "val_accuracy", "max", 3, SPACE, "synthetic"), params, curves)


def test_a_recorded_configuration_gets_its_mean_curve_when_noise_is_off():
    surrogate = Surrogate(tiny(), noise=False)
    assert surrogate.curve({"learning_rate": 0.001, "optimizer": "adam"}, 5).values.tolist() == [0.2, 0.4, 0.6]
    assert surrogate.curve({"learning_rate": 0.1, "optimizer": "adam"}, 5).values == pytest.approx([0.45, 0.65, 0.8])
    assert surrogate.curve({"learning_rate": 0.1, "optimizer": "adam"}, 5).epoch_s.tolist() == [3.0, 3.0, 3.0]


def test_a_proposal_between_two_configurations_gets_their_weighted_mean():
    surrogate = Surrogate(tiny(), k=2, noise=False)
    middle = surrogate.curve({"learning_rate": 0.01, "optimizer": "adam"}, 0)  # halfway on the log scale
    assert middle.values == pytest.approx([(0.2 + 0.45) / 2, (0.4 + 0.65) / 2, (0.6 + 0.8) / 2])
    assert middle.epoch_s == pytest.approx([2.0, 2.0, 2.0])
    nearer = surrogate.curve({"learning_rate": 0.05, "optimizer": "adam"}, 0).values
    assert 0.65 < nearer[-1] < 0.8  # nearer 0.1's curve, between the two
    assert surrogate.nearest({"learning_rate": 0.05, "optimizer": "adam"}) == 1


def test_noise_is_the_recorded_seed_spread_and_is_fixed_by_the_draw():
    surrogate = Surrogate(tiny(), k=1, noise=True, clip="table")
    params = {"learning_rate": 0.001, "optimizer": "adam"}
    first = surrogate.curve(params, 11).values
    assert surrogate.curve(params, 11).values.tolist() == first.tolist()
    mean, spread = np.array([0.2, 0.4, 0.6]), np.array([0.1, 0.1, 0.2]) / np.sqrt(2.0)
    # config 1 is the only repeated configuration: its two seeds give the noise
    drawn = {tuple(np.round(surrogate.curve(params, d).values, 9)) for d in range(40)}
    assert drawn == {tuple(np.round(mean + spread, 9)), tuple(np.round(mean - spread, 9))}


def test_noise_stays_within_what_the_neighbours_recorded_seeds_reached_each_epoch():
    surrogate = Surrogate(tiny(), k=1, noise=True)  # clip="neighbours", the default
    repeated = {"learning_rate": 0.1, "optimizer": "adam"}  # config 1: seeds 0.5 0.7 0.9 and 0.4 0.6 0.7
    # its mean 0.45 0.65 0.8 plus or minus its spread (0.07 0.07 0.14) lands past each seed: clipped onto it
    drawn = {tuple(np.round(surrogate.curve(repeated, d).values, 9)) for d in range(40)}
    assert drawn == {(0.5, 0.7, 0.9), (0.4, 0.6, 0.7)}
    # config 0 was recorded once: no seed of its (only) neighbour strayed from its curve, so neither may noise
    single = {"learning_rate": 0.001, "optimizer": "adam"}
    assert {tuple(np.round(surrogate.curve(single, d).values, 9)) for d in range(40)} == {(0.2, 0.4, 0.6)}
    # clipped to the whole table's range, a draw may be better than any seed near it ever was
    table_wide = Surrogate(tiny(), k=1, noise=True, clip="table")
    assert max(table_wide.curve(single, d).values[-1] for d in range(40)) > 0.6


def test_an_unknown_clip_is_refused():
    with pytest.raises(ValueError, match="clip: 'none' is not one of neighbours, table"):
        Surrogate(tiny(), clip="none")  # type: ignore[arg-type]


def test_a_left_out_configuration_is_answered_by_the_others():
    surrogate = Surrogate(tiny(), k=1, noise=False, exclude=frozenset({0}))
    assert surrogate.nearest({"learning_rate": 0.001, "optimizer": "adam"}) == 1
    with pytest.raises(ValueError, match="exclude"):
        Surrogate(tiny(), exclude=frozenset({0, 1, 2}))


def test_a_replayed_sweep_answered_by_the_surrogate_is_deterministic_for_a_seed():
    from tests.unit.test_replay import table

    recorded = table(configs=12, epochs=6)
    config = sweep(algorithm="random", scheduler="fifo", samples=6, concurrent=2)
    surrogate = Surrogate(recorded, noise=False)
    one = replay_sweep(config, recorded, surrogate=surrogate)
    two = replay_sweep(config, recorded, surrogate=surrogate)
    assert [t.values for t in one.trials] == [t.values for t in two.trials]
    assert len(one.trials) == 6
    for trial in one.trials:  # each curve is the surrogate's for what was proposed, not a recorded one
        assert list(trial.values) == pytest.approx(surrogate.mean_curve(trial.params).values[: len(trial.values)])
