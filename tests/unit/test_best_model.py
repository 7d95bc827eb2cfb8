"""The sample rows the best model's signature is inferred from take the model's input shape."""

from __future__ import annotations

import numpy as np

from hpo.tracking.best_model import as_model_input


def test_flat_rows_take_an_image_models_input_shape():
    rows = np.arange(3 * 64, dtype=np.float32).reshape(3, 64)
    image = as_model_input(rows, (None, 8, 8, 1))
    assert image.shape == (3, 8, 8, 1) and image[1, 0, 1, 0] == rows[1, 1]


def test_shapes_that_do_not_fit_are_left_alone():
    rows = np.zeros((2, 64), dtype=np.float32)
    assert as_model_input(rows, (None, 64)).shape == (2, 64)
    assert as_model_input(rows, (None, 10)).shape == (2, 64)  # not this data's model: MLflow will say so
    assert as_model_input(rows, [(None, 64), (None, 3)]).shape == (2, 64)  # several inputs
    assert as_model_input(rows, (None, None, 8)).shape == (2, 64)
