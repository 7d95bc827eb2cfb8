"""The queue's dispatcher: one long-lived Ray job on the head that starts queued sweeps as Ray jobs.

``hpo submit`` (and every other queue command) starts it through the job server when none runs
(:meth:`hpo.queue.jobs.Jobs.ensure_dispatcher`); it holds no state of its own. Every ``POLL_S`` it reads the
queue from the sweeps' storage and:

- follows each running sweep: its progress (trials ended, planned, the forecast) from the sweep's
  ``progress.json``; its end from the job server (``succeeded``, ``failed``, or ``interrupted``); a job the
  server no longer knows (the head restarted) makes the sweep ``interrupted`` and, on the next pass,
  queued again to run with ``hpo tune --resume``, in its old place;
- stops a running sweep ``hpo cancel`` asked to stop as Ctrl-C does (SIGTERM to its driver, found in its
  ``driver.json``): it ends ``interrupted``, resumable, nothing registered, and is not resumed by the queue;
- admits the next queued sweep by :func:`hpo.queue.admission.next_to_admit` and hands it to the queue's
  standby runner (:mod:`hpo.queue.standby`: a sweep job started ahead, its imports done), or, when none
  waits, submits ``hpo tune`` for it as a new job with the packaged code as the job's ``working_dir``;
- gives a sweep handed to a standby runner back to the queue, in its old place, when the runner's job
  ended without claiming it (:func:`hpo.queue.admission.handover_step`), and stops a runner that has not
  claimed it in ``CLAIM_S``;
- keeps one standby runner waiting (:func:`hpo.queue.admission.start_standby`): a new one once the last
  was handed a sweep and that sweep's first trial runs, or once it ended idle.

Between two passes, while a queued sweep waits only for the running ones to start their last trials, it
watches their ``progress.json`` (``WATCH_S``): the sweep's driver writes it the moment its last trial
starts, and the next pass follows at once.

Run as ``python -m hpo.queue.dispatcher --storage STORAGE``.
"""

from __future__ import annotations

import argparse
import logging
import os
import shlex
import signal
import time
from pathlib import Path

from hpo.driver import read_driver
from hpo.options import summary_path
from hpo.progress.live import PROGRESS_FILE, Snapshot, read_live
from hpo.queue.admission import awaited, handover_step, next_to_admit, start_standby, starting
from hpo.queue.entry import Assignment, EntryState, QueueEntry, StandbyRecord
from hpo.queue.jobs import ROLE_KEY, STANDBY_ROLE, SWEEP_ROLE, Jobs, JobState, dispatcher_id, python
from hpo.queue.package import working_dir
from hpo.queue.store import QueueStore
from hpo.storage import Storage
from hpo.sweep_summary import SweepSummary

logger = logging.getLogger(__name__)

#: Seconds between two passes over the queue.
POLL_S = 1.0
#: Seconds between two looks at the progress of the running sweeps admission waits for (between passes).
WATCH_S = 0.1
#: How often the queue resumes one sweep after interruptions it did not ask for.
MAX_RESUMES = 3
#: Messages the dispatcher leaves on an entry.
LOST = "its job was lost (the head restarted or its driver died); the queue resumes it"
UNCLAIMED = "the standby runner ended without taking it; queued again"
CANCELLED_RUNNING = ("cancelled while running: stopped as after Ctrl-C; "
                     "'hpo tune FILE --name {name} --resume' continues it")


