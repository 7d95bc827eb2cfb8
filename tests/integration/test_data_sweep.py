"""A real sweep on image-shaped data converted by hpo, with the node-local reader cache on."""

from __future__ import annotations

import numpy as np
import pytest
import yaml

from tests.conftest import ROOT

pytestmark = pytest.mark.slow
SMALL = ROOT / "tests" / "integration" / "sweeps" / "small.yaml"


def test_sweep_on_images_with_cache(in_tmp):
    import tf_keras
    from sklearn.datasets import load_digits

    import hpo
    from hpo.data import convert, path_to_url

    digits = load_digits()
    np.savez(in_tmp / "digits.npz", features=(digits.images / 16.0)[..., None], label=digits.target)
    train, val = convert(in_tmp / "digits.npz", path_to_url(in_tmp / "ds"), label="label", validation_fraction=0.2)
    assert train.input_shape == (8, 8, 1)
    sweep = yaml.safe_load(SMALL.read_text())
    sweep.update(name="images")
    sweep["data"] = {
        "train": train.url,
        "validation": val.url,
        "cache": {"enabled": True, "dir": str(in_tmp / "cache"), "size_limit_mb": 64},
    }
    sweep["search"].update(algorithm="random", max_concurrent=1)
    sweep["scheduler"] = {"type": "fifo"}
    sweep["trial"]["max_epochs"] = 2
    sweep["space"] = {"learning_rate": {"type": "categorical", "choices": [0.01]}}
    result = hpo.tune(hpo.SweepConfig.model_validate(sweep), num_samples=2, storage=in_tmp / "runs")
    assert list(result.trials["status"]) == ["completed", "completed"]
    assert result.best_metric > 0.5
    # One cache per dataset version and column set, under DIR/<sweep>, kept after the sweep.
    kept = sorted(p for p in (in_tmp / "cache" / "images").iterdir() if p.is_dir())
    assert len(kept) == 2 and all(any(p.rglob("*.val")) or any(p.rglob("cache.db")) for p in kept)
    checkpoint = result.summary["trials"][0]["checkpoint"]
    model = tf_keras.models.load_model(f"{checkpoint}/model.keras")
    assert tuple(model.input_shape) == (None, 8, 8, 1)
