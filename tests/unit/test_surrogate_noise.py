"""The check of where random + FIFO's final best comes from: a dip beyond the neighbourhood, under each clip."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from hpo.replay import Curve, CurveTable, ReplayedTrial, Surrogate, Task
from tests.conftest import benchmark_script

ROOT = Path(__file__).resolve().parents[2]
SPACE = {"learning_rate": {"type": "float", "low": 0.001, "high": 0.1, "log": True}}


def script():
    return benchmark_script("benchmarks/surrogate_noise.py", "surrogate_noise")


def spiky() -> CurveTable:
    """A loss table: config 1's second seed blows up at epoch 3, so its residual turned over is a deep dip."""
    params = [{"learning_rate": 0.001}, {"learning_rate": 0.1}]
    seconds = np.ones(5)
    curves = {
        (0, 0): Curve(np.array([0.9, 0.6, 0.5, 0.45, 0.4]), seconds),
        (1, 0): Curve(np.array([1.0, 0.9, 0.8, 0.75, 0.7]), seconds),
        (1, 1): Curve(np.array([1.0, 0.9, 3.0, 0.75, 0.7]), seconds),
    }
    return CurveTable(Task("spiky", "val_loss", "min", 5, SPACE, "synthetic"), params, curves)


def test_a_one_epoch_dip_is_told_from_a_curve_that_keeps_improving():
    bench = script()
    assert bench._dip(np.array([0.9, 0.8, 0.3, 0.8, 0.7]), 2)
    assert not bench._dip(np.array([0.9, 0.8, 0.7, 0.6, 0.5]), 4)  # the last epoch: no later one to compare
    assert not bench._dip(np.array([0.9, 0.7, 0.5, 0.45, 0.5]), 3)  # a minimum, not a spike


def test_the_setter_of_b_is_checked_against_its_neighbours_seeds_and_the_table():
    bench, table = script(), spiky()
    near = {"learning_rate": 0.1}
    for clip, beats in (("table", True), ("neighbours", False)):
        surrogate = Surrogate(table, k=1, clip=clip)
        draw = next(d for d in range(100) if surrogate.curve(near, d).values[2] < 1.0)  # the spike turned over
        values = surrogate.curve(near, draw).values
        trial = ReplayedTrial("replay_00000", near, 1, tuple(values), 0.0, 5.0, "max_epochs")
        found = bench.setter(table, surrogate, trial, float(np.min(values)))
        assert found["beats_neighbours"] is beats
        # mean 1.9 less the residual 1.56 is 0.34: clipped to the table's best (0.4), or to the seeds' 0.8
        assert found["at_table_best"] is (clip == "table")
        assert found["one_epoch_dip"] is (clip == "table")  # clipped, the curve just goes on improving
        assert list(values) == pytest.approx([1.0, 0.9, 0.4 if clip == "table" else 0.8, 0.75, 0.7])
