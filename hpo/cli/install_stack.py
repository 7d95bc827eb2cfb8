"""``hpo install-stack``: the patched Horovod 0.28.1 and Petastorm 0.13.1 a pip install of hpo leaves out.

Runs the same installers as ``make install`` (``scripts/install_petastorm.sh``, ``scripts/install_horovod.sh``)
for the Python running hpo: from a checkout they are its ``scripts/`` and ``patches/``; a wheel carries copies
in ``hpo/_stack`` (``setup.py`` puts them there). Horovod is compiled once (a C++ compiler and about
2 minutes); both wheels are kept in ``HPO_WHEEL_CACHE`` (default ``~/.cache/hpo/wheels``) for later installs.
"""

from __future__ import annotations

import importlib
import os
import subprocess
import sys
from pathlib import Path
from typing import Annotated

import typer

from hpo.cli.errors import one_line_errors
from hpo.errors import ConfigError, HpoError
from hpo.stack_check import stack_problems

#: The installers, in the order they run (Petastorm's is quick, Horovod's compiles).
SCRIPTS = ("install_petastorm.sh", "install_horovod.sh")
#: What the installers need in the environment first: CMake < 4 for Horovod's build files, wheel to repack
#: Petastorm, setuptools for Horovod's build (without build isolation, against the installed TensorFlow).
BUILD_TOOLS = ("cmake<4", "wheel", "setuptools==69.5.1")


def installer_root() -> Path:
    """The directory holding ``scripts/`` and ``patches/``: the wheel's ``hpo/_stack`` or the checkout.

    Raises:
        HpoError: Neither has the installers.
    """
    package = Path(__file__).resolve().parents[1]
    for root in (package / "_stack", package.parent):
        if all((root / "scripts" / name).is_file() for name in SCRIPTS):
            return root
    raise HpoError(f"{package}: the stack installers (scripts/install_*.sh) are missing; reinstall hpo-sweeps")


def install_commands(root: Path, python: str = sys.executable) -> list[list[str]]:
    """The commands ``hpo install-stack`` runs, in order."""
    pip = [python, "-m", "pip", "install", "--quiet", *BUILD_TOOLS]
    return [pip] + [["bash", str(root / "scripts" / name)] for name in SCRIPTS]


@one_line_errors
def install_stack(
    dry_run: Annotated[bool, typer.Option("--dry-run", help="Print the commands without running them.")] = False,
) -> None:
    """Build and install the patched Horovod and Petastorm into this Python environment (once; ~2 minutes)."""
    root = installer_root()
    commands = install_commands(root)
    # The installers install into VENV/bin/python: this environment's, whatever its name.
    env = {**os.environ, "VENV": sys.prefix, "PIP_DISABLE_PIP_VERSION_CHECK": "1"}
    if not Path(sys.prefix, "bin", "python").exists():
        raise ConfigError(f"{sys.prefix}: (environment): no bin/python there; run hpo from a virtual environment")
    for command in commands:
        print(" ".join(command), flush=True)
        if not dry_run and subprocess.run(command, env=env, check=False).returncode != 0:
            raise HpoError(f"'{' '.join(command)}' failed (its output is above); fix that and run it again")
    if dry_run:
        return
    importlib.invalidate_caches()  # the packages just installed
    problems = stack_problems()
    if problems:
        raise HpoError(f"installed, but {'; '.join(problems)}")
    print("Horovod 0.28.1 and Petastorm 0.13.1 (patched) installed; 'hpo validate FILE' checks a sweep")
