"""A small convolutional network for image-like features (``(H, W)`` or ``(H, W, C)`` examples)."""

from __future__ import annotations

from typing import Any

from hpo.models import output_layer


def build(params: dict[str, Any], input_shape: tuple[int, ...], num_classes: int | None) -> Any:
    """Builds an uncompiled Keras 2 CNN: ``blocks`` × (two 3×3 convolutions, 2×2 max-pool), then a head.

    Few weights for much arithmetic, so data-parallel workers exchange small gradients: the model
    benchmarks/scaling.py uses to measure compute-bound scaling.

    Args:
        params: Searched parameters: ``filters`` (int, first block; doubled per block), ``blocks`` (int),
            ``dense`` (int, units of the hidden dense layer; 0 for none), ``dropout`` (float). Missing ones
            take defaults.
        input_shape: Shape of one example: ``(H, W)`` (one channel) or ``(H, W, C)``.
        num_classes: Number of classes, or None for regression (one linear output).

    Returns:
        A ``tf.keras.Model``.

    Raises:
        ValueError: If examples are not 2- or 3-dimensional.
    """
    import tensorflow as tf

    keras = tf.keras
    if len(input_shape) not in (2, 3):
        raise ValueError(f"hpo.models.cnn needs (H, W) or (H, W, C) examples, not shape {tuple(input_shape)}")
    filters = int(params.get("filters", 16))
    blocks = int(params.get("blocks", 2))
    dense = int(params.get("dense", 64))
    dropout = float(params.get("dropout", 0.0))
    inputs = keras.Input(shape=input_shape)
    x = keras.layers.Reshape((*input_shape, 1))(inputs) if len(input_shape) == 2 else inputs
    for block in range(blocks):
        for _ in range(2):
            x = keras.layers.Conv2D(filters * 2**block, 3, padding="same", activation="relu")(x)
        if min(x.shape[1], x.shape[2]) >= 2:
            x = keras.layers.MaxPooling2D()(x)
    x = keras.layers.GlobalAveragePooling2D()(x)
    if dense:
        x = keras.layers.Dense(dense, activation="relu")(x)
    if dropout > 0:
        x = keras.layers.Dropout(dropout)(x)
    return keras.Model(inputs, output_layer(keras, x, num_classes))
