"""What a sweep's name already holds in the storage decides how ``hpo tune`` may run it.

- nothing there: a new sweep (``--resume`` is an error: there is nothing to continue);
- a sweep that started and did not finish (Tune's experiment state, the Optuna study or hpo's state file,
  and no ``summary.json`` or one that says ``interrupted``): ``--resume`` continues it; without it, refused;
- a finished sweep (``summary.json``): ``--resume`` reports it as it is and changes nothing (no trial,
  no MLflow run, no model version); without it, refused.

Starting a sweep again under a used name (which drops its Optuna study) needs ``--overwrite``; hpo never
drops a previous study or summary without being told to.
"""

from __future__ import annotations

from pathlib import Path
from typing import Literal

from hpo.errors import ConfigError
from hpo.options import SUMMARY_FILE, RunOptions
from hpo.progress.journal import EVENTS_FILE
from hpo.storage import Storage
from hpo.sweep_summary import SweepSummary

SweepState = Literal["new", "interrupted", "finished"]
#: Files a started sweep leaves in ``STORAGE/NAME`` before it finishes (hpo's, Optuna's and Tune's).
_STARTED = ("hpo_state.json", "optuna.db", "tuner.pkl")


def sweep_state(sweep_dir: Path, storage: Storage | None = None, name: str | None = None) -> SweepState:
    """Whether a sweep's name holds nothing, an unfinished sweep or a finished one.

    Looks in ``sweep_dir`` (the driver's state) and, for a shared storage, in ``STORAGE/NAME``; a shared
    storage's copy of the driver state is fetched first when this driver has none.
    """
    if storage is not None and name is not None:
        storage.pull_state(name)
    summary = sweep_dir / SUMMARY_FILE
    if summary.is_file():
        return "interrupted" if _status(summary) == "interrupted" else "finished"
    if any((sweep_dir / name).exists() for name in _STARTED) or any(sweep_dir.glob("experiment_state*.json")):
        return "interrupted"
    if storage is not None and storage.shared and name is not None and storage.sweep_exists(name):
        return "interrupted"
    return "new"


def _status(summary: Path) -> str:
    """A summary's ``status`` (summaries written before it existed are ``finished``)."""
    try:
        return SweepSummary.read(summary).status
    except ConfigError:
        return "finished"  # unreadable: treated as finished, so nothing is started over it without --overwrite


def check_rerun(name: str, options: RunOptions, source: str) -> SweepState:
    """Applies the rules of the module docstring; changes nothing.

    Args:
        name: The sweep's name.
        options: How it is to run (storage, ``resume``, ``overwrite``).
        source: The sweep file (for error messages).

    Returns:
        What ``STORAGE/NAME`` holds.

    Raises:
        ConfigError: ``--resume`` with nothing to resume; a used name without ``--resume`` or ``--overwrite``.
    """
    sweep_dir = options.sweep_dir(name)
    state = sweep_state(sweep_dir, options.storage, name)
    if options.resume and state == "new":
        raise ConfigError(
            f"{source}: --resume: there is no sweep '{name}' in {options.storage} to resume; "
            "run it without --resume (or pass the --storage it ran with)"
        )
    if not options.resume and state != "new" and not options.overwrite:
        what = "finished" if state == "finished" else "started and did not finish"
        raise ConfigError(
            f"{source}: name: sweep '{name}' {what} in {sweep_dir}; pass --resume to continue it, "
            "--name to start another one, or --overwrite to start it again (its Optuna study is dropped)"
        )
    return state


def prepare_rerun(name: str, options: RunOptions, source: str) -> Path | None:
    """Checks the name (:func:`check_rerun`) and readies its directory for the run.

    Returns:
        The ``summary.json`` of a finished sweep asked to resume (report it; run nothing), else None.
    """
    state = check_rerun(name, options, source)
    path = options.sweep_dir(name) / SUMMARY_FILE
    if state == "finished" and options.resume:
        return path
    if not options.resume:
        # hpo's own files, under --overwrite: the new run has not finished yet, and its journal starts afresh
        for own in (path, options.sweep_dir(name) / EVENTS_FILE):
            if own.is_file():
                own.unlink()
    return None
