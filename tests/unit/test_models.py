"""The bundled model builders: shapes in, shapes out, the searched parameters reach the layers."""

from __future__ import annotations

import numpy as np
import pytest

from hpo.models import cnn, mlp  # conftest set TF_USE_LEGACY_KERAS before TensorFlow loads


def test_cnn_on_grey_images_classifies():
    model = cnn.build({"filters": 8, "blocks": 2, "dense": 16, "dropout": 0.1}, (28, 28), 10)
    convs = [layer for layer in model.layers if type(layer).__name__ == "Conv2D"]
    assert [c.filters for c in convs] == [8, 8, 16, 16]  # doubled per block
    out = model.predict(np.zeros((3, 28, 28), np.float32), verbose=0)
    assert out.shape == (3, 10) and np.allclose(out.sum(axis=1), 1, atol=1e-5)


def test_cnn_with_channels_regresses():
    model = cnn.build({"blocks": 1, "dense": 0}, (8, 8, 3), None)
    assert model.predict(np.zeros((2, 8, 8, 3), np.float32), verbose=0).shape == (2, 1)


def test_cnn_rejects_flat_features():
    with pytest.raises(ValueError, match=r"hpo.models.cnn needs \(H, W\) or \(H, W, C\) examples, not shape \(64,\)"):
        cnn.build({}, (64,), 10)


def test_mlp_width_and_depth():
    model = mlp.build({"units": 24, "layers": 2}, (64,), 10)
    dense = [layer for layer in model.layers if type(layer).__name__ == "Dense"]
    assert [d.units for d in dense] == [24, 24, 10]
