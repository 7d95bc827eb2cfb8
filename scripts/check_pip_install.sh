#!/usr/bin/env bash
# What a pip user gets: `pip install .` from this checkout into a clean virtual environment, then the built
# wheel in its place. Each must give a working `hpo` command, and `hpo validate` must stop in one line saying
# what to run (Horovod and Petastorm are not pip dependencies: `hpo install-stack` builds them). Then
# `hpo install-stack` (its wheels come from HPO_WHEEL_CACHE, which `make test` filled), `hpo validate` passes
# and a one-trial, one-epoch sweep runs. Run by .ci/run after `make test`; HPO_PIP_CHECK_STACK=0 stops after
# the pip installs. Downloads come from pip's cache after the first run.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
python=${PYTHON:-python3}
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
export PIP_DISABLE_PIP_VERSION_CHECK=1 TF_CPP_MIN_LOG_LEVEL=3
start=$SECONDS

"$python" -m venv "$work/venv"
pip=("$work/venv/bin/python" -m pip)
"${pip[@]}" install --quiet --upgrade "pip>=24"

check() {  # $1: how it was installed
  local hpo=$work/venv/bin/hpo out rc
  "$hpo" --help >"$work/help.txt" || { echo "FAIL ($1): hpo --help exits $?" >&2; exit 1; }
  grep -q "validate" "$work/help.txt" || { echo "FAIL ($1): hpo --help lists no validate" >&2; exit 1; }
  rc=0
  (cd "$work" && "$hpo" validate "$root/search_spaces/digits_mlp.yaml") >"$work/out.txt" 2>"$work/err.txt" || rc=$?
  out=$(cat "$work/err.txt")
  if [[ $rc != 2 || $(wc -l <"$work/err.txt") != 1 || $out != *"hpo install-stack"* ]]; then
    echo "FAIL ($1): hpo validate should exit 2 with one line naming 'hpo install-stack'; exit $rc, stderr:" >&2
    cat "$work/err.txt" >&2
    exit 1
  fi
  echo "ok ($1): hpo --help; hpo validate → $out"
}

echo "pip install $root (clean venv)"
"${pip[@]}" install --quiet "$root"
"${pip[@]}" check
check "pip install ."
echo "pip install the wheel"
"${pip[@]}" wheel --quiet --no-deps "$root" -w "$work/dist"
"${pip[@]}" uninstall --quiet --yes hpo-sweeps
"${pip[@]}" install --quiet "$work"/dist/hpo_sweeps-*.whl
check "pip install hpo_sweeps-*.whl"
"$work/venv/bin/python" -c "import hpo, importlib.metadata as m; assert hpo.__version__ == m.version('hpo-sweeps')"
echo "pip install: $((SECONDS - start)) s"

if [ "${HPO_PIP_CHECK_STACK:-1}" = 1 ]; then
  hpo=$work/venv/bin/hpo
  echo "hpo install-stack"
  if "$hpo" install-stack --help >/dev/null 2>&1; then
    "$hpo" install-stack
  else  # the command not registered in this checkout's CLI: the same function
    "$work/venv/bin/python" -c "from hpo.cli.install_stack import install_stack; install_stack()"
  fi
  (cd "$work" && "$hpo" validate "$root/search_spaces/digits_mlp.yaml" --storage "$work/runs")
  echo "one short sweep"
  (cd "$work" && "$hpo" tune "$root/search_spaces/digits_mlp.yaml" --storage "$work/runs" --num-samples 1 \
    --set scheduler.type=fifo --set trial.max_epochs=1 --quiet)
  "$work/venv/bin/python" - "$work/runs/digits-mlp/summary.json" <<'PY'
import json, sys
summary = json.load(open(sys.argv[1]))
assert [t["status"] for t in summary["trials"]] == ["completed"], summary["trials"]
print("sweep ok:", summary["best"]["metric"])
PY
fi
echo "pip install check passed in $((SECONDS - start)) s"
