from __future__ import annotations

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hpo.config import parse_sweep, partition_label
from hpo.data import describe, path_to_url
from hpo.errors import ConfigError
from hpo.partition import by_column, by_urls, named_urls
from tests.conftest import base_sweep, hpo_cli


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
    parts = by_column(config, "region", tmp_path / "runs", "s.yaml")
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
        by_column(config, "country", tmp_path / "runs", "s.yaml")



def error_of(data, source="s.yaml") -> str:
    with pytest.raises(ConfigError) as info:
        parse_sweep(data, source)
    assert "\n" not in str(info.value)
    return str(info.value)


def test_partitions_mapping_gives_one_sweep_per_url():
    config = parse_sweep(base_sweep(name="demand", data={
        "partitions": {"eu": "file:///d/eu", "us": {"train": "file:///d/us", "validation": "file:///d/us-val"}},
        "label": "y",
    }))
    parts = by_urls(config)
    assert [(label, c.name) for label, c in parts] == [("eu", "demand-eu"), ("us", "demand-us")]
    eu, us = (c for _, c in parts)
    assert (eu.data.train, eu.data.validation, eu.data.partitions, eu.data.label) == ("file:///d/eu", None, None, "y")
    assert (us.data.train, us.data.validation) == ("file:///d/us", "file:///d/us-val")
    assert eu.search == config.search and eu.space == config.space


def test_partitions_list_is_named_after_the_last_path_component():
    config = parse_sweep(base_sweep(data={"partitions": [
        "file:///d/sales/region=eu/", "s3://bucket/us", "file:///d/fr.parquet",
    ]}))
    assert list(config.data.partitions) == ["eu", "us", "fr"]
    assert config.data.partitions["us"].train == "s3://bucket/us"


@pytest.mark.parametrize(("url", "label"), [
    ("file:///a/b/eu", "eu"), ("file:///a/region=us/", "us"), ("gs://b/x/de.parquet", "de"),
    ("file:///a/New York", "New-York"), ("builtin:digits", "digits"),
])
def test_partition_label(url, label):
    assert partition_label(url) == label


@pytest.mark.parametrize(("data", "expected"), [
    ({"partitions": ["file:///a/eu", "file:///b/eu"]},
     "s.yaml: data.partitions: 'file:///a/eu' and 'file:///b/eu' both give the partition name 'eu'; "
     "name them: partitions: {NAME: URL, ...}"),
    ({"partitions": {"eu": "/data/eu"}},
     "s.yaml: data.partitions.eu.train: '/data/eu' is not a dataset URL; use file:///abs/path, s3://bucket/path "
     "or builtin:digits"),
    ({"partitions": ["/data/eu"]},
     "s.yaml: data.partitions: '/data/eu' is not a dataset URL; use file:///abs/path, s3://bucket/path or "
     "builtin:digits"),
    ({"partitions": {"e u": "file:///d/eu"}},
     "s.yaml: data.partitions: 'e u' is not a valid partition name; use letters, digits, '-', '_' or '.'"),
    ({"partitions": {}}, "s.yaml: data.partitions: must not be empty; map at least one name to a data URL"),
    ({"train": "file:///d/all", "partitions": {"eu": "file:///d/eu"}},
     "s.yaml: data.partitions: set either data.train (one sweep) or data.partitions (one sweep per partition), "
     "not both; remove one"),
    ({"validation": "file:///d/val", "partitions": {"eu": "file:///d/eu"}},
     "s.yaml: data.validation: one validation set for all partitions is not supported; give each its own "
     "(partitions: {NAME: {train: URL, validation: URL}}) or remove it to split validation_fraction off"),
    ({"label": "y"}, "s.yaml: data.train: required key is missing; add it (or list data.partitions)"),
    ({"partitions": {"eu": {"train": "file:///d/eu", "valid": "file:///v"}}},
     "s.yaml: data.partitions.eu.valid: unknown key; remove it or check its spelling"),
])
def test_partitions_errors_are_one_line(data, expected):
    assert error_of(base_sweep(data=data)) == expected


