#!/usr/bin/env bash
# Build Horovod 0.28.1 from its PyPI sdist with hpo's patch (TF 2.21 + tf-keras 2.21, Gloo, CPU/GPU),
# once: the wheel is kept in HPO_WHEEL_CACHE and reused by every later install on this machine.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=$(realpath -m "${VENV:-$root/.venv}")  # absolute: the build below runs in another directory
py=$venv/bin/python
patch_file=$root/patches/horovod-0.28.1.patch
cache=${HPO_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hpo/wheels}
key=$(sha256sum "$patch_file" | cut -c1-12)
# GPU nodes (CUDA present, see scripts/cuda.sh): allreduce over NCCL; CPU nodes: Gloo only.
# shellcheck source=scripts/cuda.sh
source "$root/scripts/cuda.sh"
if hpo_has_cuda; then
  flavour=nccl
  gpu_flags=(HOROVOD_GPU_OPERATIONS=NCCL)
else
  flavour=cpu
  gpu_flags=()
fi
key=$key-$flavour
wheel_dir=$cache/horovod-0.28.1-$key
# Which patch the venv's Horovod was built with: a changed patch means a rebuild, not "already installed".
marker=$venv/.horovod-patch-$key

check() {
  TF_USE_LEGACY_KERAS=1 TF_CPP_MIN_LOG_LEVEL=3 "$py" -c \
    "import horovod, horovod.tensorflow.keras as h; assert horovod.__version__ == '0.28.1'; assert h.gloo_built()" \
    >/dev/null 2>&1
}

if [[ -f $marker ]] && check; then
  echo "horovod 0.28.1 (patched) already installed"
  exit 0
fi

if ! ls "$wheel_dir"/horovod-0.28.1-*.whl >/dev/null 2>&1; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  echo "building horovod 0.28.1 ($flavour) from sdist with $(basename "$patch_file") (about 2 minutes)"
  "$py" -m pip download --quiet --no-deps --no-binary :all: horovod==0.28.1 -d "$work"
  tar xzf "$work"/horovod-0.28.1.tar.gz -C "$work"
  (cd "$work/horovod-0.28.1" && patch -p1 --quiet < "$patch_file")
  mkdir -p "$wheel_dir"
  (
    cd "$work/horovod-0.28.1"
    export PATH="$venv/bin:$PATH"
    env HOROVOD_WITH_TENSORFLOW=1 HOROVOD_WITH_GLOO=1 HOROVOD_WITHOUT_MPI=1 \
      HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_MXNET=1 MAKEFLAGS="${MAKEFLAGS:--j2}" "${gpu_flags[@]}" \
      "$py" -m pip wheel --quiet --no-build-isolation --no-deps . -w "$wheel_dir"
  )
fi

"$py" -m pip install --quiet --no-deps --force-reinstall "$wheel_dir"/horovod-0.28.1-*.whl
# Horovod's own runtime requirements (installed --no-deps above so pip leaves the pinned stack alone).
"$py" -m pip install --quiet "cloudpickle" "psutil" "pyyaml" "packaging"
check || { echo "horovod installed but 'import horovod.tensorflow.keras' fails" >&2; exit 1; }
rm -f "$venv"/.horovod-patch-*
touch "$marker"
echo "horovod 0.28.1 (patched) installed"
