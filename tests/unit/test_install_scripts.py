"""The install scripts: GPU detection (NCCL Horovod, TensorFlow's CUDA wheels) and the wheel's stack installers."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT


def has_cuda(tmp_path: Path, tools: dict[str, str], **env: str) -> bool:
    """Runs ``hpo_has_cuda`` with only ``tools`` (name → script) on PATH besides the basic commands."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir(exist_ok=True)
    for name, body in tools.items():
        (bin_dir / name).write_text(f"#!/bin/sh\n{body}\n")
        (bin_dir / name).chmod(0o755)
    script = f"source {ROOT / 'scripts' / 'cuda.sh'}; hpo_has_cuda"
    clean = {k: v for k, v in os.environ.items() if k != "HPO_CUDA"}
    proc = subprocess.run(["bash", "-c", script], env={**clean, "PATH": f"{bin_dir}:/usr/bin:/bin", **env},
                          capture_output=True, timeout=30)
    return proc.returncode == 0


@pytest.mark.parametrize(
    ("tools", "env", "expected"),
    [
        ({}, {}, False),
        ({"nvcc": "echo 13.0"}, {}, False),  # a CUDA compiler without a GPU (as on the development machines)
        ({"nvidia-smi": "exit 9"}, {}, False),  # a driver tool that finds no GPU
        ({"nvidia-smi": "echo 'GPU 0: NVIDIA H100 (UUID: GPU-1)'"}, {}, True),
        ({}, {"HPO_CUDA": "1"}, True),  # the GPU image is built where there is no GPU
        ({"nvidia-smi": "echo 'GPU 0: NVIDIA H100 (UUID: GPU-1)'"}, {"HPO_CUDA": "0"}, False),
    ],
)
def test_gpu_detection(tmp_path, tools, env, expected):
    assert has_cuda(tmp_path, tools, **env) is expected


# -- the pip install: the wheel carries the stack installers that `hpo install-stack` runs ----------------


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


def test_install_stack_runs_the_checkouts_installers_for_this_python():
    import typer
    from typer.testing import CliRunner

    from hpo.cli.install_stack import BUILD_TOOLS, install_stack, installer_root

    assert installer_root() == ROOT  # a checkout: its own scripts/ and patches/
    app = typer.Typer()
    app.command("install-stack")(install_stack)
    app.command("other")(lambda: None)  # two commands: typer then takes the command name
    result = CliRunner().invoke(app, ["install-stack", "--dry-run"])
    assert result.exit_code == 0, result.output
    assert result.output.splitlines() == [
        f"{sys.executable} -m pip install --quiet {' '.join(BUILD_TOOLS)}",
        f"bash {ROOT / 'scripts' / 'install_petastorm.sh'}",
        f"bash {ROOT / 'scripts' / 'install_horovod.sh'}",
    ]


def test_the_test_tools_leave_s3fs_on_a_botocore_its_client_supports():
    """moto (requirements/dev.txt) brings boto3; its botocore must stay in the range aiobotocore declares."""
    from importlib import metadata

    from packaging.requirements import Requirement

    wanted = [Requirement(r) for r in metadata.requires("aiobotocore") or [] if r.startswith("botocore")]
    assert wanted, "aiobotocore declares no botocore requirement"
    installed = metadata.version("botocore")
    assert all(req.specifier.contains(installed) for req in wanted), (installed, [str(r) for r in wanted])
