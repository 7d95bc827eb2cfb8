"""The Petastorm reader hpo opens: :class:`InlinePool` (row groups decoded on the caller's thread), for real."""

from __future__ import annotations

import threading

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest

from hpo.data import path_to_url
from hpo.data.reader import inline_pool_class, open_batch_reader


@pytest.mark.timeout(60)
def test_inline_pool_decodes_every_ventilated_item_in_order_on_the_callers_thread():
    from petastorm.workers_pool import EmptyResultError
    from petastorm.workers_pool.ventilator import ConcurrentVentilator
    from petastorm.workers_pool.worker_base import WorkerBase

    threads = []

    class Square(WorkerBase):
        def process(self, value):
            threads.append(threading.get_ident())
            self.publish_func(value * value)

    pool = inline_pool_class()()
    # A ventilation queue of 2: the pool has to wait for Petastorm's ventilator thread to queue the rest.
    ventilator = ConcurrentVentilator(pool.ventilate, [{"value": i} for i in range(20)], max_ventilation_queue_size=2)
    pool.start(Square, ventilator=ventilator)
    try:
        got = [pool.get_results() for _ in range(20)]
        with pytest.raises(EmptyResultError):
            pool.get_results()
    finally:
        pool.stop()
        pool.join()
    assert got == [i * i for i in range(20)]
    assert set(threads) == {threading.get_ident()}


@pytest.mark.timeout(60)
def test_a_reader_over_the_inline_pool_reads_each_row_group_of_its_shard_once(tmp_path):
    rows, group = 90, 10
    table = pa.table({
        "row_id": pa.array(np.arange(rows, dtype=np.int64)),
        "features": pa.array([[float(i), float(-i)] for i in range(rows)], type=pa.list_(pa.float32())),
    })
    (tmp_path / "ds").mkdir()
    pq.write_table(table, tmp_path / "ds" / "part.parquet", row_group_size=group)
    url = path_to_url(tmp_path / "ds")
    shards = []
    for shard in range(2):
        with open_batch_reader(url, fields=["row_id", "features"], shard=shard, shard_count=2,
                               shuffle_row_groups=True, seed=5) as reader:
            batches = list(reader)
        assert all(b.features.shape == (len(b.row_id), 2) for b in batches)  # list column as a matrix
        assert all(np.array_equal(b.features[:, 0], b.row_id) for b in batches)
        shards.append(np.concatenate([b.row_id for b in batches]))
    assert len(shards[0]) + len(shards[1]) == rows
    np.testing.assert_array_equal(np.sort(np.concatenate(shards)), np.arange(rows))
    # row group i belongs to shard i % 2
    assert sorted({int(i) // group % 2 for i in shards[0]}) == [0]
