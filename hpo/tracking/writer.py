"""The sweep's MLflow writes sent by a process of their own, so the driver's loop does not wait on the store.

A local sqlite store does its ORM work and a disk sync in the process that writes (about 20 ms of CPU and
50 ms of wall per trial, measured on a 2-core machine); a server costs an HTTP round trip per write. With
thousands of trials that is the driver's largest cost after Tune's own loop, and it holds the driver's GIL.
:class:`OutboxProcess` hands each write, as one JSON line, to a child process
(``python -m hpo.tracking.writer``) that owns the sweep's :class:`~hpo.tracking.outbox.Outbox`: the same
retries, the same spool while the server is down, the same order of writes. The driver waits on the
child only at a *barrier* (:meth:`OutboxProcess.sync`): when it needs the run ids, the registered model,
whether writes are spooled, or before it writes to the store itself (the end of the sweep).

The child is in a session of its own, so Ctrl-C in the terminal stops the driver, not the writes it
still has to send; it exits once the driver closes its input (at the end of the sweep, or when the
driver dies), after it has sent (or spooled) every write it was handed.
"""

from __future__ import annotations

import atexit
import json
import logging
import os
import queue
import subprocess
import sys
import threading
from pathlib import Path
from typing import Any

from hpo.tracking.outbox import Outbox, OutboxWrites
from hpo.tracking.transport import TrackingError

log = logging.getLogger(__name__)


class OutboxProcess(OutboxWrites):
    """An :class:`~hpo.tracking.outbox.Outbox` run by a child process; the driver only queues writes.

    It offers what the sweep's tracking uses of an outbox: the writes (:meth:`create_run`, :meth:`log`,
    :meth:`terminate`, :meth:`log_model`), :meth:`flush`, :attr:`down`, :attr:`run_ids`, :attr:`model`,
    :attr:`spool_path` and a :attr:`client` for the driver's own reads.

    Args:
        uri: Tracking URI.
        spool_path: The sweep's spool file.
        parent_run_id: The sweep's parent run (key ``sweep``).
        experiment_id: The sweep's experiment.
        retries: Attempts per write before the server counts as down (the child's outbox).
        backoff_s: First retry delay (doubled each retry).
        probe_every_s: While down: seconds between health probes.
    """

    def __init__(
        self, uri: str, spool_path: Path, parent_run_id: str, experiment_id: str, retries: int = 3,
        backoff_s: float = 0.5, probe_every_s: float = 10.0,
    ) -> None:
        self.uri = uri
        self.retries = retries
        self.backoff_s = backoff_s
        self.probe_every_s = probe_every_s
        self.spool_path = Path(spool_path)
        self.parent_run_id = parent_run_id
        self.experiment_id = experiment_id
        self._run_ids: dict[str, str] = {"sweep": parent_run_id}
        self._model: dict[str, str] | None = None
        self._down = False
        self._proc: subprocess.Popen | None = None
        self._client: Any = None
        self._unsynced = False
        self._lines: queue.SimpleQueue | None = None
        self._feeder: threading.Thread | None = None

    def __getstate__(self) -> dict[str, Any]:
        return {**self.__dict__, "_proc": None, "_client": None, "_lines": None, "_feeder": None}

    # -- the child ------------------------------------------------------------------------------------

    def start(self) -> None:
        """Starts the child now (its imports then overlap the sweep's own start), not at the first write."""
        self._child()

    def _child(self) -> subprocess.Popen:
        if self._proc is None:
            import hpo

            root = str(Path(hpo.__file__).resolve().parents[1])
            env = dict(os.environ)
            env["PYTHONPATH"] = os.pathsep.join(p for p in (root, env.get("PYTHONPATH")) if p)
            settings = {"uri": self.uri, "spool_path": str(self.spool_path), "parent_run_id": self.parent_run_id,
                        "experiment_id": self.experiment_id, "run_ids": self._run_ids, "retries": self.retries,
                        "backoff_s": self.backoff_s, "probe_every_s": self.probe_every_s}
            self._proc = subprocess.Popen(
                [sys.executable, "-m", "hpo.tracking.writer", json.dumps(settings)],
                stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True, env=env,
                start_new_session=True,  # Ctrl-C stops the driver; the writes it handed over are still sent
            )
            self._lines = queue.SimpleQueue()
            self._feeder = threading.Thread(target=_feed, args=(self._lines, self._proc.stdin),
                                            name="hpo-mlflow-feeder", daemon=True)
            self._feeder.start()
            atexit.register(self.close)  # a driver that ends without closing still hands over what it holds
        return self._proc

    def submit(self, op: dict[str, Any]) -> None:
        """Queues ``op`` for the child; never waits (the feeder thread writes it to the child's input)."""
        self._child()
        self._lines.put(json.dumps(op) + "\n")
        self._unsynced = True

    def sync(self, flush: bool = False) -> int:
        """Waits until the child has sent (or spooled) every write handed to it; takes over what it knows.

        Args:
            flush: Also replay the spool if the server answers again.

        Returns:
            Writes still waiting in the spool (0 when ``flush`` is False).

        Raises:
            TrackingError: A write failed for another reason than the store's reach (as the outbox raises it),
                or the child is gone.
        """
        if self._proc is None and not flush:
            return 0
        self.submit({"op": "sync", "flush": flush})
        proc = self._child()
        assert proc.stdout is not None
        try:
            line = proc.stdout.readline()
        except OSError as exc:
            raise TrackingError(f"the MLflow writer process is gone: {exc}") from exc
        if not line:
            raise TrackingError(f"the MLflow writer process ended (exit {proc.poll()}); see the lines above")
        state = json.loads(line)
        self._run_ids.update(state["run_ids"])
        self._model = state["model"]
        self._down = state["down"]
        self._unsynced = False
        if state["error"]:
            raise TrackingError(state["error"])
        return int(state["pending"])

    def push(self) -> None:
        """Nothing to do: the feeder hands every queued write to the child as soon as it can."""

    def close(self) -> None:
        """Lets the child send what it holds and waits for it to end (idempotent)."""
        proc, self._proc = self._proc, None
        if proc is None:
            return
        self._lines.put(None)  # the feeder writes what is queued, closes the child's input and ends
        self._feeder.join()
        try:
            _, status, usage = os.wait4(proc.pid, 0)
            proc.returncode = os.waitstatus_to_exitcode(status)
            cpu_s = usage.ru_utime + usage.ru_stime
        except ChildProcessError:  # reaped already
            proc.wait()
            cpu_s = None
        if proc.stdout is not None:
            proc.stdout.close()
        log.debug("MLflow writer process ended (exit %s, %s CPU seconds)", proc.returncode, cpu_s,
                  extra={"writer_cpu_s": cpu_s})

    # -- what the sweep's tracking uses of an outbox ------------------------------------------------

    @property
    def run_ids(self) -> dict[str, str]:
        """Run key → run id, as of now (a barrier)."""
        if self._unsynced:
            self.sync()
        return dict(self._run_ids)

    @property
    def model(self) -> dict[str, str] | None:
        """The registered best model, once logged (a barrier)."""
        if self._unsynced:
            self.sync()
        return self._model

    @property
    def down(self) -> bool:
        """True while writes are waiting in the spool (a barrier)."""
        if self._unsynced:
            self.sync()
        return self._down or (self.spool_path.is_file() and self.spool_path.stat().st_size > 0)

    def adopt(self, key: str, run_id: str) -> None:
        """Writes for ``key`` go to the existing run ``run_id`` (a resumed sweep's trial)."""
        self._run_ids[key] = run_id
        self.submit({"op": "adopt", "key": key, "run_id": run_id})

    def flush(self) -> int:
        """Replays the spool if the server answers; returns how many writes are still waiting (a barrier)."""
        return self.sync(flush=True)


