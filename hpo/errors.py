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
