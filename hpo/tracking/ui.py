"""``hpo ui``: a real ``mlflow server`` over a sweep's tracking store, on 127.0.0.1, until Ctrl-C."""

from __future__ import annotations

import signal
import time
from pathlib import Path

from hpo.errors import ConfigError, HpoError
from hpo.tracking.server import MlflowServer
from hpo.tracking.uri import is_local, normalize_uri

#: The store ``hpo ui`` serves when neither ``--mlflow-uri`` nor a sweep names one.
DEFAULT_URI = "sqlite:///mlflow.db"


def store_to_serve(uri: str | None) -> str:
    """The backend store to serve: ``uri`` (``--mlflow-uri`` or a sweep's store) made absolute, else the default.

    Raises:
        ConfigError: A store that is not local (a server is already running), or a sqlite file that does not exist.
    """
    uri = normalize_uri(uri or DEFAULT_URI)
    if not is_local(uri):
        raise ConfigError(f"--mlflow-uri: {uri} is already a server; open it in a browser instead of 'hpo ui'")
    if uri.startswith("sqlite:") and not Path(uri[len("sqlite:///") :]).is_file():
        raise ConfigError(f"{uri}: (file): no MLflow database there; run 'hpo tune' first or pass --mlflow-uri")
    return uri


def _interrupt(signum: int, frame: object) -> None:
    raise KeyboardInterrupt


def serve(uri: str | None, state_root: Path, port: int | None) -> None:
    """Serves a store with ``mlflow server`` on 127.0.0.1 until Ctrl-C or SIGTERM.

    Args:
        uri: The store (``--mlflow-uri``, or the one a sweep's summary names); None: the default.
        state_root: The driver's state directory (the server's artifacts and log go there).
        port: Port on 127.0.0.1 (None: a free one).

    Raises:
        ConfigError: See :func:`store_to_serve`.
        HpoError: The server exited by itself.
    """
    store = store_to_serve(uri)
    server = MlflowServer(store, state_root / "_mlflow_artifacts", port=port, log_path=state_root / "mlflow-server.log")
    state_root.mkdir(parents=True, exist_ok=True)
    # Ctrl-C (even where SIGINT was inherited as ignored, e.g. from a background job) and `kill` stop it.
    signal.signal(signal.SIGINT, _interrupt)
    signal.signal(signal.SIGTERM, _interrupt)
    try:
        server.start()
        print(f"MLflow UI: {server.url}  (store {store}, server pid {server.pid}; Ctrl-C stops it)", flush=True)
        while server.proc is not None and server.proc.poll() is None:
            time.sleep(0.5)
        raise HpoError(f"mlflow server exited with code {server.proc.returncode}; see {server.log_path}")
    except KeyboardInterrupt:
        print("stopping the MLflow server", flush=True)
    finally:
        server.stop()
