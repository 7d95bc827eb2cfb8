#!/usr/bin/env bash
# Makes benchmarks/.peers-venv with the search benchmark's peers (DEHB, SMAC3, Syne Tune), apart from hpo's venv,
# and benchmarks/.syne-gp-venv with Syne Tune 0.13 (MOBSTER, Hyper-Tune):
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

# Syne Tune 0.13 for MOBSTER and Hyper-Tune (later Syne Tune has neither), in a venv of its own.
gp_venv="$here/../.syne-gp-venv"
[ -x "$gp_venv/bin/python" ] || "$python" -m venv "$gp_venv"
"$gp_venv/bin/python" -m pip install --quiet --upgrade pip
"$gp_venv/bin/python" -m pip install --quiet -r "$here/syne-gp-requirements.txt"
"$gp_venv/bin/python" -c "from syne_tune.optimizer.baselines import MOBSTER, HyperTune; print('syne_mobster, syne_hypertune ok')"

hpo_python=${HPO_PYTHON:-$here/../../.venv/bin/python}
site="$here/../.tune-bohb-site"
if [ -x "$hpo_python" ]; then
    "$hpo_python" -m pip install --quiet --upgrade --no-deps --target "$site" -r "$here/tune-bohb-requirements.txt"
    PYTHONPATH="$site" "$hpo_python" -c "from ray.tune.search.bohb import TuneBOHB; from hpbandster.optimizers.config_generators.bohb import BOHB; print('tune_bohb ok')"
else
    echo "tune_bohb: no hpo venv at $hpo_python (make install-dev); Ray Tune's BOHB not installed" >&2
fi
