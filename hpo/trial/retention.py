"""Which trial checkpoints stay in the storage: each trial's newest, and those a saved experiment state needs.

Tune's own retention (``CheckpointConfig(num_to_keep=K)``) deletes a trial's older checkpoints as it writes
new ones, and to keep its saved experiment state from pointing at a deleted one it saves the whole
experiment state (every trial of the sweep, the searcher) each time any trial has written K checkpoints
since the last save. With K = 2, several trials at once and short epochs, that is a save every few tenths of
a second, each costing the whole sweep: a sweep of 600 simulated trials spent most of its driver's time on
it (452 saves in 156 s), and the driver's cost per trial grew with every trial the sweep had held.

hpo keeps every checkpoint in Tune's view (no ``num_to_keep``: Tune then saves its state on its own clock,
at most 5 % of the driver's time) and deletes superseded checkpoints itself, one saved state behind: when
Tune saves its experiment state (it asks every callback for its state then), every checkpoint of a trial
older than the one that trial had at the *previous* save is deleted. The state saved last, and the one
before it if the last save did not complete, only point at checkpoints that are kept; a trial's newest
checkpoint (what a resumed trial starts from and what the best model is read from) is never deleted. Between
two saves (10 s or more) a trial keeps the checkpoints it wrote since; the deletes run in a background
thread, so a slow object store does not hold up the sweep's loop.
"""

from __future__ import annotations

import logging
import queue
import threading
from typing import Any

from ray.tune import Callback

logger = logging.getLogger(__name__)


class CheckpointRetention(Callback):
    """Tune callback: deletes each trial's superseded checkpoints, one saved experiment state behind.

    Args:
        delete: Deletes one checkpoint (default: its directory in the checkpoint's own filesystem).
    """

    def __init__(self, delete: Any = None) -> None:
        self._delete = delete or _delete_checkpoint
        #: Trial id → its checkpoints not deleted yet, oldest first.
        self._held: dict[str, list[Any]] = {}
        #: Trial id → its newest checkpoint at the previous experiment save.
        self._marked: dict[str, Any] = {}
        #: Trials that may hold a checkpoint to delete at the next save.
        self._pending: set[str] = set()
        self._queue: queue.Queue[Any] = queue.Queue()
        self._worker: threading.Thread | None = None
        self.deleted = 0

    def __getstate__(self) -> dict[str, Any]:
        # Tune pickles its callbacks with the Tuner; a resumed sweep starts with nothing held.
        return {"_delete": self._delete}

    def __setstate__(self, state: dict[str, Any]) -> None:
        self.__init__(state["_delete"])  # type: ignore[misc]

    def on_checkpoint(self, iteration: int, trials: list, trial: Any, checkpoint: Any, **info: Any) -> None:
        """Holds a new checkpoint of ``trial``."""
        self._held.setdefault(trial.trial_id, []).append(checkpoint)
        self._pending.add(trial.trial_id)

    def get_state(self) -> None:
        """Tune is saving its experiment state: deletes what the previous save no longer needs (no state kept)."""
        self.prune()
        return None

    def prune(self) -> int:
        """Queues the deletes of every checkpoint older than its trial's newest at the previous save.

        Returns:
            How many checkpoints were queued for deletion.
        """
        queued = 0
        for trial_id in list(self._pending):
            held = self._held[trial_id]
            marked = self._marked.get(trial_id)
            start = next((i for i, c in enumerate(held) if c is marked), 0)
            for checkpoint in held[:start]:
                self._submit(checkpoint)
                queued += 1
            held = self._held[trial_id] = held[start:]
            self._marked[trial_id] = held[-1]
            if len(held) == 1:
                self._pending.discard(trial_id)
        return queued

    def on_experiment_end(self, trials: list, **info: Any) -> None:
        """Waits (a little) for the deletes still queued."""
        if self._worker is not None:
            self._queue.put(None)
            self._worker.join(timeout=30)
            self._worker = None

    def _submit(self, checkpoint: Any) -> None:
        if self._worker is None or not self._worker.is_alive():
            self._worker = threading.Thread(target=self._run, name="hpo-checkpoint-retention", daemon=True)
            self._worker.start()
        self._queue.put(checkpoint)

    def _run(self) -> None:
        while True:
            checkpoint = self._queue.get()
            if checkpoint is None:
                return
            try:
                self._delete(checkpoint)
                self.deleted += 1
            except Exception as exc:  # noqa: BLE001 - a checkpoint left behind costs storage, not results
                logger.debug("superseded checkpoint %s not deleted: %s", getattr(checkpoint, "path", checkpoint), exc)


def _delete_checkpoint(checkpoint: Any) -> None:
    """Deletes a Tune checkpoint's directory in its filesystem (one that is gone already is fine)."""
    import pyarrow.fs as pafs

    filesystem = checkpoint.filesystem
    if filesystem.get_file_info(checkpoint.path).type == pafs.FileType.NotFound:
        return
    filesystem.delete_dir(checkpoint.path)
