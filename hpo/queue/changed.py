"""``hpo submit --changed-since REF``: which sweep files to queue for a commit, and why the others are skipped.

A sweep is submitted when, between ``REF`` and ``HEAD``, its sweep file changed, or a file of its model
module (the module file, or anything in the top-level package it belongs to), or a file of a local dataset
it reads (see :class:`hpo.queue.package.SweepInputs`). The rule (:func:`select`) is plain data; the git
questions (:func:`changed_paths`, :func:`short_commit`) run ``git`` in the submitting directory.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path

from hpo.errors import ConfigError
from hpo.queue.package import SweepInputs


@dataclass(frozen=True)
class Choice:
    """One sweep file's verdict.

    Attributes:
        file: The sweep file as given.
        submit: Whether it goes on the queue.
        reason: Why (the changed inputs, or that none changed).
    """

    file: str
    submit: bool
    reason: str


def _touched(path: str, changed: set[str]) -> bool:
    return path in changed or any(c.startswith(path.rstrip("/") + "/") for c in changed)


def select(sweeps: list[tuple[str, SweepInputs]], changed: set[str], ref: str) -> list[Choice]:
    """Each sweep's verdict, in the order given.

    Args:
        sweeps: ``(file as given, its inputs)``; input paths relative to the submitting directory.
        changed: Paths changed between ``ref`` and ``HEAD``, relative to the submitting directory.
        ref: The git reference (for the reasons).
    """
    choices = []
    for file, inputs in sweeps:
        hits = []
        if _touched(inputs.sweep_file, changed):
            hits.append("sweep file")
        hits += [f"model {m}" for m in inputs.model if _touched(m, changed)]
        hits += [f"data.{k} {p}" for k, p in sorted(inputs.data.items()) if _touched(p, changed)]
        if hits:
            choices.append(Choice(file, True, "changed: " + ", ".join(hits)))
        else:
            what = ", ".join(["sweep file", *(f"model {m}" for m in inputs.model),
                              *(f"data.{k} {p}" for k, p in sorted(inputs.data.items()))])
            choices.append(Choice(file, False, f"unchanged since {ref} ({what})"))
    return choices


def _git(root: Path, *args: str) -> str:
    try:
        out = subprocess.run(["git", *args], cwd=root, capture_output=True, text=True, timeout=60)
    except FileNotFoundError:
        raise ConfigError(f"{root}: --changed-since: git is not installed; install it or drop --changed-since") \
            from None
    if out.returncode != 0:
        line = (out.stderr.strip().splitlines() or ["git failed"])[-1]
        raise ConfigError(f"{root}: --changed-since: git {' '.join(args)}: {line}; pass a commit of this repository")
    return out.stdout


def changed_paths(root: Path, ref: str) -> set[str]:
    """Files changed between ``ref`` and ``HEAD``, relative to ``root`` (those outside it left out).

    Raises:
        ConfigError: ``root`` is not in a git repository, or ``ref`` is not a commit of it.
    """
    top = Path(_git(root, "rev-parse", "--show-toplevel").strip()).resolve()
    _git(root, "rev-parse", "--verify", "--quiet", f"{ref}^{{commit}}")
    here = root.resolve()
    paths = set()
    for line in _git(root, "diff", "--name-only", "--no-renames", ref, "HEAD").splitlines():
        if not line.strip():
            continue
        try:
            paths.add((top / line).relative_to(here).as_posix())
        except ValueError:
            continue
    return paths


def short_commit(root: Path) -> str:
    """``HEAD``'s short commit id."""
    return _git(root, "rev-parse", "--short", "HEAD").strip()
