"""Writes the raw files of the image and tabular example sweeps from scikit-learn's bundled datasets.

Usage: ``python search_spaces/make_example_data.py [DIR]`` (default ``/tmp/hpo-examples``). It writes
``DIR/digits_images.npz`` (arrays ``x``: 1797 images of 8×8 pixels in [0, 1], ``y``: their digit) and
``DIR/diabetes.csv`` (442 patients: ten standardised measurements and ``progression``, a disease score one
year later divided by 100 so that the label is of order one). Files already there are left alone. Then
``hpo data convert`` turns them into hpo datasets: see the head of ``digits_cnn.yaml`` and
``diabetes_regression.yaml``.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
from sklearn.datasets import load_diabetes, load_digits


def main(directory: str = "/tmp/hpo-examples") -> None:
    """Writes both files under ``directory`` unless they exist; prints what it did."""
    root = Path(directory)
    root.mkdir(parents=True, exist_ok=True)
    images = root / "digits_images.npz"
    if images.exists():
        print(f"{images}: already there, left alone")
    else:
        digits = load_digits()
        np.savez(images, x=(digits.images / 16.0).astype(np.float32), y=digits.target.astype(np.int64))
        print(f"{images}: {len(digits.target)} images of 8x8 pixels")
    table = root / "diabetes.csv"
    if table.exists():
        print(f"{table}: already there, left alone")
    else:
        frame = load_diabetes(as_frame=True).frame.rename(columns={"target": "progression"})
        frame["progression"] = frame["progression"] / 100.0
        frame.to_csv(table, index=False)
        print(f"{table}: {len(frame)} rows, {frame.shape[1] - 1} feature columns and progression")


if __name__ == "__main__":
    main(*sys.argv[1:2])
