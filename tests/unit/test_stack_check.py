"""The stack check: a missing, unpatched or TensorFlow-less Horovod and a missing/unpatched Petastorm stop preflight.

The logic is tested against site directories laid out as the installers leave them (tmp_path), and the real
installed stack must pass; one test runs ``hpo validate`` with an old Horovod first on the path.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

from hpo.errors import ConfigError
from hpo.stack_check import FIX, check_stack, horovod_problems, petastorm_problems, stack_problems
from tests.conftest import HPO, ROOT

PATCHED_KERAS = (
    "import tf_keras as keras\nif keras.__name__.startswith('tf_keras'):\n    from tf_keras.src import backend as K\n"
)
UNPATCHED_KERAS = "from keras import backend as K\n"


def site(tmp_path: Path, *, horovod: str | None = "0.28.1", tf_lib: bool = True, keras: str = PATCHED_KERAS,
         lib: bytes = b"\x7fELF ... _ZN7horovod6common11TensorQueue17WaitForNewTensors ...", built_for: str = "2.21.0",
         tensorflow: str = "2.21.0", petastorm: str | None = "0.13.1", petastorm_patched: bool = True) -> list[str]:
    """A site directory with the given Horovod, TensorFlow metadata and Petastorm; returns it as a path list."""
    root = tmp_path / "site"
    root.mkdir()
    if horovod is not None:
        pkg = root / "horovod"
        (pkg / "tensorflow" / "keras").mkdir(parents=True)
        (pkg / "__init__.py").write_text(f"from horovod.runner import run\n\n__version__ = '{horovod}'\n")
        (pkg / "metadata.json").write_text(f'{{\n"tensorflow": "{built_for}",\n"dummy": "none"\n}}')
        for name in ("__init__.py", "callbacks.py"):
            (pkg / "tensorflow" / "keras" / name).write_text(keras)
        if tf_lib:
            (pkg / "tensorflow" / "mpi_lib.cpython-311-x86_64-linux-gnu.so").write_bytes(lib)
    meta = root / f"tensorflow-{tensorflow}.dist-info"
    meta.mkdir()
    (meta / "METADATA").write_text(f"Metadata-Version: 2.1\nName: tensorflow\nVersion: {tensorflow}\n")
    if petastorm is not None:
        pkg = root / "petastorm"
        pkg.mkdir()
        (pkg / "__init__.py").write_text(f"from petastorm.reader import make_reader\n__version__ = '{petastorm}'\n")
        (pkg / "reader.py").write_text("")
        if petastorm_patched:
            (pkg / "parquet_dataset.py").write_text("")
    return [str(root)]


def test_the_installed_stack_passes():
    assert stack_problems() == []
    check_stack("sweep.yaml")


def test_a_site_as_the_installers_leave_it_passes(tmp_path):
    assert stack_problems(site(tmp_path)) == []


def test_nothing_installed_names_both(tmp_path):
    problems = stack_problems(site(tmp_path, horovod=None, petastorm=None))
    assert problems == [
        "Horovod is not installed (hpo needs 0.28.1 built with its patch)",
        "Petastorm is not installed (hpo needs 0.13.1 with its patch)",
    ]


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"horovod": "0.27.0"}, "Horovod 0.27.0 is installed, hpo needs 0.28.1 with its patch"),
        ({"tf_lib": False}, "Horovod was built without TensorFlow support (no horovod/tensorflow/mpi_lib)"),
        ({"keras": UNPATCHED_KERAS}, "Horovod 0.28.1 is installed without hpo's patch (patches/horovod-0.28.1.patch)"),
        ({"lib": b"\x7fELF no patched loop"},
         "Horovod 0.28.1 is installed without hpo's patch (patches/horovod-0.28.1.patch)"),
        ({"built_for": "2.16.1"}, "Horovod was built against TensorFlow 2.16.1, TensorFlow 2.21.0 is installed"),
    ],
)
def test_horovod_problems(tmp_path, kwargs, expected):
    assert horovod_problems(site(tmp_path, **kwargs)) == [expected]


@pytest.mark.parametrize(
    ("kwargs", "expected"),
    [
        ({"petastorm": "0.12.1"}, "Petastorm 0.12.1 is installed, hpo needs 0.13.1 with its patch"),
        ({"petastorm_patched": False},
         "Petastorm 0.13.1 is installed without hpo's patch (patches/petastorm-0.13.1.patch)"),
    ],
)
def test_petastorm_problems(tmp_path, kwargs, expected):
    assert petastorm_problems(site(tmp_path, **kwargs)) == [expected]


def test_the_error_is_one_line_with_the_fix(tmp_path):
    with pytest.raises(ConfigError) as err:
        check_stack("sweeps/a.yaml", site(tmp_path, tf_lib=False, petastorm_patched=False))
    message = str(err.value)
    assert "\n" not in message
    assert message.startswith("sweeps/a.yaml: stack: Horovod was built without TensorFlow support")
    assert "Petastorm 0.13.1 is installed without hpo's patch" in message
    assert message.endswith(FIX)


def test_the_installers_check_what_stack_check_checks():
    """The patches still contain what the check looks for (a changed patch must change the check too)."""
    horovod = (ROOT / "patches" / "horovod-0.28.1.patch").read_text()
    assert "+    from tf_keras.src import backend as K" in horovod
    assert "TensorQueue::WaitForNewTensors" in horovod
    assert "+++ b/petastorm/parquet_dataset.py" in (ROOT / "patches" / "petastorm-0.13.1.patch").read_text()


def test_validate_stops_on_an_old_horovod_first_on_the_path(tmp_path):
    """``hpo validate`` runs the check in preflight: an old Horovod ahead of the real one ends it in one line."""
    fake = Path(site(tmp_path, horovod="0.27.0", petastorm=None)[0])
    (fake / "tensorflow-2.21.0.dist-info").rename(tmp_path / "tf-meta")  # the real TensorFlow's metadata is used
    env = {**os.environ, "PYTHONPATH": f"{fake}{os.pathsep}{ROOT}"}
    proc = subprocess.run([HPO, "validate", str(ROOT / "search_spaces" / "digits_mlp.yaml")], cwd=tmp_path,
                          env=env, capture_output=True, text=True, timeout=300)
    assert proc.returncode == 2, proc.stderr
    lines = [line for line in proc.stderr.splitlines() if "digits_mlp.yaml: stack:" in line]
    assert len(lines) == 1, proc.stderr
    assert "Horovod 0.27.0 is installed, hpo needs 0.28.1 with its patch" in lines[0]
    assert lines[0].endswith(FIX)
