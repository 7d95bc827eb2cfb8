"""The sweep's MLflow writes: sent with retries and backoff, spooled while the server is unreachable.

Every write goes through an :class:`Outbox`; what the server cannot take is appended to
``STORAGE/NAME/mlflow_spool.jsonl``. Runs are addressed by *keys* (``sweep`` for the parent run,
``trial:<id>`` for a trial), so writes for a trial whose run could not even be created can be spooled
and replayed later. While the server is down, every write is spooled in order; the outbox probes the
server at most every ``probe_every_s`` seconds and replays the spool as soon as it answers, and
``hpo sync NAME`` replays what is left. Replay is idempotent: a run is looked up by its key before it is
created, and metric points already in the store are skipped, so every metric lands exactly once.
"""

from __future__ import annotations

import json
import logging
import os
import time
from pathlib import Path
from typing import Any

from hpo.config.tracking_uri import masked
from hpo.sweep_summary import RegisteredModel, SweepSummary, TrackingUpdate
from hpo.tracking.store import mlflow_client
from hpo.tracking.transport import TrackingError, Unreachable, http_settings, is_connection_error

SPOOL_NAME = "mlflow_spool.jsonl"

log = logging.getLogger(__name__)


class OutboxWrites:
    """The writes a sweep makes, each built as one operation dict and handed to :meth:`submit`; its MLflow client.

    Shared by :class:`Outbox` (sends or spools each at once) and
    :class:`~hpo.tracking.writer.OutboxProcess` (hands each to its child process), so both speak the same
    operations.
    """

    uri: str
    _client: Any

    def submit(self, op: dict[str, Any]) -> None:
        """Sends (or queues) one operation."""
        raise NotImplementedError

    @property
    def client(self) -> Any:
        """An MLflow client (made on first use, also after unpickling; beside a writer process, for reads)."""
        if self._client is None:
            self._client = mlflow_client(self.uri)
        return self._client

    def create_run(self, key: str, run_name: str, tags: dict[str, str]) -> None:
        """Creates the run for ``key`` (a trial); its id is in :attr:`run_ids` once it was sent."""
        self.submit({"op": "create_run", "key": key, "run_name": run_name, "tags": tags})

    def log(
        self,
        key: str,
        metrics: list[tuple[str, float, int, int]] | None = None,
        params: dict[str, str] | None = None,
        tags: dict[str, str] | None = None,
    ) -> None:
        """Logs metrics ``(key, value, timestamp_ms, step)``, params and tags to the run of ``key``."""
        self.submit({"op": "log", "key": key, "metrics": metrics or [], "params": params or {}, "tags": tags or {}})

    def terminate(self, key: str, status: str) -> None:
        """Sets the run of ``key`` to ``FINISHED``, ``FAILED``, ``KILLED`` or (resumed) ``RUNNING``."""
        self.submit({"op": "terminate", "key": key, "status": status})

    def log_model(self, model_path: str, sample_url: str, features: str, registered_name: str, trial_id: str) -> None:
        """Logs and registers the best model on the parent run (see :mod:`hpo.tracking.best_model`)."""
        self.submit({"op": "log_model", "key": "sweep", "model_path": model_path, "sample_url": sample_url,
                     "features": features, "registered_name": registered_name, "trial_id": trial_id})


