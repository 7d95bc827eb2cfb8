"""Worker side of a trial: runs inside each Horovod worker actor (one per rank).

The user's builder returns an uncompiled Keras 2 (tf-keras) model; this module compiles it with a
Horovod ``DistributedOptimizer`` at the rescaled learning rate, feeds it this rank's Petastorm shard,
streams rank 0's per-epoch metrics (averaged over ranks) and checkpoints to the trial driver, and stops
all ranks at the same step when the driver asks (a scheduler stop), leaving the workers reusable.
"""

from __future__ import annotations

import os
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from hpo.objective import reaches_goal
from hpo.trial.affinity import worker_claim
from hpo.trial.protocol import REPEAT_KEY, EpochCheckpoint, EpochReport, TrialStarted
from hpo.trial.spec import TRAINER_PARAMS, TrialSpec, resolve_model

#: Horovod's idle cycle (ms) on CPU workers unless HOROVOD_CYCLE_TIME is set. With hpo's Horovod patch a
#: submitted tensor starts a cycle at once, so this is only how often idle ranks coordinate, not a
#: collective's latency; each idle cycle is a round of messages between the ranks, CPU a CPU node's training
#: threads need. Two 1-CPU ranks of a small CNN trial (batch 128, pinned): 3.54-3.69 s per epoch at 5 ms,
#: 3.38-3.53 s at 50 ms (before the patch, when the cycle was the latency: 18.5 s at 1 ms, 16.5 s at 5 ms).
CPU_CYCLE_TIME_MS = 50
#: The same on GPU workers, where per-gradient allreduces (Horovod's default grouping) fuse within a cycle.
GPU_CYCLE_TIME_MS = 5
#: Gradient allreduce groups on CPU workers: one group, i.e. every gradient of a step goes to Horovod in a
#: single fused allreduce once the backward pass is done. Horovod's default (one allreduce per gradient as
#: it becomes ready) overlaps communication with the backward pass, which pays on GPUs but on CPU nodes
#: takes cores from the ranks still computing: two 1-CPU ranks of a small CNN (batch 64/rank) ran 4.2-4.9 s
#: per epoch ungrouped, 3.5-3.9 s grouped.
CPU_ALLREDUCE_GROUPS = 1
#: Ranks agree on "stop now?" (a tiny broadcast) about this many times per epoch, and at every epoch end.
STOP_CHECKS_PER_EPOCH = 10


def gpu_for_rank(local_rank: int, visible_gpus: int) -> int | None:
    """The index of the GPU a rank uses among the GPUs its process sees (None: run on CPU).

    Ray gives all workers of a node the union of their GPUs in ``CUDA_VISIBLE_DEVICES``; local rank i
    takes the i-th (workers sharing a fractional GPU wrap around onto the same device).
    """
    if visible_gpus <= 0:
        return None
    return local_rank % visible_gpus


def tf_threads(cpus_per_worker: float) -> tuple[int, int]:
    """TensorFlow's (intra-op, inter-op) thread counts for a worker with ``cpus_per_worker`` CPUs.

    As many of each as reserved CPUs (at least one), so a worker computes on no more cores than Ray gave
    it and co-located workers do not oversubscribe the node. (One inter-op thread more made a 1-CPU
    worker compute on two cores: a small CNN ran 17.3 s per epoch instead of 21.0 s alone, and two such
    workers fought over the cores.)
    """
    threads = max(1, int(cpus_per_worker))
    return threads, threads


def cycle_time_ms(gpus_per_worker: float) -> int:
    """Horovod's idle cycle time for a worker: long on CPU (wake-on-submit makes it free), 5 ms on GPU."""
    return GPU_CYCLE_TIME_MS if gpus_per_worker > 0 else CPU_CYCLE_TIME_MS


def allreduce_groups(gpus_per_worker: float) -> int:
    """``num_groups`` for Horovod's DistributedOptimizer: one fused group on CPU, Horovod's default on GPU."""
    return 0 if gpus_per_worker > 0 else CPU_ALLREDUCE_GROUPS


def _pin_devices(tf: Any, local_rank: int, gpus_per_worker: float) -> None:
    """On GPU nodes, let each rank see only its own GPU and grow memory on demand."""
    gpus = tf.config.list_physical_devices("GPU")
    index = gpu_for_rank(local_rank, len(gpus)) if gpus_per_worker > 0 else None
    if index is None:
        return
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    tf.config.set_visible_devices(gpus[index], "GPU")


def _floats(logs: dict[str, Any] | None) -> dict[str, float]:
    return {k: float(v) for k, v in (logs or {}).items() if hasattr(v, "__float__")}


