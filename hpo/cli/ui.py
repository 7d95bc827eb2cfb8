"""``hpo ui``: a real ``mlflow server`` over a sweep's tracking store, on 127.0.0.1, until Ctrl-C."""

from __future__ import annotations

import signal
import time
from pathlib import Path
from typing import Annotated, Optional

import typer

from hpo.cli.errors import one_line_errors
from hpo.cli.options import StorageOption
from hpo.errors import ConfigError, HpoError
from hpo.storage import DEFAULT_STORAGE, Storage
from hpo.sweep_summary import SweepSummary

DEFAULT_URI = "sqlite:///mlflow.db"


def backend_uri(name: str | None, storage: Storage, mlflow_uri: str | None) -> str:
    """The backend store to serve: ``--mlflow-uri``, else sweep NAME's store (summary.json), else the default.

    Raises:
        ConfigError: No summary for NAME, or a store that is not local (a server is already running).
    """
    from hpo.tracking import is_local, normalize_uri

    if mlflow_uri is None and name is not None:
        mlflow_uri = SweepSummary.load(storage, name).mlflow.uri
    uri = normalize_uri(mlflow_uri or DEFAULT_URI)
    if not is_local(uri):
        raise ConfigError(f"--mlflow-uri: {uri} is already a server; open it in a browser instead of 'hpo ui'")
    if uri.startswith("sqlite:") and not Path(uri[len("sqlite:///") :]).is_file():
        raise ConfigError(f"{uri}: (file): no MLflow database there; run 'hpo tune' first or pass --mlflow-uri")
    return uri


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


@one_line_errors
def ui(
    name: Annotated[Optional[str], typer.Argument(help="Sweep whose store to serve (from its summary).")] = None,
    storage: StorageOption = DEFAULT_STORAGE,
    mlflow_uri: Annotated[
        Optional[str],
        typer.Option("--mlflow-uri", envvar="HPO_MLFLOW_URI", help="Tracking store to serve (sqlite:/// or a path)."),
    ] = None,
    port: Annotated[Optional[int], typer.Option(help="Port on 127.0.0.1 (default: a free one).")] = None,
) -> None:
    """Start the MLflow UI (a real mlflow server) on 127.0.0.1; Ctrl-C stops it."""
    from hpo.tracking import MlflowServer

    where = Storage.parse(storage)
    uri = backend_uri(name, where, mlflow_uri)
    local = where.state_root
    server = MlflowServer(uri, local / "_mlflow_artifacts", port=port, log_path=local / "mlflow-server.log")
    local.mkdir(parents=True, exist_ok=True)
    # Ctrl-C (even where SIGINT was inherited as ignored, e.g. from a background job) and `kill` stop it.
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        server.start()
        print(f"MLflow UI: {server.url}  (store {uri}, server pid {server.pid}; Ctrl-C stops it)", flush=True)
        while server.proc is not None and server.proc.poll() is None:
            time.sleep(0.5)
        raise HpoError(f"mlflow server exited with code {server.proc.returncode}; see {server.log_path}")
    except KeyboardInterrupt:
        print("stopping the MLflow server", flush=True)
    finally:
        server.stop()
