#!/usr/bin/env bash
# Build Horovod 0.28.1 from its PyPI sdist with hpo's patch (TF 2.21 + tf-keras 2.21, Gloo, CPU/GPU),
# once: the wheel is kept in HPO_WHEEL_CACHE and reused by every later install on this machine. The build
# itself is scripts/build_horovod.sh (shared with the GPU build check, scripts/check_gpu_build.sh).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=$(realpath -m "${VENV:-$root/.venv}")  # absolute: the build below runs in another directory
py=$venv/bin/python
cache=${HPO_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hpo/wheels}
# shellcheck source=scripts/build_horovod.sh
source "$root/scripts/build_horovod.sh"
# GPU nodes (CUDA present, see scripts/cuda.sh): allreduce over NCCL, linked against the NCCL wheel that
# tensorflow[and-cuda] installed (one NCCL in the process); CPU nodes: Gloo only.
# shellcheck source=scripts/cuda.sh
source "$root/scripts/cuda.sh"
if hpo_has_cuda; then
  flavour=nccl
  mkdir -p "$cache"
  HPO_NCCL_HOME=${HPO_NCCL_HOME:-$(hpo_pip_nccl_home "$py" "$cache")}
  export HPO_NCCL_HOME
  built="hvd.gloo_built() and hvd.nccl_built()"
else
  flavour=cpu
  built="hvd.gloo_built()"
fi
# Which Horovod, patch, TensorFlow (and CUDA/NCCL) the wheel was built against: a change means a rebuild.
key=$(hpo_horovod_key "$py" "$flavour")
wheel_dir=$cache/horovod-0.28.1-$key
marker=$venv/.horovod-$key

check() {
  TF_USE_LEGACY_KERAS=1 TF_CPP_MIN_LOG_LEVEL=3 "$py" -c \
    "import horovod, horovod.tensorflow.keras as hvd; assert horovod.__version__ == '0.28.1'; assert $built" \
    >/dev/null 2>&1
}

if [[ -f $marker ]] && check; then
  echo "horovod 0.28.1 (patched) already installed"
  exit 0
fi

if ! ls "$wheel_dir"/horovod-0.28.1-*.whl >/dev/null 2>&1; then
  hpo_horovod_build "$py" "$flavour" "$wheel_dir" || { rm -rf "$wheel_dir"; exit 1; }
fi

"$py" -m pip install --quiet --no-deps --force-reinstall "$wheel_dir"/horovod-0.28.1-*.whl
# Horovod's own runtime requirements (installed --no-deps above so pip leaves the pinned stack alone).
"$py" -m pip install --quiet "cloudpickle" "psutil" "pyyaml" "packaging"
check || { echo "horovod installed but 'import horovod.tensorflow.keras' fails (or lacks $built)" >&2; exit 1; }
rm -f "$venv"/.horovod-patch-* "$venv"/.horovod-*
touch "$marker"
echo "horovod 0.28.1 (patched) installed"
