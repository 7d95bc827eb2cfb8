"""A multi-layer perceptron for flat feature vectors (the default sweep's model)."""

from __future__ import annotations

from typing import Any

from hpo.models import output_layer


def build(params: dict[str, Any], input_shape: tuple[int, ...], num_classes: int | None) -> Any:
    """Builds an uncompiled Keras 2 MLP.

    Args:
        params: Searched parameters: ``units`` (int), ``layers`` (int), ``dropout`` (float),
            ``activation`` (str). Missing ones take defaults.
        input_shape: Shape of one example's features (multi-dimensional inputs are flattened first).
        num_classes: Number of classes, or None for regression (one linear output).

    Returns:
        A ``tf.keras.Model``.
    """
    import tensorflow as tf

    keras = tf.keras
    units = int(params.get("units", 64))
    layers = int(params.get("layers", 1))
    dropout = float(params.get("dropout", 0.0))
    activation = str(params.get("activation", "relu"))
    inputs = keras.Input(shape=input_shape)
    x = keras.layers.Flatten()(inputs) if len(input_shape) > 1 else inputs  # images: one vector per example
    for _ in range(layers):
        x = keras.layers.Dense(units, activation=activation)(x)
        if dropout > 0:
            x = keras.layers.Dropout(dropout)(x)
    return keras.Model(inputs, output_layer(keras, x, num_classes))
