"""Built-in example model builders (``model: hpo.models.mlp:build``)."""

from __future__ import annotations

from typing import Any


def output_layer(keras: Any, x: Any, num_classes: int | None) -> Any:
    """The builders' common head: softmax over ``num_classes``, or one linear unit for regression (None)."""
    if num_classes:
        return keras.layers.Dense(num_classes, activation="softmax")(x)
    return keras.layers.Dense(1)(x)