class Dispatcher:
    """Moves the queue of one storage along, one :meth:`tick` at a time.

    Args:
        storage: The sweeps' storage (the queue lives under ``_queue/``).
        jobs: The cluster's job server.
        storage_arg: The ``--storage`` the sweeps' jobs get (the storage as the user wrote it).
    """

    def __init__(self, storage: Storage, jobs: Jobs, storage_arg: str) -> None:
        self.storage = storage
        self.store = QueueStore(storage)
        self.jobs = jobs
        self.storage_arg = storage_arg
        #: Progress files of the running sweeps admission waits for (watched between passes).
        self.watched: list[Path] = []

    # -- one pass --------------------------------------------------------------------------------------

    def tick(self) -> None:
        """One pass: follow running sweeps, requeue lost ones, drop cancelled queued ones, admit the next."""
        for entry in self.store.entries():
            if entry.state == EntryState.RUNNING:
                self._follow(entry)
            elif entry.state == EntryState.QUEUED and entry.cancel_requested:
                self._save(entry.model_copy(update={"state": EntryState.CANCELLED, "ended_at": time.time()}))
        for entry in self.store.entries():  # before admission: a lost sweep goes back to its old place
            if entry.state == EntryState.INTERRUPTED and entry.requeue:
                self._requeue(entry)
        entries = self.store.entries()
        settings = self.store.settings()
        running = {e.name: self._live(e) for e in entries if e.state == EntryState.RUNNING}
        chosen = next_to_admit(entries, settings, running)
        self.watched = [] if chosen is not None else [
            self.storage.state_dir(name) / PROGRESS_FILE for name in awaited(entries, settings, running)]
        if chosen is not None:
            self._start(chosen, standby=settings.standby)
            return  # its start first: the next standby waits for at least the next pass
        if settings.standby:
            self._keep_standby(any(starting(e, running[e.name]) for e in entries if e.name in running))
        else:
            self._drop_standby()

    def pause(self, seconds: float, watch_s: float = WATCH_S) -> None:
        """Waits ``seconds`` until the next pass, or less: until a watched progress file changes."""
        paths = list(self.watched)
        if not paths:
            time.sleep(seconds)
            return
        seen = [_mtime(p) for p in paths]
        deadline = time.monotonic() + seconds
        while (left := deadline - time.monotonic()) > 0:
            time.sleep(min(watch_s, left))
            if [_mtime(p) for p in paths] != seen:
                return

    def _live(self, entry: QueueEntry) -> Snapshot | None:
        return read_live(self.storage.state_dir(entry.name) / PROGRESS_FILE)

    def _save(self, entry: QueueEntry) -> None:
        """Writes ``entry``, keeping a cancel that ``hpo cancel`` wrote since it was read."""
        fresh = self.store.get(entry.name)
        if fresh is not None and fresh.cancel_requested and not entry.cancel_requested:
            entry = entry.model_copy(update={"cancel_requested": True})
        if fresh is not None and fresh.state == EntryState.CANCELLED:
            return  # cancelled while queued: hpo cancel's word is final
        if fresh is None or fresh.model_dump() != entry.model_dump():
            self.store.put(entry)

    # -- running sweeps --------------------------------------------------------------------------------

    def _follow(self, entry: QueueEntry) -> None:
        state = self.jobs.state(entry.job_id) if entry.job_id else None
        if entry.handover:
            claimed = entry.job_id is not None and self.store.claimed(entry.job_id) is not None
            step = handover_step(claimed=claimed, alive=state is not None and not state.ended,
                                 assigned_at=entry.started_at or 0.0, now=time.time())
            if step == "claimed":
                entry = entry.model_copy(update={"handover": False})
                self._save(entry)
            else:
                self._unclaimed(entry, step)
                return
        if state is None:
            self._lost(entry)
            return
        if state.ended:
            self._ended(entry, state)
            return
        update: dict[str, object] = {}
        live = self._live(entry)
        if live is not None and (entry.started_at is None or live.time >= entry.started_at):
            update |= progress_fields(live)
        else:
            live = None
        # Tune's loop runs (the sweep's live state says "running"): a signal now stops it as Ctrl-C does;
        # earlier, it would stop the driver at once, without its write-up
        if entry.cancel_requested and not entry.stop_sent and live is not None and live.state == "running":
            if self._stop(entry):
                update["stop_sent"] = True
        if update:
            self._save(entry.model_copy(update=update))

    def _stop(self, entry: QueueEntry) -> bool:
        """SIGTERM to the sweep's driver (the graceful stop of Ctrl-C); False while it has not recorded itself."""
        record = read_driver(self.storage.state_dir(entry.name))
        if record is None or (entry.started_at is not None and record.started < entry.started_at - 5):
            return False
        if not record.local:
            return self.jobs.stop(entry.job_id or "")
        try:
            os.kill(record.pid, signal.SIGTERM)
        except ProcessLookupError:
            return False
        return True

    def _unclaimed(self, entry: QueueEntry, step: str) -> None:
        """A sweep its standby runner has not claimed: wait, stop the runner, or give the sweep back."""
        if step == "stop":
            logger.warning("standby runner %s did not claim %s; stopping it", entry.job_id, entry.name)
            self.jobs.stop(entry.job_id or "")
        elif step == "requeue":  # it never ran: back to its old place (a cancelled one ends cancelled)
            ended = entry.cancel_requested
            self._save(entry.model_copy(update={
                "state": EntryState.CANCELLED if ended else EntryState.QUEUED, "handover": False,
                "job_id": None, "started_at": None, "ended_at": time.time() if ended else None,
                "message": None if ended else UNCLAIMED}))

    def _lost(self, entry: QueueEntry) -> None:
        requeue = not entry.cancel_requested and entry.resumes < MAX_RESUMES
        self._save(entry.model_copy(update={
            "state": EntryState.INTERRUPTED, "ended_at": time.time(), "requeue": requeue,
            "message": LOST if requeue else "its job was lost; 'hpo tune FILE --resume' continues it"}))

    def _requeue(self, entry: QueueEntry) -> None:
        self._save(entry.model_copy(update={
            "state": EntryState.QUEUED, "requeue": False, "resumes": entry.resumes + 1, "ended_at": None,
            "message": f"resumed by the queue after an interruption ({entry.resumes + 1} of {MAX_RESUMES})"}))

    def _ended(self, entry: QueueEntry, state: JobState) -> None:
        path = summary_path(self.storage, entry.name)
        summary = None
        if path.is_file() and path.stat().st_mtime >= (entry.started_at or 0) - 1:
            try:
                summary = SweepSummary.read(path)
            except Exception:  # noqa: BLE001 - the job's own state decides then
                summary = None
        update: dict[str, object] = {"ended_at": time.time(), "forecast_remaining_s": 0.0}
        if summary is not None:
            update["trials_ended"] = len(summary.trials)
        if state.status == "SUCCEEDED":  # also when a cancel came too late to stop it
            update |= {"state": EntryState.SUCCEEDED, "message": None}
        elif entry.cancel_requested:
            update |= {"state": EntryState.INTERRUPTED, "message": CANCELLED_RUNNING.format(name=entry.name)}
        elif summary is not None and summary.status == "interrupted":
            update |= {"state": EntryState.INTERRUPTED,
                       "message": f"interrupted; 'hpo tune FILE --name {entry.name} --resume' continues it"}
        else:
            update |= {"state": EntryState.FAILED, "message": self._failure(entry, state)}
        self._save(entry.model_copy(update=update))

    def _failure(self, entry: QueueEntry, state: JobState) -> str:
        try:
            lines = [line for line in self.jobs.logs(entry.job_id or "").splitlines() if line.startswith("error:")]
        except Exception:  # noqa: BLE001 - the server's message then
            lines = []
        return lines[-1] if lines else (state.message.strip().splitlines() or [state.status.lower()])[-1]

    # -- the standby runner ----------------------------------------------------------------------------

    def _standby(self) -> tuple[StandbyRecord | None, bool, bool]:
        """The last standby runner started, whether it was handed a sweep, whether its job is alive."""
        record = self.store.standby()
        if record is None:
            return None, False, False
        if self.store.assignment(record.job_id) is not None:
            return record, True, False
        state = self.jobs.state(record.job_id)
        return record, False, state is not None and not state.ended

    def _keep_standby(self, busy_starting: bool) -> None:
        """Starts a standby runner when none waits (and no admitted sweep is still starting)."""
        record, taken, alive = self._standby()
        if not start_standby(record, taken=taken, alive=alive, busy_starting=busy_starting, now=time.time()):
            return
        job_id = f"hpo-standby-{dispatcher_id(self.storage_arg).removeprefix('hpo-queue-')}-{int(time.time() * 1000)}"
        entrypoint = shlex.join([python(), "-m", "hpo.queue.standby", "--storage", self.storage_arg,
                                 "--job", job_id])
        self.jobs.submit(entrypoint, job_id, None, {ROLE_KEY: STANDBY_ROLE})
        self.store.put_standby(StandbyRecord(job_id=job_id, started_at=time.time()))
        logger.info("standby runner %s started", job_id)

    def _drop_standby(self) -> None:
        """Stops a standby runner still waiting (the queue's ``standby`` setting was turned off)."""
        record = self.store.standby()
        if record is None or self.store.assignment(record.job_id) is not None:
            return
        state = self.jobs.state(record.job_id)
        if state is not None and not state.ended:
            self.jobs.stop(record.job_id)

    # -- admission ---------------------------------------------------------------------------------------

    def _start(self, entry: QueueEntry, *, standby: bool = True) -> None:
        fresh = self.store.get(entry.name)
        if fresh is None or fresh.state != EntryState.QUEUED or fresh.cancel_requested:
            return
        from hpo.rerun import sweep_state

        resume = sweep_state(self.storage.state_dir(entry.name), self.storage, entry.name) != "new"
        record, taken, alive = self._standby() if standby else (None, False, False)
        try:
            if record is not None and alive and not taken:  # the runner started ahead takes it
                job_id = record.job_id
                self.store.assign(job_id, Assignment(
                    name=entry.name, args=tune_args(fresh, self.storage_arg, resume), package=entry.package,
                    working_dir=working_dir(self.storage, entry.package) if entry.package else None,
                    data=entry.data, assigned_at=time.time()))
            else:
                job_id = f"hpo-{entry.name}-{int(time.time() * 1000)}"
                runtime_env = {"working_dir": working_dir(self.storage, entry.package)} if entry.package else None
                self.jobs.submit(sweep_command(fresh, self.storage_arg, resume), job_id, runtime_env,
                                 {ROLE_KEY: SWEEP_ROLE, "hpo_sweep": entry.name})
        except Exception as exc:  # noqa: BLE001 - one bad entry never stops the queue
            text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            self._save(fresh.model_copy(update={"state": EntryState.FAILED, "ended_at": time.time(),
                                                "message": f"the job server refused it: {text}"}))
            return
        now = self.store.get(entry.name)
        if now is not None and now.state == EntryState.CANCELLED:  # hpo cancel came while it was submitted
            self.jobs.stop(job_id)
            return
        self._save(fresh.model_copy(update={"state": EntryState.RUNNING, "started_at": time.time(),
                                            "ended_at": None, "job_id": job_id, "stop_sent": False,
                                            "handover": job_id == (record.job_id if record else None)}))


