"""Ending an ``hpo`` command: Python's exit steps, then the process ends without the interpreter's teardown.

After a sweep, CPython's teardown of the interpreter (the modules of TensorFlow, Ray and MLflow and their
native libraries) took about 2 s of a 20 s ``hpo tune`` command on a 2-core machine, after everything the
command writes was written. :func:`end` runs every step of Python's own exit that can write something, in
Python's order (the threading module's exit callbacks and the non-daemon threads, then the ``atexit``
handlers: Ray's shutdown, logging's flush, the journal's ``exit`` event), flushes the standard streams and
ends the process with the command's exit status. The journal's ``exit`` event is then the command's end
as the user's clock sees it, which is what the plan learns (:mod:`hpo.plan.history`).
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn


def status_of(code: object) -> int:
    """The exit status Python gives ``sys.exit(code)``: None → 0, an int → itself, anything else → 1."""
    if code is None:
        return 0
    if isinstance(code, int) and not isinstance(code, bool):
        return code & 0xFF
    return 1


def end(code: object) -> NoReturn:
    """Ends this process as ``sys.exit(code)`` would, without the interpreter's teardown.

    Args:
        code: What ``SystemExit`` carried: None, an exit status, or a message (printed to stderr, status 1).
    """
    from hpo import compat

    if code is not None and not isinstance(code, int):
        print(code, file=sys.stderr)
    status = status_of(code)
    try:
        compat.run_python_exit_steps()
    finally:
        for stream in (sys.stdout, sys.stderr):
            try:
                stream.flush()
            except (OSError, ValueError):  # a closed or broken pipe: nothing more can reach it
                pass
        os._exit(status)
