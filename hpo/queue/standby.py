"""The queue's standby runner: one sweep job the dispatcher starts ahead, warm, for the next admitted sweep.

Most of a sweep job's start-up does not depend on its sweep: the job's process, then hpo's, Ray Tune's and
MLflow's imports (more than half the time from submission to the first trial on a busy head). The
dispatcher keeps ONE job of each queue started ahead (``python -m hpo.queue.standby --storage STORAGE --job
ID``), whatever the length of the queue; it does that part and waits for the dispatcher to hand it a sweep
(:class:`hpo.queue.entry.Assignment`, ``STORAGE/_queue/standby/ID.json``, polled every ``POLL_S``). It claims
it (``STORAGE/_queue/standby/ID.claim.json``, :class:`hpo.queue.entry.Claim`) before anything else, then
unpacks the sweep's package into its own directory, makes it its working directory and its Ray workers'
``runtime_env`` ``working_dir`` (what a job submitted with the package gets), and runs the ``hpo`` command
the sweep's own job would run (``python -m hpo.cli.main tune …``) in this process (by the module's
name: the runner is that command started ahead), so that from then on
the job is the sweep's: its output is ``hpo logs``, its end is the sweep's end, ``hpo cancel`` stops it as
it stops any sweep. The dispatcher then starts the next standby.

A runner waits at most ``IDLE_S`` (``--idle``) and then ends without a sweep; the dispatcher starts another.
A sweep handed over just as the runner ended is never lost nor run twice: the dispatcher queues it again
once the runner's job has ended without its claim (:func:`hpo.queue.admission.handover_step`).

Run as ``python -m hpo.queue.standby --storage STORAGE --job ID``.
"""

from __future__ import annotations

import argparse
import importlib
import json
import logging
import os
import sys
import tempfile
import time
from pathlib import Path

from hpo import _env
from hpo.queue.entry import Assignment, Claim
from hpo.queue.package import read_package, remove_unpacked, unpack
from hpo.queue.store import QueueStore
from hpo.storage import Storage

logger = logging.getLogger(__name__)

#: Seconds between two looks for a sweep handed over.
POLL_S = 0.2
#: Seconds a runner waits for a sweep before it ends (the dispatcher starts a new one).
IDLE_S = 900.0
#: Tries to write the claim (a storage brownout) before the runner gives the sweep back by ending.
CLAIM_TRIES = 5
#: What the standby imports ahead: what ``hpo tune`` imports before its first trial (the command's own
#: module by name, as ``python -m`` will run it; TensorFlow is imported by the trials' workers, not here).
WARM_MODULES = (
    "hpo.cli.main", "hpo.api", "hpo.sweep", "hpo.tuner", "hpo.preflight", "hpo.rerun", "hpo.summary",
    "hpo.progress.setup", "hpo.progress.monitor", "hpo.progress.placement_watch", "hpo.tracking.kinds",
    "hpo.tracking.sweep_tracker", "hpo.search.searchers", "hpo.search.schedulers", "hpo.trial.driver",
    "hpo.trial.simulated", "hpo.trial.simtime", "hpo.cluster.fit", "hpo.cluster.visibility", "hpo.data",
    "ray.tune", "ray.job_submission", "optuna", "mlflow", "mlflow.tracking", "mlflow.store.tracking.sqlalchemy_store",
    # what a sweep's driver still imported between its checks and its first trial (measured, not sweep-specific)
    "grpc.aio", "alembic.command", "sqlalchemy.dialects.sqlite", "pydantic.v1", "ray.train.trainer", "pyarrow.json",
    "ray._private.arrow_serialization", "hpo.trial.retention",
)
#: The variable through which Ray's job server gives a job's driver its job config (its ``runtime_env``).
JOB_CONFIG_ENV = "RAY_JOB_CONFIG_JSON_ENV_VAR"


def warm(modules: tuple[str, ...] = WARM_MODULES) -> list[str]:
    """Imports ``modules``; returns those that failed (the sweep then imports, or reports, them itself)."""
    failed = []
    for name in modules:
        try:
            importlib.import_module(name)
        except Exception:  # noqa: BLE001 - a missing extra is the sweep's to report, in its own words
            failed.append(name)
    return failed


def job_config(current: str | None, working_dir: str | None) -> str:
    """The job config (JSON) of ``current`` with ``working_dir`` as its ``runtime_env``'s working directory.

    Ray's driver reads it at ``ray.init`` (uploading a local package, passing a URI through), so the
    sweep's workers get the package as a job submitted with it gives them.
    """
    config = json.loads(current) if current else {}
    if working_dir is not None:
        config["runtime_env"] = {**(config.get("runtime_env") or {}), "working_dir": working_dir}
    return json.dumps(config)


