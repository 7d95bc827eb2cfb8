"""Process environment every hpo process needs before TensorFlow or Ray is imported.

Why each variable is needed: Horovod's Keras needs Keras 2 (tf-keras),
Ray's pyarrow floor must be waived for Petastorm, and the start-up noise of TF is silenced.
"""

from __future__ import annotations

import contextlib
import logging
import os
import warnings
from collections.abc import Iterator

#: Variables set (if the user has not set them) in the driver and passed to every Ray worker.
WORKER_ENV: dict[str, str] = {
    "TF_USE_LEGACY_KERAS": "1",
    "TF_CPP_MIN_LOG_LEVEL": "3",
    "TF_ENABLE_ONEDNN_OPTS": "0",
    "RAY_DISABLE_PYARROW_VERSION_CHECK": "1",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_TRAIN_V2_ENABLED": "0",
    "RAY_AIR_NEW_OUTPUT": "0",
    "MLFLOW_LOGGING_LEVEL": "WARNING",
    # Let a stopped trial's thread hand its warm workers back before Tune gives up reusing the actor.
    "TUNE_FUNCTION_THREAD_TIMEOUT_S": "20",
    # Save the experiment state often, so a crashed sweep resumes close to where it was.
    "TUNE_GLOBAL_CHECKPOINT_S": "2",
    "PYTHONWARNINGS": "ignore::FutureWarning,ignore::DeprecationWarning",
    # Object storage rides out a brownout (hpo.object_store): the driver's limit reaches every worker, and
    # boto3 (MLflow's S3 artifacts) retries in botocore's standard mode for as long (AWS_MAX_ATTEMPTS below).
    "HPO_STORAGE_RETRY_S": "600",
    "AWS_RETRY_MODE": "standard",
}


def worker_env() -> dict[str, str]:
    """The hpo variables as Ray workers get them (``runtime_env``): the user's own values win."""
    env = {key: os.environ.get(key, value) for key, value in WORKER_ENV.items()}
    env["AWS_MAX_ATTEMPTS"] = os.environ.get("AWS_MAX_ATTEMPTS") or str(_storage_attempts(env["HPO_STORAGE_RETRY_S"]))
    return env


def _storage_attempts(limit: str) -> int:
    """The botocore attempts for a retry limit (an unreadable limit: the default; hpo.object_store says why)."""
    from hpo.object_store import DEFAULT_RETRY_S, attempts_for

    try:
        return attempts_for(max(0.0, float(limit)))
    except ValueError:
        return attempts_for(DEFAULT_RETRY_S)


def apply() -> dict[str, str]:
    """Sets up one of hpo's own processes (the CLI, a worker): environment, warning filters, log levels.

    The user's own values of the variables are kept. Library callers use :func:`applied` instead, which
    undoes everything when the sweep ends.

    Returns:
        The effective values of the hpo variables, for Ray's ``runtime_env``.
    """
    for key, value in worker_env().items():
        os.environ.setdefault(key, value)
    warnings.filterwarnings("ignore", category=FutureWarning)
    warnings.filterwarnings("ignore", category=DeprecationWarning, module="horovod")
    logging.getLogger("alembic").setLevel(logging.WARNING)
    if not os.environ.get("HPO_DEBUG"):
        # A failed trial is reported in one line by hpo (and kept in summary.json); Tune's traceback
        # for it is shown with HPO_DEBUG=1.
        logging.getLogger("ray.tune").setLevel(logging.CRITICAL)
    return worker_env()


@contextlib.contextmanager
def applied() -> Iterator[dict[str, str]]:
    """:func:`apply` for the duration of a block (a sweep run from Python), then the caller's process as it was.

    The environment variables, warning filters and log levels (Optuna's verbosity included) are put back.

    Yields:
        The effective values of the hpo variables.
    """
    added = [key for key in (*WORKER_ENV, "AWS_MAX_ATTEMPTS") if key not in os.environ]
    loggers = {name: logging.getLogger(name).level for name in (*_LOGGERS, *_SWEEP_LOGGERS)}
    with warnings.catch_warnings():
        try:
            yield apply()
        finally:
            for key in added:
                os.environ.pop(key, None)
            for name, level in loggers.items():
                logging.getLogger(name).setLevel(level)


#: Loggers :func:`apply` quiets.
_LOGGERS = ("alembic", "ray.tune")
#: Loggers a sweep sets the level of while it runs (Optuna's verbosity: the Optuna searchers set it to WARNING),
#: put back by :func:`applied` as well.
_SWEEP_LOGGERS = ("optuna",)
