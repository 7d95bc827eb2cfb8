"""Checks that each need a fresh Python process importing TensorFlow, or a wheel built by pip.

They test single behaviours (the CLI's filter of TensorFlow's start-up lines, the wheel's contents, the
stream's undoing of TensorFlow's mmap threshold) but take seconds each, so they run in ``make test`` and
not in the fast unit set.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
from pathlib import Path

import pytest

from hpo.data import builtin_digits
from tests.conftest import ROOT, base_sweep


def test_cli_hides_tensorflow_startup_lines_unless_verbose(tmp_path, write_sweep):
    (tmp_path / "tfmodel.py").write_text("import tensorflow as tf\n\ndef build(params, input_shape, num_classes):\n"
                                         "    return None\n")
    sweep = write_sweep(base_sweep(model="tfmodel:build"))
    env = {**os.environ, "PYTHONPATH": str(ROOT)}
    env.pop("HPO_VERBOSE", None)
    cmd = [sys.executable, "-m", "hpo.cli.main"]
    quiet = subprocess.run([*cmd, "validate", str(sweep), "--offline"], cwd=tmp_path, env=env, capture_output=True,
                           text=True, timeout=300)
    assert quiet.returncode == 0, quiet.stderr
    assert "ok — sweep" in quiet.stdout and "absl" not in quiet.stderr and "cuda drivers" not in quiet.stderr
    loud = subprocess.run([*cmd, "--verbose", "validate", str(sweep), "--offline"], cwd=tmp_path, env=env,
                          capture_output=True, text=True, timeout=300)
    assert loud.returncode == 0, loud.stderr
    assert "absl::InitializeLog()" in loud.stderr  # what is hidden is there without the filter


def _build_wheel(tmp_path: Path) -> Path:
    """hpo-sweeps' wheel, built from a copy of the checkout's packaging files (the checkout stays untouched)."""
    import shutil

    src = tmp_path / "src"
    src.mkdir()
    for name in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "LICENSE"):
        shutil.copy(ROOT / name, src / name)
    for folder in ("hpo", "scripts", "patches"):
        shutil.copytree(ROOT / folder, src / folder, ignore=shutil.ignore_patterns("__pycache__"))
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", "--quiet", "--no-deps",
                           str(src), "-w", str(tmp_path / "dist")], capture_output=True, text=True, timeout=300)
    assert proc.returncode == 0, proc.stderr
    (wheel,) = (tmp_path / "dist").glob("hpo_sweeps-*.whl")
    return wheel


def test_the_wheel_carries_the_installers_its_metadata_and_the_command(tmp_path):
    import zipfile

    import hpo

    wheel = _build_wheel(tmp_path)
    assert wheel.name == f"hpo_sweeps-{hpo.__version__}-py3-none-any.whl"
    with zipfile.ZipFile(wheel) as z:
        for name in ("scripts/install_horovod.sh", "scripts/build_horovod.sh", "scripts/install_petastorm.sh",
                     "scripts/cuda.sh",
                     "patches/horovod-0.28.1.patch", "patches/petastorm-0.13.1.patch"):
            assert z.read(f"hpo/_stack/{name}") == (ROOT / name).read_bytes(), name
        info = f"hpo_sweeps-{hpo.__version__}.dist-info"
        metadata = z.read(f"{info}/METADATA").decode()
        assert "hpo = hpo.cli.main:main" in z.read(f"{info}/entry_points.txt").decode()
        z.extractall(tmp_path / "site")
    for line in ("Name: hpo-sweeps", "License-Expression: Apache-2.0", "Requires-Python: <3.13,>=3.11",
                 "Provides-Extra: gp", "Provides-Extra: cluster", "Provides-Extra: gpu", "Provides-Extra: dev",
                 "Requires-Dist: tensorflow==2.21.0", 'Requires-Dist: torch>=2.4; extra == "gp"'):
        assert line in metadata.splitlines(), line
    assert not [line for line in metadata.splitlines() if line.lower().startswith(("requires-dist: horovod",
                                                                                    "requires-dist: petastorm"))]
    # Installed from the wheel, install-stack finds the installers inside the package.
    code = "from hpo.cli.install_stack import installer_root; print(installer_root())"
    env = {**os.environ, "PYTHONPATH": str(tmp_path / "site")}
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.stdout.strip() == str((tmp_path / "site" / "hpo" / "_stack").resolve()), proc.stderr


_MMAP_PROBE = """
import ctypes, resource, sys
ctypes.CDLL(None).prctl(41, 1, 0, 0, 0)  # PR_SET_THP_DISABLE: count 4 KiB faults, not the odd huge page
import numpy as np
import hpo._env; hpo._env.apply()
import tensorflow as tf
from hpo.data import ShardStream, describe

def faults():  # minor page faults while allocating, filling and freeing a 4 MiB array 40 times
    before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
    for _ in range(40):
        block = np.ones(2**20, dtype=np.float32)
        del block
    return resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before

list(tf.data.Dataset.from_generator(lambda: iter([np.zeros(1, np.float32)]), output_types=tf.float32))
pinned = faults()
info = describe(sys.argv[1])
stream = ShardStream(info, features="features", label="label", rank=0, size=1, steps=info.steps(64, 1))
next(iter(stream.dataset()))
print(pinned, faults())
"""


@pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's mallopt only")
def test_tf_dataset_undoes_the_mmap_threshold_from_generator_pins(tmp_path):
    """TF's first ``from_generator`` kernel makes glibc mmap (and zero) every buffer over 128 KiB, for the
    rest of the process; starting a stream's iterator undoes that. In a fresh process: TF does it once."""
    import subprocess
    import sys

    train_url, _ = builtin_digits(tmp_path, 0.2)
    out = subprocess.run([sys.executable, "-c", _MMAP_PROBE, train_url], capture_output=True, text=True, check=True)
    pinned, restored = map(int, out.stdout.split()[-2:])
    assert pinned > 40 * 256  # hundreds of faults per allocation (~510 here), none once restored
    assert restored < pinned / 10
