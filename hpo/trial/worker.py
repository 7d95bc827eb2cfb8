"""Worker side of a trial: runs inside each Horovod worker actor (one per rank).

The user's builder returns an uncompiled Keras 2 (tf-keras) model; this module compiles it with a
Horovod ``DistributedOptimizer`` at the rescaled learning rate, feeds it this rank's Petastorm shard,
and streams rank 0's per-epoch metrics (averaged over ranks) back to the trial driver.
"""

from __future__ import annotations

import os
import sys
import time
from typing import Any

from hpo.trial.spec import TRAINER_PARAMS, TrialSpec, resolve_model


def _keras_metrics(logs: dict[str, Any]) -> dict[str, float]:
    return {k: float(v) for k, v in (logs or {}).items() if isinstance(v, (int, float)) or hasattr(v, "__float__")}


def _make_callbacks(spec: TrialSpec, hvd: Any, keras: Any, queue: Any, rank: int) -> list[Any]:
    class EpochStream(keras.callbacks.Callback):
        """Sends rank 0's averaged epoch metrics to the driver (last in the list: sees final logs)."""

        def on_train_begin(self, logs: Any = None) -> None:
            self.started = time.time()
            self.epoch_start = self.started
            queue.put({"kind": "start", "time": self.started})

        def on_epoch_begin(self, epoch: int, logs: Any = None) -> None:
            self.epoch_start = time.time()

        def on_epoch_end(self, epoch: int, logs: Any = None) -> None:
            now = time.time()
            last = bool(self.model.stop_training) or epoch + 1 >= spec.max_epochs
            queue.put(
                {
                    "kind": "epoch",
                    "epoch": epoch + 1,
                    "metrics": _keras_metrics(logs),
                    "epoch_time_s": now - self.epoch_start,
                    "time": now,
                    "last": last,
                    "stopped_by_patience": bool(self.model.stop_training),
                }
            )

    callbacks = [
        hvd.callbacks.BroadcastGlobalVariablesCallback(0),
        # Average before EarlyStopping so every rank sees the same value and stops at the same epoch.
        hvd.callbacks.MetricAverageCallback(),
        keras.callbacks.EarlyStopping(
            monitor=spec.objective_metric,
            mode=spec.objective_mode,
            patience=spec.patience,
            min_delta=spec.min_delta,
            restore_best_weights=True,
        ),
    ]
    if rank == 0:
        callbacks.append(EpochStream())
    return callbacks


def _pin_devices(tf: Any, hvd: Any, gpus_per_worker: float) -> None:
    """On GPU nodes, let each rank see only its own GPU and grow memory on demand."""
    gpus = tf.config.list_physical_devices("GPU")
    if not gpus or gpus_per_worker <= 0:
        return
    for gpu in gpus:
        tf.config.experimental.set_memory_growth(gpu, True)
    tf.config.set_visible_devices(gpus[hvd.local_rank() % len(gpus)], "GPU")


def run_worker(spec: TrialSpec, params: dict[str, Any], queue: Any, record_ids: bool = True) -> dict[str, Any]:
    """Trains the trial's model on this rank's shard.

    Args:
        spec: The sweep's trial spec.
        params: This trial's sampled parameters.
        queue: A ``ray.util.queue.Queue``; rank 0 puts one message per epoch on it.
        record_ids: Return the row ids read per epoch (training shard), for audits.

    Returns:
        Per-rank facts: rank, size, rows read per epoch and (if recorded) the row ids of each epoch.
    """
    import hpo._env  # noqa: F401  (TF_USE_LEGACY_KERAS before TensorFlow loads)

    for path in spec.sys_path:
        if path not in sys.path:
            sys.path.append(path)

    import horovod.tensorflow.keras as hvd
    import tensorflow as tf

    from hpo.data import ShardStream

    keras = tf.keras
    hvd.init()
    rank, size = hvd.rank(), hvd.size()
    threads = max(1, int(spec.cpus_per_worker))
    tf.config.threading.set_intra_op_parallelism_threads(threads)
    tf.config.threading.set_inter_op_parallelism_threads(threads)
    _pin_devices(tf, hvd, spec.gpus_per_worker)
    seed = int(params.get("seed", spec.seed))
    keras.utils.set_random_seed(seed + 1000 * rank)

    hyper = spec.hyper(params)
    common = {"features": spec.features, "label": spec.label, "rank": rank, "size": size, "seed": seed}
    train = ShardStream(spec.train, steps=hyper["steps_per_epoch"], record_ids=record_ids, **common)
    val = ShardStream(spec.validation, steps=hyper["validation_steps"], shuffle=False, **common)

    builder = resolve_model(spec.model)
    model_params = {k: v for k, v in params.items() if k not in TRAINER_PARAMS}
    model = builder(
        params=model_params,
        input_shape=(spec.train.feature_dim,),
        num_classes=spec.train.num_classes,
    )
    if not isinstance(model, keras.Model):
        raise TypeError(
            f"model builder '{spec.model}' returned {type(model).__module__}.{type(model).__name__}, not a "
            "tf.keras (Keras 2) model; build it with tf.keras (TF_USE_LEGACY_KERAS=1 is set for you)"
        )
    optimizer = keras.optimizers.get(
        {"class_name": hyper["optimizer"], "config": {"learning_rate": hyper["effective_learning_rate"]}}
    )
    model.compile(
        optimizer=hvd.DistributedOptimizer(optimizer),
        loss=spec.loss,
        metrics=list(spec.metrics),
    )
    model.fit(
        train.dataset(),
        steps_per_epoch=hyper["steps_per_epoch"],
        validation_data=val.dataset(),
        validation_steps=hyper["validation_steps"],
        epochs=spec.max_epochs,
        callbacks=_make_callbacks(spec, hvd, keras, queue, rank),
        verbose=0,
    )
    return {
        "rank": rank,
        "size": size,
        "pid": os.getpid(),
        "epoch_rows": list(train.epoch_rows),
        "epoch_ids": [ids.tolist() for ids in train.epoch_ids],
    }
