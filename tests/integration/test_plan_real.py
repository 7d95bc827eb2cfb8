"""``hpo plan`` against a real sweep: plan a shape from another shape's real sweep, then run it and compare.

One real sweep (3 trials of one Horovod worker, 2 epochs, one at a time), ``hpo plan --from`` it for two
trials at once, then that shape for real: its wall time, from the command's start to its end, must fall in
the 80 % interval the plan printed. This check can fail on a sound plan: in ``benchmarks/plan.py``
(``benchmarks/results/plan.json``) the interval held the real wall time in 21 of 24 held-out pairs recorded
with nothing else running (88 %), and in 14 of 48 pairs recorded on a machine shared with other work, whose
load changed between sweeps (the same sweep file took 26 s and 50-61 s minutes apart): the plan's spreads
are a dedicated machine's. Expect it to miss about one run in five to eight when it runs alone, and most
runs while other work starts or stops beside it (``make test`` runs two test processes side by side): so it
is marked ``calibration``, left out of ``make test``, and run alone with ``pytest -m calibration``.
"""

from __future__ import annotations

import json
import subprocess
import time

import pytest
import yaml

from tests.conftest import HPO, ROOT

pytestmark = [pytest.mark.slow, pytest.mark.calibration]
SMALL = ROOT / "tests" / "integration" / "sweeps" / "small.yaml"


def sweep(at_once: int) -> dict:
    data = yaml.safe_load(SMALL.read_text())
    data["name"] = f"plan-{at_once}"
    data["search"].update(num_samples=3, max_concurrent=at_once, seed=5)
    data["trial"].update(workers=1, cpus_per_worker=1.0, max_epochs=2)
    return data


def tune(file, runs) -> None:
    proc = subprocess.run([HPO, "tune", str(file), "--storage", str(runs), "--quiet"], cwd=runs.parent,
                          capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]


def test_a_planned_shape_run_for_real_ends_inside_the_printed_interval(tmp_path):
    runs = tmp_path / "runs"
    first, second = tmp_path / "one.yaml", tmp_path / "two.yaml"
    first.write_text(yaml.safe_dump(sweep(1)))
    second.write_text(yaml.safe_dump(sweep(2)))
    tune(first, runs)
    proc = subprocess.run([HPO, "plan", str(second), "--from", "plan-1", "--storage", str(runs), "--json"],
                          cwd=tmp_path, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
    planned = json.loads(proc.stdout)
    assert planned["source"] == {**planned["source"], "kind": "from", "sweeps": ["plan-1"], "trials": 3}
    option = next(o for o in planned["options"] if (o["max_concurrent"], o["workers_per_trial"]) == (2, 1))
    began = time.time()
    tune(second, runs)
    real = time.time() - began
    assert option["wall_s_low"] <= real <= option["wall_s_high"], (real, option)


def test_a_pilot_runs_real_trials_at_two_shapes_and_the_plan_learns_from_them(tmp_path):
    """``hpo plan --pilot 2``: two real pilot sweeps (the file's 2 workers per trial and 1), then a plan from
    their journals. Nothing here can miss by design; it sits in this module because each pilot is a real sweep
    (minutes on a shared 2-core machine), too slow for ``make test``."""
    runs = tmp_path / "runs"
    file = tmp_path / "pilot.yaml"
    data = yaml.safe_load(SMALL.read_text())
    data["name"] = "pilot"
    file.write_text(yaml.safe_dump(data))
    proc = subprocess.run([HPO, "plan", str(file), "--pilot", "2", "--deadline", "2h", "--storage", str(runs),
                           "--json"], cwd=tmp_path, capture_output=True, text=True, timeout=900)
    assert proc.returncode == 0, proc.stderr[-3000:]
    planned = json.loads(proc.stdout.strip().splitlines()[-1])
    source = planned["source"]
    assert source["kind"] == "pilot" and source["trials"] == 4, source  # 2 trials at each of 2 shapes
    assert {s["workers_per_trial"] for s in source["shapes"]} == {1, 2}
    assert all((runs / name / "progress_events.jsonl").is_file() for name in source["sweeps"])  # really run
    measured = {(o["max_concurrent"], o["workers_per_trial"]) for o in planned["options"] if o["measured"]}
    assert (1, 2) in measured and (1, 1) in measured
    assert planned["recommended"] is not None and planned["recommended"]["p_meet"] is not None
