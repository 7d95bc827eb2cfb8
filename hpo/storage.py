"""Where sweeps live: a local directory, a shared mount (``file://``), or object storage (``s3://``, ``gs://``).

Ray Tune's experiment directory, every trial's checkpoints and the datasets hpo writes itself go to the
storage, through pyarrow, so that every node of a cluster reads the same files. State only the driver
uses (the Optuna SQLite study, ``hpo_state.json``, the MLflow spool, ``summary.json``) stays in a local
directory on the driver (:meth:`Storage.state_dir`); for a shared storage it is also copied there
(:meth:`Storage.push_state`) so that a sweep is complete in one place, and copied back
(:meth:`Storage.pull_state`) when a driver on another machine resumes or reports it.

A plain local path is what it always was: ``STORAGE/NAME`` holds everything, and on a cluster of several
nodes it is refused before any trial starts (see :func:`hpo.cluster.check_storage_shared`).

Custom S3 endpoints (MinIO, moto, Ceph) come from the standard ``AWS_ENDPOINT_URL`` (or
``AWS_ENDPOINT_URL_S3``) environment variable, or from the URI itself as pyarrow takes it:
``s3://bucket/runs?endpoint_override=127.0.0.1:9000&scheme=http``.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import os
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit

from hpo.errors import ConfigError
from hpo.object_store import (
    RETRY_ENV,
    gcs_filesystem,
    one_line,
    probe_filesystem,
    retry_limit_s,
    s3_filesystem,
)

log = logging.getLogger(__name__)

#: Where sweeps live unless ``--storage`` says otherwise (relative to the working directory).
DEFAULT_STORAGE = "hpo_runs"
#: Storage URI schemes hpo accepts besides a plain path.
SCHEMES = ("file", "s3", "gs")
#: The query keys of an ``s3://`` URI that pyarrow's ``S3FileSystem`` takes (the rest is refused).
S3_QUERY_KEYS = ("endpoint_override", "scheme", "region", "allow_bucket_creation")
#: Driver-only files of a sweep that a shared storage also keeps (see :meth:`Storage.push_state`).
STATE_FILES = ("summary.json", "hpo_state.json", "optuna.db", "mlflow_spool.jsonl", "report.html", "sweep.yaml")
#: Sub-directory of a shared storage's sweep that holds the copy of the driver-only files.
STATE_COPY = "_driver"


@dataclass(frozen=True)
class Storage:
    """A parsed ``--storage``: where Tune, the trials and hpo's datasets write, and where driver state lives.

    Attributes:
        scheme: ``local`` (a plain path on the driver), ``file`` (a mount every node shares), ``s3`` or ``gs``.
        root: The absolute path (``local``, ``file``) or ``bucket/prefix`` (``s3``, ``gs``), no trailing ``/``.
        query: The ``s3://`` options of the URI (``endpoint_override``, ``scheme`` …), as given.
        state_root: The local directory that holds driver-only state (``STORAGE`` itself when local).
    """

    scheme: str
    root: str
    query: tuple[tuple[str, str], ...] = ()
    state_root: Path = field(default=Path(DEFAULT_STORAGE))

    @classmethod
    def parse(cls, value: str | Path | Storage, *, key: str = "--storage") -> Storage:
        """Parses a local path, ``file:///abs/path``, ``s3://bucket/prefix[?…]`` or ``gs://bucket/prefix``.

        Raises:
            ConfigError: For another scheme, a URI without bucket, or an unknown ``s3://`` option.
        """
        if isinstance(value, Storage):
            return value
        text = str(value).strip()
        if not text:
            raise ConfigError(f"{key}: empty; pass a directory, file:///shared/path, s3://bucket/prefix or gs://…")
        if "://" not in text:
            path = Path(text).expanduser().resolve()
            return cls("local", str(path), (), path)
        parts = urlsplit(text)
        scheme = parts.scheme.lower()
        if scheme not in SCHEMES:
            raise ConfigError(
                f"{key}: {text}: unsupported scheme '{parts.scheme}'; use a directory, file://, s3:// or gs://"
            )
        if scheme == "file":
            if parts.netloc not in ("", "localhost") or not parts.path.startswith("/"):
                raise ConfigError(f"{key}: {text}: a file:// URI takes an absolute path; write file:///shared/runs")
            path = str(Path(parts.path).resolve())
            return cls("file", path, (), _shared_state_root("file", path))
        root = (parts.netloc + parts.path).rstrip("/")
        if not parts.netloc or not re.fullmatch(r"[a-z0-9][a-z0-9.\-_]{1,62}", parts.netloc):
            raise ConfigError(f"{key}: {text}: no valid bucket name; write {scheme}://bucket/prefix")
        query = tuple(parse_qsl(parts.query, keep_blank_values=True))
        unknown = sorted({k for k, _ in query} - set(S3_QUERY_KEYS if scheme == "s3" else ()))
        if unknown:
            allowed = ", ".join(S3_QUERY_KEYS) if scheme == "s3" else "none"
            raise ConfigError(f"{key}: {text}: unknown option '{unknown[0]}'; options allowed: {allowed}")
        return cls(scheme, root, query, _shared_state_root(scheme, root))

    # -- what it is ---------------------------------------------------------------------------------

    @property
    def shared(self) -> bool:
        """True if every node of a cluster can see it (object storage or a mount given as ``file://``)."""
        return self.scheme != "local"

    @property
    def remote(self) -> bool:
        """True for object storage (``s3://``, ``gs://``)."""
        return self.scheme in ("s3", "gs")

    def __str__(self) -> str:
        """The storage as the user writes it (a path, or a URI without its query)."""
        if self.scheme == "local":
            return self.root
        return f"{self.scheme}://{self.root}" if self.remote else f"file://{self.root}"

    def url(self, *parts: str) -> str:
        """A URL under the storage, for datasets and checkpoints: ``file:///…`` or ``s3://bucket/…?query``."""
        path = "/".join([self.root, *(p.strip("/") for p in parts if p)])
        if not self.remote:
            return f"file://{path}"
        query = f"?{urlencode(self.query)}" if self.query else ""
        return f"{self.scheme}://{path}{query}"

    # -- driver-only state --------------------------------------------------------------------------

    def state_dir(self, name: str) -> Path:
        """The local directory of sweep ``name``'s driver-only state (``STORAGE/NAME`` for a local storage)."""
        return self.state_root / name

    def push_state(self, name: str) -> None:
        """Copies sweep ``name``'s driver-only files to ``STORAGE/NAME/_driver`` (shared storage only)."""
        if not self.shared:
            return
        local = self.state_dir(name)
        fs, base = self.filesystem()
        target = f"{base}/{name}/{STATE_COPY}"
        fs.create_dir(target, recursive=True)
        for file_name in STATE_FILES:
            path = local / file_name
            if path.is_file():
                _upload(fs, path, f"{target}/{file_name}")

    def pull_state(self, name: str) -> bool:
        """Copies sweep ``name``'s driver-only files from the storage where the local directory has none.

        Returns:
            True if anything was copied (a sweep started or finished by another driver).
        """
        if not self.shared:
            return False
        import pyarrow.fs as pafs

        local = self.state_dir(name)
        if any((local / f).exists() for f in STATE_FILES):
            return False
        fs, base = self.filesystem()
        copied = False
        for file_name in STATE_FILES:
            remote = f"{base}/{name}/{STATE_COPY}/{file_name}"
            if fs.get_file_info(remote).type != pafs.FileType.File:
                continue
            local.mkdir(parents=True, exist_ok=True)
            with fs.open_input_stream(remote) as src:
                tmp = local / f".{file_name}.tmp"
                tmp.write_bytes(src.read())
                os.replace(tmp, local / file_name)
            copied = True
        return copied

    # -- Tune and pyarrow ----------------------------------------------------------------------------

    def filesystem(self) -> tuple[Any, str]:
        """The pyarrow filesystem and the storage's root path in it (object storage retried for a brownout)."""
        import pyarrow.fs as pafs

        if not self.remote:
            return pafs.LocalFileSystem(), self.root
        _say_if_unreachable(self)
        if self.scheme == "gs":
            return gcs_filesystem(), self.root
        return s3_filesystem(s3_options(dict(self.query))), self.root

    def probe(self) -> None:
        """Asks the object storage once, without retries, whether it answers now.

        Raises:
            OSError: If it does not answer within a few seconds.
        """
        if not self.remote:
            return
        _probe_filesystem(self.scheme, self.query).get_file_info(self.root)

    def tune_storage(self) -> tuple[str, Any]:
        """``(storage_path, storage_filesystem)`` for Tune's ``RunConfig`` (filesystem None when local)."""
        if not self.remote:
            return self.root, None
        fs, root = self.filesystem()
        return root, fs

    def experiment_path(self, name: str) -> str:
        """Tune's experiment directory of sweep ``name``, in the storage's filesystem."""
        return f"{self.root}/{name}"

    def sweep_exists(self, name: str) -> bool:
        """True if the storage holds anything of sweep ``name`` (Tune's experiment state or a state copy)."""
        import pyarrow.fs as pafs

        fs, base = self.filesystem()
        return fs.get_file_info(f"{base}/{name}").type != pafs.FileType.NotFound

    def open_checkpoint(self, uri: str) -> Any:
        """A Ray ``Checkpoint`` for a checkpoint URI or path written in this storage."""
        from ray import tune

        if not self.remote:
            return tune.Checkpoint(uri)
        fs, _ = self.filesystem()
        return tune.Checkpoint(uri.split("://", 1)[-1], filesystem=fs)

    def upload_dir(self, local: Path, *parts: str) -> str:
        """Copies a local directory into the storage at ``parts`` (skipped when local); returns its URL."""
        if not self.shared:
            return f"file://{Path(local).resolve()}"
        import pyarrow.fs as pafs

        fs, base = self.filesystem()
        target = "/".join([base, *parts])
        fs.create_dir(target, recursive=True)
        pafs.copy_files(str(Path(local).resolve()), target, source_filesystem=pafs.LocalFileSystem(),
                        destination_filesystem=fs)
        return self.url(*parts)

    def holds(self, *parts: str) -> bool:
        """True if the file ``parts`` exists in the storage."""
        import pyarrow.fs as pafs

        fs, base = self.filesystem()
        return fs.get_file_info("/".join([base, *parts])).type == pafs.FileType.File


def write_text_atomic(path: Path, text: str) -> Path:
    """Writes ``text`` to ``path`` through a temporary file beside it, so a reader never sees half a file."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp")
    tmp.write_text(text)
    os.replace(tmp, path)
    return path


def checkpoint_uri(checkpoint: Any) -> str:
    """Where a Ray ``Checkpoint`` lies, as a URI the user can open: ``s3://bucket/…``, ``gs://…`` or a path."""
    kind = getattr(getattr(checkpoint, "filesystem", None), "type_name", "local")
    scheme = {"s3": "s3", "gcs": "gs"}.get(kind)
    return f"{scheme}://{checkpoint.path}" if scheme else str(checkpoint.path)


def s3_options(query: dict[str, str]) -> dict[str, Any]:
    """Pyarrow ``S3FileSystem`` options from a URI's query and the ``AWS_ENDPOINT_URL[_S3]`` environment.

    The URI's ``endpoint_override`` wins over the environment; ``scheme`` defaults to the endpoint URL's.
    """
    options: dict[str, Any] = {}
    endpoint = os.environ.get("AWS_ENDPOINT_URL_S3") or os.environ.get("AWS_ENDPOINT_URL")
    if endpoint:
        parts = urlsplit(endpoint if "://" in endpoint else f"https://{endpoint}")
        options["endpoint_override"] = parts.netloc
        options["scheme"] = parts.scheme
    for key, value in query.items():
        options[key] = value.lower() in ("1", "true", "yes") if key == "allow_bucket_creation" else value
    region = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if region and "region" not in options:
        options["region"] = region
    return options


@functools.cache
def _say_if_unreachable(storage: Storage) -> None:
    """Says at once (once per process) when the storage does not answer, rather than only after the retries."""
    try:
        storage.probe()
    except OSError as exc:
        log.warning(
            "%s does not answer (%s); retrying for up to %.0f s (%s)", storage, one_line(exc),
            retry_limit_s(), RETRY_ENV,
        )


@functools.cache
def _probe_filesystem(scheme: str, query: tuple[tuple[str, str], ...]) -> Any:
    """One probe filesystem per storage, made while it answers: making one can itself wait on a stalled store."""
    return probe_filesystem(scheme, s3_options(dict(query)) if scheme == "s3" else {})


def _shared_state_root(scheme: str, root: str) -> Path:
    """The local directory of a shared storage's driver-only state: ``./hpo_runs/_shared/<scheme>-<slug>``."""
    slug = re.sub(r"[^A-Za-z0-9._-]+", "_", root.strip("/"))[:80]
    digest = hashlib.sha1(f"{scheme}://{root}".encode()).hexdigest()[:8]
    return Path(DEFAULT_STORAGE).resolve() / "_shared" / f"{scheme}-{slug}-{digest}"


def _upload(fs: Any, path: Path, target: str) -> None:
    with fs.open_output_stream(target) as out:
        out.write(path.read_bytes())
