"""The install scripts' GPU detection: a GPU machine gets NCCL Horovod and TensorFlow's CUDA wheels."""

from __future__ import annotations

import os
import subprocess
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
