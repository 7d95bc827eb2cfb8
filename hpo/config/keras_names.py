"""The Keras 2 (tf-keras) optimizer, loss and metric names a sweep file may use.

Checked here, without importing TensorFlow, so that ``hpo validate`` and ``hpo tune`` reject a misspelt name
before any trial starts; ``tests/unit/test_keras_names.py`` checks every name against the installed tf-keras.
"""

from __future__ import annotations

#: ``keras.optimizers.get({"class_name": NAME, ...})`` (case-insensitive).
OPTIMIZERS = frozenset({"adam", "sgd", "rmsprop", "adagrad", "adadelta", "adamax", "nadam", "ftrl"})
#: The optimizers whose constructor takes ``momentum`` (``space.momentum`` / ``trial.momentum`` reach them only).
MOMENTUM_OPTIMIZERS = frozenset({"sgd", "rmsprop"})
#: ``model.compile(loss=NAME)``.
LOSSES = frozenset({
    "binary_crossentropy", "binary_focal_crossentropy", "categorical_crossentropy", "categorical_focal_crossentropy",
    "categorical_hinge", "cosine_similarity", "hinge", "huber", "kl_divergence", "kld", "kullback_leibler_divergence",
    "log_cosh", "logcosh", "mae", "mape", "mean_absolute_error", "mean_absolute_percentage_error",
    "mean_squared_error", "mean_squared_logarithmic_error", "mse", "msle", "poisson",
    "sparse_categorical_crossentropy", "squared_hinge",
})
#: ``model.compile(metrics=[NAME])``: Keras' metric functions plus the names compile resolves by the loss.
METRICS = frozenset({
    "accuracy", "acc", "crossentropy", "ce",
    "binary_accuracy", "binary_crossentropy", "categorical_accuracy", "categorical_crossentropy", "hinge",
    "kullback_leibler_divergence", "log_cosh", "logcosh", "mae", "mape", "mean_absolute_error",
    "mean_absolute_percentage_error", "mean_squared_error", "mean_squared_logarithmic_error", "mse", "msle",
    "poisson", "sparse_categorical_accuracy", "sparse_categorical_crossentropy", "sparse_top_k_categorical_accuracy",
    "squared_hinge", "top_k_categorical_accuracy",
})


def unknown(names: list[str], known: frozenset[str]) -> str | None:
    """The first of ``names`` Keras does not know (case-insensitive), or None."""
    return next((n for n in names if str(n).lower() not in known), None)
