"""``hpo stop NAME``: from another terminal, the graceful stop that Ctrl-C gives a running sweep.

The sweep's driver records itself in ``STATE/NAME/driver.json`` (:mod:`hpo.driver`); ``hpo stop`` sends
it SIGTERM, which the driver takes as it takes Ctrl-C (:mod:`hpo.interrupt`): the running trials stop,
each keeping its last checkpoint, the summary says ``interrupted``, ``hpo tune … --resume`` continues it,
and the ``hpo tune`` that ran it exits 143.
"""

from __future__ import annotations

import os
import signal
import time
from typing import Annotated

import typer

from hpo.cli.errors import one_line_errors
from hpo.cli.options import StorageOption
from hpo.driver import DRIVER_FILE, DriverRecord, read_driver
from hpo.errors import ConfigError
from hpo.options import summary_path
from hpo.progress.live import PROGRESS_FILE
from hpo.storage import DEFAULT_STORAGE, Storage

#: What ``hpo stop`` sends: the driver stops as after Ctrl-C (and its ``hpo tune`` exits 143).
STOP_SIGNAL = signal.SIGTERM


def running_record(storage: Storage, name: str) -> DriverRecord:
    """The driver of sweep ``name`` if it runs, on this host or another.

    Raises:
        ConfigError: No such sweep, or it is not running (one line ``NAME: problem; fix``).
    """
    state = storage.state_dir(name)
    record = read_driver(state)
    if record is None:
        if not (state / PROGRESS_FILE).is_file() and not summary_path(storage, name).is_file():
            storage.pull_state(name)
        if not (state / PROGRESS_FILE).is_file() and not summary_path(storage, name).is_file():
            raise ConfigError(f"{name}: no sweep of this name in {storage}; see 'hpo list' or pass --storage")
        raise ConfigError(f"{name}: not running (no {DRIVER_FILE}); nothing to stop, see 'hpo status {name}'")
    if not record.alive():
        raise ConfigError(
            f"{name}: not running (its driver, pid {record.pid}, has ended); 'hpo tune FILE --resume' continues it"
        )
    return record


@one_line_errors
def stop(
    name: Annotated[str, typer.Argument(help="The running sweep.")],
    storage: StorageOption = DEFAULT_STORAGE,
    wait: Annotated[bool, typer.Option("--wait", help="Return once the driver has ended (it writes up first).")]
    = False,
) -> None:
    """Stop a running sweep as Ctrl-C does: running trials keep their last checkpoint; --resume continues it."""
    record = running_record(Storage.parse(storage), name)
    if not record.local:
        raise ConfigError(
            f"{name}: its driver runs on host {record.host} (pid {record.pid}); run 'hpo stop {name}' there"
        )
    os.kill(record.pid, STOP_SIGNAL)
    print(f"{name}: sent {STOP_SIGNAL.name} to its driver (pid {record.pid}); the running trials stop and keep their "
          f"last checkpoint", flush=True)
    if wait:
        while record.alive():
            time.sleep(0.2)
        print(f"{name}: stopped; see 'hpo status {name}'", flush=True)
