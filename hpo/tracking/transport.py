"""Talking to the tracking store: which errors mean "unreachable", and the HTTP client settings hpo uses."""

from __future__ import annotations

import contextlib
import os
from collections.abc import Iterator

from hpo.errors import HpoError
from hpo.tracking.uri import is_server

#: Settings for a tracking server (the user's own values win): our own retries replace MLflow's (7 retries,
#: 120 s timeout), which would stall the sweep for minutes per write while the server is down; and no
#: "View run ... at" lines on stdout for every run MLflow closes.
HTTP_ENV = {
    "MLFLOW_HTTP_REQUEST_MAX_RETRIES": "0",
    "MLFLOW_HTTP_REQUEST_TIMEOUT": "30",
    "MLFLOW_SUPPRESS_PRINTING_URL_TO_STDOUT": "true",
}



class Unreachable(Exception):
    """The tracking server did not answer; the write was spooled."""


class TrackingError(HpoError):
    """An MLflow write failed for a reason other than an unreachable store (reported, not spooled)."""


#: Words of the messages MLflow and its HTTP / database layers give when the store is out of reach.
_CONNECTION_WORDS = (
    "max retries exceeded",
    "connection refused",
    "connection reset",
    "connection aborted",
    "failed to establish a new connection",
    "remote end closed connection",
    "timed out",
    "temporarily unavailable",
    "database is locked",
    "503",
    "502",
    "504",
)


def is_connection_error(exc: BaseException) -> bool:
    """True if ``exc`` says the tracking store could not be reached (worth retrying and spooling).

    Connection errors, timeouts, gateway errors and a locked sqlite database are; anything else (a
    rejected write, an error in hpo's own code such as reading a data sample) is not.
    """
    if isinstance(exc, (ConnectionError, TimeoutError)):
        return True
    try:
        import requests

        if isinstance(exc, (requests.exceptions.ConnectionError, requests.exceptions.Timeout)):
            return True
    except ImportError:  # pragma: no cover - requests comes with MLflow
        pass
    from mlflow.exceptions import MlflowException

    if isinstance(exc, MlflowException) or type(exc).__name__ == "OperationalError":
        text = str(exc).lower()
        return any(word in text for word in _CONNECTION_WORDS)
    return False


@contextlib.contextmanager
def http_settings(uri: str) -> Iterator[None]:
    """:data:`HTTP_ENV` for the duration of one write to a server (the user's own values win), then restored."""
    if not is_server(uri):
        yield
        return
    added = [key for key in HTTP_ENV if key not in os.environ]
    os.environ.update({key: HTTP_ENV[key] for key in added})
    try:
        yield
    finally:
        for key in added:
            os.environ.pop(key, None)
