"""The GPU Horovod build: its cache key, what TensorFlow 2.21 offers the patch, and (on a GPU) the import.

The compile-and-link check itself (a GPU wheel built from PyPI's CUDA wheels, loaded into TensorFlow) is
`make check-gpu-build` (scripts/check_gpu_build.sh): minutes of compiling the first time, so not a test.
"""

from __future__ import annotations

import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from tests.conftest import ROOT

BUILD = ROOT / "scripts" / "build_horovod.sh"
PATCH = ROOT / "patches" / "horovod-0.28.1.patch"


def fake_toolkit(root: Path, nvcc: str = "12.9.86", cudart: int = 12090, nccl: tuple = (2, 32, 3)) -> Path:
    """A directory shaped like a CUDA toolkit plus NCCL, with the version facts the cache key reads."""
    (root / "bin").mkdir(parents=True)
    (root / "include").mkdir()
    nvcc_path = root / "bin" / "nvcc"
    nvcc_path.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {nvcc.rsplit('.', 1)[0]}, V{nvcc}'\n")
    nvcc_path.chmod(0o755)
    (root / "include" / "cuda_runtime_api.h").write_text(f"#define CUDART_VERSION {cudart}\n")
    major, minor, patch = nccl
    (root / "include" / "nccl.h").write_text(
        f"#define NCCL_MAJOR {major}\n#define NCCL_MINOR {minor}\n#define NCCL_PATCH {patch}\n"
    )
    return root


