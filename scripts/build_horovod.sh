#!/usr/bin/env bash
# Sourced by scripts/install_horovod.sh and scripts/check_gpu_build.sh: the one recipe that builds the
# Horovod 0.28.1 wheel from its PyPI sdist with patches/horovod-0.28.1.patch, for CPU nodes (Gloo) or GPU
# nodes (Gloo + NCCL allreduce). The cluster image's GPU stage builds through the same function.
#
# hpo_horovod_key PY FLAVOUR: the wheel's cache key. A wheel is only reused when everything it was
# compiled against is the same: Horovod's version, the patch, TensorFlow's version (Horovod's ops link
# TF's C++ ABI) and, for the nccl flavour, the CUDA compiler, CUDA runtime and NCCL versions.
# hpo_horovod_build PY FLAVOUR OUT_DIR: builds the wheel into OUT_DIR.
#
# The nccl flavour reads: HPO_CUDA_HOME (a CUDA toolkit: bin/nvcc, include/, lib64/; default: the one
# whose nvcc is on PATH, else /usr/local/cuda), HPO_NCCL_HOME (include/nccl.h and lib/libnccl.so; default: the NCCL wheel that
# tensorflow[and-cuda] installed in the venv, so that Horovod and TensorFlow load the same NCCL) and
# HOROVOD_BUILD_CUDA_CC_LIST (the GPU architectures compiled for; default below) and HPO_HASH_INCLUDE (a
# directory with highwayhash/ and farmhash.h; default: the system's). The GPU build compiles Horovod's XLA
# ops, whose TensorFlow headers (xla/printer.h, tsl/platform/fingerprint.h) include highwayhash and
# farmhash, two header sets the TensorFlow wheel does not ship: Debian and Ubuntu have them as
# libhighwayhash-dev and libfarmhash-dev (only their declarations are used; nothing of theirs is linked).
hpo_horovod_root=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
hpo_horovod_patch=$hpo_horovod_root/patches/horovod-0.28.1.patch
# T4 (7.5), A100 (8.0), A10G (8.6), L4 (8.9), H100 (9.0): the GPUs of cluster/aws-gpu.yaml and
# cluster/gcp-gpu.yaml and their usual alternatives. Every CUDA 12 and 13 nvcc compiles these.
HPO_CUDA_CC_LIST_DEFAULT=75,80,86,89,90

hpo_cuda_home() {
  if [[ -n ${HPO_CUDA_HOME:-} ]]; then
    echo "$HPO_CUDA_HOME"
  elif command -v nvcc >/dev/null 2>&1; then
    dirname "$(dirname "$(realpath "$(command -v nvcc)")")"
  else
    echo /usr/local/cuda
  fi
}

# The version of an installed distribution in PY's environment, without importing it (importing
# TensorFlow takes seconds).
hpo_dist_version() {
  "$1" -c "import importlib.metadata as m, sys; print(m.version(sys.argv[1]))" "$2" 2>/dev/null || echo none
}

# The NCCL of the venv's nvidia-nccl-cu12 wheel, as a directory Horovod's CMake finds: the wheel ships
# only libnccl.so.2, CMake looks for libnccl.so. Prints the directory (under the wheel cache).
hpo_pip_nccl_home() {
  local py=$1 cache=$2 site
  site=$("$py" -c "import nvidia.nccl as n; print(list(n.__path__)[0])") || {
    echo "no NCCL wheel (nvidia-nccl-cu12) in $(dirname "$py")/..: install tensorflow[and-cuda] first" >&2
    return 1
  }
  local home
  home=$cache/nccl-$(hpo_dist_version "$py" nvidia-nccl-cu12)
  mkdir -p "$home/lib"
  ln -sfn "$site/include" "$home/include"
  ln -sf "$site/lib/libnccl.so.2" "$home/lib/libnccl.so.2"
  ln -sf libnccl.so.2 "$home/lib/libnccl.so"
  echo "$home"
}

hpo_nccl_version() {
  # NCCL_MAJOR / NCCL_MINOR / NCCL_PATCH from nccl.h.
  awk '/^#define NCCL_(MAJOR|MINOR|PATCH) /{v=v (v?".":"") $3} END{print v}' "$1/include/nccl.h"
}