def command(assignment: Assignment, cwd: Path) -> list[str]:
    """``hpo``'s arguments for ``assignment`` in working directory ``cwd`` (packed datasets read from there)."""
    packed = [f"--set=data.{key}=file://{cwd}/{path}" for key, path in sorted(assignment.data.items())]
    return [*assignment.args, *packed]


def wait(store: QueueStore, job_id: str, poll_s: float = POLL_S, idle_s: float = IDLE_S) -> Assignment | None:
    """Waits until the dispatcher hands standby ``job_id`` a sweep, for at most ``idle_s``.

    Returns:
        The sweep handed over, or None: none came in ``idle_s`` (the runner ends; one handed over after
        its last look is given back by the dispatcher once it sees the job ended without a claim).
    """
    deadline = time.monotonic() + idle_s
    while True:
        try:
            found = store.assignment(job_id)
        except Exception:  # a storage brownout: look again
            logger.exception("reading the queue failed; retrying")
            found = None
        if found is not None:
            return found
        if time.monotonic() >= deadline:
            return None
        time.sleep(poll_s)


def claim(store: QueueStore, job_id: str, assignment: Assignment, tries: int = CLAIM_TRIES) -> bool:
    """Claims the sweep handed to runner ``job_id``, before anything of it runs; False: it could not be written.

    Without its claim the runner must not run the sweep: the dispatcher queues it again once this job ends.
    """
    for attempt in range(tries):
        try:
            store.claim(Claim(job_id=job_id, name=assignment.name, claimed_at=time.time()))
            return True
        except Exception:  # a storage brownout: try again, then give the sweep back
            logger.exception("claiming %s failed (try %d of %d)", assignment.name, attempt + 1, tries)
            if attempt + 1 < tries:
                time.sleep(min(2.0 ** attempt, 10.0))
    return False


def run(assignment: Assignment, content: bytes | None, workdir: Path) -> None:
    """Runs the sweep of ``assignment`` in this process from ``workdir``; exits with ``hpo``'s status.

    Args:
        assignment: The sweep handed over.
        content: Its package (None: nothing packaged).
        workdir: An empty directory: the package is unpacked there and the sweep runs there.
    """
    if content is not None:
        unpack(content, workdir)
    os.chdir(workdir)
    sys.dont_write_bytecode = True  # the unpacked copy stays as unpacked (it is removed file by file)
    sys.path.insert(0, str(workdir))  # the user's model module, as `python -m` run from there finds it
    os.environ[JOB_CONFIG_ENV] = job_config(os.environ.get(JOB_CONFIG_ENV), assignment.working_dir)
    sys.argv = ["hpo", *command(assignment, workdir)]
    print(f"hpo queue: {assignment.name}: hpo {' '.join(sys.argv[1:])}", flush=True)
    importlib.import_module("hpo.cli.main").main()  # what the `hpo` command runs


def main(argv: list[str] | None = None) -> None:
    """Warms up, waits for a sweep, claims it and runs it (the job ends with it); ends idle after ``--idle``."""
    parser = argparse.ArgumentParser(prog="python -m hpo.queue.standby")
    parser.add_argument("--storage", required=True)
    parser.add_argument("--job", required=True, help="this job's submission id")
    parser.add_argument("--poll", type=float, default=POLL_S)
    parser.add_argument("--idle", type=float, default=IDLE_S, help="seconds to wait for a sweep before ending")
    args = parser.parse_args(argv)
    _env.apply()  # one of hpo's own processes: set up before Ray or anything else is imported
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(message)s")
    failed = warm()
    if failed:
        logger.info("hpo queue standby: not imported ahead: %s", ", ".join(failed))
    storage = Storage.parse(args.storage)
    store = QueueStore(storage)
    assignment = wait(store, args.job, args.poll, args.idle)
    if assignment is None:
        logger.info("hpo queue standby: no sweep in %.0f s; ending (the queue starts another)", args.idle)
        return
    if not claim(store, args.job, assignment):
        logger.error("hpo queue standby: %s not claimed; the queue runs it again", assignment.name)
        sys.exit(1)
    content = read_package(storage, assignment.package) if assignment.package else None
    workdir = Path(tempfile.mkdtemp(prefix="hpo-sweep-"))
    try:
        run(assignment, content, workdir)
    finally:
        os.chdir(tempfile.gettempdir())
        remove_unpacked(content, workdir)  # what it unpacked; anything the sweep wrote there stays


if __name__ == "__main__":
    main()
