"""Maps exceptions to one-line messages and exit codes (0 ok, 2 bad input, 1 runtime failure)."""

from __future__ import annotations

import functools
import os
import sys
from collections.abc import Callable
from typing import Any, TypeVar

import typer

from hpo.errors import ConfigError, HpoError

F = TypeVar("F", bound=Callable[..., Any])


def one_line_errors(func: F) -> F:
    """Decorator for commands: ConfigError → exit 2, other failures → exit 1, one line on stderr.

    ``HPO_DEBUG=1`` re-raises, so the full traceback is shown.
    """

    @functools.wraps(func)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return func(*args, **kwargs)
        except (typer.Exit, typer.Abort, KeyboardInterrupt):
            raise
        except ConfigError as exc:
            if os.environ.get("HPO_DEBUG"):
                raise
            print(f"error: {exc}", file=sys.stderr)
            raise typer.Exit(2) from None
        except Exception as exc:
            if os.environ.get("HPO_DEBUG"):
                raise
            kind = "" if isinstance(exc, HpoError) else f"{type(exc).__name__}: "
            text = str(exc).strip().splitlines()
            print(f"error: {kind}{text[0] if text else ''} (HPO_DEBUG=1 shows the traceback)", file=sys.stderr)
            raise typer.Exit(1) from None

    return wrapper  # type: ignore[return-value]
