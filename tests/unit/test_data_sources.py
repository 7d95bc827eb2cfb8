"""Data sources: every ``data:`` value is recognised by one registered source; a new source is one registration."""

from __future__ import annotations

from collections.abc import Iterator

import numpy as np
import pytest

from hpo.cluster.visibility import _can_read, probe_for
from hpo.config import SweepConfig
from hpo.data import (
    DATA_SOURCES,
    DataSource,
    Materialised,
    MaterialiseRequest,
    RemoteFilesystem,
    data_source,
    filesystem,
    path_to_url,
    register_source,
    write_dataset,
)
from hpo.data.sources import url_problem
from hpo.errors import ConfigError
from hpo.preflight import preflight
from tests.conftest import base_sweep


@pytest.mark.parametrize(("value", "name"), [
    ("file:///data/train", "file"), ("s3://bucket/train", "s3"), ("gs://b/t", "gs"), ("gcs://b/t", "gs"),
    ("hdfs://nn/t", "hdfs"), ("builtin:digits", "builtin"), ("ftp://host/t", None), ("/data/train", None),
    ("S3://bucket/train", None),
])
def test_each_value_is_of_one_source(value, name):
    kind = data_source(value)
    assert (kind.name if kind else None) == name
    assert (url_problem(value) is None) == (name is not None)


def test_a_value_no_source_recognises_gets_the_examples_of_the_sources():
    assert url_problem("ftp://host/t") == (
        "'ftp://host/t' is not a dataset URL; use file:///abs/path, s3://bucket/path or builtin:digits"
    )
    with pytest.raises(ValueError) as err:
        register_source(DataSource("other-s3", ("s3://",)))
    assert str(err.value) == "data source 'other-s3': prefix s3:// belongs to data source 's3'; pick another"


def _toy_materialise(request: MaterialiseRequest) -> Materialised:
    """Writes 240 rows of 4 features (3 classes) for ``toy:NAME``, once, under the request's root."""
    rows = np.arange(240)
    x = np.random.default_rng(request.seed).normal(size=(240, 4)).astype(np.float32)
    y = rows % 3
    n_val = int(240 * request.validation_fraction)
    base = request.root / request.value.split(":", 1)[1]
    train = write_dataset((x[n_val:], y[n_val:]), path_to_url(base / "train"), row_ids=rows[n_val:])
    validation = write_dataset((x[:n_val], y[:n_val]), path_to_url(base / "validation"), row_ids=rows[:n_val])
    return Materialised(train, validation)


def _toy_probe(url: str, key: str) -> str | None:
    return None if url.endswith("/here") else f"{key}: toy says {url} is not there"


@pytest.fixture
def toy_sources() -> Iterator[None]:
    """A source that writes its own data (``toy:``) and one read in place through fsspec's memory filesystem."""
    before = dict(DATA_SOURCES)
    register_source(DataSource("toy", ("toy:",), materialise=_toy_materialise))
    register_source(DataSource("mem", ("mem://",), example="mem://bucket/data", probe=_toy_probe,
                               remote=RemoteFilesystem(("mem",), "memory", "fsspec")))
    yield
    DATA_SOURCES.clear()
    DATA_SOURCES.update(before)


def test_a_registered_source_is_checked_resolved_and_probed(toy_sources, tmp_path):
    # the sweep file takes its values, and refuses a validation set for a source that splits its own
    config = SweepConfig.model_validate(base_sweep(
        name="toy-sweep", data={"train": "toy:small"}, tracking={"mlflow_uri": f"sqlite:///{tmp_path}/mlflow.db"}
    ))
    with pytest.raises(ValueError, match="toy:small makes its own validation split"):
        SweepConfig.model_validate(base_sweep(data={"train": "toy:small", "validation": "file:///v"}))
    assert "mem://bucket/data" in url_problem("ftp://x")  # its example is offered
    # the checks before a sweep materialise it and describe what it wrote
    spec = preflight(config, tmp_path / "runs", "toy.yaml", check_tracking=False)
    assert spec.train.url == path_to_url(tmp_path / "runs" / "_data" / "small" / "train")
    assert (spec.train.num_rows, spec.validation.num_rows) == (192, 48)
    assert spec.train.input_shape == (4,) and spec.train.num_classes == 3
    # each node probes a URL with its source's probe: the toy's for mem://, the file one's for what it wrote
    probes = [("data.train", url, probe_for(url)) for url in ("mem://b/here", "mem://b/gone", spec.train.url)]
    assert _can_read(probes) == [("data.train", "data.train: toy says mem://b/gone is not there")]
    # the filesystem layer reads its remote scheme
    fs, path = filesystem("mem://bucket/data")
    assert type(fs).__name__ == "MemoryFileSystem" and path == "bucket/data"


def test_a_source_that_writes_its_own_data_is_not_partitioned(toy_sources, tmp_path):
    from hpo.partition import by_column

    config = SweepConfig.model_validate(base_sweep(data={"train": "toy:small"}))
    with pytest.raises(ConfigError) as err:
        by_column(config, "region", tmp_path, "toy.yaml")
    assert str(err.value) == "toy.yaml: data.train: --partition-by needs a file:// dataset, not toy:small"


def test_the_file_probe_names_a_missing_dataset(tmp_path):
    url = path_to_url(tmp_path / "absent")
    assert _can_read([("data.validation", url, probe_for(url))]) == [("data.validation", f"{url} not found")]
