"""Ctrl-C and SIGTERM during a sweep: the first stops it cleanly, a second at once.

While a sweep runs, :class:`Interruption` holds SIGINT and SIGTERM. The first signal asks Ray Tune to end
as it does after Ctrl-C (:func:`hpo.compat.tune_stop_gracefully`): running trials stop (each keeps the
checkpoint of its last epoch), Tune saves the experiment state, and the sweep writes itself up as
``interrupted``. A signal before Tune's loop runs, or a second one, raises ``KeyboardInterrupt`` at once.
The signal that came first decides the exit code (130 for SIGINT, 143 for SIGTERM).
"""

from __future__ import annotations

import os
import signal
import sys
import threading
from collections.abc import Callable
from types import FrameType, TracebackType
from typing import Any

from hpo import compat

#: Tune's own SIGINT handler stays off while hpo holds the signal (read by ``tune.run`` when it starts).
_TUNE_SIGINT_ENV = "TUNE_DISABLE_SIGINT_HANDLER"
_SIGNALS = (signal.SIGINT, signal.SIGTERM)


class Interruption:
    """Holds SIGINT and SIGTERM for a block (in the main thread; elsewhere it does nothing).

    Attributes:
        signum: The first signal received, or None.
        count: Signals received so far.
    """

    def __init__(self, on_stop: Callable[[], None] | None = None) -> None:
        #: Called once, from the handler, when the first signal asks Tune to stop (before Tune stops trials).
        self.on_stop = on_stop
        self.signum: int | None = None
        self.count = 0
        self._saved: dict[int, Any] = {}
        self._tune_handler: Any = None
        self._env: str | None = None

    @property
    def interrupted(self) -> bool:
        """Whether a signal came."""
        return self.signum is not None

    def __enter__(self) -> Interruption:
        if threading.current_thread() is not threading.main_thread():
            return self
        self._env = os.environ.get(_TUNE_SIGINT_ENV)
        os.environ[_TUNE_SIGINT_ENV] = "1"
        for sig in _SIGNALS:
            self._saved[sig] = signal.getsignal(sig)
            signal.signal(sig, self._handle)
        self._tune_handler = compat.clear_tune_stop_handler()  # an earlier sweep's, in this process
        return self

    def rearm(self) -> None:
        """Takes the signals back after Ray started: its core worker installs a SIGTERM handler that aborts."""
        for sig in self._saved:
            signal.signal(sig, self._handle)

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        for sig, handler in self._saved.items():
            signal.signal(sig, handler)
        if self._saved and hasattr(signal, "SIGUSR1"):
            signal.signal(signal.SIGUSR1, self._tune_handler or signal.SIG_DFL)  # not the handler Tune left
        self._saved.clear()
        if self._env is None:
            os.environ.pop(_TUNE_SIGINT_ENV, None)
        else:
            os.environ[_TUNE_SIGINT_ENV] = self._env

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        self.count += 1
        if self.signum is None:
            self.signum = signum
        if self.count == 1 and self.on_stop is not None:
            self.on_stop()
        if self.count == 1 and compat.tune_stop_gracefully():
            print(
                f"\n{signal.Signals(signum).name}: stopping the running trials (each keeps its last checkpoint); "
                "press Ctrl-C again to stop at once",
                file=sys.stderr,
                flush=True,
            )
            return
        raise KeyboardInterrupt


def exit_code(signum: int) -> int:
    """The shell's exit code for a process a signal stopped: 128 + the signal number (130, 143)."""
    return 128 + signum
