"""Driver side of a trial: the Tune function trainable that runs one Horovod-on-Ray job.

The trial reserves ``1 + workers`` bundles (an empty one for this driver, one per worker) so Tune
schedules whole trials; the backend places its workers in that placement group. Rank 0 streams epoch
metrics and checkpoints through the backend's channel; every epoch is reported to Tune (with a
checkpoint), so ASHA can stop the trial mid-training and a failed attempt resumes from its last epoch.

Ending a trial:
- finished: the workers are kept warm for the next trial of the same shape on this trial actor;
- stopped by the scheduler (``SystemExit`` out of ``tune.report``): the workers are asked to stop at
  their next synced check, and kept warm if they do within a few seconds, else killed;
- failed: every worker actor is killed.
"""

from __future__ import annotations

import json
import shutil
import tempfile
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import ray
from ray import tune

from hpo.errors import TrialFailed
from hpo.object_store import StorageUnavailable, storage_line
from hpo.trial import backend as backends
from hpo.trial import simulated
from hpo.trial.protocol import EpochCheckpoint, TrialContext, TrialStarted, epoch_result
from hpo.trial.spec import TrialSpec
from hpo.trial.worker import run_worker

_POLL_S = 0.25
#: Seconds stopped workers get to reach their next synced stop check before they are killed.
STOP_GRACE_S = 15


@dataclass(frozen=True)
class BackendKind:
    """A ``trial.backend``: how a trial gets its group of workers, and the function every rank runs.

    Attributes:
        acquire: The trial's group of workers (new, or warm from an earlier trial).
        worker: ``worker(spec, params, channel, resume)``, run by every rank; ``resume`` is the
            :class:`~hpo.trial.protocol.EpochCheckpoint` a retried trial continues from (None: a fresh start).
    """

    acquire: Callable[[TrialSpec], backends.Backend]
    worker: Callable[..., dict[str, Any]]


def _horovod(spec: TrialSpec) -> backends.Backend:
    return backends.acquire(spec.workers, spec.cpus_per_worker, spec.gpus_per_worker, spec.rendezvous_host)


#: ``trial.backend`` → its :class:`BackendKind`.
BACKENDS: dict[str, BackendKind] = {
    "horovod": BackendKind(_horovod, run_worker),
    "simulated": BackendKind(simulated.acquire, simulated.run_simulated),
}


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


def write_checkpoint(path: Path, ckpt: EpochCheckpoint) -> None:
    """Writes an epoch checkpoint whose weights are arrays into directory ``path``.

    Files: ``state.json`` (:attr:`EpochCheckpoint.state`), ``weights.npz`` and, when EarlyStopping's best
    weights are not this epoch's, ``best_weights.npz``.
    """
    np.savez(path / "weights.npz", *ckpt.weights)
    if ckpt.best_weights is not None:
        np.savez(path / "best_weights.npz", *ckpt.best_weights)
    (path / "state.json").write_text(json.dumps(ckpt.state))


def read_checkpoint(path: Path) -> EpochCheckpoint:
    """The checkpoint :func:`write_checkpoint` wrote into directory ``path``, weights as arrays."""

    def arrays(name: str) -> list[np.ndarray] | None:
        if not (path / name).exists():
            return None
        with np.load(path / name) as data:
            return [data[f"arr_{i}"] for i in range(len(data.files))]

    state = json.loads((path / "state.json").read_text())
    return EpochCheckpoint(state=state, weights=arrays("weights.npz"), best_weights=arrays("best_weights.npz"))


def _save_checkpoint(ckpt: EpochCheckpoint) -> tune.Checkpoint:
    """Writes rank 0's epoch checkpoint (weights fetched from the object store) to a new directory."""
    path = Path(tempfile.mkdtemp(prefix="hpo-ckpt-"))
    best = None if ckpt.best_weights is None else ray.get(ckpt.best_weights)
    write_checkpoint(path, EpochCheckpoint(ckpt.state, ray.get(ckpt.weights), best))
    return tune.Checkpoint.from_directory(str(path))


def _load_checkpoint(checkpoint: tune.Checkpoint | None) -> EpochCheckpoint | None:
    """Reads a checkpoint written by :func:`_save_checkpoint` (None: start from epoch 0)."""
    if checkpoint is None:
        return None
    with checkpoint.as_directory() as path:
        return read_checkpoint(Path(path))


