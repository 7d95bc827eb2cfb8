"""A new local sqlite MLflow store, made from a cached copy of MLflow's empty schema.

MLflow builds a new sqlite store by running every schema migration since its first release: about 3 CPU
seconds in every sweep, report or UI that opens a store file that does not exist yet. The empty schema
is the same for every store of one MLflow version, so hpo builds it once per version, with MLflow's own
table set-up, under ``~/.cache/hpo/mlflow`` (``$XDG_CACHE_HOME/hpo`` where that is set) and copies it.
MLflow opens the copy as a store of its own and adds its ``Default`` experiment on first use, as it does
for a store it made. A file that exists is never touched; whatever fails here leaves the store to MLflow.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def cache_root() -> Path:
    """The cache directory of hpo on this machine: ``$XDG_CACHE_HOME/hpo``, else ``~/.cache/hpo``."""
    return Path(os.environ.get("XDG_CACHE_HOME") or Path.home() / ".cache").expanduser() / "hpo"


def prepare_sqlite_store(uri: str) -> bool:
    """Creates the database file of a ``sqlite:///`` store that does not exist yet from the cached schema.

    Args:
        uri: A normalized tracking URI; anything but a sqlite file whose directory exists is left alone.

    Returns:
        True if this call created the file.
    """
    if not uri.startswith("sqlite:///"):
        return False
    path = Path(uri[len("sqlite:///") :])
    if path.exists() or not path.parent.is_dir():
        return False
    try:
        return _copy_new(empty_schema(), path)
    except Exception as exc:  # noqa: BLE001 - any failure only means MLflow builds the store itself
        log.debug("MLflow builds %s itself: %s", path, exc)
        return False


def empty_schema() -> Path:
    """The cached empty store of the installed MLflow, built on first use.

    Raises:
        OSError: If the cache cannot be written.
    """
    import mlflow
    import sqlalchemy

    from hpo import compat

    cached = cache_root() / "mlflow" / f"empty-store-{mlflow.__version__}.db"
    if cached.exists():
        return cached
    cached.parent.mkdir(parents=True, exist_ok=True)
    building = cached.with_name(f".{cached.name}.{os.getpid()}")
    engine = sqlalchemy.create_engine(f"sqlite:///{building}")
    try:
        compat.mlflow_create_tables(engine)
    finally:
        engine.dispose()
    os.replace(building, cached)  # hpo's own cache file; a concurrent build wrote the same schema
    return cached


def _copy_new(source: Path, path: Path) -> bool:
    """Copies ``source`` to ``path`` unless ``path`` appears meanwhile (a hard link never replaces a file)."""
    partial = path.with_name(f".{path.name}.hpo-{os.getpid()}")
    shutil.copyfile(source, partial)
    try:
        os.link(partial, path)
    except FileExistsError:
        return False
    finally:
        partial.unlink()
    return True


def mlflow_client(uri: str) -> Any:
    """An ``MlflowClient`` of ``uri`` (a new sqlite store made from the cached schema first)."""
    from mlflow.tracking import MlflowClient

    prepare_sqlite_store(uri)
    return MlflowClient(tracking_uri=uri)
