#!/usr/bin/env bash
# Makes benchmarks/.peers-venv with the search benchmark's peers (DEHB, SMAC3, Syne Tune), apart from hpo's venv:
# their dependencies clash with hpo's pinned stack, and none of them is a dependency of hpo.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
venv="$here/../.peers-venv"
python=${PYTHON:-python3}
[ -x "$venv/bin/python" ] || "$python" -m venv "$venv"
"$venv/bin/python" -m pip install --quiet --upgrade pip
"$venv/bin/python" -m pip install --quiet -r "$here/requirements.txt"
"$venv/bin/python" - <<'PY'
from importlib.metadata import version
from dehb import DEHB  # noqa: F401
from smac import MultiFidelityFacade  # noqa: F401
from syne_tune.optimizer.baselines import ASHA, BOHB  # noqa: F401
print("peers ok:", ", ".join(f"{p} {version(p)}" for p in ("syne-tune", "dehb", "smac", "ConfigSpace")))
PY
