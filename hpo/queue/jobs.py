"""The cluster's Ray Jobs server, as the queue uses it: submit, status, logs, stop, and the one dispatcher.

Only the job server's HTTP API is used (``ray.job_submission.JobSubmissionClient``): ``hpo submit`` needs
the dashboard's address (tunnelled, or the one the user gives), never a Ray driver connection. Ray's token
authentication stays on: the client sends the token Ray finds on this machine (``~/.ray/auth_token``), and
no job gets a credential in its ``runtime_env``.
"""

from __future__ import annotations

import hashlib
import shlex
import sys
import time
from dataclasses import dataclass
from typing import Any

from hpo.errors import ConfigError

#: Job states of the job server that are over.
ENDED_JOB_STATES = frozenset({"STOPPED", "SUCCEEDED", "FAILED"})
#: The metadata key that marks hpo's own jobs, and its values.
ROLE_KEY = "hpo_role"
DISPATCHER_ROLE = "queue-dispatcher"
#: The job server's answer while its job agent is not up yet (a head that just started or restarted).
NO_AGENT = "No available agent to submit job"
#: The most seconds a submission waits for the job agent of a head that is starting.
AGENT_WAIT_S = 90.0
#: Seconds between two tries while the job agent is not up.
AGENT_RETRY_S = 1.0
SWEEP_ROLE = "sweep"
STANDBY_ROLE = "standby"


@dataclass(frozen=True)
class JobState:
    """A job as the job server reports it.

    Attributes:
        status: ``PENDING``, ``RUNNING``, ``STOPPED``, ``SUCCEEDED`` or ``FAILED``.
        message: The server's message (why it failed, …).
    """

    status: str
    message: str = ""

    @property
    def ended(self) -> bool:
        """True once the job is over."""
        return self.status in ENDED_JOB_STATES


def dispatcher_id(storage: str) -> str:
    """The submission id prefix of the dispatcher of queue ``storage`` (one per storage on a cluster)."""
    return "hpo-queue-" + hashlib.sha256(storage.encode()).hexdigest()[:10]


class Jobs:
    """The job server of one cluster.

    Args:
        address: The dashboard's address (``http://HOST:8265``); None: the cluster this process runs in
            (inside a job on the head).

    Raises:
        ConfigError: The job server does not answer there.
    """

    def __init__(self, address: str | None = None) -> None:
        from hpo import compat

        compat.enable_ray_token_auth_if_available()
        from ray.job_submission import JobSubmissionClient

        try:
            self._client = JobSubmissionClient(address)
        except (ConnectionError, RuntimeError, ValueError) as exc:
            text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
            raise ConfigError(f"--address: no Ray job server answers at {address} ({text}); start the cluster "
                              "(hpo cluster up) and pass its dashboard address, e.g. http://127.0.0.1:8265 "
                              "through 'ray dashboard CLUSTER.yaml'") from None

    def submit(self, entrypoint: str, submission_id: str, runtime_env: dict[str, Any] | None,
               metadata: dict[str, str]) -> str:
        """Submits a job; returns its submission id.

        A head that just (re)started answers "no available agent" until its job agent is up (seconds, more
        on a loaded head): the submission is tried again for up to :data:`AGENT_WAIT_S`.
        """
        waited_until = time.monotonic() + AGENT_WAIT_S
        while True:
            try:
                return self._client.submit_job(entrypoint=entrypoint, submission_id=submission_id,
                                               runtime_env=runtime_env or None, metadata=metadata)
            except RuntimeError as exc:
                if NO_AGENT not in str(exc) or time.monotonic() >= waited_until:
                    raise
            time.sleep(AGENT_RETRY_S)

    def state(self, job_id: str) -> JobState | None:
        """The job's state, or None if the job server does not know it (a head that restarted forgot it)."""
        try:
            info = self._client.get_job_info(job_id)
        except RuntimeError as exc:
            if "does not exist" in str(exc) or "404" in str(exc):
                return None
            raise
        return JobState(str(info.status.value if hasattr(info.status, "value") else info.status),
                        info.message or "")

    def logs(self, job_id: str) -> str:
        """The job's output so far."""
        return self._client.get_job_logs(job_id)

    def follow(self, job_id: str) -> Any:
        """An async iterator of the job's output as it comes, until the job ends."""
        return self._client.tail_job_logs(job_id)

    def stop(self, job_id: str) -> bool:
        """Asks the job server to stop a job (SIGTERM to its entrypoint, then SIGKILL)."""
        return bool(self._client.stop_job(job_id))

    def listed(self) -> list[Any]:
        """Every job the server knows (``JobDetails``)."""
        return list(self._client.list_jobs())

    def ensure_dispatcher(self, storage: str) -> str:
        """Starts the dispatcher of queue ``storage`` on the head unless one runs; returns its submission id.

        Two callers at once start one: both try the same submission id and the server refuses the second.
        """
        prefix = dispatcher_id(storage)
        ours = [j for j in self.listed() if (j.submission_id or "").startswith(prefix)]
        for job in ours:
            if str(getattr(job.status, "value", job.status)) not in ENDED_JOB_STATES:
                return job.submission_id
        submission_id = f"{prefix}-{len(ours) + 1}"
        entrypoint = shlex.join(["python", "-m", "hpo.queue.dispatcher", "--storage", storage])
        try:
            self.submit(entrypoint, submission_id, None, {ROLE_KEY: DISPATCHER_ROLE})
        except RuntimeError as exc:
            if "already exists" not in str(exc):
                raise
        return submission_id


def python() -> str:
    """The Python that runs this process (the dispatcher's, on the head: the sweeps' jobs run it too)."""
    return sys.executable
