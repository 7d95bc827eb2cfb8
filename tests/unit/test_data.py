"""Real Parquet written by pyarrow and read back through Petastorm (no Ray)."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pandas as pd
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hpo.data import DatasetInfo, RowLossError, ShardStream, builtin_digits, convert, describe, path_to_url
from hpo.errors import ConfigError


def frame(rows: int = 101) -> pd.DataFrame:
    rng = np.random.default_rng(0)
    return pd.DataFrame(
        {
            "a": rng.normal(size=rows),
            "b": rng.integers(0, 5, size=rows),
            "name": ["x"] * rows,
            "c": rng.normal(size=rows).astype(np.float32),
            "y": rng.integers(0, 3, size=rows),
        }
    )


@pytest.mark.parametrize("fmt", ["csv", "parquet"])
def test_convert_round_trip(tmp_path, fmt):
    df = frame()
    src = tmp_path / f"src.{fmt}"
    df.to_csv(src, index=False) if fmt == "csv" else df.to_parquet(src)
    url = path_to_url(tmp_path / "ds")
    warned = []
    [info] = convert(src, url, label="y", drop_nonnumeric=True, warn=warned.append)
    assert warned == [f"{src}: name: text column left out of the features (--drop-nonnumeric)"]
    assert info.num_rows == 101 and info.feature_dim == 3 and info.num_classes == 3 and info.has_row_id
    # Shard-friendly: 24 row groups of 4 or 5 rows, so 1, 2, 3, 4, 6 or 8 workers get even shards.
    assert len(info.row_group_rows) == 24 and set(info.row_group_rows) == {4, 5}
    assert [info.shard_rows(r, 2) for r in range(2)] == [51, 50]
    table = pq.read_table(tmp_path / "ds")
    ftype = table.schema.field("features").type
    assert pa.types.is_list(ftype) and ftype.value_type == pa.float32()
    features = np.asarray(table.column("features").to_pylist(), dtype=np.float32)
    np.testing.assert_allclose(features, df[["a", "b", "c"]].to_numpy(dtype=np.float32))
    np.testing.assert_array_equal(table.column("y").to_numpy(), df["y"].to_numpy())
    np.testing.assert_array_equal(table.column("row_id").to_numpy(), np.arange(101))


def test_convert_regression_labels(tmp_path):
    df = frame().assign(y=lambda d: d["a"] * 2.0)
    src = tmp_path / "r.csv"
    df.to_csv(src, index=False)
    [info] = convert(src, path_to_url(tmp_path / "r"), label="y", drop_nonnumeric=True)
    assert info.num_classes is None and info.feature_dim == 3


def test_convert_missing_label_column(tmp_path):
    src = tmp_path / "src.csv"
    frame().to_csv(src, index=False)
    with pytest.raises(ConfigError, match=r"src.csv: target: label column not found \(columns: a, b, name, c, y\)"):
        convert(src, path_to_url(tmp_path / "ds"), label="target")


def test_describe_rejects_missing_path_and_columns(tmp_path):
    with pytest.raises(ConfigError, match=r"data: no Parquet files at .*nothing; check the URL"):
        describe(path_to_url(tmp_path / "nothing"))
    src = tmp_path / "src.csv"
    frame().to_csv(src, index=False)
    url = path_to_url(tmp_path / "ds")
    convert(src, url, label="y", drop_nonnumeric=True)
    with pytest.raises(ConfigError, match=r"data.label: column 'label' not found \(columns: row_id, features, y\)"):
        describe(url, label="label")


def test_describe_rejects_fixed_size_lists(tmp_path):
    (tmp_path / "fs").mkdir()
    arr = pa.FixedSizeListArray.from_arrays(pa.array(np.zeros(8, dtype=np.float32)), 2)
    pq.write_table(pa.table({"features": arr, "label": pa.array([0, 1, 0, 1])}), tmp_path / "fs" / "p.parquet")
    with pytest.raises(ConfigError, match="fixed-size list, which Petastorm drops silently"):
        describe(path_to_url(tmp_path / "fs"))


def stream_epochs(info: DatasetInfo, size: int, batch: int, epochs: int) -> list[list[np.ndarray]]:
    """Reads ``epochs`` epochs of every shard; returns [rank][epoch] -> sorted row ids."""
    steps = info.steps(batch, size)
    out = []
    for rank in range(size):
        stream = ShardStream(
            info, features="features", label="label", rank=rank, size=size, steps=steps, seed=3, record_ids=True
        )
        for _ in range(epochs):
            batches = list(stream.epoch_batches())
            assert len(batches) == steps  # every rank runs the same number of steps
            assert all(len(x) == len(y) > 0 for x, y in batches)
        out.append(stream.epoch_ids)
    return out


@pytest.mark.parametrize("size", [1, 2, 3])
def test_every_epoch_reads_every_row_exactly_once_across_shards(tmp_path, size):
    train_url, _ = builtin_digits(tmp_path, 0.2)
    info = describe(train_url)
    all_ids = np.sort(pq.read_table(train_url[len("file://") :], columns=["row_id"]).column(0).to_numpy())
    per_rank = stream_epochs(info, size, batch=32, epochs=5)
    for epoch in range(5):
        shards = [per_rank[rank][epoch] for rank in range(size)]
        union = np.concatenate(shards)
        assert len(union) == len(set(union.tolist())), "a row was read twice"
        np.testing.assert_array_equal(np.sort(union), all_ids)


def test_epochs_are_reshuffled(tmp_path):
    train_url, _ = builtin_digits(tmp_path, 0.2)
    info = describe(train_url)
    stream = ShardStream(info, features="features", label="label", rank=0, size=2, steps=info.steps(32, 2), seed=1)
    first = np.concatenate([y for _, y in stream.epoch_batches()])
    second = np.concatenate([y for _, y in stream.epoch_batches()])
    assert sorted(first.tolist()) == sorted(second.tolist()) and not np.array_equal(first, second)


def test_row_loss_is_detected(tmp_path):
    train_url, _ = builtin_digits(tmp_path, 0.2)
    info = describe(train_url)
    # Claim one row group more than the files hold: the reader comes up short and must say so.
    lying = DatasetInfo(
        info.url,
        info.num_rows + 7,
        (*info.row_group_rows[:-2], info.row_group_rows[-2] + 7, info.row_group_rows[-1]),
        info.feature_dim,
        10,
        True,
    )
    stream = ShardStream(lying, features="features", label="label", rank=0, size=2, steps=lying.steps(32, 2))
    with pytest.raises(RowLossError, match="expected"):
        list(stream.epoch_batches())


def test_tf_dataset_yields_the_shard(tmp_path):
    from hpo import _env

    _env.apply()  # TF_USE_LEGACY_KERAS before TensorFlow loads

    train_url, _ = builtin_digits(tmp_path, 0.2)
    info = describe(train_url)
    steps = info.steps(64, 2)
    stream = ShardStream(info, features="features", label="label", rank=1, size=2, steps=steps)
    rows = sum(int(x.shape[0]) for x, _ in stream.dataset().take(steps))
    assert rows == info.shard_rows(1, 2)


def test_tf_dataset_prefetches_a_fixed_buffer_without_autotuning(tmp_path):
    """tf.data's autotuner makes deleting a long-used iterator (the end of ``fit``) wait up to a minute."""
    from hpo import _env

    _env.apply()  # TF_USE_LEGACY_KERAS before TensorFlow loads
    from hpo.data.stream import PREFETCH_BATCHES

    train_url, _ = builtin_digits(tmp_path, 0.2)
    info = describe(train_url)  # 64 features: 256 B a row
    stream = ShardStream(info, features="features", label="label", rank=0, size=1, steps=info.steps(64, 1))
    assert stream.dataset().options().autotune.enabled is False
    assert stream.prefetch_batches() == PREFETCH_BATCHES[1]  # 16 KiB batches: capped
    huge = replace(info, feature_dim=224 * 224 * 3, feature_shape=(224, 224, 3))
    wide = ShardStream(huge, features="features", label="label", rank=0, size=1, steps=huge.steps(256, 1))
    assert wide.prefetch_batches() == PREFETCH_BATCHES[0]  # 150 MiB batches: the floor
    mid = ShardStream(huge, features="features", label="label", rank=0, size=1, steps=huge.num_rows // 2)
    batch_bytes = max(mid.batch_sizes()) * 4 * 224 * 224 * 3  # 2 or 3 rows
    assert PREFETCH_BATCHES[0] < mid.prefetch_batches() == 64 * 2**20 // batch_bytes < PREFETCH_BATCHES[1]


def test_builtin_digits_table_is_scikit_learns_digits():
    from sklearn.datasets import load_digits

    from hpo.data.builtin import load_digits_table

    table, digits = load_digits_table(), load_digits()
    assert table.shape == (1797, 65)
    np.testing.assert_array_equal(table[:, :-1], digits.data)
    np.testing.assert_array_equal(table[:, -1].astype(int), digits.target)