def _feed(lines: queue.SimpleQueue, stdin: Any) -> None:
    """The feeder thread: writes the queued lines to the child's input, in order, until ``None``.

    The driver's thread only queues; a child that is slow to read holds up this thread, never the sweep.
    What is written is flushed whenever the queue is empty, so the child is never left waiting on a buffer.
    """
    try:
        while (line := lines.get()) is not None:
            stdin.write(line)
            if lines.empty():
                stdin.flush()
    except OSError as exc:  # the child is gone: the driver hears it at the next barrier
        log.error("the MLflow writer process does not take writes: %s", exc)
    finally:
        try:
            stdin.close()
        except OSError:
            pass


def serve(settings: dict[str, Any], lines: Any, out: Any) -> None:
    """The child's loop: every line of ``lines`` is a write (or a barrier), handled in order.

    A write that fails for another reason than the store's reach is reported at the next barrier (the
    first such error), as :class:`~hpo.tracking.outbox.Outbox` would have raised it in the driver.
    """
    outbox = Outbox(settings["uri"], Path(settings["spool_path"]), settings["parent_run_id"],
                    settings["experiment_id"], retries=settings.get("retries", 3),
                    backoff_s=settings.get("backoff_s", 0.5), probe_every_s=settings.get("probe_every_s", 10.0))
    outbox.run_ids.update(settings.get("run_ids") or {})
    error: str | None = None
    for line in lines:
        if not line.strip():
            continue
        op = json.loads(line)
        kind = op["op"]
        if kind == "sync":
            pending = 0
            try:
                pending = outbox.flush() if op["flush"] else 0
            except Exception as exc:  # noqa: BLE001 - told to the driver, which raises it
                error = error or f"{type(exc).__name__}: {exc}"
            out.write(json.dumps({"run_ids": outbox.run_ids, "model": outbox.model, "down": outbox.down,
                                  "pending": pending, "error": error}) + "\n")
            out.flush()
            error = None
        elif kind == "adopt":
            outbox.run_ids[op["key"]] = op["run_id"]
        else:
            try:
                outbox.submit(op)
            except Exception as exc:  # noqa: BLE001 - told to the driver at the next barrier
                log.error("%s", exc)
                error = error or (str(exc) if isinstance(exc, TrackingError) else f"{type(exc).__name__}: {exc}")


def main() -> None:
    """``python -m hpo.tracking.writer SETTINGS_JSON``: writes read from stdin, barrier answers on stdout."""
    logging.basicConfig(level=logging.WARNING, format="%(levelname)s %(name)s: %(message)s")
    serve(json.loads(sys.argv[1]), sys.stdin, sys.stdout)


if __name__ == "__main__":
    main()
