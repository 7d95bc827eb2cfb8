#!/usr/bin/env bash
# Install Petastorm 0.13.1 patched for current pyarrow (patches/petastorm-0.13.1.patch), once: the
# patched wheel is kept in HPO_WHEEL_CACHE and reused by every later install on this machine.
# PyPI has no Petastorm 0.13.1 sdist, so the wheel is unpacked, patched and packed again (build tag 1),
# which keeps pip's file list right (the patch adds petastorm/parquet_dataset.py).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
venv=$(realpath -m "${VENV:-$root/.venv}")
py=$venv/bin/python
patch_file=$root/patches/petastorm-0.13.1.patch
cache=${HPO_WHEEL_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/hpo/wheels}
key=$(sha256sum "$patch_file" | cut -c1-12)
wheel_dir=$cache/petastorm-0.13.1-$key

check() {
  "$py" - <<'PY' >/dev/null 2>&1
import importlib.util, petastorm, pyarrow
assert petastorm.__version__ == "0.13.1"
assert importlib.util.find_spec("petastorm.parquet_dataset") is not None  # the patch is in
from petastorm import make_batch_reader  # noqa: F401
PY
}

if check && [ "$(cat "$venv/.petastorm-patch" 2>/dev/null)" = "$key" ]; then
  echo "petastorm 0.13.1 (patched) already installed"
  exit 0
fi

if ! ls "$wheel_dir"/petastorm-0.13.1-1-*.whl >/dev/null 2>&1; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  echo "patching petastorm 0.13.1 with $(basename "$patch_file")"
  "$py" -m pip download --quiet --no-deps petastorm==0.13.1 -d "$work"
  "$py" -m wheel unpack "$work"/petastorm-0.13.1-py2.py3-none-any.whl -d "$work"
  (cd "$work/petastorm-0.13.1" && patch -p1 --quiet < "$patch_file")
  mkdir -p "$wheel_dir"
  "$py" -m wheel pack "$work/petastorm-0.13.1" --build-number 1 -d "$wheel_dir"
fi

"$py" -m pip install --quiet --no-deps --force-reinstall "$wheel_dir"/petastorm-0.13.1-1-*.whl
check || { echo "patched petastorm installed but 'from petastorm import make_batch_reader' fails" >&2; exit 1; }
echo "$key" > "$venv/.petastorm-patch"
echo "petastorm 0.13.1 (patched for pyarrow $("$py" -c 'import pyarrow; print(pyarrow.__version__)')) installed"
