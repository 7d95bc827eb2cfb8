"""``hpo data inspect`` and the dataset checks that run before any trial (real Parquet files)."""

from __future__ import annotations

import json
import os
import subprocess
import sys

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hpo.data import describe, filesystem, inspect_dataset, path_to_url, write_dataset
from hpo.errors import ConfigError
from tests.conftest import ROOT


def raw(tmp_path, name: str, table: pa.Table) -> str:
    (tmp_path / name).mkdir()
    pq.write_table(table, tmp_path / name / "p.parquet")
    return path_to_url(tmp_path / name)


def test_inspect_reports_rows_groups_schema_shape_and_classes(tmp_path):
    x = np.random.default_rng(0).random((120, 4, 4), dtype=np.float32)
    url = write_dataset((x, np.arange(120) % 3), path_to_url(tmp_path / "ds"))
    report = inspect_dataset(url)
    assert report["rows"] == 120 and report["row_groups"] == 24 and report["row_group_rows"] == [5, 5]
    assert report["schema"] == {"row_id": "int64", "features": "list<element: float>", "label": "int64"}
    assert report["features"] == {"column": "features", "shape": [4, 4], "declared": True}
    assert report["label"] == {"column": "label", "task": "classification", "classes": {"0": 40, "1": 40, "2": 40}}
    assert report["shards"]["8"] == [15] * 8
    reg = write_dataset((x, np.linspace(-1, 1, 120)), path_to_url(tmp_path / "reg"))
    assert inspect_dataset(reg)["label"] == {"column": "label", "task": "regression", "range": [-1.0, 1.0]}


@pytest.mark.parametrize(
    ("name", "table", "kw", "message"),
    [
        (
            "wrong-column",
            pa.table({"features": pa.array([[1.0]] * 4), "y": [0, 1, 0, 1]}),
            {},
            "data.label: column 'label' not found (columns: features, y); set data.label to one of them",
        ),
        (
            "strings",
            pa.table({"features": pa.array([["a", "b"]] * 4), "label": [0, 1, 0, 1]}),
            {},
            "data.features: 'features' holds non-numeric values (list<element: string>); encode them as numbers",
        ),
        (
            "scalar",
            pa.table({"features": pa.array(["a"] * 4), "label": [0, 1, 0, 1]}),
            {},
            "data.features: 'features' has type string, not list<float32>; rewrite it with 'hpo data convert'",
        ),
        (
            "fixed",
            pa.table(
                {
                    "features": pa.FixedSizeListArray.from_arrays(pa.array(np.zeros(8, np.float32)), 2),
                    "label": [0, 1, 0, 1],
                }
            ),
            {},
            "data.features: 'features' is a fixed-size list, which Petastorm drops silently; rewrite it",
        ),
        (
            "empty",
            pa.table({"features": pa.array([], pa.list_(pa.float32())), "label": pa.array([], pa.int64())}),
            {},
            "data: the dataset at file://",
        ),
        (
            "ragged",
            pa.table({"features": pa.array([[1.0], [1.0, 2.0], [1.0], [1.0]]), "label": [0, 1, 0, 1]}),
            {},
            "data.features: rows of 'features' hold 1 to 2 values; every row needs the same number",
        ),
        (
            "float-labels",
            pa.table({"features": pa.array([[1.0]] * 4), "label": [0.5, 1.0, 0.0, 1.0]}),
            {"task": "classification"},
            "data.label: classification needs integer labels 0..k-1 (got double); encode the labels",
        ),
    ],
)
def test_unusable_datasets_fail_with_one_line(tmp_path, name, table, kw, message):
    url = raw(tmp_path, name, table)
    with pytest.raises(ConfigError) as err:
        describe(url, **kw)
    text = str(err.value)
    assert text.startswith(url) and message in text and "\n" not in text
    if name == "empty":
        assert text.endswith("has no rows; check the source")


def test_declared_shape_must_match_the_rows(tmp_path):
    table = pa.table({"features": pa.array([[1.0, 2.0, 3.0]] * 4), "label": [0, 1, 0, 1]})
    url = raw(tmp_path, "bad", table.replace_schema_metadata({b"hpo.shape.features": b"[2, 2]"}))
    with pytest.raises(ConfigError, match=r"declared shape \[2, 2\] holds 4 values but rows have 3"):
        describe(url)


@pytest.mark.parametrize(("url", "package"), [("s3://bucket/data", "s3fs"), ("gs://bucket/data", "gcsfs")])
def test_remote_url_without_its_fsspec_extra_gives_a_hint(url, package):
    pytest.importorskip("fsspec")
    try:
        __import__(package)
        pytest.skip(f"{package} is installed")
    except ImportError:
        pass
    with pytest.raises(ConfigError) as err:
        filesystem(url, key="data.train")
    scheme = url.split(":")[0]
    assert str(err.value) == (
        f"{url}: data.train: reading {scheme}:// needs the '{package}' package, which is not installed; "
        f"run 'pip install {package}'"
    )
    with pytest.raises(ConfigError, match=f"run 'pip install {package}'"):
        describe(url)


def test_unknown_scheme(tmp_path):
    with pytest.raises(
        ConfigError, match=r"ftp://x/y: data: unsupported URL scheme 'ftp'; use file://, s3:// or gs://"
    ):
        describe("ftp://x/y")


def cli(*args: str, cwd) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    return subprocess.run(
        [sys.executable, "-m", "hpo.cli.main", *args], cwd=cwd, env=env, capture_output=True, text=True, timeout=120
    )


def test_cli_convert_split_and_inspect(tmp_path):
    x = np.random.default_rng(0).random((100, 3, 2), dtype=np.float32)
    np.savez(tmp_path / "a.npz", features=x, label=np.arange(100) % 2)
    proc = cli("data", "convert", "a.npz", "out", "--label", "label", "--validation-fraction", "0.2", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == [
        f"file://{tmp_path}/out/train: 80 rows, 6 features of shape [3, 2], 24 row groups, 2 classes",
        f"file://{tmp_path}/out/validation: 20 rows, 6 features of shape [3, 2], 20 row groups, 2 classes",
    ]
    proc = cli("data", "inspect", "out/train", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "rows: 80 in 1 file(s), 24 row groups of 3–4 rows" in proc.stdout
    assert "features: 'features' shape [3, 2]" in proc.stdout and "label: 'label' 2 classes: 0: " in proc.stdout
    proc = cli("data", "inspect", "out/train", "--json", cwd=tmp_path)
    assert json.loads(proc.stdout)["rows"] == 80
    proc = cli("data", "inspect", "out/train", "--label", "target", cwd=tmp_path)
    assert proc.returncode == 2 and proc.stderr.strip().splitlines() == [
        f"error: file://{tmp_path}/out/train: data.label: column 'target' not found "
        "(columns: row_id, features, label); set data.label to one of them"
    ]
