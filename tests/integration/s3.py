"""A real S3-compatible endpoint for the storage tests: moto's server on 127.0.0.1, stopped by its PID."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from hpo.tracking import free_port

#: Credentials the moto server accepts (any); every process of a test gets them through its environment.
CREDENTIALS = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_DEFAULT_REGION": "us-east-1"}


@dataclass
class MotoServer:
    """``python -m moto.server`` on ``127.0.0.1:port``, logging to ``log_path``."""

    log_path: Path
    port: int = field(default_factory=free_port)
    proc: subprocess.Popen | None = None
    #: Scheduling priority (``nice``) of the server: a benchmark keeps it below Ray's workers (nice 15), as an
    #: object store on other machines would be.
    nice: int = 0

    @property
    def endpoint(self) -> str:
        return f"http://127.0.0.1:{self.port}"

    def env(self) -> dict[str, str]:
        """What a process needs to reach the server through the standard variables."""
        return {**CREDENTIALS, "AWS_ENDPOINT_URL": self.endpoint}

    def start(self, timeout: float = 60) -> MotoServer:
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        log = self.log_path.open("ab")
        self.proc = subprocess.Popen(
            ["nice", "-n", str(self.nice), sys.executable, "-m", "moto.server", "-H", "127.0.0.1",
             "-p", str(self.port)],
            stdout=log, stderr=subprocess.STDOUT, start_new_session=True, env={**os.environ, **CREDENTIALS},
        )
        deadline = time.time() + timeout
        while time.time() < deadline:
            if self.proc.poll() is not None:
                raise RuntimeError(f"moto server exited: {self.log_path.read_text()[-2000:]}")
            try:
                self.client().list_buckets()
                return self
            except Exception:  # noqa: BLE001 - not up yet
                time.sleep(0.3)
        self.stop()
        raise RuntimeError(f"moto server not up in {timeout} s: {self.log_path.read_text()[-2000:]}")

    def client(self):
        import boto3

        return boto3.client("s3", endpoint_url=self.endpoint, **{
            "aws_access_key_id": CREDENTIALS["AWS_ACCESS_KEY_ID"],
            "aws_secret_access_key": CREDENTIALS["AWS_SECRET_ACCESS_KEY"],
            "region_name": CREDENTIALS["AWS_DEFAULT_REGION"],
        })

    def bucket(self, name: str) -> str:
        """Creates bucket ``name``; returns it."""
        self.client().create_bucket(Bucket=name)
        return name

    def keys(self, bucket: str, prefix: str = "") -> list[str]:
        """Every object key under ``prefix``."""
        out: list[str] = []
        for page in self.client().get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=prefix):
            out += [o["Key"] for o in page.get("Contents", [])]
        return out

    def stop(self) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        os.killpg(self.proc.pid, signal.SIGTERM)
        try:
            self.proc.wait(timeout=15)
        except subprocess.TimeoutExpired:
            os.killpg(self.proc.pid, signal.SIGKILL)
            self.proc.wait(timeout=15)


@contextlib.contextmanager
def moto_with_bucket(log: Path, bucket: str) -> Iterator[MotoServer]:
    """A started moto server with ``bucket``, its credentials and endpoint in ``os.environ`` until the end."""
    server = MotoServer(log).start()
    server.bucket(bucket)
    saved = {k: os.environ.get(k) for k in server.env()}
    os.environ.update(server.env())
    try:
        yield server
    finally:
        server.stop()
        for key, value in saved.items():
            if value is None:
                os.environ.pop(key, None)
            else:
                os.environ[key] = value
