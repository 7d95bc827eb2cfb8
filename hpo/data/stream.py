"""One Horovod rank's Petastorm shard as exactly ``steps`` batches per epoch, each row exactly once."""

from __future__ import annotations

import ctypes
import functools
import hashlib
import json
import logging
import zlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from hpo.data.info import DatasetInfo
from hpo.data.local_copy import local_copy
from hpo.data.reader import open_batch_reader
from hpo.data.write import ROW_ID
from hpo.errors import ConfigError

Chunk = tuple[np.ndarray, np.ndarray, "np.ndarray | None"]
#: Rows are shuffled together across row groups up to this many bytes of features (memory bound).
MIX_BYTES = 128 * 2**20
#: Bytes of ready batches tf.data keeps ahead of training (prefetch buffer), within the bounds below.
PREFETCH_BYTES = 64 * 2**20
PREFETCH_BATCHES = (2, 64)
log = logging.getLogger(__name__)

#: diskcache shards of Petastorm's LocalDiskCache (its default).
_CACHE_SHARDS = 6
#: glibc's ``mallopt`` parameters, and the values :func:`restore_malloc_thresholds` sets.
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD_BYTES = 32 * 2**20  # glibc's own ceiling for its dynamic threshold (64-bit)


@functools.cache
def _mallopt() -> Any:
    """The C library's ``mallopt``, or None where there is none."""
    try:
        mallopt = ctypes.CDLL(None).mallopt  # the process's own symbols: libc is loaded already
    except (OSError, AttributeError):
        return None
    mallopt.argtypes, mallopt.restype = (ctypes.c_int, ctypes.c_int), ctypes.c_int
    return mallopt


def restore_malloc_thresholds() -> bool:
    """Undoes the 128 KiB mmap threshold TensorFlow's ``from_generator`` pins for the whole process.

    The process's first ``GeneratorDataset`` kernel calls ``mallopt(M_MMAP_THRESHOLD, 131072)`` (seen with a
    uprobe on ``mallopt``), which also switches off glibc's dynamic threshold. From then on every tensor
    over 128 KiB (a conv layer's activations or im2col buffer) is a fresh ``mmap`` whose pages the kernel
    zeroes on first touch and ``munmap`` on free: a small CNN trained from :meth:`ShardStream.dataset` spent
    28 % of its CPU in page faults and ran each epoch 40 % longer than from in-memory arrays. Sets the
    threshold where glibc's dynamic rule would have taken it, and the trim threshold to twice that, as
    that rule does. A no-op (False) where the C library has no ``mallopt`` (not glibc).
    """
    mallopt = _mallopt()
    if mallopt is None:
        return False
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD_BYTES)) and bool(
        mallopt(_M_TRIM_THRESHOLD, 2 * MMAP_THRESHOLD_BYTES)
    )


class RowLossError(RuntimeError):
    """A reader returned a different number of rows than the shard holds."""


