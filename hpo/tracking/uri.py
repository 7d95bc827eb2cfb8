"""Tracking URIs: which kind of MLflow store a URI names, made absolute so every process agrees on it."""

from __future__ import annotations

import os
from pathlib import Path

#: Plain paths with these suffixes are sqlite databases; any other plain path is a file store directory.
SQLITE_SUFFIXES = (".db", ".sqlite", ".sqlite3")


def normalize_uri(uri: str) -> str:
    """Makes relative ``sqlite:///x.db`` and plain paths absolute, so every process agrees on them.

    A plain path ending in ``.db``/``.sqlite`` becomes a sqlite URI; any other plain path a ``file://``
    store directory; ``http(s)://`` URIs are kept (without a trailing slash).
    """
    if uri.startswith("sqlite:///") and not uri.startswith("sqlite:////"):
        return "sqlite:///" + os.path.abspath(uri[len("sqlite:///") :])
    if "://" not in uri:
        path = os.path.abspath(os.path.expanduser(uri))
        return ("sqlite:///" if path.endswith(SQLITE_SUFFIXES) else "file://") + path
    if uri.startswith(("http://", "https://")):
        return uri.rstrip("/")
    return uri


def is_server(uri: str) -> bool:
    """True for the URI of a tracking server (``http://host:port``)."""
    return uri.startswith(("http://", "https://"))


def is_local(uri: str) -> bool:
    """True for stores this process writes itself (sqlite, file directory)."""
    return uri.startswith(("sqlite:", "file:"))


def local_store_dir(uri: str) -> Path | None:
    """The directory a local store of a normalized URI writes in, or None (a server, a remote database).

    ``sqlite:////abs/mlflow.db`` → ``/abs``; ``file:///abs/mlruns`` → ``/abs/mlruns``.
    """
    if uri.startswith("sqlite:///"):
        return Path(uri[len("sqlite:///") :]).parent
    if uri.startswith("file://"):
        return Path(uri[len("file://") :])
    return None
