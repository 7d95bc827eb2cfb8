"""Driver side of a trial: the Tune function trainable that runs one Horovod-on-Ray job.

The trial reserves ``1 + workers`` bundles (an empty one for this driver, one per worker) so Tune
schedules whole trials; ``horovod.ray.RayExecutor`` places its workers in that placement group. Rank 0
streams epoch metrics through a ``ray.util.queue.Queue``; every epoch is reported to Tune, so ASHA can
stop the trial mid-training. On any exit (finished, stopped, failed) the worker actors are killed.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from queue import Empty
from typing import Any

import ray
from ray import tune
from ray.util.queue import Queue

from hpo.errors import TrialFailed
from hpo.trial.spec import TrialSpec
from hpo.trial.worker import run_worker

#: Seconds to wait for workers to rendezvous (Gloo) before the trial fails.
RENDEZVOUS_TIMEOUT_S = 120
_POLL_S = 0.5


def worker_bundle(spec: TrialSpec) -> dict[str, float]:
    """The resources one Horovod worker of a trial reserves."""
    worker = {"CPU": spec.cpus_per_worker}
    if spec.gpus_per_worker:
        worker["GPU"] = spec.gpus_per_worker
    return worker


def placement(spec: TrialSpec) -> tune.PlacementGroupFactory:
    """One empty bundle for the trial driver plus one bundle per Horovod worker, packed."""
    worker = worker_bundle(spec)
    return tune.PlacementGroupFactory([{}] + [dict(worker) for _ in range(spec.workers)], strategy="PACK")


def _report(msg: dict[str, Any], hyper: dict[str, Any], started: float, first_epoch_at: float | None) -> None:
    metrics = dict(msg["metrics"])
    metrics.update(
        epoch=msg["epoch"],
        epoch_time_s=msg["epoch_time_s"],
        trial_finished=bool(msg["last"]),
        stopped_by_patience=bool(msg["stopped_by_patience"]),
        startup_s=(first_epoch_at - started) if first_epoch_at else None,
        effective_learning_rate=hyper["effective_learning_rate"],
        global_batch_size=hyper["global_batch_size"],
    )
    tune.report(metrics)


def run_trial(spec: TrialSpec, params: dict[str, Any]) -> None:
    """Runs one trial to completion, early stop or failure (called by Tune in the trial actor)."""
    from horovod.ray import RayExecutor

    started = time.time()
    hyper = spec.hyper(params)
    queue = Queue(actor_options={"num_cpus": 0})
    settings = RayExecutor.create_settings(timeout_s=RENDEZVOUS_TIMEOUT_S)
    executor = RayExecutor(
        settings,
        num_workers=spec.workers,
        cpus_per_worker=spec.cpus_per_worker,
        use_gpu=spec.gpus_per_worker > 0,
        gpus_per_worker=spec.gpus_per_worker or None,
    )
    workers: list[Any] = []
    try:
        executor.start()
        workers = list(executor.adapter.workers)
        refs = executor.run_remote(run_worker, args=[spec, params, queue])
        first_epoch_at: float | None = None
        pending = list(refs)
        while True:
            try:
                msg = queue.get(timeout=_POLL_S)
            except Empty:
                if not pending:
                    break
                done, pending = ray.wait(pending, num_returns=len(pending), timeout=0)
                _gather(done)
                continue
            if msg["kind"] == "start":
                first_epoch_at = msg["time"]
                continue
            if msg["last"]:
                # The scheduler may stop the trial at its final report (ASHA at max_t does): finish the
                # workers' work before reporting it.
                _write_audit(_gather(refs))
                _report(msg, hyper, started, first_epoch_at)
                return
            _report(msg, hyper, started, first_epoch_at)
        _write_audit(_gather(refs))
    finally:
        for worker in workers:
            ray.kill(worker, no_restart=True)
        try:
            executor.shutdown()
        except Exception:  # noqa: BLE001 - the workers are already gone; nothing more to release
            pass
        ray.kill(queue.actor, no_restart=True)


def _gather(refs: list[Any]) -> list[dict[str, Any]]:
    try:
        return ray.get(refs)
    except ray.exceptions.RayError as exc:
        raise TrialFailed(_cause(exc)) from None


def _cause(exc: ray.exceptions.RayError) -> str:
    """The user-facing line of a worker's failure (the original exception, not Ray's wrapper)."""
    cause = getattr(exc, "cause", None)
    if cause is not None:
        return f"{type(cause).__name__}: {cause}"
    return str(exc).strip().splitlines()[-1]


def _write_audit(results: list[dict[str, Any]]) -> None:
    """Keeps each rank's per-epoch row counts and ids in the trial directory (``rows.json``)."""
    path = Path(tune.get_context().get_trial_dir()) / "rows.json"
    path.write_text(json.dumps(sorted(results, key=lambda r: r["rank"])))


def make_trainable(spec: TrialSpec) -> Any:
    """The Tune trainable for a sweep's trials, with its placement group attached."""

    def hpo_trial(config: dict[str, Any]) -> None:
        run_trial(spec, config)

    return tune.with_resources(hpo_trial, placement(spec))
