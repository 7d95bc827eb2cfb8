#!/usr/bin/env bash
# Compile-and-link check of the GPU Horovod build (Gloo + NCCL allreduce, patched for TensorFlow 2.21) on
# a machine with no GPU and no CUDA toolkit installed: `make check-gpu-build`.
#
# The CUDA pieces come from PyPI's nvidia-* wheels, at the versions requirements/cuda.txt pins (those
# tensorflow[and-cuda]==2.21.0 installs): the CUDA runtime headers and libraries, CCCL, NCCL. PyPI's CUDA 12
# nvcc wheel (nvidia-cuda-nvcc-cu12) ships ptxas but no nvcc, so Horovod's one CUDA source file
# (horovod/common/ops/cuda/cuda_kernels.cu) is compiled by the CUDA 13.0 nvcc wheel with its own crt
# headers; everything else (Horovod's C++ against TensorFlow's headers, cuda_runtime.h, nccl.h) is the
# CUDA 12 set. The cluster image compiles the same sources with the CUDA 12.9 nvcc of its devel base
# (cluster/Dockerfile), through the same build function (scripts/build_horovod.sh).
#
# Passes when the wheel builds and its TensorFlow op library loads into TensorFlow 2.21 with every symbol
# resolved (dlopen, RTLD_NOW: the link check), reporting nccl_built() and cuda_built(). It does not run a
# collective: that needs a GPU (tests/gpu).
#
# Cached: the wheel and an ok-marker live under HPO_WHEEL_CACHE, keyed by Horovod's version, the patch,
# TensorFlow's version, the CUDA/NCCL versions and this script; a second run takes seconds. The first run
# downloads about 0.5 GB of wheels (pip's cache keeps them) and compiles for a few minutes per core.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=$(realpath -m "${VENV:-$root/.venv}")
py=$venv/bin/python
cache=${HPO_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hpo/wheels}
pins=$root/requirements/cuda.txt
# The compiler of the one .cu file (see above): CUDA 13.0's nvcc, cudafe++/cicc and crt headers.
nvcc_wheels=(nvidia-cuda-nvcc==13.0.88 nvidia-nvvm==13.0.88 nvidia-cuda-crt==13.0.88)
# shellcheck source=scripts/build_horovod.sh
source "$root/scripts/build_horovod.sh"
[[ -x $py ]] || { echo "no venv at $venv: run 'make install' first (VENV=... for another)" >&2; exit 2; }

# The toolkit directory: the pins and this script. The ok-marker: also Horovod's patch, TensorFlow's
# version and the build function.
toolkit_inputs=$( (cat "$pins" "$0"; printf '%s\n' "${nvcc_wheels[@]}") | sha256sum | cut -c1-12)
tk=$cache/cuda-toolkit-$toolkit_inputs
key=horovod-0.28.1-$(sha256sum "$hpo_horovod_patch" | cut -c1-12)-tf$(hpo_dist_version "$py" tensorflow)
key=$key-cuda$toolkit_inputs-build$(sha256sum "$root/scripts/build_horovod.sh" | cut -c1-12)
ok=$cache/gpu-build-check-$key.ok
if [[ -f $ok ]]; then
  echo "GPU Horovod build check: ok (cached: $(cat "$ok"))"
  exit 0
fi

