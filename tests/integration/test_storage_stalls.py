"""Object storage that stalls: retried writes and reads, and a node-local dataset copy, on a real S3 server.

One moto server for the module; a stall is the server frozen with SIGSTOP and resumed with SIGCONT, so
every request in that time hangs, as in a brownout. The whole-sweep stall is in ``test_two_nodes.py``.
"""

from __future__ import annotations

import os
import signal
import threading
import time
from collections.abc import Iterator

import numpy as np
import pytest

from hpo import object_store
from hpo.data import ReaderCache, ShardStream, describe, write_dataset
from hpo.data.local_copy import copy_dir, local_copy
from hpo.storage import Storage
from tests.integration.s3 import MotoServer, moto_with_bucket

BUCKET = "stalls"


@pytest.fixture(scope="module")
def moto(tmp_path_factory) -> Iterator[MotoServer]:
    with moto_with_bucket(tmp_path_factory.mktemp("moto") / "moto.log", BUCKET) as server:
        yield server


def _frozen(server: MotoServer, seconds: float) -> threading.Timer:
    """Freezes the server now and resumes it after ``seconds`` (the timer that does)."""
    os.kill(server.proc.pid, signal.SIGSTOP)
    timer = threading.Timer(seconds, os.kill, (server.proc.pid, signal.SIGCONT))
    timer.start()
    return timer


def test_a_write_during_a_stall_lands_once_the_store_is_back(moto):
    fs, base = Storage.parse(f"s3://{BUCKET}/runs").filesystem()
    timer = _frozen(moto, 15)
    started = time.time()
    try:
        with fs.open_output_stream(f"{base}/during-stall.bin") as out:
            out.write(b"x" * 100_000)
    finally:
        timer.join()
    assert time.time() - started >= 14  # it waited for the store, and did not fail
    assert "runs/during-stall.bin" in moto.keys(BUCKET, "runs/")


def test_the_retry_limit_is_kept_when_ray_pickles_the_filesystem(moto):
    import ray.cloudpickle as cloudpickle

    fs, _ = Storage.parse(f"s3://{BUCKET}/runs").filesystem()
    copy = cloudpickle.loads(cloudpickle.dumps(fs))
    options, attempts = copy.hpo_options
    assert attempts == object_store.attempts_for(object_store.DEFAULT_RETRY_S) == 61
    assert options["endpoint_override"] == f"127.0.0.1:{moto.port}"
    assert copy.type_name == "s3"


def test_a_remote_dataset_is_read_from_one_local_copy_per_node(moto, tmp_path):
    rng = np.random.default_rng(0)
    x, y = rng.normal(size=(300, 4)).astype(np.float32), rng.integers(0, 3, 300)
    local = tmp_path / "source"
    write_dataset((x, y), f"file://{local}")
    for file in local.iterdir():
        moto.client().upload_file(str(file), BUCKET, f"data/small/{file.name}")
    info = describe(f"s3://{BUCKET}/data/small")
    cache_root = tmp_path / "cache"

    assert local_copy(info, cache_root, size_limit_mb=0) == info.url  # too large for the limit: read remotely
    url = local_copy(info, cache_root, size_limit_mb=100)
    target = copy_dir(cache_root, info)
    assert url == f"file://{target}" and (target / ".complete").is_file()
    copied = sorted(p.name for p in target.iterdir() if p.name != ".complete")
    assert copied == sorted(p.name for p in local.iterdir())
    stamp = (target / ".complete").stat().st_mtime_ns
    assert local_copy(info, cache_root, size_limit_mb=100) == url
    assert (target / ".complete").stat().st_mtime_ns == stamp  # copied once

    # Training reads the copy: with the store frozen, a stream over the cached dataset still yields every row.
    cache = ReaderCache(root=str(cache_root / "sweep"), copies=str(cache_root))
    stream = ShardStream(info, features="features", label="label", rank=0, size=1, steps=3, cache=cache, shuffle=False)
    timer = _frozen(moto, 8)
    started = time.time()
    try:
        rows = sum(len(batch_y) for _, batch_y in stream.epoch_batches())
    finally:
        elapsed = time.time() - started
        timer.join()
    assert rows == 300 and stream.local_url == url
    assert elapsed < 8, f"the epoch waited for the frozen store ({elapsed:.1f} s)"


def test_a_bad_retry_limit_is_one_line_naming_the_variable(monkeypatch):
    monkeypatch.setenv(object_store.RETRY_ENV, "ten minutes")
    with pytest.raises(object_store.ConfigError) as err:
        object_store.retry_limit_s()
    assert str(err.value) == (
        "environment: HPO_STORAGE_RETRY_S: 'ten minutes' is not a number of seconds >= 0; "
        "set it to e.g. 600 (or unset it for the default)"
    )


def test_a_storage_interruption_reads_as_interrupted_everywhere():
    from hpo.trial.protocol import trial_failure_line

    exc = object_store.StorageUnavailable(object_store.storage_line(4, OSError("AWS Error NETWORK_CONNECTION")))
    line = trial_failure_line(None, f"Traceback …\nhpo.object_store.StorageUnavailable: {exc}")
    assert line.startswith("storage unreachable for over 600 s (HPO_STORAGE_RETRY_S) writing the checkpoint of epoch 4")
    assert object_store.error_status(line) == "interrupted"
    assert object_store.error_status("ValueError: bad shape") == "failed"


def test_a_short_retry_limit_gives_up_on_a_hanging_store_near_it(moto, monkeypatch):
    monkeypatch.setenv(object_store.RETRY_ENV, "10")
    fs, base = Storage.parse(f"s3://{BUCKET}/runs").filesystem()
    timer = _frozen(moto, 60)
    started = time.time()
    try:
        with pytest.raises(OSError):
            fs.get_file_info(f"{base}/never")
        waited = time.time() - started
    finally:
        timer.cancel()
        os.kill(moto.proc.pid, signal.SIGCONT)
    assert 5 <= waited <= 60, waited  # retried (not the first timeout), given up on well before the store came back
