"""The optimizer, loss and metric names a sweep may use are exactly the ones the installed tf-keras knows."""

from __future__ import annotations

import pytest

from hpo import _env
from hpo.config.keras_names import LOSSES, METRICS, OPTIMIZERS

_env.apply()  # TF_USE_LEGACY_KERAS before TensorFlow loads
keras = pytest.importorskip("tf_keras")


def test_every_listed_optimizer_builds_and_no_other_is_known():
    for name in OPTIMIZERS:
        keras.optimizers.get({"class_name": name, "config": {"learning_rate": 0.1}})
    with pytest.raises(ValueError):
        keras.optimizers.get({"class_name": "adamz", "config": {"learning_rate": 0.1}})


def test_every_listed_loss_and_metric_compiles():
    model = keras.Sequential([keras.layers.Dense(3, input_shape=(2,), activation="softmax")])
    for loss in LOSSES:
        model.compile(optimizer="sgd", loss=loss)
    for metric in METRICS - {"accuracy", "acc", "crossentropy", "ce"}:  # those four compile resolves by the loss
        assert callable(keras.metrics.get(metric))
    assert not callable(keras.metrics.get("accuracyy"))  # an unknown name comes back as the string itself
    functions = {n for n in dir(keras.losses) if n.islower() and not n.startswith("_")} - {
        "deserialize", "get", "serialize"}
    assert functions == LOSSES  # a loss added or removed by an upgrade is noticed here