def test_named_urls_from_the_command_line():
    got = named_urls(["eu=file:///d/x", "file:///d/region=us", "s3://b/fr"], "s.yaml")
    assert got == {"eu": "file:///d/x", "us": "file:///d/region=us", "fr": "s3://b/fr"}
    with pytest.raises(ConfigError, match=r"^s.yaml: --partition: 'file:///a/eu' and 'file:///b/eu' are both "
                                          r"named 'eu'; pass them as NAME=URL$"):
        named_urls(["file:///a/eu", "file:///b/eu"], "s.yaml")
    with pytest.raises(ConfigError, match=r"^s.yaml: --partition: cannot derive a partition name from 'file:///'"):
        named_urls(["file:///"], "s.yaml")


def test_partition_by_and_url_partitions_exclude_each_other(tmp_path):
    config = parse_sweep(base_sweep(data={"partitions": {"eu": "file:///d/eu"}}))
    with pytest.raises(ConfigError, match=r"^s.yaml: data.partitions: the sweep already lists its partitions; "
                                          r"drop --partition-by \(partition_by\) or data.partitions$"):
        by_column(config, "region", tmp_path, "s.yaml")


def test_plain_tune_refuses_a_partitioned_sweep(tmp_path):
    import hpo

    config = parse_sweep(base_sweep(data={"partitions": {"eu": "file:///d/eu"}}))
    with pytest.raises(ConfigError, match=r"data.partitions: this sweep runs one sweep per partition \(1\); "
                                          r"run it with hpo.tune_partitions\(\)"):
        hpo.tune(config, storage=tmp_path)


def cli(*args, cwd):
    proc = hpo_cli(*args, cwd=cwd)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def test_cli_partition_errors_exit_2_before_anything_runs(tmp_path, write_sweep):
    url, _ = regional(tmp_path)
    sweep = write_sweep(base_sweep(name="demand", data={"train": url}))
    line = cli("tune", str(sweep), "--partition-by", "region", "--partition", url, cwd=tmp_path)
    assert line == f"error: {sweep}: --partition-by: cannot be combined with --partition; use one of them"
    # The second partition's URL is bad: nothing runs, not even the first partition.
    line = cli("tune", str(sweep), "--storage", str(tmp_path / "runs"), "--partition", f"eu={url}",
               "--partition", "us=file:///nonexistent/us", cwd=tmp_path)
    assert line.startswith(f"error: {sweep} (partition us): data.train: no Parquet files at /nonexistent/us; "
                           "check the URL"), line
    assert not (tmp_path / "runs" / "demand-eu").exists()
    listed = write_sweep(base_sweep(name="demand", data={"partitions": {"eu": url}}), "listed.yaml")
    line = cli("tune", str(listed), "--partition-by", "region", cwd=tmp_path)
    assert line.startswith(f"error: {listed}: data.partitions: the sweep already lists its partitions"), line
    line = cli("validate", str(write_sweep(base_sweep(data={"partitions": ["file:///x/eu", "/y/us"]}), "bad.yaml")),
               cwd=tmp_path)
    assert line.startswith(f"error: {tmp_path}/bad.yaml: data.partitions: '/y/us' is not a dataset URL"), line


def test_the_cli_names_its_option_in_partition_errors(tmp_path):
    """``hpo tune --partition`` goes through the API's partitioned run and keeps naming its own option."""
    import hpo

    line = cli("tune", "s.yaml", "--partition", "file:///a/eu", "--partition", "file:///b/eu", cwd=tmp_path)
    assert line == ("error: s.yaml: --partition: 'file:///a/eu' and 'file:///b/eu' are both named 'eu'; "
                    "pass them as NAME=URL")
    with pytest.raises(ConfigError, match=r"^s.yaml: partitions: 'file:///a/eu' and 'file:///b/eu' are both named"):
        hpo.tune_partitions("s.yaml", partitions=["file:///a/eu", "file:///b/eu"])


def test_option_overrides_name_the_sweep_file_keys():
    from hpo.config import option_overrides

    assert option_overrides() == {}
    assert option_overrides(4, "n", "http://m:5000") == {
        "search.num_samples": 4, "name": "n", "tracking.mlflow_uri": "http://m:5000"}
    assert option_overrides(mlflow_uri="file:///m") == {"tracking.mlflow_uri": "file:///m"}
