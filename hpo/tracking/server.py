"""A real ``mlflow server`` process (for ``hpo ui`` and tests) and the reachability check of a server URI.

The server is started in its own session, so its whole process group (uvicorn and its workers) can be
stopped by the process group id of the process we started, never by name.
"""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path

from hpo.config.tracking_uri import masked
from hpo.errors import ConfigError, HpoError
from hpo.tracking.store import prepare_sqlite_store

#: Server environment defaults (the user's own values win): quiet, and no GenAI job runner (six
#: huey consumer processes that sweeps never use).
SERVER_ENV = {"MLFLOW_LOGGING_LEVEL": "WARNING", "MLFLOW_SERVER_ENABLE_JOB_EXECUTION": "false"}
#: Seconds a preflight waits for ``/health`` of a tracking server.
PREFLIGHT_TIMEOUT_S = 5.0


def free_port(host: str = "127.0.0.1") -> int:
    """A TCP port that is free on ``host`` right now."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])


def health(url: str, timeout: float = PREFLIGHT_TIMEOUT_S) -> str | None:
    """Asks ``URL/health`` once.

    Returns:
        None if the server answered OK, else why not (one line).
    """
    try:
        with urllib.request.urlopen(f"{url.rstrip('/')}/health", timeout=timeout) as response:
            body = response.read(64).decode(errors="replace").strip()
            return None if response.status == 200 else f"HTTP {response.status} {body}"
    except urllib.error.HTTPError as exc:
        return f"HTTP {exc.code} {exc.reason}"
    except (urllib.error.URLError, OSError) as exc:
        reason = getattr(exc, "reason", exc)
        return str(reason) or type(exc).__name__


def check_reachable(uri: str, source: str) -> None:
    """Preflight for an ``http(s)://`` tracking URI: the server must answer ``/health``.

    Raises:
        ConfigError: The server is unreachable (one line, before anything has started).
    """
    if not uri.startswith(("http://", "https://")):
        return
    problem = health(uri)
    if problem is not None:
        raise ConfigError(
            f"{source}: tracking.mlflow_uri: MLflow server {masked(uri)} is unreachable ({problem}); "
            "start it (hpo ui --port N, or mlflow server) or use a sqlite:/// URI"
        )


class MlflowServer:
    """One ``mlflow server`` process on 127.0.0.1, started in its own process group.

    Args:
        backend_uri: Backend store (e.g. ``sqlite:////abs/mlflow.db``).
        artifacts_dir: Where the server keeps artifacts it is sent.
        port: Port to listen on (None: a free one).
        host: Interface (127.0.0.1 by default).
        workers: Uvicorn workers.
        log_path: File for the server's output (None: discarded).
    """

    def __init__(
        self,
        backend_uri: str,
        artifacts_dir: Path,
        port: int | None = None,
        host: str = "127.0.0.1",
        workers: int = 1,
        log_path: Path | None = None,
    ) -> None:
        self.backend_uri = backend_uri
        self.artifacts_dir = Path(artifacts_dir).resolve()
        self.host = host
        self.port = port or free_port(host)
        self.workers = workers
        self.log_path = log_path
        self.proc: subprocess.Popen[bytes] | None = None

    @property
    def url(self) -> str:
        """The server's base URL."""
        return f"http://{self.host}:{self.port}"

    @property
    def pid(self) -> int | None:
        """PID of the server process (also its process group id)."""
        return self.proc.pid if self.proc else None

    def command(self) -> list[str]:
        """The command line that starts the server."""
        return [
            sys.executable,
            "-m",
            "mlflow",
            "server",
            "--backend-store-uri",
            self.backend_uri,
            "--artifacts-destination",
            self.artifacts_dir.as_uri(),
            "--host",
            self.host,
            "--port",
            str(self.port),
            "--workers",
            str(self.workers),
        ]

    def start(self, timeout: float = 120.0) -> MlflowServer:
        """Starts the server and waits until ``/health`` answers.

        Raises:
            HpoError: The server exited or did not become healthy within ``timeout`` seconds.
        """
        self.artifacts_dir.mkdir(parents=True, exist_ok=True)
        prepare_sqlite_store(self.backend_uri)
        out = open(self.log_path, "ab") if self.log_path else subprocess.DEVNULL
        env = {**SERVER_ENV, **os.environ}
        try:
            self.proc = subprocess.Popen(
                self.command(),
                stdout=out,
                stderr=subprocess.STDOUT,
                stdin=subprocess.DEVNULL,
                start_new_session=True,
                env=env,
            )
        finally:
            if out is not subprocess.DEVNULL:
                out.close()
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if self.proc.poll() is not None:
                raise HpoError(
                    f"mlflow server exited with code {self.proc.returncode} before it was healthy"
                    + (f"; see {self.log_path}" if self.log_path else "")
                )
            if health(self.url, timeout=2.0) is None:
                return self
            time.sleep(0.5)
        self.stop()
        raise HpoError(f"mlflow server on {self.url} not healthy after {timeout:.0f} s")

    def stop(self, timeout: float = 15.0) -> None:
        """Stops the server's process group (SIGTERM, then SIGKILL after ``timeout``) and reaps it."""
        if self.proc is None:
            return
        pgid = self.proc.pid  # start_new_session: the group id is the leader's pid
        for sig in (signal.SIGTERM, signal.SIGKILL):
            try:
                os.killpg(pgid, sig)
            except ProcessLookupError:
                break
            try:
                self.proc.wait(timeout=timeout)
            except subprocess.TimeoutExpired:
                continue
            if not _group_alive(pgid):
                break
            time.sleep(0.5)
        self.proc.poll()

    def __enter__(self) -> MlflowServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()


def _group_alive(pgid: int) -> bool:
    try:
        os.killpg(pgid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True
