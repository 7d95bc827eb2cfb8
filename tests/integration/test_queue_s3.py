"""The queue's files on object storage: the standby runner's hand-over and claim through a real S3 server.

One moto server for the module (a few seconds); the queue reads and writes ``s3://`` through the same
storage layer as the sweeps' state. No Ray: the dispatcher's and the runner's files are the contract.
"""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest

from hpo.queue import Assignment, EntryState, QueueEntry, QueueSettings, QueueStore, StandbyRecord
from hpo.queue.admission import handover_step
from hpo.queue.package import SweepInputs, build, read_package, store_package, unpack, working_dir
from hpo.queue.standby import claim, wait
from hpo.storage import Storage
from tests.integration.s3 import MotoServer, moto_with_bucket

BUCKET = "queue"


@pytest.fixture(scope="module")
def moto(tmp_path_factory) -> Iterator[MotoServer]:
    with moto_with_bucket(tmp_path_factory.mktemp("moto") / "moto.log", BUCKET) as server:
        yield server


def test_a_sweep_is_handed_over_claimed_and_unpacked_through_object_storage(moto, tmp_path):
    storage = Storage.parse(f"s3://{BUCKET}/sweeps")
    store = QueueStore(storage)
    store.put_settings(QueueSettings(max_running=1))
    store.put(QueueEntry(name="s", submitted_at=time.time()))
    src = tmp_path / "src"
    src.mkdir()
    (src / "sweep.yaml").write_text("name: s\n")
    content = build(SweepInputs(src, "sweep.yaml", []))
    package = store_package(storage, content)
    assert working_dir(storage, package).startswith(f"s3://{BUCKET}/sweeps/_queue/packages/")

    # the dispatcher starts a runner and hands it the sweep; the runner finds it, claims it, unpacks it
    store.put_standby(StandbyRecord(job_id="hpo-standby-1", started_at=time.time()))
    assert wait(store, "hpo-standby-1", poll_s=0.0, idle_s=0.0) is None  # nothing handed over yet
    handed = Assignment(name="s", args=["tune", "sweep.yaml", "--name", "s"], package=package,
                        working_dir=working_dir(storage, package), assigned_at=time.time())
    store.assign("hpo-standby-1", handed)
    got = wait(store, "hpo-standby-1", poll_s=0.0, idle_s=0.0)
    assert got == handed
    assert store.claimed("hpo-standby-1") is None
    assert handover_step(claimed=False, alive=False, assigned_at=handed.assigned_at, now=time.time()) == "requeue"
    assert claim(store, "hpo-standby-1", got)
    taken = store.claimed("hpo-standby-1")
    assert taken is not None and taken.name == "s"
    assert handover_step(claimed=True, alive=False, assigned_at=handed.assigned_at, now=time.time()) == "claimed"
    assert (unpack(read_package(storage, got.package), tmp_path / "work") / "sweep.yaml").read_text() == "name: s\n"

    keys = set(moto.keys(BUCKET, "sweeps/_queue/"))
    assert {"sweeps/_queue/standby.json", "sweeps/_queue/standby/hpo-standby-1.json",
            "sweeps/_queue/standby/hpo-standby-1.claim.json", "sweeps/_queue/entries/s.json",
            "sweeps/_queue/settings.json"} <= keys
    assert [e.state for e in store.entries()] == [EntryState.QUEUED]  # the runner's files are no entries
