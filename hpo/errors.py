"""Exceptions that hpo raises, and what each one means for the sweep."""

from __future__ import annotations


class HpoError(Exception):
    """Base class of every error hpo raises on purpose."""


class ConfigError(HpoError, ValueError):
    """Bad user input: a sweep file, a dataset, a command-line value.

    The message is one line, ``file: key: problem; fix``; the CLI prints it and exits with code 2.
    """


class TrialFailed(HpoError):
    """One trial failed; the sweep records it and goes on."""


class SweepAborted(HpoError):
    """The sweep itself cannot go on (Ray could not start, storage unwritable, ...)."""


class SweepInterrupted(HpoError):
    """Ctrl-C (SIGINT) or SIGTERM stopped the sweep; what had finished is kept and ``--resume`` continues it.

    Attributes:
        signum: The signal that stopped it (the CLI exits with 128 + ``signum``).
        name: The sweep's name.
        summary_path: Its ``summary.json`` (status ``interrupted``), or None when it stopped at once.
    """

    def __init__(self, signum: int, name: str, summary_path: object = None) -> None:
        how = "stopped at once" if summary_path is None else "interrupted; finished trials and checkpoints are kept"
        super().__init__(f"sweep '{name}' {how}")
        self.signum = signum
        self.name = name
        self.summary_path = summary_path
