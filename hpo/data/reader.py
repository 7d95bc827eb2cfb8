"""Opening a Petastorm 0.13.1 batch reader that does the work on the calling thread, without its idle waits.

``make_batch_reader(reader_pool_type="dummy")`` never loses rows (the thread pool of 0.13.1 does, at epoch
ends), but its pool sleeps 100 ms whenever it has consumed the few row groups the ventilator thread had
queued — about 0.3 s per epoch per rank on small datasets. :class:`InlinePool` is that pool with a 1 ms
wait, and :func:`open_batch_reader` builds the same ``Reader`` as ``make_batch_reader`` does for plain
Parquet (no Petastorm metadata, no predicates or transforms) around it, with a worker that turns list
columns into matrices in one step (:func:`table_to_arrays`).
"""

from __future__ import annotations

import functools
import time
from typing import Any

import numpy as np

from hpo import compat
from hpo.data.fs import arrow_filesystem

#: Seconds between checks for the next queued row group.
POLL_S = 0.001


@functools.cache
def inline_pool_class() -> type:
    """:class:`InlinePool`, made on first use: importing hpo needs no Petastorm (preflight says it is missing)."""
    from petastorm.workers_pool import EmptyResultError
    from petastorm.workers_pool.dummy_pool import DummyPool

    class InlinePool(DummyPool):
        """Petastorm's dummy pool (row groups decoded on the caller's thread) polling every millisecond."""

        def get_results(self) -> Any:
            """The next decoded row group, processed on this thread.

            Raises:
                EmptyResultError: When the ventilator has no more row groups (end of the reader's epochs).
            """
            items, results = compat.dummy_pool_queues(self)
            worker, ventilator = compat.dummy_pool_worker_and_ventilator(self)
            while not results:
                if items:
                    args, kwargs = items.pop(0)
                    worker.process(*args, **kwargs)
                    if ventilator:
                        ventilator.processed_item()
                elif ventilator is None or ventilator.completed():
                    if not items:  # the last item may have arrived just before completion
                        raise EmptyResultError()
                else:
                    time.sleep(POLL_S)
            return results.pop(0)

    return InlinePool


def table_to_arrays(table: Any) -> dict[str, np.ndarray]:
    """A row group as NumPy arrays; list columns become ``(rows, length)`` matrices without copying per row.

    Petastorm converts list columns through pandas objects and ``np.vstack`` of one array per row,
    which caps a reader at ~15k rows/s for 784 features here; flattening the Arrow list array is a
    single copy at most.

    Raises:
        RuntimeError: If the rows of a list column have different lengths or nulls.
    """
    import pyarrow as pa
    import pyarrow.compute as pc

    out = {}
    for name in table.column_names:
        column = table.column(name).combine_chunks()
        if pa.types.is_list(column.type) or pa.types.is_large_list(column.type):
            lengths = pc.list_value_length(column)
            rows = len(column)
            width = pc.min(lengths).as_py() if rows else 0
            if rows and (column.null_count or width != pc.max(lengths).as_py()):
                raise RuntimeError(f"rows of list column '{name}' differ in length or hold nulls")
            out[name] = column.flatten().to_numpy(zero_copy_only=False).reshape(rows, width or 0)
        else:
            out[name] = column.to_numpy(zero_copy_only=False)
    return out


def _worker_class() -> type:
    from petastorm.arrow_reader_worker import ArrowReaderWorker

    class ArrayWorker(ArrowReaderWorker):
        """Petastorm's Arrow worker publishing NumPy arrays made by :func:`table_to_arrays`."""

        def __init__(self, worker_id: int, publish_func: Any, args: Any) -> None:
            super().__init__(worker_id, lambda table: publish_func(table_to_arrays(table)), args)

    return ArrayWorker


def _cache_store(cache: dict[str, Any] | None) -> Any:
    """Petastorm's local-disk cache with these settings, or its null cache."""
    from petastorm.cache import NullCache
    from petastorm.local_disk_cache import LocalDiskCache

    if not cache:
        return NullCache()
    return LocalDiskCache(
        cache["cache_location"],
        cache["cache_size_limit"],
        cache["cache_row_size_estimate"],
        **cache.get("cache_extra_settings", {}),
    )


def open_batch_reader(
    url: str,
    *,
    fields: list[str],
    shard: int,
    shard_count: int,
    shuffle_row_groups: bool,
    seed: int | None,
    cache: dict[str, Any] | None = None,
    filesystem: Any = None,
) -> Any:
    """A Petastorm ``Reader`` of batches (one per row group) of one shard, for one epoch.

    Args:
        url: Dataset URL (``file://``, ``s3://``, ``gs://``).
        fields: Columns to read.
        shard: This reader's shard (row group i belongs to shard i % shard_count).
        shard_count: Number of shards.
        shuffle_row_groups: Shuffle the shard's row-group order (with ``seed``).
        seed: Nonzero seed (Petastorm treats 0 as "unseeded"); None keeps the file order (Petastorm also
            shuffles the order, not the membership, of a shard's row groups whenever a seed is given).
        cache: ``cache_location``, ``cache_size_limit``, ``cache_row_size_estimate`` and
            ``cache_extra_settings`` for a local-disk cache; None for no cache.
        filesystem: A pyarrow filesystem to read through (None: resolved from the URL).

    Returns:
        A ``petastorm.reader.Reader`` (a context manager and an iterator of namedtuples of arrays).
    """
    from petastorm.fs_utils import get_filesystem_and_path_or_paths
    from petastorm.local_disk_cache import LocalDiskCache
    from petastorm.reader import Reader, normalize_dataset_url_or_urls

    if filesystem is None and not url.startswith("file://"):
        fs, path = arrow_filesystem(url)  # remote: pyarrow's filesystem, with the URL's endpoint options
    else:
        fs, path = get_filesystem_and_path_or_paths(normalize_dataset_url_or_urls(url), filesystem=filesystem)
    store = _cache_store(cache)

    class QuietReader(Reader):
        """Petastorm's Reader without the "Cache cleanup complete." print on every exit."""

        def cleanup_cache(self) -> None:
            if isinstance(self.cache, LocalDiskCache):
                self.cache.cleanup()  # a no-op with cleanup=False, as hpo sets it

    return QuietReader(
        fs,
        path,
        schema_fields=fields,
        worker_class=_worker_class(),
        reader_pool=inline_pool_class()(),
        seed=seed,
        shuffle_row_groups=shuffle_row_groups,
        num_epochs=1,
        cur_shard=shard,
        shard_count=shard_count,
        cache=store,
        is_batched_reader=True,
    )
