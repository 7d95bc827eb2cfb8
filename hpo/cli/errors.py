"""Maps exceptions to one-line messages and exit codes (0 ok, 2 bad input, 1 runtime failure, 130/143 stopped)."""

from __future__ import annotations

import functools
import os
import shlex
import signal
import sys
from collections.abc import Callable
from pathlib import Path
from typing import Any, TypeVar

import typer

from hpo.errors import ConfigError, HpoError, SweepInterrupted
from hpo.interrupt import exit_code

F = TypeVar("F", bound=Callable[..., Any])


def one_line_errors(func: F) -> F:
    """Decorator for commands: ConfigError → exit 2, other failures → exit 1, one line on stderr.

    A sweep stopped by Ctrl-C or SIGTERM exits 130 or 143 and says how to resume it. ``HPO_DEBUG=1``
    re-raises, so the full traceback is shown.
    """

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except (typer.Exit, typer.Abort):
            raise
        except SweepInterrupted as exc:
            print(f"interrupted: {exc}; no model was registered", file=sys.stderr)
            if exc.summary_path is not None:
                print(f"summary: {exc.summary_path}", file=sys.stderr)
            print(f"resume with: {resume_command(sys.argv, exc)}", file=sys.stderr, flush=True)
            raise typer.Exit(exit_code(exc.signum)) from None
        except KeyboardInterrupt:
            print("interrupted before any trial started", file=sys.stderr)
            raise typer.Exit(exit_code(signal.SIGINT)) from None
        except ConfigError as exc:
            if os.environ.get("HPO_DEBUG"):
                raise
            for line in str(exc).splitlines():  # one line per problem (a sweep file's every problem at once)
                print(f"error: {line}", file=sys.stderr)
            raise typer.Exit(2) from None
        except Exception as exc:
            if os.environ.get("HPO_DEBUG"):
                raise
            kind = "" if isinstance(exc, HpoError) else f"{type(exc).__name__}: "
            text = str(exc).strip().splitlines()
            print(f"error: {kind}{text[0] if text else ''} (HPO_DEBUG=1 shows the traceback)", file=sys.stderr)
            raise typer.Exit(1) from None

    return wrapper  # type: ignore[return-value]


def resume_command(argv: list[str], stopped: SweepInterrupted) -> str:
    """The command line that resumes the stopped sweep.

    ``hpo tune``: the same command with ``--resume`` (without ``--overwrite``); another command (``hpo
    repeat``): ``hpo tune`` on the sweep file every sweep saves beside its summary, with the same storage.
    """
    if len(argv) < 2 or argv[1] != "tune":
        from hpo.repeats import CONFIG_FILE

        where = f"STORAGE/{stopped.name}" if stopped.summary_path is None else str(Path(stopped.summary_path).parent)
        storage = [argv[i + 1] for i, a in enumerate(argv[:-1]) if a == "--storage"]
        tail = ["--storage", storage[-1]] if storage else []
        return shlex.join(["hpo", "tune", f"{where}/{CONFIG_FILE}", "--resume", *tail])
    args = [a for a in argv[1:] if a != "--overwrite"]
    if "--resume" not in args:
        args.append("--resume")
    return shlex.join(["hpo", *args])