def horovod_key(flavour: str, toolkit: Path | None = None, **env: str) -> str:
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("HPO_", "HOROVOD_"))}
    if toolkit is not None:
        environ.update(HPO_CUDA_HOME=str(toolkit), HPO_NCCL_HOME=str(toolkit))
    environ.update(env)
    proc = subprocess.run(
        ["bash", "-c", f"source {BUILD}; hpo_horovod_key {sys.executable} {flavour}"],
        env=environ, capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


def test_the_wheel_cache_key_names_everything_the_wheel_was_compiled_against(tmp_path):
    import hashlib
    import importlib.metadata

    patch = hashlib.sha256(PATCH.read_bytes()).hexdigest()[:12]
    tf = importlib.metadata.version("tensorflow")
    assert horovod_key("cpu") == f"{patch}-tf{tf}-cpu"
    key = horovod_key("nccl", fake_toolkit(tmp_path / "a"))
    assert key == f"{patch}-tf{tf}-nccl-nvcc12.9.86-cudart12090-nccl2.32.3-cc75_80_86_89_90"


@pytest.mark.parametrize(
    "change",
    [{"nvcc": "12.8.93"}, {"cudart": 12080}, {"nccl": (2, 27, 7)}, {"HOROVOD_BUILD_CUDA_CC_LIST": "80,90"}],
    ids=["nvcc", "cuda-runtime", "nccl", "architectures"],
)
def test_a_stale_gpu_wheel_is_never_reused_after_a_cuda_change(tmp_path, change):
    before = horovod_key("nccl", fake_toolkit(tmp_path / "before"))
    env = {k: v for k, v in change.items() if k.startswith("HOROVOD_")}
    versions = {k: v for k, v in change.items() if k not in env}
    after = horovod_key("nccl", fake_toolkit(tmp_path / "after", **versions), **env)
    assert after != before


def test_the_gpu_build_needs_nvcc_and_says_where_it_looked(tmp_path):
    empty = tmp_path / "cuda"
    empty.mkdir()
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("HPO_", "HOROVOD_"))}
    environ.update(HPO_CUDA_HOME=str(empty), HPO_NCCL_HOME=str(empty))
    proc = subprocess.run(
        ["bash", "-c", f"source {BUILD}; hpo_horovod_build {sys.executable} nccl {tmp_path / 'out'}"],
        env=environ, capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 1
    assert proc.stderr.strip() == f"no nvcc in {empty}/bin (set HPO_CUDA_HOME to a CUDA toolkit)"
    assert not (tmp_path / "out").exists()


def test_the_gpu_build_names_the_hash_headers_tensorflows_xla_headers_need(tmp_path):
    toolkit = fake_toolkit(tmp_path / "cuda")
    hashes = tmp_path / "include"
    hashes.mkdir()
    environ = {k: v for k, v in os.environ.items() if not k.startswith(("HPO_", "HOROVOD_"))}
    environ.update(HPO_CUDA_HOME=str(toolkit), HPO_NCCL_HOME=str(toolkit), HPO_HASH_INCLUDE=str(hashes))
    proc = subprocess.run(
        ["bash", "-c", f"source {BUILD}; hpo_horovod_build {sys.executable} nccl {tmp_path / 'out'}"],
        env=environ, capture_output=True, text=True, timeout=60,
    )
    assert proc.returncode == 1
    assert proc.stderr.strip() == (
        f"no highwayhash/farmhash headers in {hashes}: install libhighwayhash-dev and libfarmhash-dev (apt-get), "
        "or set HPO_HASH_INCLUDE"
    )


def tensorflow_dir() -> Path:
    import importlib.util

    spec = importlib.util.find_spec("tensorflow")
    assert spec is not None and spec.submodule_search_locations
    return Path(next(iter(spec.submodule_search_locations)))


@pytest.mark.skipif(shutil.which("nm") is None, reason="needs nm (binutils) to list TensorFlow's exported symbols")
def test_tensorflow_exports_no_as_gpu_stream_value_so_the_patch_reads_the_streams_handle():
    """What the patch relies on: TF 2.21 exports no stream_executor::gpu::AsGpuStreamValue (an unpatched GPU
    Horovod fails to load), and its Stream hands out the CUDA stream as a virtual platform_specific_handle()."""
    tf = tensorflow_dir()
    # The framework library holds TF's stream_executor (libtensorflow_cc.so.2, 1 GB, takes a minute to list;
    # the link check of `make check-gpu-build` loads Horovod against all of them).
    libraries = [tf / "libtensorflow_framework.so.2", tf / "python" / "_pywrap_tensorflow_internal.so"]
    assert libraries[0].exists()
    for library in (lib for lib in libraries if lib.exists()):
        symbols = subprocess.run(["nm", "-D", "--defined-only", str(library)], capture_output=True, text=True,
                                 timeout=120).stdout
        assert "AsGpuStreamValue" not in symbols, library
    stream_h = (tf / "include" / "xla" / "stream_executor" / "stream.h").read_text()
    assert "virtual PlatformSpecificHandle platform_specific_handle() const" in stream_h
    # The XLA builder moved; the patch includes the new path where it exists.
    assert (tf / "include" / "tensorflow" / "compiler" / "xla" / "hlo" / "builder" / "xla_builder.h").exists()
    assert not (tf / "include" / "tensorflow" / "compiler" / "xla" / "client" / "xla_builder.h").exists()
    patch = PATCH.read_text()
    assert '+#include "tensorflow/compiler/xla/hlo/builder/xla_builder.h"' in patch
    assert "+      stream->platform_specific_handle().stream);" in patch
    assert patch.count("-  auto stream = stream_executor::gpu::AsGpuStreamValue(") >= 1
    assert "+  auto stream = stream_executor::gpu::AsGpuStreamValue(" not in patch
    # XLA's StatusOr became absl::StatusOr.
    assert "+template <typename T> using HvdStatusOr = absl::StatusOr<T>;" in patch
    assert "+  ::xla::StatusOr<" not in patch


@pytest.mark.gpu
def test_horovod_on_a_gpu_machine_is_built_with_nccl():
    """On a GPU machine `make install` builds Horovod with NCCL allreduce (scripts/install_horovod.sh)."""
    from hpo import _env

    _env.apply()
    import horovod.tensorflow as hvd
    import tensorflow as tf

    assert tf.config.list_physical_devices("GPU"), "this test needs a GPU"
    assert hvd.nccl_built() and hvd.cuda_built() and hvd.gloo_built()
