"""Checks of ``tracking.mlflow_uri`` that need no server: the form of the URI, its driver, its directory.

Credentials in a URI (``scheme://user:password@host``) never appear in a message: :func:`masked` hides them.
"""

from __future__ import annotations

import importlib.util
import os
import re
from urllib.parse import urlsplit

#: Database schemes MLflow's SQL store takes → the Python drivers that serve them (any one is enough).
_DRIVERS = {
    "mysql": ("pymysql", "MySQLdb"),
    "postgresql": ("psycopg2", "psycopg", "pg8000"),
    "mssql": ("pyodbc", "pymssql"),
}
_SCHEMES = ("sqlite", "file", "http", "https", "databricks", *_DRIVERS)


def masked(uri: str) -> str:
    """``uri`` with any password replaced by ``***``."""
    return re.sub(r"(://[^:/@]+):[^@/]*@", r"\1:***@", uri)


def _check_plain(uri: str) -> str | None:
    """A URI without ``://``: ``databricks``, a directory path, or ``NAME:…`` with a scheme MLflow does not have."""
    if uri == "databricks":
        return None
    prefix = re.match(r"^([A-Za-z][A-Za-z0-9+.-]*):", uri)
    if prefix is None or len(prefix.group(1)) == 1:  # a path (C:\\ is a Windows drive)
        return None
    scheme = prefix.group(1).split("+", 1)[0].lower()
    if scheme in ("sqlite", "http", "https"):
        return f"'{masked(uri)}' is not a complete URI; use sqlite:///mlflow.db"
    if scheme == "file":
        return None
    return f"'{prefix.group(1)}:' is not an MLflow store; use sqlite:///mlflow.db, a directory or http://host:port"


def check_tracking_uri(uri: str) -> str | None:
    """The problem with ``uri`` (a message with its fix), or None if MLflow could use it.

    Accepted: ``sqlite:///path.db`` (its directory must exist), ``file://`` or a plain path (a store
    directory), ``http(s)://host[:port]``, ``databricks``, and SQL databases whose driver is installed;
    ``NAME:…`` with any other scheme is refused (it is no path either). Whether a local store can be
    written is checked before the sweep (:func:`hpo.preflight.preflight`).
    """
    if not uri.strip():
        return "empty; use sqlite:///mlflow.db or http://host:port"
    if "://" not in uri:
        return _check_plain(uri)
    parts = urlsplit(uri)
    scheme = parts.scheme.split("+", 1)[0].lower()
    if scheme not in _SCHEMES:
        return f"'{parts.scheme}://' is not an MLflow store; use sqlite:///mlflow.db, a directory or http://host:port"
    if scheme in ("http", "https") and not parts.hostname:
        return f"'{masked(uri)}' names no host; use http://host:port"
    if scheme == "sqlite":
        path = uri.split("://", 1)[1]
        if path in ("", "/") or ":memory:" in path:
            return "an in-memory sqlite store keeps nothing after the sweep; name a file, e.g. sqlite:///mlflow.db"
        directory = os.path.dirname(os.path.abspath(path[1:])) if path.startswith("/") else None
        if directory and not os.path.isdir(directory):
            return f"the directory {directory} does not exist; create it or use sqlite:///mlflow.db"
    if scheme in _DRIVERS and not any(importlib.util.find_spec(m) for m in _DRIVERS[scheme]):
        return (f"no {scheme} driver is installed ({' or '.join(_DRIVERS[scheme])}); install one, or use "
                "sqlite:///mlflow.db")
    return None