def _mtime(path: Path) -> int | None:
    try:
        return path.stat().st_mtime_ns
    except OSError:
        return None


def progress_fields(live: Snapshot) -> dict[str, object]:
    """The entry's progress fields from a sweep's live snapshot."""
    ended = live.completed + live.stopped_early + live.failed + live.diverged + live.interrupted
    return {"trials_ended": ended, "trials_total": live.planned, "forecast_remaining_s": live.remaining_s_median}


def tune_args(entry: QueueEntry, storage_arg: str, resume: bool) -> list[str]:
    """``hpo``'s arguments for the entry: ``tune`` of the packaged sweep file, on the cluster, under its name."""
    return ["tune", entry.sweep_file, "--name", entry.name, "--storage", storage_arg, "--address", "auto",
            "--quiet", *(["--resume"] if resume else []), *entry.args]


def sweep_command(entry: QueueEntry, storage_arg: str, resume: bool) -> str:
    """The entrypoint of a job of its own for the entry: ``hpo tune`` (:func:`tune_args`) from the job's directory."""
    words = [python(), "-m", "hpo.cli.main", *tune_args(entry, storage_arg, resume)]
    # A packed dataset is read from the job's unpacked copy: its working directory ($PWD in the job's shell).
    packed = [f'--set=data.{key}=file://"$PWD"/{shlex.quote(path)}' for key, path in sorted(entry.data.items())]
    return " ".join([shlex.join(words), *packed])


def main(argv: list[str] | None = None) -> None:
    """The dispatcher's loop (until its job is stopped or the cluster stops)."""
    parser = argparse.ArgumentParser(prog="python -m hpo.queue.dispatcher")
    parser.add_argument("--storage", required=True)
    parser.add_argument("--poll", type=float, default=POLL_S)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    dispatcher = Dispatcher(Storage.parse(args.storage), Jobs(None), args.storage)
    logger.info("hpo queue dispatcher: queue in %s", args.storage)
    while True:
        try:
            dispatcher.tick()
        except Exception:  # a storage brownout or a busy job server: try again on the next pass
            logger.exception("queue pass failed; retrying")
        dispatcher.pause(args.poll)


if __name__ == "__main__":
    main()
