"""Dataset URLs and the filesystems behind them (``file://`` locally, ``s3://``/``gs://`` through fsspec)."""

from __future__ import annotations

import hashlib
import json
from pathlib import Path
from typing import Any

from hpo.errors import ConfigError

#: URL scheme → (fsspec protocol, the package that provides it).
REMOTE_SCHEMES: dict[str, tuple[str, str]] = {
    "s3": ("s3", "s3fs"),
    "s3a": ("s3", "s3fs"),
    "gs": ("gs", "gcsfs"),
    "gcs": ("gs", "gcsfs"),
    "hdfs": ("hdfs", "pyarrow"),
}


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
    scheme, sep, rest = url.partition("://")
    if not sep or scheme not in REMOTE_SCHEMES:
        raise ConfigError(f"{url}: {key}: unsupported URL scheme '{scheme}'; use file://, s3:// or gs://")
    protocol, package = REMOTE_SCHEMES[scheme]
    try:
        return fsspec.filesystem(protocol), rest
    except ImportError:
        raise ConfigError(
            f"{url}: {key}: reading {scheme}:// needs the '{package}' package, which is not installed; "
            f"run 'pip install {package}'"
        ) from None


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
