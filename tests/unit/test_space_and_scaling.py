from __future__ import annotations

import math

import pytest
from ray.tune.search.sample import Categorical, Float, Integer

from hpo.config import parse_sweep
from hpo.search import SearchSpace
from hpo.trial.spec import scale_learning_rate
from tests.conftest import base_sweep


def test_space_maps_to_tune_domains():
    config = parse_sweep(
        base_sweep(
            space={
                "lr": {"type": "float", "low": 1e-4, "high": 1e-1, "log": True},
                "drop": {"type": "float", "low": 0.0, "high": 0.5},
                "q": {"type": "float", "low": 0.0, "high": 1.0, "step": 0.25},
                "units": {"type": "int", "low": 16, "high": 128, "step": 16},
                "layers": {"type": "int", "low": 1, "high": 3},
                "opt": {"type": "categorical", "choices": ["adam", "sgd"]},
            }
        )
    )
    space = {name: SearchSpace.domain(spec) for name, spec in config.space.items()}
    assert isinstance(space["lr"], Float) and isinstance(space["lr"].sampler, Float._LogUniform)
    assert (space["lr"].lower, space["lr"].upper) == (1e-4, 1e-1)
    assert isinstance(space["drop"].sampler, Float._Uniform)
    quantized = {space["q"].sample() for _ in range(200)}
    assert quantized <= {0.0, 0.25, 0.5, 0.75, 1.0} and len(quantized) >= 3
    assert isinstance(space["units"], Integer)
    samples = [space["units"].sample() for _ in range(200)]
    assert set(samples) <= set(range(16, 129, 16)) and len(set(samples)) >= 5
    layers = {space["layers"].sample() for _ in range(200)}
    assert layers == {1, 2, 3}  # high is inclusive
    assert isinstance(space["opt"], Categorical) and space["opt"].categories == ["adam", "sgd"]


def test_grid_algorithm_enumerates_categoricals():
    config = parse_sweep(
        base_sweep(
            search={"algorithm": "grid"},
            space={
                "opt": {"type": "categorical", "choices": ["adam", "sgd"]},
                "units": {"type": "grid", "values": [8, 16]},
            },
        )
    )
    space = SearchSpace(config).param_space()
    assert space["opt"] == {"grid_search": ["adam", "sgd"]}
    assert space["units"] == {"grid_search": [8, 16]}


@pytest.mark.parametrize(
    ("rule", "workers", "expected"),
    [("linear", 2, 0.02), ("linear", 8, 0.08), ("sqrt", 4, 0.02), ("none", 8, 0.01), ("linear", 1, 0.01)],
)
def test_learning_rate_scales_with_global_batch(rule, workers, expected):
    # Reference batch = one worker's batch (the default): the global batch grows with the workers.
    assert math.isclose(scale_learning_rate(0.01, 32 * workers, 32, rule), expected)


def test_learning_rate_scaling_relative_to_reference_batch():
    # A rate found with a global batch of 64 (2 workers x 32) means the same on 8 workers: 4x the rate.
    assert math.isclose(scale_learning_rate(0.01, 8 * 32, 64, "linear"), 0.04)
    with pytest.raises(ValueError):
        scale_learning_rate(0.01, 64, 32, "cubic")


def test_trial_spec_effective_values():
    from hpo.data import DatasetInfo
    from hpo.trial.spec import TrialSpec

    info = DatasetInfo("file:///x", 1000, tuple([250, 250, 250, 250]), 8, 3, True)
    config = parse_sweep(base_sweep(trial={"workers": 4, "batch_size_per_worker": 16, "reference_batch_size": 32}))
    hyper = TrialSpec.from_config(config, info, info).hyper({"learning_rate": 0.01})
    assert hyper["global_batch_size"] == 64
    assert math.isclose(hyper["effective_learning_rate"], 0.02)
    assert hyper["steps_per_epoch"] == 16  # 250 rows per shard / 16 per batch, rounded up


def test_momentum_reaches_the_optimizers_that_take_it():
    from hpo.data import DatasetInfo
    from hpo.trial.spec import TrialSpec, optimizer_config

    info = DatasetInfo("file:///x", 1000, tuple([250, 250, 250, 250]), 8, 3, True)
    spec = TrialSpec.from_config(parse_sweep(base_sweep(trial={"workers": 1})), info, info)
    sgd = optimizer_config(spec.hyper({"optimizer": "sgd", "momentum": 0.9, "learning_rate": 0.01}))
    assert sgd == {"class_name": "sgd", "config": {"learning_rate": 0.01, "momentum": 0.9}}
    assert optimizer_config(spec.hyper({"optimizer": "RMSprop", "momentum": 0.5}))["config"]["momentum"] == 0.5
    # Adam has no momentum argument; a trial without it (or with adam) gets the learning rate only.
    assert optimizer_config(spec.hyper({"optimizer": "adam", "momentum": 0.9}))["config"].keys() == {"learning_rate"}
    assert optimizer_config(spec.hyper({"optimizer": "sgd"}))["config"].keys() == {"learning_rate"}
