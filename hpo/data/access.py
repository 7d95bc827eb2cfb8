"""What reading a dataset can fail on outside hpo's own checks, as one-line errors with a fix.

The libraries behind a dataset URL raise their own exceptions: botocore's ``NoCredentialsError`` for
``s3://`` without credentials, pyarrow's ``OSError: Unable to load libjvm`` for ``hdfs://`` without Java,
``ArrowInvalid`` for a file that is not Parquet. :func:`reading` turns each into a
:class:`~hpo.errors.ConfigError` naming the sweep file, the key and what to do.
"""

from __future__ import annotations

import contextlib
import glob
import os
from collections.abc import Iterator

import pyarrow as pa

from hpo.errors import ConfigError

#: Where pyarrow looks for ``libjvm.so`` below ``JAVA_HOME``.
_LIBJVM = ("lib/server/libjvm.so", "jre/lib/*/server/libjvm.so", "lib/*/server/libjvm.so", "libjvm.so")


@contextlib.contextmanager
def reading(url: str, key: str, where: str) -> Iterator[None]:
    """Runs the block that reads dataset ``url`` and reports a library's failure as one line.

    Args:
        url: The dataset URL.
        key: The sweep-file key it came from (``data.train``).
        where: The sweep file (or the URL), first in the message.

    Raises:
        ConfigError: For missing cloud credentials, a missing Java/libhdfs runtime, a denied access or a
            file that is not Parquet.
    """
    if url.lower().startswith("hdfs://"):
        problem = _java_problem()
        if problem:
            raise ConfigError(_hdfs_message(url, key, where, problem))
    try:
        yield
    except pa.ArrowInvalid as exc:
        raise ConfigError(
            f"{where}: {key}: {url} is not a Parquet dataset ({_first_sentence(exc)}); convert the file with "
            "'hpo data convert SOURCE DEST' and point the key at DEST"
        ) from None
    except PermissionError as exc:
        raise ConfigError(f"{where}: {key}: reading {url} was refused ({_first_sentence(exc)}); check the "
                          "credentials or the permissions of the path") from None
    except OSError as exc:
        if "libjvm" in str(exc) or "libhdfs" in str(exc) or "HDFS" in str(exc):
            raise ConfigError(_hdfs_message(url, key, where, _first_sentence(exc))) from None
        raise
    except Exception as exc:
        if any(cls.__name__ in ("NoCredentialsError", "PartialCredentialsError") for cls in type(exc).__mro__):
            raise ConfigError(
                f"{where}: {key}: no credentials to read {url} ({_first_sentence(exc)}); set AWS_ACCESS_KEY_ID and "
                "AWS_SECRET_ACCESS_KEY (or AWS_PROFILE), or copy the data to a file:// URL"
            ) from None
        raise


def _hdfs_message(url: str, key: str, where: str, why: str) -> str:
    return (f"{where}: {key}: reading {url} needs Java and Hadoop's libhdfs ({why}); set JAVA_HOME and HADOOP_HOME "
            "(see pyarrow's HadoopFileSystem), or copy the data to file:// or s3://")


def _java_problem() -> str | None:
    """Why pyarrow would not load Java for HDFS (``JAVA_HOME`` unset, or no ``libjvm.so`` below it), or None.

    Checked before pyarrow tries: its own search prints a line on stderr for every place it looks.
    """
    java_home = os.environ.get("JAVA_HOME")
    if not java_home:
        return "JAVA_HOME is not set"
    if not any(glob.glob(os.path.join(java_home, rel)) for rel in _LIBJVM):
        return f"no libjvm.so below JAVA_HOME={java_home}"
    return None


def _first_sentence(exc: BaseException) -> str:
    """The first line of an exception's message, up to its first full stop, or its type's name."""
    text = (str(exc).strip().splitlines() or [type(exc).__name__])[0]
    return text.split(". ", 1)[0].rstrip(".") or type(exc).__name__