# 1. A CUDA toolkit directory from the wheels (once per pin set).
if [[ ! -x $tk/bin/nvcc ]]; then
  echo "assembling a CUDA toolkit from PyPI wheels in $tk"
  dl=$(mktemp -d)
  trap 'rm -rf "$dl"' EXIT
  grep -v '^\s*#' "$pins" | grep -E 'nvidia-(cuda-runtime|cuda-cccl|cuda-nvcc|nccl)-cu12' > "$dl/req.txt"
  "$py" -m pip download --quiet --no-deps -d "$dl/w" -r "$dl/req.txt" "${nvcc_wheels[@]}"
  for w in "$dl"/w/*.whl; do "$py" -m zipfile -e "$w" "$dl/x"; done
  new=$tk.partial
  rm -rf "$new"
  mkdir -p "$new"/{bin,include,lib,lib64,nvvm/lib64}
  cu13=$dl/x/nvidia/cu13
  cp -a "$cu13/bin/." "$new/bin/"
  cp -a "$cu13/nvvm/." "$new/nvvm/"
  cp "$cu13"/lib/libnvvm.so* "$new/nvvm/lib64/"
  cp "$cu13"/lib/libnvvm.so* "$new/lib/"  # nvcc.profile puts TOP/lib on cicc's library path
  for p in cuda_runtime cuda_cccl cuda_nvcc nccl; do cp -a "$dl/x/nvidia/$p/include/." "$new/include/"; done
  rm -rf "$new/include/crt"
  cp -a "$cu13/include/crt" "$new/include/crt"  # the compiler's own headers go with the compiler
  cp -a "$dl/x/nvidia/cuda_runtime/lib/." "$new/lib64/"
  cp -a "$dl/x/nvidia/nccl/lib/libnccl.so.2" "$new/lib64/"
  ln -s libcudart.so.12 "$new/lib64/libcudart.so"
  ln -s libnccl.so.2 "$new/lib64/libnccl.so"
  chmod +x "$new"/bin/* "$new"/nvvm/bin/*
  rm -rf "$tk"
  mv "$new" "$tk"
fi

# 2. The highwayhash and farmhash headers TensorFlow's XLA headers include (see scripts/build_horovod.sh),
# from Debian's packages, unpacked into the cache instead of installed.
hashes=$cache/hash-headers
if [[ ! -f $hashes/usr/include/farmhash.h || ! -f $hashes/usr/include/highwayhash/arch_specific.h ]]; then
  debs=$(mktemp -d)
  (cd "$debs" && apt-get download libhighwayhash-dev libfarmhash-dev >/dev/null 2>&1) || {
    echo "could not download libhighwayhash-dev and libfarmhash-dev with apt-get (run 'apt-get update')" >&2
    rm -rf "$debs"
    exit 1
  }
  for deb in "$debs"/*.deb; do dpkg -x "$deb" "$hashes"; done
  rm -rf "$debs"
fi

# 3. The wheel, through the cluster image's build function.
export HPO_CUDA_HOME=$tk HPO_NCCL_HOME=$tk HPO_HASH_INCLUDE=$hashes/usr/include
build_hash=$(sha256sum "$root/scripts/build_horovod.sh" | cut -c1-12)
wheel_dir=$cache/horovod-0.28.1-$(hpo_horovod_key "$py" nccl)-build$build_hash-check
if ! ls "$wheel_dir"/horovod-0.28.1-*.whl >/dev/null 2>&1; then
  log=$cache/gpu-build-check.log
  echo "compiling (log: $log)"
  if ! HPO_HOROVOD_VERBOSE=1 hpo_horovod_build "$py" nccl "$wheel_dir" > "$log" 2>&1; then
    grep -E 'error:|undefined reference|Error [0-9]+|CMake Error' "$log" | head -20 >&2
    echo "GPU Horovod build check: the build failed (log: $log)" >&2
    rm -rf "$wheel_dir"
    exit 1
  fi
fi

# 4. The link check: the op library loads into TensorFlow with every symbol resolved.
unpacked=$(mktemp -d)
trap 'rm -rf "$unpacked" ${dl:+"$dl"}' EXIT
"$py" -m zipfile -e "$wheel_dir"/horovod-0.28.1-*.whl "$unpacked"
result=$(cd "$unpacked" && LD_LIBRARY_PATH=$tk/lib64${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH} \
  TF_CPP_MIN_LOG_LEVEL=3 TF_USE_LEGACY_KERAS=1 CUDA_VISIBLE_DEVICES= PYTHONPATH=$unpacked "$py" - 2> "$unpacked/stderr" <<'PY'
import ctypes
import glob
import os

import horovod
import horovod.tensorflow as hvd

assert os.path.dirname(horovod.__file__).startswith(os.getcwd()), horovod.__file__
lib = glob.glob(os.path.join(os.path.dirname(hvd.__file__), "mpi_lib*.so"))[0]
ctypes.CDLL(lib, mode=os.RTLD_NOW)  # every undefined symbol resolved now, or OSError names it
assert hvd.nccl_built(), "built without NCCL"
assert hvd.cuda_built(), "built without CUDA"
assert hvd.gloo_built(), "built without Gloo"
nccl = hvd.nccl_built()  # NCCL's version code, e.g. 23203 for 2.32.3
print(f"NCCL {nccl // 10000}.{nccl // 100 % 100}.{nccl % 100}, cuda_built={hvd.cuda_built()}, "
      f"gloo_built={hvd.gloo_built()}")
PY
) || {
  grep -v "^I0000\|^WARNING: All log messages" "$unpacked/stderr" >&2
  echo "GPU Horovod build check: the wheel does not load into TensorFlow (see above)" >&2
  exit 1
}
echo "$result, $(date -u +%FT%TZ)" > "$ok"
echo "GPU Horovod build check: ok ($result)"