class Outbox(OutboxWrites):
    """Sends MLflow writes for one sweep; spools what the server cannot take.

    Args:
        uri: Tracking URI.
        spool_path: The sweep's spool file.
        parent_run_id: The sweep's parent run (key ``sweep``).
        experiment_id: The sweep's experiment.
        retries: Attempts per write before the server counts as down.
        backoff_s: First retry delay (doubled each retry).
        probe_every_s: While down: seconds between health probes.
    """

    def __init__(
        self,
        uri: str,
        spool_path: Path,
        parent_run_id: str,
        experiment_id: str,
        retries: int = 3,
        backoff_s: float = 0.5,
        probe_every_s: float = 10.0,
    ) -> None:
        self.uri = uri
        self.spool_path = Path(spool_path)
        self.experiment_id = experiment_id
        self.run_ids: dict[str, str] = {"sweep": parent_run_id}
        self.model: dict[str, str] | None = None
        self.retries = retries
        self.backoff_s = backoff_s
        self.probe_every_s = probe_every_s
        self._last_probe = 0.0
        self._client: Any = None
        self._history: dict[tuple[str, str], set[tuple[int, float]]] = {}

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_client": None, "_history": {}}

    @property
    def down(self) -> bool:
        """True while writes are waiting in the spool."""
        return self.spool_path.is_file() and self.spool_path.stat().st_size > 0

    # -- the writes ---------------------------------------------------------------------------------

    def adopt(self, key: str, run_id: str) -> None:
        """Writes for ``key`` go to the existing run ``run_id`` (a resumed sweep's trial)."""
        self.run_ids[key] = run_id

    def push(self) -> None:
        """Nothing to do: every write was sent (or spooled) when it was made."""

    # -- sending and spooling -----------------------------------------------------------------------

    def submit(self, op: dict[str, Any]) -> None:
        """Sends ``op`` now, or spools it (and everything after it, while the server is down)."""
        if self.down:
            if time.monotonic() - self._last_probe >= self.probe_every_s:
                self.flush()
            if self.down:
                self._spool(op)
                return
        try:
            self._send_retrying(op, replay=False)
        except Unreachable:
            self._spool(op)

    def flush(self) -> int:
        """Replays the spool if the server answers; returns how many writes are still waiting."""
        self._last_probe = time.monotonic()
        if not self.spool_path.is_file():
            return 0
        ops = [json.loads(line) for line in self.spool_path.read_text().splitlines() if line.strip()]
        sent = 0
        try:
            for op in ops:
                self._send_retrying(op, replay=True)
                sent += 1
        except Unreachable:
            pass
        finally:
            self._rewrite(ops[sent:])
        return len(ops) - sent

    def _spool(self, op: dict[str, Any]) -> None:
        self.spool_path.parent.mkdir(parents=True, exist_ok=True)
        with self.spool_path.open("a") as f:
            f.write(json.dumps(op) + "\n")
            f.flush()
            os.fsync(f.fileno())

    def _rewrite(self, ops: list[dict[str, Any]]) -> None:
        if not ops:
            self.spool_path.unlink(missing_ok=True)
            return
        tmp = self.spool_path.with_suffix(".tmp")
        tmp.write_text("".join(json.dumps(op) + "\n" for op in ops))
        os.replace(tmp, self.spool_path)

    def _send_retrying(self, op: dict[str, Any], replay: bool) -> None:
        """Sends one write, retrying with exponential backoff.

        Raises:
            Unreachable: The write could not be sent and should be spooled: the server does not answer
                (or, for a local store, every attempt failed). A write that a reachable server rejects
                is logged and dropped: spooling it would only fail again.
        """
        if op["op"] != "create_run" and op["key"] not in self.run_ids:
            log.warning("MLflow write %s dropped: the run for %s was never created", op["op"], op["key"])
            return
        delay = self.backoff_s
        error: Exception | None = None
        for attempt in range(self.retries):
            try:
                with http_settings(self.uri):
                    self._send(op, replay)
                return
            except Exception as exc:  # noqa: BLE001  (sorted below: connection errors are retried)
                if not is_connection_error(exc):
                    self._rejected(op, exc)
                    return
                error = exc
            if attempt + 1 < self.retries:
                time.sleep(delay)
                delay *= 2
        raise Unreachable(f"{masked(self.uri)}: {error}")

    def _rejected(self, op: dict[str, Any], exc: Exception) -> None:
        """A write that failed for another reason than the store's reach.

        A reachable server's refusal (an MLflow error) is logged and dropped: spooling it would only fail
        again. Anything else is a real error and is raised, not spooled.

        Raises:
            TrackingError: For an error that is not MLflow's answer.
        """
        from mlflow.exceptions import MlflowException

        if isinstance(exc, MlflowException):
            log.warning("MLflow write %s for %s was rejected and dropped: %s", op["op"], op["key"], exc)
            return
        raise TrackingError(f"MLflow write {op['op']} for {op['key']} failed: {type(exc).__name__}: {exc}") from exc

    def _send(self, op: dict[str, Any], replay: bool) -> None:
        kind = op["op"]
        if kind == "create_run":
            self._create_run(op, replay)
            return
        run_id = self.run_ids[op["key"]]
        if kind == "log":
            self._log(run_id, op, replay)
        elif kind == "terminate" and op["status"] == "RUNNING":
            self.client.update_run(run_id, status="RUNNING")
        elif kind == "terminate":
            self.client.set_terminated(run_id, op["status"])
        elif kind == "log_model":
            from hpo.tracking import best_model

            sample = best_model.sample_features(op["sample_url"], op["features"])
            model_uri, version = best_model.log_best_model(
                self.uri, run_id, Path(op["model_path"]), sample, op["registered_name"]
            )
            self.model = {
                "trial_id": op["trial_id"],
                "model_uri": model_uri,
                "registered_name": op["registered_name"],
                "version": version,
            }
            tags = {"hpo.model_trial_id": op["trial_id"], "hpo.registered_model": f"{op['registered_name']}/{version}"}
            self._log(run_id, {"metrics": [], "params": {}, "tags": tags}, replay=False)

    def _create_run(self, op: dict[str, Any], replay: bool) -> None:
        key = op["key"]
        if key in self.run_ids:
            return
        if replay:
            found = self.client.search_runs(
                [self.experiment_id],
                filter_string=f"tags.`hpo.key` = '{key}' and tags.`mlflow.parentRunId` = '{self.run_ids['sweep']}'",
            )
            if found:
                self.run_ids[key] = found[0].info.run_id
                return
        run = self.client.create_run(self.experiment_id, run_name=op["run_name"], tags={**op["tags"], "hpo.key": key})
        self.run_ids[key] = run.info.run_id

    def _log(self, run_id: str, op: dict[str, Any], replay: bool) -> None:
        from mlflow.entities import Metric, Param, RunTag

        metrics = [Metric(k, float(v), int(ts), int(step)) for k, v, ts, step in op["metrics"]]
        if replay:
            metrics = [m for m in metrics if (m.step, m.value) not in self._logged(run_id, m.key)]
        params = [Param(k, str(v)) for k, v in op["params"].items()]
        tags = [RunTag(k, str(v)) for k, v in op["tags"].items()]
        for start in range(0, max(len(metrics), len(params), len(tags), 1), 100):
            self.client.log_batch(
                run_id,
                metrics=metrics[start : start + 100],
                params=params[start : start + 100],
                tags=tags[start : start + 100],
            )
        for m in metrics:
            if (run_id, m.key) in self._history:
                self._history[(run_id, m.key)].add((m.step, m.value))

    def _logged(self, run_id: str, key: str) -> set[tuple[int, float]]:
        """(step, value) points of a metric already in the store (read once per run and key)."""
        if (run_id, key) not in self._history:
            history = self.client.get_metric_history(run_id, key)
            self._history[(run_id, key)] = {(m.step, m.value) for m in history}
        return self._history[(run_id, key)]


def tracking_update(outbox: Outbox, pending: int) -> TrackingUpdate:
    """What the outbox knows for the sweep's summary: trial run ids, the registered model, unsent writes."""
    run_ids = {key.removeprefix("trial:"): run_id for key, run_id in outbox.run_ids.items() if key.startswith("trial:")}
    model = RegisteredModel.model_validate(outbox.model) if outbox.model is not None else None
    return TrackingUpdate(run_ids=run_ids, model=model, pending_writes=pending,
                          spool=str(outbox.spool_path) if pending else None)


def update_summary(summary: SweepSummary, outbox: Outbox, pending: int) -> None:
    """Hands the summary the outbox's :func:`tracking_update` (run ids, registered model, unsent writes)."""
    summary.record_tracking(tracking_update(outbox, pending))
