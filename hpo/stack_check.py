"""Are Horovod and Petastorm installed as hpo's trials need them? Checked from files, without importing either.

Neither is a declared dependency: Horovod 0.28.1 is built from its sdist with ``patches/horovod-0.28.1.patch``
and Petastorm 0.13.1 is installed patched with ``patches/petastorm-0.13.1.patch`` (``make install`` or
``hpo install-stack``; ``scripts/install_horovod.sh``, ``scripts/install_petastorm.sh``). A ``pip install``
alone leaves them out, and every trial would fail; preflight calls :func:`check_stack` so that ``hpo validate``
and ``hpo tune`` stop first, in one line that says what to run.

What is read (a few small files and one search of Horovod's TensorFlow library; about 4 ms here):

* Horovod: ``horovod/__init__.py``'s version; ``horovod/tensorflow/mpi_lib*.so`` (absent when it was built
  without TensorFlow); ``horovod/metadata.json`` (the TensorFlow it was built against); the patch's Keras
  lines in ``horovod/tensorflow/keras/__init__.py`` and ``callbacks.py``; its C++ part (``WaitForNewTensors``)
  in the library.
* Petastorm: ``petastorm/__init__.py``'s version; ``petastorm/parquet_dataset.py``, which the patch adds.
"""

from __future__ import annotations

import importlib.machinery
import json
import mmap
import re
from collections.abc import Sequence
from importlib import metadata
from pathlib import Path

from hpo.errors import ConfigError

HOROVOD_VERSION = "0.28.1"
PETASTORM_VERSION = "0.13.1"
#: The line ``patches/horovod-0.28.1.patch`` puts in Horovod's Keras modules.
HOROVOD_KERAS_PATCH = "from tf_keras.src import backend as K"
#: A symbol the patch's C++ part adds to Horovod's library (its background loop wakes on a new tensor).
HOROVOD_LIB_PATCH = b"WaitForNewTensors"
#: The one-line fix every problem ends with.
FIX = "run 'hpo install-stack' (in a checkout of hpo: 'make install')"

_VERSION = re.compile(r"""^__version__\s*=\s*['"]([^'"]+)['"]""", re.MULTILINE)


def _package_dir(name: str, path: Sequence[str] | None) -> Path | None:
    """The directory of top-level package ``name`` on ``path`` (``sys.path`` if None), found without importing."""
    spec = importlib.machinery.PathFinder.find_spec(name, None if path is None else list(path))
    if spec is None or not spec.submodule_search_locations:
        return None
    return Path(next(iter(spec.submodule_search_locations)))


def _version(package: Path) -> str | None:
    """``__version__`` as written in ``package/__init__.py``."""
    try:
        found = _VERSION.search((package / "__init__.py").read_text(encoding="utf-8", errors="replace"))
    except OSError:
        return None
    return found.group(1) if found else None


def _contains(path: Path, needle: bytes) -> bool:
    """Whether the file at ``path`` contains ``needle`` (memory-mapped: a large library costs no copy)."""
    try:
        with path.open("rb") as f, mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as m:
            return m.find(needle) != -1
    except (OSError, ValueError):
        return False


def _tensorflow_version(path: Sequence[str] | None) -> str | None:
    """The installed TensorFlow's version from its metadata (``tensorflow`` or a variant such as ``-cpu``)."""
    for name in ("tensorflow", "tensorflow-cpu", "tensorflow-gpu", "tf-nightly"):
        where = {} if path is None else {"path": list(path)}
        for dist in metadata.distributions(name=name, **where):
            return dist.version
    return None


def horovod_problems(path: Sequence[str] | None = None) -> list[str]:
    """What keeps the Horovod on ``path`` from running hpo's trials (empty when nothing does).

    Args:
        path: Directories to look in, as ``sys.path`` (None: ``sys.path``).
    """
    package = _package_dir("horovod", path)
    if package is None:
        return [f"Horovod is not installed (hpo needs {HOROVOD_VERSION} built with its patch)"]
    version = _version(package)
    if version != HOROVOD_VERSION:
        return [f"Horovod {version or '(unknown version)'} is installed, hpo needs {HOROVOD_VERSION} with its patch"]
    libs = sorted((package / "tensorflow").glob("mpi_lib*.so")) + sorted((package / "tensorflow").glob("mpi_lib*.pyd"))
    if not libs:
        return ["Horovod was built without TensorFlow support (no horovod/tensorflow/mpi_lib)"]
    problems = []
    built_for = _built_against(package)
    installed = _tensorflow_version(path)
    if built_for and installed and built_for != installed:
        problems.append(f"Horovod was built against TensorFlow {built_for}, TensorFlow {installed} is installed")
    keras = [package / "tensorflow" / "keras" / name for name in ("__init__.py", "callbacks.py")]
    if not all(_contains(file, HOROVOD_KERAS_PATCH.encode()) for file in keras) or not _contains(
        libs[0], HOROVOD_LIB_PATCH
    ):
        problems.append(f"Horovod {HOROVOD_VERSION} is installed without hpo's patch (patches/horovod-0.28.1.patch)")
    return problems


def _built_against(package: Path) -> str | None:
    """The TensorFlow version Horovod's build recorded in ``horovod/metadata.json``."""
    try:
        value = json.loads((package / "metadata.json").read_text(encoding="utf-8")).get("tensorflow")
    except (OSError, ValueError, AttributeError):
        return None
    return value if isinstance(value, str) and value not in ("", "none") else None


def petastorm_problems(path: Sequence[str] | None = None) -> list[str]:
    """What keeps the Petastorm on ``path`` from reading hpo's datasets (empty when nothing does).

    Args:
        path: Directories to look in, as ``sys.path`` (None: ``sys.path``).
    """
    package = _package_dir("petastorm", path)
    if package is None:
        return [f"Petastorm is not installed (hpo needs {PETASTORM_VERSION} with its patch)"]
    version = _version(package)
    if version != PETASTORM_VERSION:
        return [
            f"Petastorm {version or '(unknown version)'} is installed, hpo needs {PETASTORM_VERSION} with its patch"
        ]
    if not (package / "parquet_dataset.py").is_file():
        return [f"Petastorm {PETASTORM_VERSION} is installed without hpo's patch (patches/petastorm-0.13.1.patch)"]
    return []


def stack_problems(path: Sequence[str] | None = None) -> list[str]:
    """Every problem of the Horovod and Petastorm on ``path`` (None: ``sys.path``), one short phrase each."""
    return horovod_problems(path) + petastorm_problems(path)


def check_stack(source: str, path: Sequence[str] | None = None) -> None:
    """Stops a sweep whose trials could not run for want of a (patched) Horovod or Petastorm.

    Args:
        source: The sweep file, for the message.
        path: Directories to look in (None: ``sys.path``).

    Raises:
        ConfigError: One line naming every problem and the command that fixes them.
    """
    problems = stack_problems(path)
    if problems:
        raise ConfigError(f"{source}: stack: {'; '.join(problems)}; {FIX}")