hpo_nvcc_version() {
  "$1/bin/nvcc" --version | sed -n 's/.*release \([0-9.]*\), V\([0-9.]*\).*/\2/p'
}

hpo_cudart_version() {
  # CUDART_VERSION from cuda_runtime_api.h, e.g. 12090 for 12.9.
  awk '/^#define CUDART_VERSION /{print $3}' "$1/include/cuda_runtime_api.h"
}

hpo_horovod_key() {
  local py=$1 flavour=$2 key
  key=$(sha256sum "$hpo_horovod_patch" | cut -c1-12)-tf$(hpo_dist_version "$py" tensorflow)-$flavour
  if [[ $flavour == nccl ]]; then
    local cuda nccl=${HPO_NCCL_HOME:?the NCCL to link (scripts/install_horovod.sh sets it)}
    cuda=$(hpo_cuda_home)
    key=$key-nvcc$(hpo_nvcc_version "$cuda")-cudart$(hpo_cudart_version "$cuda")-nccl$(hpo_nccl_version "$nccl")
    key=$key-cc$(echo "${HOROVOD_BUILD_CUDA_CC_LIST:-$HPO_CUDA_CC_LIST_DEFAULT}" | tr -d ' ' | tr , _)
  fi
  echo "$key"
}

hpo_horovod_build() {
  local py=$1 flavour=$2 out=$3 venv work
  venv=$(dirname "$(dirname "$py")")
  local gpu_env=()
  if [[ $flavour == nccl ]]; then
    local cuda
    cuda=$(hpo_cuda_home)
    [[ -x $cuda/bin/nvcc ]] || { echo "no nvcc in $cuda/bin (set HPO_CUDA_HOME to a CUDA toolkit)" >&2; return 1; }
    # Static CUDA runtime (Horovod's default), shared NCCL: the NCCL wheels ship no static library, and
    # one NCCL in the process is the one TensorFlow loads too.
    gpu_env=(HOROVOD_GPU_OPERATIONS=NCCL HOROVOD_CUDA_HOME="$cuda" HOROVOD_NCCL_HOME="$HPO_NCCL_HOME"
      HOROVOD_NCCL_LINK=SHARED HOROVOD_BUILD_CUDA_CC_LIST="${HOROVOD_BUILD_CUDA_CC_LIST:-$HPO_CUDA_CC_LIST_DEFAULT}")
    local hashes=${HPO_HASH_INCLUDE:-/usr/include}
    if [[ ! -f $hashes/highwayhash/arch_specific.h || ! -f $hashes/farmhash.h ]]; then
      echo "no highwayhash/farmhash headers in $hashes: install libhighwayhash-dev and libfarmhash-dev" \
        "(apt-get), or set HPO_HASH_INCLUDE" >&2
      return 1
    fi
    [[ $hashes == /usr/include ]] || gpu_env+=(CPLUS_INCLUDE_PATH="$hashes${CPLUS_INCLUDE_PATH:+:$CPLUS_INCLUDE_PATH}")
  fi
  work=$(mktemp -d)
  echo "building horovod 0.28.1 ($flavour) from sdist with $(basename "$hpo_horovod_patch")"
  "$py" -m pip download --quiet --no-deps --no-binary :all: horovod==0.28.1 -d "$work"
  tar xzf "$work"/horovod-0.28.1.tar.gz -C "$work"
  (cd "$work/horovod-0.28.1" && patch -p1 --quiet < "$hpo_horovod_patch")
  mkdir -p "$out"
  local rc=0 verbosity=(--quiet)
  [[ -n ${HPO_HOROVOD_VERBOSE:-} ]] && verbosity=(--verbose)
  (
    cd "$work/horovod-0.28.1"
    export PATH="$venv/bin:$PATH"
    env HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
      HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 MAKEFLAGS="${MAKEFLAGS:--j2}" "${gpu_env[@]}" \
      "$py" -m pip wheel "${verbosity[@]}" --no-build-isolation --no-deps . -w "$out"
  ) || rc=$?
  rm -rf "$work"
  return $rc
}
