"""Built-in example datasets, written once as hpo datasets."""

from __future__ import annotations

from pathlib import Path

import numpy as np

from hpo.data.fs import path_to_url, url_to_path
from hpo.data.write import PART, write_dataset


def builtin_digits(root: Path, validation_fraction: float, seed: int = 0) -> tuple[str, str]:
    """Writes scikit-learn's bundled digits (8×8 images, 10 classes) once under ``root``.

    Features are stored flat with the declared shape ``(64,)``, so the default MLP sees 64 inputs.

    Returns:
        The ``file://`` URLs of the train and validation datasets.
    """
    tag = f"digits-v1-{validation_fraction:g}-{seed}"
    train_url, val_url = path_to_url(root / tag / "train"), path_to_url(root / tag / "validation")
    if (url_to_path(val_url) / PART).exists():
        return train_url, val_url
    from sklearn.datasets import load_digits

    digits = load_digits()
    x = (digits.data / 16.0).astype(np.float32)
    y = digits.target.astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    n_val = round(len(x) * validation_fraction)
    val, train = order[:n_val], order[n_val:]
    write_dataset((x[train], y[train]), train_url, row_ids=train)
    write_dataset((x[val], y[val]), val_url, row_ids=val)
    return train_url, val_url