def _callbacks(
    spec: TrialSpec, hvd: Any, keras: Any, channel: Any, rank: int, resume: dict | None, steps_per_epoch: int
) -> tuple[list[Any], Any]:
    """Horovod broadcast + metric averaging, resumable EarlyStopping, synced stop, and rank 0's stream."""
    import ray
    from horovod.tensorflow import broadcast_object

    class ResumableEarlyStopping(keras.callbacks.EarlyStopping):
        """EarlyStopping whose best value, wait counter and best weights survive a resume."""

        def on_train_begin(self, logs: Any = None) -> None:
            super().on_train_begin(logs)
            state = (resume or {}).get("early_stopping")
            if state:
                self.best, self.wait, self.best_epoch = state["best"], state["wait"], state["best_epoch"]
                # No separate best weights in the checkpoint: the checkpoint epoch was the best one.
                self.best_weights = resume.get("best_weights") or resume["weights"]

    class SyncedStop(keras.callbacks.Callback):
        """Stops every rank at the same batch when the driver asks (rank 0 reads, then broadcasts).

        Rank 0 asks the driver one check ahead: each check reads the answer to the question sent at the
        previous one (long arrived by then) and sends the next, so no rank waits for a round trip to the
        channel actor mid-epoch. A stop takes effect at most one check later; epoch ends ask and wait.
        """

        requested = False
        pending: Any = None

        def _wanted(self, wait: bool) -> bool:
            if rank != 0:
                return False
            if self.pending is None or wait:
                self.pending = channel.should_stop.remote()
            ready, _ = ray.wait([self.pending], timeout=None if wait else 0)
            if not ready:
                return False
            answer, self.pending = bool(ray.get(self.pending)), channel.should_stop.remote()
            return answer

        def _check(self, name: str, wait: bool) -> None:
            if broadcast_object(self._wanted(wait), root_rank=0, name=name):
                self.requested = True
                self.model.stop_training = True

        every = max(10, steps_per_epoch // STOP_CHECKS_PER_EPOCH)

        def on_train_batch_end(self, batch: int, logs: Any = None) -> None:
            if (batch + 1) % self.every == 0:
                self._check("hpo.stop.batch", wait=False)

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            self._check("hpo.stop.epoch", wait=True)

    class GoalStop(keras.callbacks.Callback):
        """Ends training on every rank at the epoch whose averaged objective reaches ``objective.goal``.

        The sweep ends there too (hpo.search.GoalStopper); ending the trial as finished rather than letting
        Tune stop it keeps its final model (``model.keras``), so the trial that reached the goal can be the
        sweep's registered model.
        """

        reached = False

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            value = (logs or {}).get(spec.objective_metric)
            if spec.goal is not None and reaches_goal(value, spec.goal, spec.objective_mode):
                self.reached = True
                self.model.stop_training = True

    class Affinity(keras.callbacks.Callback):
        """Pins this worker to its claimed cores while its node is full, lets it float otherwise."""

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            worker_claim(spec.cpus_per_worker, spec.gpus_per_worker).refresh()

    class EpochStream(keras.callbacks.Callback):
        """Rank 0: sends averaged epoch metrics plus a checkpoint (weights in the object store)."""

        def on_train_begin(self, logs: Any = None) -> None:
            channel.put.remote(TrialStarted(time.time()))
            self.epoch_start = time.time()

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self.epoch_start = time.time()

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            now = time.time()
            state = {
                "epoch": epoch + 1,
                "early_stopping": {
                    "best": float(early.best),
                    "wait": int(early.wait),
                    "best_epoch": int(early.best_epoch),
                },
            }
            improved = early.best_epoch == epoch
            checkpoint = EpochCheckpoint(
                state=state,
                weights=ray.put(self.model.get_weights()),
                best_weights=None if improved or early.best_weights is None else ray.put(early.best_weights),
            )
            report = EpochReport(
                epoch=epoch + 1,
                metrics=_floats(logs),
                epoch_time_s=now - self.epoch_start,
                time=now,
                last=bool(self.model.stop_training) or epoch + 1 >= spec.max_epochs,
                stopped_by_patience=bool(self.model.stop_training) and early.stopped_epoch > 0,
                stopped_by_goal=goal.reached,
                checkpoint=checkpoint,
            )
            ray.get(channel.put.remote(report))

    early = ResumableEarlyStopping(
        monitor=spec.objective_metric,
        mode=spec.objective_mode,
        patience=spec.patience,
        min_delta=spec.min_delta,
        restore_best_weights=True,
    )
    synced = SyncedStop()
    goal = GoalStop()
    callbacks = [
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        # Average before EarlyStopping so every rank sees the same value and stops at the same epoch.
        hvd.callbacks.MetricAverageCallback(),
        early,
        goal,  # after EarlyStopping: this epoch's weights are its best if they reach the goal
        synced,
    ]
    if spec.pin_cpus:
        callbacks.append(Affinity())
    if rank == 0:
        callbacks.append(EpochStream())  # last: sees EarlyStopping's decision for this epoch
    return callbacks, synced


def run_worker(
    spec: TrialSpec,
    params: dict[str, Any],
    channel: Any,
    resume: dict[str, Any] | None = None,
    record_ids: bool = True,
) -> dict[str, Any]:
    """Trains the trial's model on this rank's shard.

    Args:
        spec: The sweep's trial spec.
        params: This trial's sampled parameters.
        channel: The group's message actor (see ``hpo.trial.backend._Channel``).
        resume: ``{"state": {...}, "weights": [...], "best_weights": [...]}`` from the last checkpoint.
        record_ids: Return the row ids read per epoch (training shard), for audits.

    Returns:
        Per-rank facts: rank, size, pid, the optimizer's learning rate, rows read per epoch, the row ids
        of each epoch (if recorded) and, on rank 0 of a finished trial, the saved model as bytes.
    """
    from hpo import _env

    _env.apply()  # this worker process is hpo's own: TF_USE_LEGACY_KERAS before TensorFlow loads

    for path in spec.sys_path:
        if path not in sys.path:
            sys.path.append(path)

    import horovod.tensorflow.keras as hvd
    import tensorflow as tf

    from hpo.data import ShardStream

    keras = tf.keras
    if not hvd.is_initialized():
        if spec.pin_cpus:  # before hvd.init and TF's thread pools start, so their threads inherit a pin
            worker_claim(spec.cpus_per_worker, spec.gpus_per_worker).refresh()
        os.environ.setdefault("HOROVOD_CYCLE_TIME", str(cycle_time_ms(spec.gpus_per_worker)))
        hvd.init()
        intra, inter = tf_threads(spec.cpus_per_worker)
        tf.config.threading.set_intra_op_parallelism_threads(intra)
        tf.config.threading.set_inter_op_parallelism_threads(inter)
        _pin_devices(tf, hvd.local_rank(), spec.gpus_per_worker)
    keras.backend.clear_session()  # a warm worker starts each trial from a clean graph
    rank, size = hvd.rank(), hvd.size()
    seed = spec.seed + 7919 * int(params.get(REPEAT_KEY, 0))  # each repeat: its own init and data order
    keras.utils.set_random_seed(seed + 1000 * rank)

    hyper = spec.hyper(params)
    common = {
        "features": spec.features,
        "label": spec.label,
        "rank": rank,
        "size": size,
        "seed": seed,
        "cache": spec.cache,
    }
    train = ShardStream(spec.train, steps=hyper["steps_per_epoch"], record_ids=record_ids, **common)
    val = ShardStream(spec.validation, steps=hyper["validation_steps"], shuffle=False, **common)
    initial_epoch = int(resume["state"]["epoch"]) if resume else 0
    train.epoch = val.epoch = initial_epoch  # a resumed trial continues the per-epoch shuffle sequence

    builder = resolve_model(spec.model)
    model_params = {k: v for k, v in params.items() if k not in TRAINER_PARAMS and k != REPEAT_KEY}
    model = builder(params=model_params, input_shape=spec.train.input_shape, num_classes=spec.train.num_classes)
    if not isinstance(model, keras.Model):
        raise TypeError(
            f"model builder '{spec.model}' returned {type(model).__module__}.{type(model).__name__}, not a "
            "tf.keras (Keras 2) model; build it with tf.keras (TF_USE_LEGACY_KERAS=1 is set for you)"
        )
    optimizer = keras.optimizers.get(
        {"class_name": hyper["optimizer"], "config": {"learning_rate": hyper["effective_learning_rate"]}}
    )
    distributed = hvd.DistributedOptimizer(optimizer, num_groups=allreduce_groups(spec.gpus_per_worker))
    model.compile(optimizer=distributed, loss=spec.loss, metrics=list(spec.metrics))
    if resume:
        model.set_weights(resume["weights"])
    callbacks, synced = _callbacks(spec, hvd, keras, channel, rank, resume, hyper["steps_per_epoch"])
    model.fit(
        train.dataset(),
        steps_per_epoch=hyper["steps_per_epoch"],
        validation_data=val.dataset(),
        validation_steps=hyper["validation_steps"],
        epochs=spec.max_epochs,
        initial_epoch=initial_epoch,
        callbacks=callbacks,
        verbose=0,
    )
    result: dict[str, Any] = {
        "rank": rank,
        "size": size,
        "pid": os.getpid(),
        "learning_rate": float(keras.backend.get_value(model.optimizer.learning_rate)),
        "initial_epoch": initial_epoch,
        "epoch_rows": list(train.epoch_rows),
        "epoch_ids": [ids.tolist() for ids in train.epoch_ids],
    }
    if rank == 0 and not synced.requested:
        result["model"] = _inference_model_bytes(keras, model)
    return result


def _inference_model_bytes(keras: Any, model: Any) -> bytes:
    """The trained model (EarlyStopping restored its best weights) as ``.keras`` bytes, uncompiled.

    The Horovod-wrapped optimizer is left out, so the file loads with plain tf-keras, without Horovod.
    """
    inference = keras.models.clone_model(model)
    inference.set_weights(model.get_weights())
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "model.keras"
        inference.save(path)
        return path.read_bytes()
