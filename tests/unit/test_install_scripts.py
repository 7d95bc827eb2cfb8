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


# -- `hpo install-stack` runs the stack installers (the wheel that carries them: tests/integration) ------


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
