#!/usr/bin/env bash
# Creates the virtual environment and installs hpo with its pinned stack and the patched Horovod.
# Idempotent: a second run with nothing changed takes seconds. Wheels stay in pip's cache and
# HPO_WHEEL_CACHE, so a fresh clone on the same machine installs without building again.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
venv=${VENV:-.venv}
python=${PYTHON:-python3}
export PIP_DISABLE_PIP_VERSION_CHECK=1 TF_CPP_MIN_LOG_LEVEL=3

"$python" -c 'import sys; sys.exit(0 if sys.version_info[:2] in ((3, 11), (3, 12)) else "hpo needs Python 3.11 or 3.12 (the pinned TensorFlow/Horovod stack)")'
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
pip="$venv/bin/python -m pip"
$pip install --quiet --upgrade "pip>=24" wheel
# shellcheck source=scripts/cuda.sh
source "$root/scripts/cuda.sh"
echo "installing the pinned stack (requirements/stack.txt)"
$pip install --quiet -r requirements/stack.txt
if hpo_has_cuda; then
  # A GPU node: TensorFlow's CUDA libraries (cuDNN, cuBLAS, NCCL …) as pip wheels, at the versions
  # requirements/cuda.txt pins (TensorFlow itself only asks for CUDA 12.5 or later 12.x).
  echo "CUDA found: installing tensorflow[and-cuda]"
  $pip install --quiet -c requirements/stack.txt -c requirements/cuda.txt "tensorflow[and-cuda]==2.21.0"
fi
# The distribution was named hpo before it became hpo-sweeps: a venv holding that earlier editable install of
# this checkout drops it first (both would own the hpo package and command). Nothing else named hpo is touched.
if $pip show hpo 2>/dev/null | grep -qxF "Editable project location: $root"; then
  $pip uninstall --quiet --yes hpo
fi
$pip install --quiet --no-deps -e .
VENV="$venv" bash scripts/install_petastorm.sh
VENV="$venv" bash scripts/install_horovod.sh
if [ "${HPO_DEV:-0}" = 1 ]; then
  echo "installing the test tools (requirements/dev.txt)"
  # moto's boto3 would otherwise take the newest botocore, outside the range the installed aiobotocore
  # (s3fs's S3 client) declares: the tests would exercise s3fs on a botocore it does not support.
  aiobotocore=$("$venv/bin/python" -c 'import importlib.metadata as m; print(m.version("aiobotocore"))')
  $pip install --quiet -c requirements/stack.txt -r requirements/dev.txt "aiobotocore==$aiobotocore"
fi
# Optuna's GPSampler (search.algorithm: optuna-gp) needs torch: installed for the tests (HPO_DEV=1) or
# on request (HPO_WITH_GP=1); without it, optuna-gp sweeps stop in preflight saying how to install it.
# torch 2.13 (CPU build) declares setuptools>=77 while Petastorm 0.13.1 declares setuptools<70. Neither
# imports setuptools at run time, so torch is installed on its own and setuptools is put back.
if [ "${HPO_DEV:-0}${HPO_WITH_GP:-0}" != 00 ] && ! "$venv/bin/python" -c "import torch" >/dev/null 2>&1; then
  echo "installing torch 2.13.0 (CPU) for optuna-gp"
  $pip install --quiet torch==2.13.0 2>&1 | grep -v "dependency resolver\|requires setuptools\|has requirement" || true
  $pip install --quiet setuptools==69.5.1 2>&1 | grep -v "dependency resolver\|requires setuptools\|has requirement" || true
  "$venv/bin/python" -c "import torch" || { echo "torch failed to install" >&2; exit 1; }
fi
# The MLflow UI browser test drives Debian's headless chromium: install it where we can (root + apt);
# elsewhere that one test skips and says why.
if [ "${HPO_DEV:-0}" = 1 ] && ! command -v chromium >/dev/null && [ "$(id -u)" = 0 ] && command -v apt-get >/dev/null; then
  echo "installing Debian's chromium (for the MLflow UI browser test)"
  apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq chromium >/dev/null
fi
# Fail loudly if the stack does not import together.
"$venv/bin/python" - <<'PY'
import hpo._env; hpo._env.apply()
import horovod.tensorflow.keras, petastorm, ray.tune, mlflow, optuna, tf_keras  # noqa: F401,E401
from ray.tune.search.optuna import OptunaSearch  # noqa: F401
print("stack ok")
PY
