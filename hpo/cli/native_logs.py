"""TensorFlow's start-up lines on stderr, kept from a CLI user unless ``hpo --verbose``.

TensorFlow's C++ libraries log through absl as they load ("WARNING: All log messages before
absl::InitializeLog() is called are written to STDERR", "I0000 … cudart_stub.cc:31] Could not find cuda
drivers on your machine …", the oneDNN and CPU-instruction notes). They write to file descriptor 2 before
Python's logging exists, and neither ``TF_CPP_MIN_LOG_LEVEL`` nor ``GLOG_minloglevel`` stops them
(measured with TensorFlow 2.21). So the first ``import tensorflow`` of a CLI process runs with descriptor
2 sent to a temporary file; afterwards every line of it that is not such an informational start-up line
(errors, Python warnings, anything else) is written to stderr as it was.
"""

from __future__ import annotations

import contextlib
import importlib.abc
import importlib.machinery
import os
import re
import sys
import tempfile
from collections.abc import Iterator
from types import ModuleType
from typing import Any

#: The modules whose first import is quieted (the top-level package: its submodules load inside it).
QUIETED = ("tensorflow",)
#: A start-up line to drop: absl's preamble, an absl INFO/WARNING line, or the CPU-instruction note's tail.
NOISE = re.compile(
    r"^(WARNING: All log messages before absl::InitializeLog\(\) is called are written to STDERR"
    r"|[IW]\d{4} [\d:.]+\s+\d+ [\w.]+:\d+\] .*"
    r"|To enable the following instructions: .*in other operations, rebuild TensorFlow .*)$"
)


def is_noise(line: str) -> bool:
    """True for a TensorFlow start-up line that a CLI user need not see (absl INFO/WARNING, its preamble)."""
    return NOISE.match(line.rstrip("\r\n")) is not None


@contextlib.contextmanager
def filtered_stderr() -> Iterator[None]:
    """Sends file descriptor 2 to a temporary file for the block, then writes back its lines but the noise."""
    sys.stderr.flush()
    saved = os.dup(2)
    with tempfile.TemporaryFile(mode="w+b") as capture:
        os.dup2(capture.fileno(), 2)
        try:
            yield
        finally:
            with contextlib.suppress(Exception):
                sys.stderr.flush()
            os.dup2(saved, 2)
            os.close(saved)
            capture.seek(0)
            kept = [line for line in capture.read().decode(errors="replace").splitlines(True) if not is_noise(line)]
            if kept:
                sys.stderr.write("".join(kept))
                sys.stderr.flush()


class _QuietLoader(importlib.abc.Loader):
    """The real loader of a quieted module, its ``exec_module`` run inside :func:`filtered_stderr`."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> ModuleType | None:
        return self._loader.create_module(spec)

    def exec_module(self, module: ModuleType) -> None:
        with filtered_stderr():
            self._loader.exec_module(module)

    def __getattr__(self, name: str) -> Any:
        return getattr(self._loader, name)  # resource readers and the like: the real loader's


class _QuietFinder(importlib.abc.MetaPathFinder):
    """Finds the quieted modules through the other finders and hands them out with a :class:`_QuietLoader`."""

    def find_spec(self, fullname: str, path: Any, target: ModuleType | None = None) -> Any:
        if fullname not in QUIETED:
            return None
        for finder in sys.meta_path:
            if finder is self or not hasattr(finder, "find_spec"):
                continue
            spec = finder.find_spec(fullname, path, target)
            if spec is not None:
                if spec.loader is not None and hasattr(spec.loader, "exec_module"):
                    spec.loader = _QuietLoader(spec.loader)
                return spec
        return None


def quiet_tensorflow_startup() -> None:
    """Quiets the first ``import tensorflow`` of this process (see the module's doc); once is enough."""
    if any(isinstance(finder, _QuietFinder) for finder in sys.meta_path):
        return
    if any(name in sys.modules for name in QUIETED):
        return  # loaded already: its lines are out
    sys.meta_path.insert(0, _QuietFinder())
