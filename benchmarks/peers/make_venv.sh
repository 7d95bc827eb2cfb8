#!/usr/bin/env bash
# Makes benchmarks/.peers-venv with the search benchmark's peers (DEHB, SMAC3, Syne Tune), apart from hpo's venv:
# their dependencies clash with hpo's pinned stack, and none of them is a dependency of hpo. Then installs what
# Ray Tune's BOHB needs (HpBandSter, ConfigSpace) into benchmarks/.tune-bohb-site with hpo's Python: TuneBOHB
# runs inside hpo's process (it is Ray Tune's), which reads that folder last on its path.
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

hpo_python=${HPO_PYTHON:-$here/../../.venv/bin/python}
site="$here/../.tune-bohb-site"
if [ -x "$hpo_python" ]; then
    "$hpo_python" -m pip install --quiet --upgrade --no-deps --target "$site" -r "$here/tune-bohb-requirements.txt"
    PYTHONPATH="$site" "$hpo_python" -c "from ray.tune.search.bohb import TuneBOHB; from hpbandster.optimizers.config_generators.bohb import BOHB; print('tune_bohb ok')"
else
    echo "tune_bohb: no hpo venv at $hpo_python (make install-dev); Ray Tune's BOHB not installed" >&2
fi
