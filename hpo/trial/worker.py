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
from pathlib import Path
from typing import Any

from hpo import compat
from hpo.results import REPEAT_KEY
from hpo.trial.affinity import worker_claim
from hpo.trial.protocol import EpochCheckpoint
from hpo.trial.spec import TRAINER_PARAMS, TrialSpec, optimizer_config, resolve_model

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


def gpu_for_rank(local_rank: int, visible_gpus: int) -> int | None:
    """The index of the GPU a rank uses among the GPUs its process sees (None: run on CPU).

    Ray gives all workers of a trial on one node the union of their GPUs in ``CUDA_VISIBLE_DEVICES``; local
    rank i takes the i-th. A trial of one worker may hold a fraction of a GPU (it sees that one device);
    the ranks of a trial of several workers hold whole GPUs (the sweep file's validation refuses fractions
    there), so each finds one of its own.

    Raises:
        RuntimeError: fewer GPUs visible than local ranks: two ranks would share a device, which NCCL
            refuses ("Duplicate GPU detected") after the whole trial has started.
    """
    if visible_gpus <= 0:
        return None
    if local_rank >= visible_gpus:
        raise RuntimeError(
            f"local rank {local_rank} has no GPU of its own: this process sees {visible_gpus} GPU(s) for at least "
            f"{local_rank + 1} ranks on this node (trial.gpus_per_worker must be whole when trial.workers > 1)"
        )
    return local_rank


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


class StopPoller:
    """Rank 0's poll of the driver's stop flag, one check ahead (the ``ask`` of :class:`SyncedStop`).

    Each check reads the answer to the question sent at the previous one (long arrived by then) and sends
    the next, so no rank waits for a round trip to the channel actor mid-epoch; a stop takes effect at most
    one check later. With ``wait`` (epoch ends) it asks and waits. Other ranks always answer False: rank 0's
    answer is broadcast to them.

    Args:
        channel: The group's channel actor.
        rank: This worker's rank.
    """

    def __init__(self, channel: Any, rank: int) -> None:
        self.channel, self.rank = channel, rank
        self.pending: Any = None

    def __call__(self, wait: bool) -> bool:
        """True if the driver asked to stop (as far as rank 0 knows)."""
        import ray

        if self.rank != 0:
            return False
        if self.pending is None or wait:
            self.pending = self.channel.should_stop.remote()
        ready, _ = ray.wait([self.pending], timeout=None if wait else 0)
        if not ready:
            return False
        answer, self.pending = bool(ray.get(self.pending)), self.channel.should_stop.remote()
        return answer


def _callbacks(
    spec: TrialSpec, hvd: Any, channel: Any, rank: int, resume: EpochCheckpoint | None, steps_per_epoch: int
) -> tuple[list[Any], Any]:
    """Horovod broadcast + metric averaging, divergence, resumable EarlyStopping, goal, synced stop, rank 0's stream."""
    import ray
    from horovod.tensorflow import broadcast_object

    from hpo.trial import callbacks as cb

    early = cb.ResumableEarlyStopping(
        resume=resume,
        monitor=spec.objective_metric,
        mode=spec.objective_mode,
        patience=spec.patience,
        min_delta=spec.min_delta,
        restore_best_weights=True,
    )
    goal = cb.GoalStop(spec.objective_metric, spec.goal, spec.objective_mode)
    divergence = cb.DivergenceStop(("loss", "val_loss", spec.objective_metric))
    synced = cb.SyncedStop(
        ask=StopPoller(channel, rank),
        broadcast=lambda value, name: broadcast_object(value, root_rank=0, name=name),
        steps_per_epoch=steps_per_epoch,
    )
    callbacks = [
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        # Average before EarlyStopping so every rank sees the same value and stops at the same epoch.
        hvd.callbacks.MetricAverageCallback(),
        divergence,  # every rank sees the same averaged logs: all stop at the same epoch
        early,
        goal,  # after EarlyStopping: this epoch's weights are its best if they reach the goal
        synced,
    ]
    if spec.pin_cpus:
        callbacks.append(cb.Affinity(lambda: worker_claim(spec.cpus_per_worker, spec.gpus_per_worker).refresh()))
    if rank == 0:  # last: sees EarlyStopping's and the goal's decision for this epoch
        send = lambda message: ray.get(channel.put.remote(message))  # noqa: E731
        if spec.checkpoint_every_epoch:
            wanted = lambda: ray.get(channel.checkpoint_wanted.remote())  # noqa: E731
        else:
            wanted = lambda: False  # noqa: E731  (only the final checkpoint, with the model)
        callbacks.append(cb.EpochStream(send, ray.put, early, goal, spec.max_epochs, divergence=divergence,
                                        checkpoint_wanted=wanted))
    return callbacks, synced


def _start_horovod(spec: TrialSpec, hvd: Any, tf: Any) -> None:
    """Initialises Horovod and TensorFlow's threads and devices once per worker process."""
    if hvd.is_initialized():
        return
    if spec.pin_cpus:  # before hvd.init and TF's thread pools start, so their threads inherit a pin
        worker_claim(spec.cpus_per_worker, spec.gpus_per_worker).refresh()
    os.environ.setdefault("HOROVOD_CYCLE_TIME", str(cycle_time_ms(spec.gpus_per_worker)))
    hvd.init()
    compat.autograph_skips_horovod()
    intra, inter = tf_threads(spec.cpus_per_worker)
    tf.config.threading.set_intra_op_parallelism_threads(intra)
    tf.config.threading.set_inter_op_parallelism_threads(inter)
    _pin_devices(tf, hvd.local_rank(), spec.gpus_per_worker)


