"""Object-storage filesystems that ride out a brownout: retries with backoff for minutes, not seconds.

Every read and write hpo and Ray Tune make to ``s3://`` or ``gs://`` (checkpoints, Tune's experiment state,
the driver's state copy, hpo's datasets, the storage probes) goes through the filesystems made here. Their
retries are the libraries' own, configured rather than wrapped by hand:

- ``s3://``: pyarrow's ``S3FileSystem`` with the AWS SDK's standard retry strategy (exponential backoff with
  jitter, at most 20 s between attempts), enough attempts to cover :func:`retry_limit_s`, a connect timeout
  and a low-speed request timeout (a stalled endpoint is retried, a slow upload that still moves is not cut).
  pyarrow drops the retry strategy when it pickles a filesystem (as Ray does to send it to every trial):
  the filesystem made here keeps it.
- ``gs://``: pyarrow's ``GcsFileSystem`` with ``retry_time_limit``.
- datasets read through fsspec (``s3fs``): botocore's standard retry mode with the same number of attempts.

The limit is ``HPO_STORAGE_RETRY_S`` seconds (default :data:`DEFAULT_RETRY_S`). Past it, the operation
raises as it did before; a trial whose checkpoint could not be written then ends as *interrupted*
(:class:`StorageUnavailable`), resumable from the last checkpoint that landed.
"""

from __future__ import annotations

import functools
import math
import os
from datetime import timedelta
from typing import Any

from hpo.errors import ConfigError

#: Environment variable: how long (seconds) a storage operation is retried before it fails.
RETRY_ENV = "HPO_STORAGE_RETRY_S"
#: Default retry limit: long enough for a brownout (throttling, a slow endpoint, a network blip).
DEFAULT_RETRY_S = 600.0
#: Seconds to open a connection before the attempt counts as failed (at most; less for a short limit).
CONNECT_TIMEOUT_S = 10.0
#: Seconds without a byte moving before an attempt counts as failed (a stalled endpoint; at most, as above).
REQUEST_TIMEOUT_S = 30.0
#: The AWS SDKs' standard retry mode waits a random time up to ``min(2 ** attempt, 20)`` seconds between
#: attempts: on average 10 s once the cap is reached. An endpoint that refuses at once fails an attempt in
#: no time, one that hangs in up to :data:`REQUEST_TIMEOUT_S`: the attempts are counted for the former.
_MEAN_BACKOFF_S = 10.0


class StorageUnavailable(OSError):
    """The storage stayed unreachable past the retry limit (the trial stops as interrupted, resumable)."""


def retry_limit_s() -> float:
    """Seconds a storage operation is retried: ``HPO_STORAGE_RETRY_S``, else :data:`DEFAULT_RETRY_S`.

    Raises:
        ConfigError: If the variable is not a number of seconds >= 0.
    """
    raw = os.environ.get(RETRY_ENV, "").strip()
    if not raw:
        return DEFAULT_RETRY_S
    try:
        value = float(raw)
    except ValueError:
        value = -1.0
    if not math.isfinite(value) or value < 0:
        raise ConfigError(
            f"environment: {RETRY_ENV}: {raw!r} is not a number of seconds >= 0; "
            f"set it to e.g. {int(DEFAULT_RETRY_S)} (or unset it for the default)"
        )
    return value


def attempts_for(limit_s: float) -> int:
    """How many attempts of the standard retry mode span ``limit_s`` seconds (at least 3, the SDKs' default)."""
    return max(3, 1 + math.ceil(limit_s / _MEAN_BACKOFF_S))


def _make_s3(options: dict[str, Any], attempts: int) -> Any:
    return _retrying_s3_class()(attempts, **options)


@functools.cache
def _retrying_s3_class() -> type:
    """:class:`RetryingS3FileSystem`, defined on first use (pyarrow is not imported with hpo)."""
    import pyarrow.fs as pafs

    class RetryingS3FileSystem(pafs.S3FileSystem):  # type: ignore[misc]
        """pyarrow's ``S3FileSystem`` with the standard retry strategy, which survives pickling.

        Args:
            attempts: The retry strategy's ``max_attempts``.
            **options: ``S3FileSystem`` keyword options (endpoint, region, timeouts …).
        """

        def __init__(self, attempts: int, **options: Any) -> None:
            super().__init__(retry_strategy=pafs.AwsStandardS3RetryStrategy(max_attempts=attempts), **options)
            self.hpo_options = (dict(options), attempts)

        def __reduce__(self) -> tuple[Any, tuple[Any, ...]]:
            options, attempts = self.hpo_options
            return _make_s3, (options, attempts)

    return RetryingS3FileSystem


