"""A user model module for the tests: fails on purpose when ``params['fail']`` is true, and produces NaN
losses from the first batch (a diverged trial, deterministically) when ``params['nan']`` is true."""

from __future__ import annotations

from hpo.models.mlp import build as mlp


def build(params, input_shape, num_classes):
    if params.get("fail"):
        raise RuntimeError("this configuration is broken on purpose")
    model = mlp(params, input_shape, num_classes)
    if not params.get("nan"):
        return model
    import tensorflow as tf

    keras = tf.keras
    inputs = keras.Input(shape=input_shape)
    poisoned = keras.layers.Dense(input_shape[-1], kernel_initializer=keras.initializers.Constant(float("nan")))
    return keras.Model(inputs, model(poisoned(inputs)))
