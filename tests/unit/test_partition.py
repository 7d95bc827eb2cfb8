from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hpo.config import parse_sweep
from hpo.data import describe, path_to_url
from hpo.errors import ConfigError
from hpo.sweep import partition
from tests.conftest import base_sweep


def regional(tmp_path):
    rng = np.random.default_rng(0)
    rows = 240
    (tmp_path / "ds").mkdir()
    table = pa.table({
        "features": pa.array([list(r) for r in rng.normal(size=(rows, 4)).astype(np.float32)],
                             type=pa.list_(pa.float32())),
        "label": pa.array(rng.integers(0, 3, size=rows)),
        "region": pa.array(np.where(np.arange(rows) % 3 == 0, "eu", "us")),
    })
    pq.write_table(table, tmp_path / "ds" / "p.parquet", row_group_size=10)
    return path_to_url(tmp_path / "ds"), table


def test_one_sweep_per_partition_value(tmp_path):
    url, table = regional(tmp_path)
    config = parse_sweep(base_sweep(name="demand", data={"train": url}))
    parts = partition(config, "region", tmp_path / "runs", "s.yaml")
    assert [(v, c.name) for v, c in parts] == [("eu", "demand-eu"), ("us", "demand-us")]
    frame = table.to_pandas()
    for value, part in parts:
        info = describe(part.data.train)
        expected = frame[frame["region"] == value]
        assert info.num_rows == len(expected) and info.feature_dim == 4
        ids = pq.read_table(part.data.train[len("file://"):], columns=["row_id"]).column(0).to_numpy()
        assert sorted(ids.tolist()) == expected.index.tolist()  # row ids point back into the source
        assert part.data.validation is None and part.search == config.search


def test_partition_column_must_exist(tmp_path):
    url, _ = regional(tmp_path)
    config = parse_sweep(base_sweep(data={"train": url}))
    with pytest.raises(ConfigError, match=r"s.yaml: data.train: column 'country' not found \(columns: features, "
                                          r"label, region\); pass --partition-by with one of them"):
        partition(config, "country", tmp_path / "runs", "s.yaml")