def timeouts(limit_s: float) -> tuple[float, float]:
    """``(connect, request)`` timeouts of one attempt for a retry limit of ``limit_s``.

    :data:`CONNECT_TIMEOUT_S` and :data:`REQUEST_TIMEOUT_S`, shorter for a short limit (a tenth of it, at
    least 5 s to answer), so that a hanging store is given up on near the limit, not attempts × timeout later.
    """
    return min(CONNECT_TIMEOUT_S, max(3.0, limit_s / 20)), min(REQUEST_TIMEOUT_S, max(5.0, limit_s / 10))


def s3_filesystem(options: dict[str, Any], limit_s: float | None = None) -> Any:
    """An S3 filesystem for pyarrow ``options`` that retries for ``limit_s`` (default :func:`retry_limit_s`)."""
    limit = retry_limit_s() if limit_s is None else limit_s
    connect, request = timeouts(limit)
    merged = {"connect_timeout": connect, "request_timeout": request, **options}
    return _retrying_s3_class()(attempts_for(limit), **merged)


def gcs_filesystem(limit_s: float | None = None) -> Any:
    """A GCS filesystem that retries for ``limit_s`` (default :func:`retry_limit_s`)."""
    import pyarrow.fs as pafs

    limit = retry_limit_s() if limit_s is None else limit_s
    return pafs.GcsFileSystem(retry_time_limit=timedelta(seconds=limit))


def botocore_config(limit_s: float | None = None) -> dict[str, Any]:
    """``config_kwargs`` for ``s3fs``: botocore's standard retry mode for the same limit, and the timeouts."""
    limit = retry_limit_s() if limit_s is None else limit_s
    connect, request = timeouts(limit)
    return {
        "retries": {"mode": "standard", "max_attempts": attempts_for(limit)},
        "connect_timeout": connect,
        "read_timeout": request,
    }


#: How the one-line reason of a trial that :class:`StorageUnavailable` stopped begins.
STORAGE_LINE_START = "storage unreachable"


def one_line(exc: BaseException, limit: int = 200) -> str:
    """A storage error's text on one line, at most ``limit`` characters (the SDKs' messages span lines)."""
    return " ".join(str(exc).split())[:limit]


def storage_line(epoch: int | None, exc: BaseException) -> str:
    """The one-line reason of a trial stopped because its checkpoint of ``epoch`` could not be written.

    ``epoch`` None: the checkpoint it was to resume from could not be read.
    """
    cause = one_line(exc, 160)
    what = "reading the checkpoint to resume from" if epoch is None else f"writing the checkpoint of epoch {epoch}"
    return (
        f"{STORAGE_LINE_START} for over {retry_limit_s():.0f} s ({RETRY_ENV}) {what} ({cause}); "
        "interrupted: 'hpo tune … --resume' continues it from its last checkpoint"
    )


def error_status(line: str) -> str:
    """``interrupted`` for a trial :class:`StorageUnavailable` stopped (its error line), else ``failed``."""
    return "interrupted" if line.startswith(STORAGE_LINE_START) else "failed"


#: Seconds a storage probe waits for a connection, and for an answer (one attempt, no retries).
PROBE_TIMEOUT_S = 5.0


def probe_filesystem(scheme: str, options: dict[str, Any]) -> Any:
    """A filesystem that fails fast (one attempt, short timeouts): to ask whether the storage answers now."""
    import pyarrow.fs as pafs

    if scheme == "gs":
        return pafs.GcsFileSystem(retry_time_limit=timedelta(seconds=PROBE_TIMEOUT_S))
    merged = {**options, "connect_timeout": PROBE_TIMEOUT_S, "request_timeout": PROBE_TIMEOUT_S}
    return _retrying_s3_class()(1, **merged)