@dataclass(frozen=True)
class ReaderCache:
    """Petastorm's local-disk cache, kept across readers, trials and processes of one sweep on a node.

    Attributes:
        root: Directory of this sweep's cache on the node (``~`` is expanded where the reader runs).
        size_limit_mb: Upper bound of each dataset's cache (least recently stored entries are evicted).
    """

    root: str
    size_limit_mb: int = 2048
    #: Where whole-dataset copies live on the node (:mod:`hpo.data.local_copy`; None: no copies).
    copies: str | None = None
    #: Petastorm's row-group cache for what is read from the storage (``data.cache.enabled``).
    row_groups: bool = True

    def location(self, info: DatasetInfo, fields: list[str]) -> str:
        """The cache directory of one dataset version and column selection."""
        key = json.dumps([info.url, info.fingerprint, sorted(fields)])
        return str(Path(self.root).expanduser() / hashlib.sha1(key.encode()).hexdigest()[:16])

    def reader_kwargs(self, info: DatasetInfo, fields: list[str]) -> dict[str, Any]:
        """Petastorm local-disk cache arguments: a cache that is not deleted when the reader exits."""
        limit = self.size_limit_mb * 2**20
        row_bytes = info.feature_dim * 4 + 16
        return {
            "cache_location": self.location(info, fields),
            "cache_size_limit": limit,
            # Only used by Petastorm's sanity check (limit / shards >= 5 rows).
            "cache_row_size_estimate": max(1, min(row_bytes, limit // (5 * _CACHE_SHARDS))),
            "cache_extra_settings": {"cleanup": False},
        }


def epoch_seed(seed: int, epoch: int) -> int:
    """A nonzero 32-bit seed per (seed, epoch).

    Petastorm 0.13.1 shuffles row groups non-deterministically when its seed is 0 or None, and a reader
    reuses its first epoch's order; hpo opens one reader per epoch with this seed instead.
    """
    return zlib.crc32(f"{seed}:{epoch}".encode()) | 1


class ShardStream:
    """One rank's shard as exactly ``steps`` batches per epoch, each row exactly once.

    Batches are re-cut from Petastorm's row groups so that every rank runs the same number of steps
    (Horovod hangs otherwise) while no row is repeated or skipped: a shard with fewer rows gets
    slightly smaller batches. Each epoch opens a fresh reader whose row-group order is shuffled with a
    per-epoch seed, and rows are shuffled across ``mix_groups`` consecutive row groups. Row groups are
    decoded on the calling thread (:class:`~hpo.data.reader.InlinePool`, Petastorm's dummy pool without
    its 100 ms waits), since the thread pool of Petastorm 0.13.1 loses row groups at epoch ends; the row
    count of every epoch is checked anyway.

    Args:
        info: Dataset description.
        features: Features column.
        label: Label column.
        rank: This worker's shard index.
        size: Number of shards (workers).
        steps: Batches to produce per epoch (the same on every rank).
        seed: Base seed; each epoch's order depends on (seed, epoch) only.
        shuffle: Shuffle row-group order and rows within each epoch.
        record_ids: Keep the row ids read in each epoch (for audits and tests).
        cache: Keep row groups in a local-disk cache that outlives the reader (None: no cache).
        mix_groups: Row groups whose rows are shuffled together (more: better mixing, more memory); fewer
            when they would hold more than ``MIX_BYTES`` of features.
        filesystem: A pyarrow filesystem to read through (None: resolved from the URL).
    """

    def __init__(
        self,
        info: DatasetInfo,
        *,
        features: str,
        label: str,
        rank: int,
        size: int,
        steps: int,
        seed: int = 0,
        shuffle: bool = True,
        record_ids: bool = False,
        cache: ReaderCache | None = None,
        mix_groups: int = 4,
        filesystem: Any = None,
    ) -> None:
        self.info = info
        self.features = features
        self.label = label
        self.rank = rank
        self.size = size
        self.steps = steps
        self.seed = seed
        self.shuffle = shuffle
        self.record_ids = record_ids and info.has_row_id
        self.cache = cache
        self.mix_groups = max(1, mix_groups)
        self.filesystem = filesystem
        #: The node's copy of a remote dataset, once :meth:`_source` has looked for it.
        self.local_url: str | None = None
        self.expected_rows = info.shard_rows(rank, size)
        if self.expected_rows < steps:
            raise ConfigError(
                f"{info.url}: trial.batch_size_per_worker: shard {rank} has {self.expected_rows} rows, fewer "
                f"than the {steps} steps per epoch; use fewer workers or a bigger dataset"
            )
        self.epoch = 0
        #: The exception that ended :meth:`dataset`'s generator (TensorFlow reports only its own error).
        self.error: Exception | None = None
        self.epoch_rows: list[int] = []
        self.epoch_ids: list[np.ndarray] = []

    def batch_sizes(self) -> list[int]:
        """Sizes of this rank's ``steps`` batches: as equal as possible, summing to the shard's rows."""
        base, extra = divmod(self.expected_rows, self.steps)
        return [base + 1] * extra + [base] * (self.steps - extra)

    def _source(self, fields: list[str]) -> tuple[str, dict[str, Any] | None, Any]:
        """``(url, Petastorm cache arguments, filesystem)`` to read: the node's copy of the dataset when it has one."""
        if self.cache is None:
            return self.info.url, None, self.filesystem
        if self.cache.copies is not None and self.local_url is None:
            try:
                self.local_url = local_copy(self.info, self.cache.copies, self.cache.size_limit_mb)
            except OSError as exc:  # a full or read-only disk: the storage is read as without a copy
                log.warning("no local copy of %s (%s); reading it from the storage", self.info.url, exc)
                self.local_url = self.info.url
        if self.local_url is not None and self.local_url != self.info.url:
            return self.local_url, None, None  # a local copy: no object storage, no row-group cache needed
        kwargs = self.cache.reader_kwargs(self.info, fields) if self.cache.row_groups else None
        return self.info.url, kwargs, self.filesystem

    def _row_groups(self, epoch: int) -> Iterator[Chunk]:
        fields = [self.features, self.label] + ([ROW_ID] if self.record_ids else [])
        url, cache, filesystem = self._source(fields)
        with open_batch_reader(
            url,
            fields=fields,
            shard=self.rank,
            shard_count=self.size,
            shuffle_row_groups=self.shuffle,
            seed=epoch_seed(self.seed, epoch) if self.shuffle else None,
            cache=cache,
            filesystem=filesystem,
        ) as reader:
            for group in reader:
                x = np.asarray(getattr(group, self.features), dtype=np.float32)
                y = np.asarray(getattr(group, self.label))
                ids = np.asarray(getattr(group, ROW_ID)) if self.record_ids else None
                yield x, y, ids

    def _chunks(self, epoch: int) -> Iterator[Chunk]:
        """Row groups, with rows shuffled across up to ``mix_groups`` consecutive groups when shuffling."""
        if not self.shuffle:
            yield from self._row_groups(epoch)
            return
        rng = np.random.default_rng(epoch_seed(self.seed, epoch))
        held: list[Chunk] = []

        def mixed() -> Chunk:
            total = sum(len(c[1]) for c in held)
            order = rng.permutation(total)
            if len(held) == 1:
                x, y, ids = held[0]
                return x[order], y[order], None if ids is None else ids[order]
            # The same shuffle as concatenate-then-index, scattering each group into place: one copy.
            dest = np.empty_like(order)
            dest[order] = np.arange(total)
            out = [np.empty((total, *part.shape[1:]), dtype=part.dtype) for part in held[0] if part is not None]
            offset = 0
            for chunk in held:
                where = dest[offset : offset + len(chunk[1])]
                for target, part in zip(out, (p for p in chunk if p is not None), strict=True):
                    target[where] = part
                offset += len(chunk[1])
            return out[0], out[1], out[2] if len(out) > 2 else None

        held_bytes = 0
        for chunk in self._row_groups(epoch):
            held.append(chunk)
            held_bytes += chunk[0].nbytes
            if len(held) >= self.mix_groups or held_bytes >= MIX_BYTES:
                yield mixed()
                held, held_bytes = [], 0
        if held:
            yield mixed()

    def epoch_blocks(self) -> Iterator[tuple[np.ndarray, np.ndarray, int]]:
        """Yields one epoch as blocks of whole batches of one size: ``(x, y, batch_size)``.

        ``len(y)`` of a block is a multiple of its ``batch_size``; the blocks' batches, in order, are exactly
        :meth:`batch_sizes`. A block is a view of one shuffled chunk where it can be (no copy), so the
        input pipeline cuts batches in TensorFlow instead of calling Python once per batch.

        Raises:
            RowLossError: If the reader returned more or fewer rows than the shard holds.
        """
        epoch = self.epoch
        self.epoch += 1
        sizes = self.batch_sizes()
        pending: list[Chunk] = []
        seen_ids: list[np.ndarray] = []
        buffered = produced = read = 0
        for chunk in self._chunks(epoch):
            read += len(chunk[1])
            buffered += len(chunk[1])
            pending.append(chunk)
            if chunk[2] is not None:
                seen_ids.append(chunk[2])
            while produced < len(sizes) and buffered >= sizes[produced]:
                size, count = sizes[produced], 0
                while produced + count < len(sizes) and sizes[produced + count] == size and (
                    buffered >= size * (count + 1)
                ):
                    count += 1
                x, y = _take(pending, size * count)
                yield x, y, size
                buffered -= size * count
                produced += count
        if read != self.expected_rows or produced != len(sizes):
            raise RowLossError(
                f"shard {self.rank}/{self.size} of {self.info.url}: epoch {epoch} read {read} rows, "
                f"expected {self.expected_rows}"
            )
        self.epoch_rows.append(read)
        if seen_ids:
            self.epoch_ids.append(np.sort(np.concatenate(seen_ids)))

    def epoch_batches(self) -> Iterator[tuple[np.ndarray, np.ndarray]]:
        """Yields one epoch: exactly ``steps`` batches covering the shard once (see :meth:`epoch_blocks`).

        Raises:
            RowLossError: If the reader returned more or fewer rows than the shard holds.
        """
        for x, y, size in self.epoch_blocks():
            for start in range(0, len(y), size):
                yield x[start : start + size], y[start : start + size]

    def dataset(self):  # -> tf.data.Dataset
        """The shard as a repeating ``tf.data.Dataset`` of ``(features, label)`` batches, prefetched.

        Python runs once per block of batches (:meth:`epoch_blocks`), on tf.data's background thread; the
        blocks are cut into batches by a reshape in TensorFlow, without copying rows one by one. Features
        come in the dataset's declared shape (``info.input_shape``). Each iterator's start undoes the malloc
        setting ``from_generator`` imposes on the process (:func:`restore_malloc_thresholds`).
        """
        import tensorflow as tf

        shape = tuple(self.info.input_shape)
        label_dtype = tf.int64 if self.info.num_classes is not None else tf.float32
        signature = (
            tf.TensorSpec(shape=(None, *shape), dtype=tf.float32),
            tf.TensorSpec(shape=(None,), dtype=label_dtype),
            tf.TensorSpec(shape=(), dtype=tf.int64),
        )

        def blocks() -> Iterator[tuple[np.ndarray, np.ndarray, np.int64]]:
            # Runs when an iterator starts, after its GeneratorDataset kernel was built (see below).
            restore_malloc_thresholds()
            try:
                for x, y, size in self.epoch_blocks():
                    yield x.reshape(len(x), *shape), y.astype(label_dtype.as_numpy_dtype, copy=False), np.int64(size)
            except Exception as exc:
                self.error = exc
                raise

        def split(x, y, size):  # (k·b, ...) -> k batches of b rows
            batches_x = tf.reshape(x, tf.concat([[-1, size], tf.constant(shape, tf.int64)], axis=0))
            return tf.data.Dataset.from_tensor_slices((batches_x, tf.reshape(y, [-1, size])))

        stream = tf.data.Dataset.from_generator(blocks, output_signature=signature)
        # A fixed prefetch buffer and no tf.data autotuning: the autotuner's background thread sleeps up
        # to a minute between rounds and deleting the iterator (the end of ``fit``) waits for it, which
        # cost ~35 s at the end of every trial of a minute or more.
        options = tf.data.Options()
        options.autotune.enabled = False
        return stream.flat_map(split).repeat().prefetch(self.prefetch_batches()).with_options(options)

    def prefetch_batches(self) -> int:
        """Batches prefetched: about :data:`PREFETCH_BYTES` of features, within :data:`PREFETCH_BATCHES`."""
        batch_bytes = 4 * self.info.feature_dim * max(self.batch_sizes())  # float32 features
        low, high = PREFETCH_BATCHES
        return min(high, max(low, PREFETCH_BYTES // batch_bytes))


def _take(pending: list[Chunk], n: int) -> tuple[np.ndarray, np.ndarray]:
    """Removes the first ``n`` rows from ``pending`` (copying only when a batch spans chunks)."""
    xs, ys = [], []
    while n:
        x, y, _ = pending[0]
        if len(y) <= n:
            pending.pop(0)
            xs.append(x)
            ys.append(y)
            n -= len(y)
        else:
            xs.append(x[:n])
            ys.append(y[:n])
            pending[0] = (x[n:], y[n:], None)
            n = 0
    if len(xs) == 1:
        return xs[0], ys[0]
    return np.concatenate(xs), np.concatenate(ys)