def run_trial(spec: TrialSpec, params: dict[str, Any]) -> None:
    """Runs one trial to completion, scheduler stop or failure (called by Tune in the trial actor)."""
    started = time.time()
    hyper = spec.hyper(params)
    try:
        resume = _load_checkpoint(tune.get_checkpoint())
    except OSError as exc:  # the storage's retries ran out: as for a checkpoint write, resumable, not failed
        raise StorageUnavailable(storage_line(None, exc)) from None
    kind = BACKENDS[spec.backend]
    group = kind.acquire(spec)
    started = group.started_at(started)  # on the clock rank 0 stamps its messages with
    warm = group.warm
    refs = group.launch(kind.worker, [spec, params, group.channel, resume])
    outcome = "failed"
    try:
        if not _stream(group, refs, hyper, started, warm, resume) and resume is None:
            # A new trial that returns without a result ends the whole sweep in Tune; a failed one is retried
            # or recorded. (A trial resumed at its last epoch has nothing left to report: its result stands.)
            raise TrialFailed("the workers ended before reporting an epoch")
        outcome = "finished"
    except SystemExit:
        outcome = "stopped"
        raise
    finally:
        _end(group, refs, outcome)


def _stream(
    group: backends.Backend,
    refs: list[Any],
    hyper: dict[str, Any],
    started: float,
    warm: bool,
    resume: EpochCheckpoint | None,
) -> int:
    """Relays rank 0's messages to Tune until the last epoch (or a worker failure).

    Returns:
        How many epochs were reported to Tune.
    """
    first_epoch_at: float | None = None
    pending = list(refs)
    reported = 0
    while True:
        messages = ray.get(group.channel.drain.remote())
        if not messages:
            if not pending:
                return reported
            done, pending = ray.wait(pending, num_returns=len(pending), timeout=_POLL_S)
            _gather(done)
            # Drain once more before returning: rank 0 may have sent its last epoch just before it returned.
            continue
        for msg in messages:
            if isinstance(msg, TrialStarted):
                first_epoch_at = msg.time
                continue
            context = TrialContext(
                startup_s=(first_epoch_at - started) if first_epoch_at else None,
                warm_start=warm,
                resumed_from_epoch=resume.epoch if resume else 0,
                settings=hyper,
            )
            metrics = epoch_result(msg, context, group.now())
            reported += 1
            if msg.checkpoint.weights is None:  # rank 0 went on while the last checkpoint was being persisted
                tune.report(metrics)
                continue
            checkpoint = _save_checkpoint(msg.checkpoint)
            if msg.last:
                # The scheduler may stop the trial at its final report (ASHA does at max_t): finish the
                # workers' work first, and put the final model and row audit in the final checkpoint.
                _write_results(_gather(refs), Path(checkpoint.path))
            try:
                tune.report(metrics, checkpoint=checkpoint)  # persists the checkpoint before returning
            except OSError as exc:  # the storage's own retries ran out (hpo.object_store): resumable, not failed
                raise StorageUnavailable(storage_line(msg.epoch, exc)) from None
            finally:
                shutil.rmtree(checkpoint.path, ignore_errors=True)
                group.channel.checkpoint_done.remote()
            if msg.last:
                return reported


def _end(group: backends.Backend, refs: list[Any], outcome: str) -> None:
    """Releases the workers: warm for the next trial when they are idle and healthy, else killed."""
    reusable = False
    if outcome == "finished":
        reusable = True
    elif outcome == "stopped":
        # Waited for: a threaded channel host may run calls out of order, and a stop request that lands
        # after the next trial's reset would stop that trial before its first epoch.
        # A request not taken within the grace period leaves the group unusable: it is torn down, not reused.
        asked = ray.wait([group.channel.request_stop.remote()], timeout=STOP_GRACE_S)[0]
        done, pending = ray.wait(refs, num_returns=len(refs), timeout=STOP_GRACE_S)
        reusable = bool(asked) and not pending and _all_ok(done)
    group.release(reusable=reusable)


def _all_ok(refs: list[Any]) -> bool:
    try:
        ray.get(refs)
        return True
    except ray.exceptions.RayError:
        return False


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


def _write_results(results: list[dict[str, Any]], directory: Path) -> None:
    """Writes the final model (``model.keras``) and each rank's row audit (``rows.json``) to ``directory``."""
    results = sorted(results, key=lambda r: r["rank"])
    model = results[0].pop("model", None)
    if model is not None:
        (directory / "model.keras").write_bytes(model)
    (directory / "rows.json").write_text(json.dumps(results))


def make_trainable(spec: TrialSpec) -> Any:
    """The Tune trainable for a sweep's trials, with its placement group attached."""

    def hpo_trial(config: dict[str, Any]) -> None:
        run_trial(spec, config)

    return tune.with_resources(hpo_trial, placement(spec))
