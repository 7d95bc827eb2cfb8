"""Dataset URLs and the filesystems behind them (``file://`` locally, ``s3://``/``gs://`` through fsspec).

Which remote schemes there are, and the package behind each, is declared by the data sources
(:attr:`hpo.data.sources.DataSource.remote`).
"""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any
from urllib.parse import parse_qsl, urlsplit

from hpo.data.sources import remote_schemes
from hpo.errors import ConfigError
from hpo.object_store import botocore_config, gcs_filesystem, s3_filesystem
from hpo.storage import s3_options


def url_to_path(url: str) -> Path:
    """Returns the local path of a ``file://`` URL."""
    if not url.startswith("file://"):
        raise ConfigError(f"{url}: (url): only file:// URLs are read locally; copy the data or use a file:// URL")
    return Path(url[len("file://") :])


def path_to_url(path: str | Path) -> str:
    """Returns the ``file://`` URL of a local path (made absolute)."""
    return "file://" + str(Path(path).resolve())


def as_url(dest: str | Path) -> str:
    """A URL as given, or a plain local path turned into a ``file://`` URL."""
    dest = str(dest)
    return dest if "://" in dest else path_to_url(dest)


def filesystem(url: str, key: str = "data") -> tuple[Any, str]:
    """The fsspec filesystem and in-filesystem path of a dataset URL.

    Args:
        url: ``file:///…``, ``s3://bucket/…`` or ``gs://bucket/…``.
        key: The sweep-file key the URL came from (for error messages).

    Returns:
        ``(filesystem, path)``.

    Raises:
        ConfigError: For an unknown scheme, or a missing fsspec extra (with the package to install).
    """
    import fsspec

    if url.startswith("file://"):
        return fsspec.filesystem("file"), str(url_to_path(url))
    scheme, rest, query = _split(url, key)
    protocol, package = remote_schemes()[scheme]
    kwargs: dict[str, Any] = {}
    if protocol == "s3":
        options = s3_options(query)
        kwargs["config_kwargs"] = botocore_config()
        if "endpoint_override" in options:
            kwargs["client_kwargs"] = {"endpoint_url": f"{options.get('scheme', 'https')}://{options['endpoint_override']}"}
    try:
        return fsspec.filesystem(protocol, **kwargs), rest
    except ImportError:
        raise ConfigError(
            f"{url}: {key}: reading {scheme}:// needs the '{package}' package, which is not installed; "
            f"run 'pip install {package}'"
        ) from None


def arrow_filesystem(url: str, key: str = "data") -> tuple[Any, str]:
    """The pyarrow filesystem and in-filesystem path of a dataset URL (what Petastorm's reader takes).

    ``s3://`` options come from the URL's query (``?endpoint_override=…&scheme=http``) and the standard
    ``AWS_ENDPOINT_URL`` variable, as for the sweep storage (:func:`hpo.storage.s3_options`).

    Raises:
        ConfigError: For a scheme pyarrow has no filesystem for.
    """
    import pyarrow.fs as pafs

    if url.startswith("file://"):
        return pafs.LocalFileSystem(), str(url_to_path(url))
    scheme, rest, query = _split(url, key)
    protocol = remote_schemes()[scheme][0]
    if protocol == "s3":
        return s3_filesystem(s3_options(query)), rest
    if protocol == "gs":
        return gcs_filesystem(), rest
    return pafs.FileSystem.from_uri(url)


def _split(url: str, key: str) -> tuple[str, str, dict[str, str]]:
    """``(scheme, bucket/path, query)`` of a remote dataset URL."""
    parts = urlsplit(url)
    scheme = parts.scheme.lower()
    if scheme not in remote_schemes():
        raise ConfigError(f"{url}: {key}: unsupported URL scheme '{parts.scheme or url}'; use file://, s3:// or gs://")
    return scheme, parts.netloc + parts.path, dict(parse_qsl(parts.query))


def unreadable(url: str, key: str = "data") -> str | None:
    """Why this process cannot read dataset ``url`` (a file or a directory), or None: the data sources' probe.

    Run on each node of a connected cluster (:mod:`hpo.cluster.visibility`); any failure is the answer.
    """
    try:
        fs, path = arrow_filesystem(url, key)
        if fs.get_file_info(path).type.name == "NotFound":
            return f"{url.split('?')[0]} not found"
    except Exception as exc:  # noqa: BLE001 - any failure to read is the answer
        return f"{type(exc).__name__}: {exc}"
    return None


def parquet_files(fs: Any, path: str) -> list[str]:
    """The Parquet files of a dataset (a directory, searched recursively, or one file), sorted."""
    if fs.isfile(path):
        return [path]
    if not fs.isdir(path):
        return []
    return sorted(f for f in fs.find(path) if f.endswith(".parquet") and not Path(f).name.startswith((".", "_")))


def fingerprint(fs: Any, files: list[str]) -> str:
    """A short hash of the files' names, sizes and modification stamps: changes when the data is rewritten."""
    stamps = []
    for file in files:
        info = fs.info(file)
        stamps.append(
            [file, info.get("size")]
            + [str(info[k]) for k in ("mtime", "ETag", "etag", "md5Hash", "updated", "LastModified") if k in info]
        )
    return hashlib.sha1(json.dumps(stamps).encode()).hexdigest()[:16]