def _build_model(spec: TrialSpec, params: dict[str, Any], hyper: dict[str, Any], hvd: Any, keras: Any) -> Any:
    """The user's model, compiled with Horovod's DistributedOptimizer at the rescaled learning rate."""
    builder = resolve_model(spec.model)
    model_params = {k: v for k, v in params.items() if k not in TRAINER_PARAMS and k != REPEAT_KEY}
    try:
        model = builder(params=model_params, input_shape=spec.train.input_shape, num_classes=spec.train.num_classes)
    except SystemExit as exc:  # would end the worker process: fail the trial with a line that says why
        raise RuntimeError(f"model builder '{spec.model}' called sys.exit({exc.code!r}); a builder must return a "
                           "model, not exit") from None
    if not isinstance(model, keras.Model):
        raise TypeError(
            f"model builder '{spec.model}' returned {type(model).__module__}.{type(model).__name__}, not a "
            "tf.keras (Keras 2) model; build it with tf.keras (TF_USE_LEGACY_KERAS=1 is set for you)"
        )
    optimizer = keras.optimizers.get(optimizer_config(hyper))
    distributed = hvd.DistributedOptimizer(optimizer, num_groups=allreduce_groups(spec.gpus_per_worker))
    model.compile(optimizer=distributed, loss=spec.loss, metrics=list(spec.metrics))
    return model


def _prepare_process(spec: TrialSpec) -> None:
    """Sets this worker process up before TensorFlow loads: hpo's environment and the user's import paths."""
    from hpo import _env

    _env.apply()  # this worker process is hpo's own: TF_USE_LEGACY_KERAS before TensorFlow loads
    for path in spec.sys_path:
        if path not in sys.path:
            sys.path.append(path)


def run_worker(
    spec: TrialSpec,
    params: dict[str, Any],
    channel: Any,
    resume: EpochCheckpoint | None = None,
    record_ids: bool = True,
) -> dict[str, Any]:
    """Trains the trial's model on this rank's shard.

    Args:
        spec: The sweep's trial spec.
        params: This trial's sampled parameters.
        channel: The group's message actor (see ``hpo.trial.backend.Channel``).
        resume: The last checkpoint, weights as arrays (None: a fresh start).
        record_ids: Return the row ids read per epoch (training shard), for audits.

    Returns:
        Per-rank facts: rank, size, pid, the optimizer's learning rate, rows read per epoch, the row ids
        of each epoch (if recorded) and, on rank 0 of a finished trial, the saved model as bytes.
    """
    _prepare_process(spec)
    import horovod.tensorflow.keras as hvd
    import tensorflow as tf

    from hpo.data import ShardStream

    keras = tf.keras
    _start_horovod(spec, hvd, tf)
    keras.backend.clear_session()  # a warm worker starts each trial from a clean graph
    rank, size = hvd.rank(), hvd.size()
    seed = spec.seed + 7919 * int(params.get(REPEAT_KEY, 0))  # each repeat: its own init and data order
    keras.utils.set_random_seed(seed + 1000 * rank)

    hyper = spec.hyper(params)
    common = {"features": spec.features, "label": spec.label, "rank": rank, "size": size, "seed": seed,
              "cache": spec.cache}
    train = ShardStream(spec.train, steps=hyper["steps_per_epoch"], record_ids=record_ids, **common)
    val = ShardStream(spec.validation, steps=hyper["validation_steps"], shuffle=False, **common)
    initial_epoch = resume.epoch if resume else 0
    train.epoch = val.epoch = initial_epoch  # a resumed trial continues the per-epoch shuffle sequence

    model = _build_model(spec, params, hyper, hvd, keras)
    if resume:
        model.set_weights(resume.weights)
    callbacks, synced = _callbacks(spec, hvd, channel, rank, resume, hyper["steps_per_epoch"])
    _fit(model, train, val, hyper, spec.max_epochs, initial_epoch, callbacks)
    return _result(rank, size, keras, model, initial_epoch, train, with_model=rank == 0 and not synced.requested)


def _fit(
    model: Any, train: Any, val: Any, hyper: dict[str, Any], epochs: int, initial_epoch: int, callbacks: list
) -> None:
    """Keras ``fit`` over the two shard streams; an input-pipeline failure is raised as its Python exception.

    TensorFlow reports a failing generator as its own ``[[IteratorGetNext]]`` error; the user needs the
    exception behind it (e.g. ``FileNotFoundError`` and the path a node cannot see).
    """
    try:
        model.fit(
            train.dataset(),
            steps_per_epoch=hyper["steps_per_epoch"],
            validation_data=val.dataset(),
            validation_steps=hyper["validation_steps"],
            epochs=epochs,
            initial_epoch=initial_epoch,
            callbacks=callbacks,
            verbose=0,
        )
    except Exception as exc:
        inner = train.error or val.error
        if inner is None:
            raise
        raise inner from exc


def _result(rank: int, size: int, keras: Any, model: Any, initial_epoch: int, train: Any, with_model: bool) -> dict:
    """What a rank returns to the driver (see :func:`run_worker`)."""
    result: dict[str, Any] = {
        "rank": rank,
        "size": size,
        "pid": os.getpid(),
        "learning_rate": float(keras.backend.get_value(model.optimizer.learning_rate)),
        "initial_epoch": initial_epoch,
        "epoch_rows": list(train.epoch_rows),
        "epoch_ids": [ids.tolist() for ids in train.epoch_ids],
    }
    if with_model:
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
