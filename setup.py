"""Build step of hpo-sweeps: the wheel carries the stack installers for ``hpo install-stack``.

Everything else is declared in pyproject.toml. ``scripts/install_horovod.sh`` (and ``scripts/build_horovod.sh``,
which it sources), ``scripts/install_petastorm.sh``, ``scripts/cuda.sh`` and ``patches/*.patch`` are copied into
the wheel as ``hpo/_stack/scripts`` and ``hpo/_stack/patches`` (the same layout as the checkout, so the scripts
find their patches). MANIFEST.in puts them in the sdist.
"""

from __future__ import annotations

from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

ROOT = Path(__file__).resolve().parent
STACK_FILES = ("scripts/install_horovod.sh", "scripts/build_horovod.sh", "scripts/install_petastorm.sh",
               "scripts/cuda.sh",
               "patches/horovod-0.28.1.patch", "patches/petastorm-0.13.1.patch")


class BuildPyWithInstallers(build_py):
    """``build_py`` that also copies the stack installers under ``hpo/_stack``."""

    def run(self) -> None:
        """Builds the packages, then adds the installers."""
        super().run()
        for name in STACK_FILES:
            target = Path(self.build_lib, "hpo", "_stack", name)
            target.parent.mkdir(parents=True, exist_ok=True)
            self.copy_file(str(ROOT / name), str(target))


setup(cmdclass={"build_py": BuildPyWithInstallers})
