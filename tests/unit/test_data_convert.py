"""Converting each input kind to an hpo dataset and reading it back (real Parquet, real Petastorm)."""

from __future__ import annotations

import numpy as np
import pandas as pd
import pyarrow.parquet as pq
import pytest

from hpo.data import (
    ShardStream,
    convert,
    declared_shapes,
    describe,
    path_to_url,
    row_group_sizes,
    write_dataset,
)
from hpo.errors import ConfigError


def images(rows: int = 150) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(1)
    return rng.random((rows, 6, 5, 2), dtype=np.float32), rng.integers(0, 4, size=rows)


def read_back(url: str, features: str = "features", label: str = "label") -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Features (flat), labels and row ids in row-id order, straight from Parquet."""
    table = pq.read_table(url[len("file://") :])
    order = np.argsort(table.column("row_id").to_numpy())
    x = np.asarray(table.column(features).to_pylist(), dtype=np.float32)[order]
    return x, table.column(label).to_numpy()[order], table.column("row_id").to_numpy()[order]


def test_npz_keeps_image_shape_and_values(tmp_path):
    x, y = images()
    np.savez(tmp_path / "img.npz", features=x, label=y)
    [info] = convert(tmp_path / "img.npz", path_to_url(tmp_path / "ds"), label="label")
    assert info.input_shape == (6, 5, 2) and info.feature_dim == 60 and info.num_classes == 4
    assert declared_shapes(pq.read_schema(tmp_path / "ds" / "part-00000.parquet")) == {"features": (6, 5, 2)}
    flat, labels, ids = read_back(info.url)
    np.testing.assert_array_equal(flat.reshape(-1, 6, 5, 2), x)
    np.testing.assert_array_equal(labels, y)
    np.testing.assert_array_equal(ids, np.arange(150))


def test_npz_single_other_array_is_the_features(tmp_path):
    x, y = images(30)
    np.savez(tmp_path / "a.npz", pixels=x, target=y)
    [info] = convert(tmp_path / "a.npz", path_to_url(tmp_path / "ds"), label="target")
    assert info.input_shape == (6, 5, 2)
    np.savez(tmp_path / "b.npz", pixels=x, other=x, target=y)
    with pytest.raises(ConfigError, match=r"b.npz: features: features array not found \(arrays: pixels, other, target"):
        convert(tmp_path / "b.npz", path_to_url(tmp_path / "ds2"), label="target")


@pytest.mark.parametrize("kind", ["tuple", "labels", "mapping", "frame-of-arrays", "frame-of-columns"])
def test_python_objects_round_trip(tmp_path, kind):
    x, y = images(48)
    url = path_to_url(tmp_path / kind)
    if kind == "tuple":
        write_dataset((x, y), url)
    elif kind == "labels":
        write_dataset(x, url, labels=y)
    elif kind == "mapping":
        write_dataset({"features": x, "y": y}, url, label="y")
    elif kind == "frame-of-arrays":
        write_dataset(pd.DataFrame({"features": list(x), "y": y}), url, label="y")
    else:
        flat = x.reshape(48, -1)
        frame = pd.DataFrame(flat, columns=[f"f{i}" for i in range(60)]).assign(y=y)
        write_dataset(frame, url, label="y")
    label = "label" if kind in ("tuple", "labels") else "y"
    info = describe(url, label=label)
    assert info.input_shape == ((60,) if kind == "frame-of-columns" else (6, 5, 2))
    flat, labels, _ = read_back(url, label=label)
    np.testing.assert_array_equal(flat, x.reshape(48, -1))
    np.testing.assert_array_equal(labels, y)


def test_batches_come_in_the_declared_shape(tmp_path):
    from hpo import _env

    _env.apply()  # TF_USE_LEGACY_KERAS before TensorFlow loads

    x, y = images(96)
    url = write_dataset((x, y), path_to_url(tmp_path / "ds"))
    info = describe(url)
    stream = ShardStream(info, features="features", label="label", rank=0, size=2, steps=3, shuffle=False)
    ds = stream.dataset()
    assert tuple(ds.element_spec[0].shape) == (None, 6, 5, 2)
    batches = list(ds.take(3).as_numpy_iterator())
    got = np.concatenate([b[0] for b in batches])
    expected = np.concatenate(
        [x[sum(info.row_group_rows[:i]) :][:n] for i, n in enumerate(info.row_group_rows) if i % 2 == 0]
    )
    np.testing.assert_array_equal(got, expected)


def test_validation_split_is_a_seeded_partition(tmp_path):
    x, y = images(200)
    np.savez(tmp_path / "img.npz", features=x, label=y)
    train, val = convert(tmp_path / "img.npz", path_to_url(tmp_path / "ds"), label="label", validation_fraction=0.25)
    assert train.url.endswith("/ds/train") and val.url.endswith("/ds/validation")
    assert (train.num_rows, val.num_rows) == (150, 50) and train.input_shape == val.input_shape == (6, 5, 2)
    tx, ty, tids = read_back(train.url)
    vx, _, vids = read_back(val.url)
    assert not set(tids) & set(vids) and sorted([*tids, *vids]) == list(range(200))
    np.testing.assert_array_equal(tx.reshape(-1, 6, 5, 2), x[tids])  # row ids name the source rows
    np.testing.assert_array_equal(ty, y[tids])
    np.testing.assert_array_equal(vx.reshape(-1, 6, 5, 2), x[vids])
    again = convert(tmp_path / "img.npz", path_to_url(tmp_path / "ds2"), label="label", validation_fraction=0.25)
    np.testing.assert_array_equal(read_back(again[1].url)[2], vids)
    other = convert(
        tmp_path / "img.npz", path_to_url(tmp_path / "ds3"), label="label", validation_fraction=0.25, seed=1
    )
    assert not np.array_equal(read_back(other[1].url)[2], vids)


def test_split_by_writes_one_dataset_per_value(tmp_path):
    rng = np.random.default_rng(0)
    frame = pd.DataFrame(
        {"a": rng.normal(size=90), "b": rng.normal(size=90), "region": ["eu", "us", "ap"] * 30, "y": np.arange(90) % 3}
    )
    frame.to_csv(tmp_path / "t.csv", index=False)
    infos = convert(tmp_path / "t.csv", path_to_url(tmp_path / "ds"), label="y", split_by="region")
    assert [i.url.rsplit("/", 1)[1] for i in infos] == ["region=ap", "region=eu", "region=us"]
    for info in infos:
        region = info.url.rsplit("=", 1)[1]
        flat, labels, ids = read_back(info.url, label="y")
        np.testing.assert_array_equal(labels, frame.loc[ids, "y"].to_numpy())
        assert info.num_rows == 30 and info.input_shape == (2,)  # 'region' is not a feature
        np.testing.assert_array_equal(ids, np.flatnonzero(frame["region"] == region))
        np.testing.assert_allclose(flat, frame.loc[ids, ["a", "b"]].to_numpy(dtype=np.float32))
    both = convert(
        tmp_path / "t.csv", path_to_url(tmp_path / "ds2"), label="y", split_by="region", validation_fraction=0.2
    )
    assert [i.url.split("/ds2/")[1] for i in both][:2] == ["region=ap/train", "region=ap/validation"]
    assert [i.num_rows for i in both] == [24, 6] * 3


@pytest.mark.parametrize("rows", [24, 101, 1_000, 24 * 65_536 + 5, 10_000_000])
def test_row_groups_give_even_shards_for_1_2_4_8_workers(rows):
    sizes = row_group_sizes(rows)
    assert sum(sizes) == rows and len(sizes) % 24 == 0 and max(sizes) <= 65_536
    for workers in (1, 2, 4, 8):
        shards = [sum(sizes[r::workers]) for r in range(workers)]
        assert max(shards) - min(shards) <= 1, (workers, shards)


def test_petastorm_shards_are_even_for_1_2_4_8_workers(tmp_path):
    x, y = images(1_001)
    info = describe(write_dataset((x, y), path_to_url(tmp_path / "ds")))
    for workers in (1, 2, 4, 8):
        read = []
        for rank in range(workers):
            stream = ShardStream(
                info, features="features", label="label", rank=rank, size=workers, steps=1, shuffle=False
            )
            read.append(sum(len(b) for _, b in stream.epoch_batches()))
        assert sum(read) == 1_001 and max(read) - min(read) <= 1, (workers, read)


def test_convert_rejects_bad_options(tmp_path):
    x, y = images(20)
    np.savez(tmp_path / "a.npz", features=x, label=y)
    (tmp_path / "a.json").write_text("{}")
    url = path_to_url(tmp_path / "ds")
    with pytest.raises(ConfigError, match=r"a.json: \(file\): unsupported format '.json'; convert a .csv, .parquet"):
        convert(tmp_path / "a.json", url, label="label")
    with pytest.raises(ConfigError, match=r"a.npz: --validation-fraction: 1.5 is not between 0 and 1"):
        convert(tmp_path / "a.npz", url, label="label", validation_fraction=1.5)
    with pytest.raises(ConfigError, match=r"a.npz: --validation-fraction: 0.01 of 20 rows leaves an empty validation"):
        convert(tmp_path / "a.npz", url, label="label", validation_fraction=0.01)
    with pytest.raises(ConfigError, match=r"a.npz: --split-by: column 'site' not found \(columns: features, label"):
        convert(tmp_path / "a.npz", url, label="label", split_by="site")
    with pytest.raises(ConfigError, match=r"ds: features: features are <U1, not numeric"):
        write_dataset((np.array([["a"]] * 4), np.zeros(4)), url)


def test_sweep_splits_off_validation_keeping_shape_and_row_ids(tmp_path):
    from hpo.config import parse_sweep
    from hpo.preflight import resolve_data
    from tests.conftest import base_sweep

    x, y = images(120)
    url = write_dataset((x, y), path_to_url(tmp_path / "ds"))
    config = parse_sweep(base_sweep(data={"train": url, "validation_fraction": 0.25}, search={"seed": 4}))
    train, val = resolve_data(config, tmp_path / "runs", "s.yaml")
    assert (train.num_rows, val.num_rows) == (90, 30) and train.input_shape == val.input_shape == (6, 5, 2)
    assert len(train.row_group_rows) == 24 and train.num_classes == 4
    tx, ty, tids = read_back(train.url)
    _, _, vids = read_back(val.url)
    assert sorted([*tids, *vids]) == list(range(120))
    np.testing.assert_array_equal(tx.reshape(-1, 6, 5, 2), x[tids])
    np.testing.assert_array_equal(ty, y[tids])
