"""Built-in example datasets, written once as hpo datasets."""

from __future__ import annotations

import gzip
import importlib.util
from pathlib import Path

import numpy as np

from hpo.data.fs import path_to_url, url_to_path
from hpo.data.sources import Materialised, MaterialiseRequest
from hpo.data.write import PART, validation_rows, write_dataset
from hpo.errors import ConfigError


def materialise(request: MaterialiseRequest) -> Materialised:
    """The ``builtin:`` data source: writes the named built-in dataset (once) and its validation split.

    Raises:
        ConfigError: For a built-in dataset hpo does not have.
    """
    if request.value != "builtin:digits":
        raise ConfigError(
            f"{request.source}: data.train: unknown built-in dataset '{request.value}'; use builtin:digits"
        )
    train, validation = builtin_digits(request.root, request.validation_fraction, request.seed, request.source)
    return Materialised(train, validation)


def builtin_digits(root: Path, validation_fraction: float, seed: int = 0, source: str = "data") -> tuple[str, str]:
    """Writes scikit-learn's bundled digits (8×8 images, 10 classes) once under ``root``.

    Features are stored flat with the declared shape ``(64,)``, so the default MLP sees 64 inputs.

    Args:
        root: Where hpo keeps the datasets it writes (``STATE/_data``).
        validation_fraction: Share of the 1,797 rows split off for validation.
        seed: Seed of the split.
        source: The sweep file, for error messages.

    Returns:
        The ``file://`` URLs of the train and validation datasets.

    Raises:
        ConfigError: If ``validation_fraction`` leaves no row for training.
    """
    tag = f"digits-v1-{validation_fraction:g}-{seed}"
    train_url, val_url = path_to_url(root / tag / "train"), path_to_url(root / tag / "validation")
    if (url_to_path(val_url) / PART).exists():
        return train_url, val_url
    data = load_digits_table()
    x = (data[:, :-1] / 16.0).astype(np.float32)
    y = data[:, -1].astype(np.int64)
    order = np.random.default_rng(seed).permutation(len(x))
    n_val = validation_rows(len(x), validation_fraction, source)
    val, train = order[:n_val], order[n_val:]
    write_dataset((x[train], y[train]), train_url, row_ids=train)
    write_dataset((x[val], y[val]), val_url, row_ids=val)
    return train_url, val_url


def load_digits_table() -> np.ndarray:
    """scikit-learn's bundled ``digits.csv.gz`` (1797 rows: 64 pixel values 0-16, then the digit), read directly.

    The same numbers as ``sklearn.datasets.load_digits``, without importing scikit-learn (and SciPy), which
    costs a sweep driver more time than writing the dataset: the file is located with ``find_spec``, which
    does not run the package.
    """
    spec = importlib.util.find_spec("sklearn")
    if spec is None or not spec.submodule_search_locations:
        raise ImportError("builtin:digits needs scikit-learn's bundled data; install scikit-learn")
    path = Path(next(iter(spec.submodule_search_locations))) / "datasets" / "data" / "digits.csv.gz"
    with gzip.open(path, "rt") as f:
        return np.loadtxt(f, delimiter=",")
