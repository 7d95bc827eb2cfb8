"""The storage URI: what each form means, where driver state goes, and the one-line errors."""

from __future__ import annotations

from pathlib import Path

import pytest

from hpo.errors import ConfigError
from hpo.options import RunOptions, summary_path
from hpo.storage import Storage, checkpoint_uri, s3_options


def test_a_plain_path_is_local_and_holds_everything(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    storage = Storage.parse("runs")
    assert storage.scheme == "local" and not storage.shared and not storage.remote
    assert storage.root == str(tmp_path / "runs") and storage.state_dir("s") == tmp_path / "runs" / "s"
    assert storage.url("_data", "x") == f"file://{tmp_path}/runs/_data/x"
    assert storage.tune_storage() == (str(tmp_path / "runs"), None)
    assert summary_path(storage, "s") == tmp_path / "runs" / "s" / "summary.json"
    assert RunOptions(storage="runs").sweep_dir("s") == tmp_path / "runs" / "s"


def test_object_storage_keeps_driver_state_on_the_driver(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    storage = Storage.parse("s3://bucket/team/runs/?endpoint_override=127.0.0.1:9000&scheme=http")
    assert storage.scheme == "s3" and storage.shared and storage.remote
    assert storage.root == "bucket/team/runs" and str(storage) == "s3://bucket/team/runs"
    assert storage.url("_data", "d") == "s3://bucket/team/runs/_data/d?endpoint_override=127.0.0.1%3A9000&scheme=http"
    assert storage.experiment_path("s") == "bucket/team/runs/s"
    state = storage.state_dir("s")
    assert state.parent.parent == tmp_path / "hpo_runs" / "_shared" and state.name == "s"
    assert state.parent.name.startswith("s3-bucket_team_runs-")
    assert Storage.parse("s3://bucket/other").state_root != storage.state_root  # two storages never mix
    path, fs = storage.tune_storage()
    assert path == "bucket/team/runs" and fs.type_name == "s3"


def test_a_shared_mount_is_shared_but_not_remote(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    storage = Storage.parse(f"file://{tmp_path}/nfs/runs")
    assert storage.scheme == "file" and storage.shared and not storage.remote
    assert storage.tune_storage() == (f"{tmp_path}/nfs/runs", None)
    assert storage.url("x") == f"file://{tmp_path}/nfs/runs/x"
    assert storage.state_dir("s") != tmp_path / "nfs" / "runs" / "s"  # sqlite stays off the mount


@pytest.mark.parametrize(
    ("value", "message"),
    [
        ("", "--storage: empty; pass a directory, file:///shared/path, s3://bucket/prefix or gs://…"),
        ("ftp://host/runs", "--storage: ftp://host/runs: unsupported scheme 'ftp'; use a directory, file://, s3:// or gs://"),
        ("s3:///runs", "--storage: s3:///runs: no valid bucket name; write s3://bucket/prefix"),
        ("file://relative/runs", "--storage: file://relative/runs: a file:// URI takes an absolute path; write file:///shared/runs"),
        (
            "s3://bucket/runs?endpoint=x",
            "--storage: s3://bucket/runs?endpoint=x: unknown option 'endpoint'; options allowed: "
            "endpoint_override, scheme, region, allow_bucket_creation",
        ),
        (
            "gs://bucket/runs?scheme=http",
            "--storage: gs://bucket/runs?scheme=http: unknown option 'scheme'; options allowed: none",
        ),
    ],
)
def test_bad_storage_is_a_one_line_error(value, message):
    with pytest.raises(ConfigError) as err:
        Storage.parse(value)
    assert str(err.value) == message


def test_s3_options_take_the_standard_endpoint_variable_and_the_uri_wins(monkeypatch):
    monkeypatch.setenv("AWS_ENDPOINT_URL", "http://127.0.0.1:5000")
    monkeypatch.setenv("AWS_DEFAULT_REGION", "eu-west-1")
    assert s3_options({}) == {"endpoint_override": "127.0.0.1:5000", "scheme": "http", "region": "eu-west-1"}
    options = s3_options({"endpoint_override": "minio:9000", "allow_bucket_creation": "true"})
    assert options["endpoint_override"] == "minio:9000" and options["allow_bucket_creation"] is True
    monkeypatch.setenv("AWS_ENDPOINT_URL_S3", "https://s3.example:443")
    assert s3_options({})["endpoint_override"] == "s3.example:443"


def test_checkpoint_locations_read_as_uris(tmp_path):
    import pyarrow.fs as pafs
    from ray import tune

    s3 = pafs.S3FileSystem(endpoint_override="127.0.0.1:1", scheme="http")
    assert checkpoint_uri(tune.Checkpoint("bucket/runs/s/t/checkpoint_000001", filesystem=s3)) == (
        "s3://bucket/runs/s/t/checkpoint_000001"
    )
    assert checkpoint_uri(tune.Checkpoint(str(tmp_path))) == str(tmp_path)


def test_push_and_pull_state_through_a_shared_mount(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    storage = Storage.parse(f"file://{tmp_path}/mount")
    state = storage.state_dir("s")
    state.mkdir(parents=True)
    (state / "summary.json").write_text('{"name": "s"}')
    (state / "other.txt").write_text("not state")
    storage.push_state("s")
    copy = tmp_path / "mount" / "s" / "_driver"
    assert sorted(p.name for p in copy.iterdir()) == ["summary.json"]
    # Another driver (an empty state root) gets the copy; one that has state keeps its own.
    other = Storage("file", storage.root, (), Path(tmp_path / "elsewhere"))
    assert other.pull_state("s") and (other.state_dir("s") / "summary.json").read_text() == '{"name": "s"}'
    (state / "summary.json").write_text('{"name": "mine"}')
    assert not storage.pull_state("s") and (state / "summary.json").read_text() == '{"name": "mine"}'
