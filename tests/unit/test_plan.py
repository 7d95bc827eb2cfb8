"""``hpo.plan``: the shape model, the option search and ``hpo plan``, on synthetic past sweeps (no Ray)."""

from __future__ import annotations

import json
import math

import numpy as np
import pytest

import hpo
from hpo.cluster.shapes import NodeShape
from hpo.errors import ConfigError
from hpo.plan import Capacity, Shape, forecast, read_sweep
from hpo.plan.planner import plan
from hpo.plan.shape_model import PRIOR_MEAN, PRIOR_SD, EpochModel, Point
from tests.conftest import ROOT, hpo_cli
from tests.unit.plan_journals import past_sweep, sweep_file

#: One CPU per node, eight nodes: every trial of one worker has a node to itself (no crowding).
NODES = Capacity((NodeShape("n1", {"CPU": 1.0}, 8),), 8, "nodes.yaml")


def shapes(*at_once: int, workers: int = 1) -> list[Shape]:
    return [Shape(workers, m) for m in at_once]


@pytest.fixture
def exact(monkeypatch):
    """No rerun spread on the overheads and the machine's speed: the arithmetic alone."""
    monkeypatch.setattr(forecast, "OVERHEAD_SD", 0.0)
    monkeypatch.setattr(forecast, "MACHINE_SD", 0.0)


# -- history ------------------------------------------------------------------------------------------------


def test_a_past_sweep_is_read_with_its_overheads_and_cold_and_warm_starts(tmp_path):
    d = past_sweep(tmp_path / "p", epochs=[[3.0, 1.0], [2.5, 1.0], [0.5, 1.0]], at_once=2, max_epochs=2,
                   startup_s=4.0, launch_s=1.5, before_s=7.0, after_s=2.0)
    record = read_sweep(d)
    assert record.shape == Shape(1, 2, 0.0, 1.0, 32)
    assert [t.warm for t in record.trials] == [False, False, True]
    assert [t.startup_s for t in record.trials] == pytest.approx([4.0, 4.0, 4.0])
    assert (record.before_s, record.after_s, record.launch_s) == pytest.approx((7.0, 2.0, 1.5))
    # slot 1: 1.5 + 4 + 4 (trial 0) = 9.5; slot 2: 1.5 + 4 + 3.5 (trial 1) = 9.0, then 4 + 1.5 (trial 2)
    assert record.loop_s == pytest.approx(14.5)
    assert record.wall_s == pytest.approx(7.0 + 14.5 + 2.0)
    assert record.epoch_cost == pytest.approx(1.0)


def test_the_hand_over_to_a_freed_slot_counts_into_the_start_up_of_the_trial_that_takes_it(tmp_path):
    d = past_sweep(tmp_path / "p", epochs=[[2.0]] * 4, startup_s=3.0, warm_startup_s=0.5, handover_s=0.25)
    record = read_sweep(d)
    assert [t.startup_s for t in record.trials] == pytest.approx([3.0, 0.75, 0.75, 0.75])
    assert record.loop_s == pytest.approx(3.0 + 2.0 + 3 * (0.25 + 0.5 + 2.0))
    # Planned at its own shape with no overheads outside the loop, the loop's median is the loop it had.
    made = plan(d / "sweep.yaml", history=[d], samples=400)
    own = next(o for o in made.options if (o.workers_per_trial, o.max_concurrent) == (1, 1))
    assert own.wall_s_median == pytest.approx(record.loop_s, rel=0.05)
    # A wait far longer than a hand-over (the slot waited for nodes) is not counted.
    slow = read_sweep(past_sweep(tmp_path / "q", epochs=[[2.0]] * 2, startup_s=3.0, warm_startup_s=0.5,
                                 handover_s=45.0))
    assert [t.startup_s for t in slow.trials] == pytest.approx([3.0, 0.5])


def test_a_pilots_trials_cut_by_its_epoch_cap_are_continued_to_the_sweeps(tmp_path):
    from hpo.plan.history import extended

    record = read_sweep(past_sweep(tmp_path / "p", epochs=[[2.0, 1.0]] * 3, max_epochs=2))
    longer = extended(record, 8, "max", 2, 0.0)
    assert all(2 < len(t.values) <= 8 for t in longer.trials)  # still rising at the cap: they go on
    assert all(len(t.epoch_seconds) == len(t.values) and t.epoch_seconds[-1] == 1.0 for t in longer.trials)
    assert extended(record, 2, "max", 2, 0.0) is record


def test_a_directory_without_a_sweep_is_refused(tmp_path):
    with pytest.raises(ConfigError, match=r"no sweep\.yaml and progress_events\.jsonl there"):
        read_sweep(tmp_path)


# -- the shape model ----------------------------------------------------------------------------------------


def test_the_model_without_other_shapes_is_its_prior_and_widens_with_the_distance():
    model = EpochModel.fit([Point(1, 32, 1.0, 4.0)])
    one = Point(1, 32, 1.0, 4.0)
    mean2, sd2 = model.log_ratio(Point(2, 32, 1.0, 1.0), one)
    mean8, sd8 = model.log_ratio(Point(8, 32, 1.0, 1.0), one)
    assert mean2 == pytest.approx(-PRIOR_MEAN[0] * math.log(2))  # the prior's speed-up, not a straight line
    assert mean8 == pytest.approx(-PRIOR_MEAN[0] * math.log(8))
    assert sd8 > sd2 > model.log_ratio(one, one)[1]  # farther from what was measured: wider


def test_two_measured_worker_counts_fit_the_speed_up_and_narrow_it():
    points = [Point(1, 32, 1.0, 4.0), Point(2, 32, 1.0, 2.2)]
    model = EpochModel.fit(points)
    measured = math.log(4.0 / 2.2) / math.log(2)  # 0.862
    assert abs(model.mean[0] - measured) < abs(PRIOR_MEAN[0] - measured) / 2  # pulled towards the data
    assert math.sqrt(model.cov[0, 0]) < 0.75 * PRIOR_SD[0]
    # the batch's exponent was never measured: its prior is untouched
    assert model.mean[1] == pytest.approx(PRIOR_MEAN[1]) and math.sqrt(model.cov[1, 1]) == pytest.approx(PRIOR_SD[1])


# -- the option search ---------------------------------------------------------------------------------------


def test_twice_the_slots_and_no_start_up_is_half_the_wall_time(tmp_path):
    history = past_sweep(tmp_path / "p", epochs=[[2.0]] * 8)
    result = plan(sweep_file(tmp_path / "s.yaml"), history=[history], shapes=shapes(1, 2, 4), cluster=NODES)
    wall = {o.max_concurrent: o.wall_s_median for o in result.options}
    assert wall[1] == pytest.approx(16.0, rel=0.02)  # 8 trials × 1 epoch × 2 s, one at a time
    assert wall[2] == pytest.approx(wall[1] / 2, rel=1e-9)
    assert wall[4] == pytest.approx(wall[1] / 4, rel=1e-9)
    assert {o.max_concurrent: o.nodes for o in result.options} == {1: {"n1": 1}, 2: {"n1": 2}, 4: {"n1": 4}}


def test_the_commands_overheads_are_added_once(tmp_path, exact):
    bare = plan(sweep_file(tmp_path / "s.yaml"), history=[past_sweep(tmp_path / "a", epochs=[[2.0]] * 8)],
                shapes=shapes(2), cluster=NODES)
    around = plan(sweep_file(tmp_path / "s.yaml"),
                  history=[past_sweep(tmp_path / "b", epochs=[[2.0]] * 8, before_s=5.0, after_s=3.0,
                                      launch_s=1.0)], shapes=shapes(2), cluster=NODES)
    assert around.options[0].wall_s_median == pytest.approx(bare.options[0].wall_s_median + 9.0, rel=1e-9)


def test_a_deadline_between_two_options_picks_the_cheaper_one_that_meets_it(tmp_path):
    history = past_sweep(tmp_path / "p", epochs=[[2.0]] * 8)
    file = sweep_file(tmp_path / "s.yaml", cost={"per_cpu_hour": 3.6})
    candidates = shapes(1, 4) + shapes(2, workers=2)
    result = plan(file, history=[history], shapes=candidates, cluster=NODES, deadline_s=8.0)
    by = {(o.max_concurrent, o.workers_per_trial): o for o in result.options}
    assert by[(1, 1)].wall_s_low > 8.0 > by[(4, 1)].wall_s_high  # the deadline lies between their intervals
    assert by[(1, 1)].p_meet < 0.01 and by[(4, 1)].p_meet > 0.99
    # 2 workers are predicted less than twice as fast: the same trials cost more on them
    assert by[(2, 2)].cost_median > by[(4, 1)].cost_median
    assert result.recommended is by[(4, 1)]
    assert "cheapest option that ends within 8s" in result.why
    # a later deadline: one at a time meets it too, for the same cost on fewer nodes
    later = plan(file, history=[history], shapes=candidates, cluster=NODES, deadline_s=30.0)
    assert later.options[-1].wall_s_high < 30.0
    assert (later.recommended.max_concurrent, later.recommended.workers_per_trial) == (1, 1)


def test_p_meet_rises_with_the_deadline(tmp_path):
    rng = np.random.default_rng(3)
    epochs = [list(rng.uniform(0.5, 2.0, size=int(rng.integers(1, 6)))) for _ in range(10)]
    history = past_sweep(tmp_path / "p", epochs=epochs, max_epochs=5, startup_s=0.5)
    file = sweep_file(tmp_path / "s.yaml", trials=10, max_epochs=5)
    ps = [[o.p_meet for o in plan(file, history=[history], shapes=shapes(1, 2), cluster=NODES, samples=400,
                                  deadline_s=d).options] for d in (5, 10, 15, 20, 30, 45, 60, 120)]
    for option in zip(*ps, strict=True):
        assert list(option) == sorted(option) and option[0] < option[-1]


def test_no_option_meets_the_deadline_the_likeliest_is_named(tmp_path):
    history = past_sweep(tmp_path / "p", epochs=[[2.0]] * 8)
    result = plan(sweep_file(tmp_path / "s.yaml"), history=[history], shapes=shapes(1, 2, 4), cluster=NODES,
                  deadline_s=1.0)
    assert result.recommended.max_concurrent == 4
    assert result.why.startswith("no option ends within 1s with probability ≥ 80%")


def test_without_a_deadline_the_fastest_per_unit_cost_is_recommended(tmp_path, exact):
    history = past_sweep(tmp_path / "p", epochs=[[2.0]] * 8, startup_s=3.0, warm_startup_s=0.0)
    result = plan(sweep_file(tmp_path / "s.yaml"), history=[history], shapes=shapes(1, 2, 4, 8), cluster=NODES)
    assert all(o.p_meet is None for o in result.options)
    by = {o.max_concurrent: o.wall_s_median for o in result.options}
    assert by[8] == pytest.approx(5.0) and by[1] == pytest.approx(3.0 + 8 * 2.0)  # one cold start, 7 warm
    # every slot pays the cold start once: one slot holds least for the time it takes (19 CPU-s against 40)
    assert result.recommended.max_concurrent == 1 and "fastest per unit cost" in result.why


def test_shapes_the_cluster_cannot_hold_are_listed_apart(tmp_path):
    history = past_sweep(tmp_path / "p", epochs=[[2.0]] * 8)
    result = plan(sweep_file(tmp_path / "s.yaml"), history=[history], cluster=NODES, deadline_s=60)
    assert all(o.max_concurrent * o.workers_per_trial <= 8 for o in result.options)
    assert result.too_big and all(s.max_concurrent * s.workers_per_trial > 8 for s in result.too_big)
    assert result.source.kind == "earlier rounds" and result.source.sweeps == ("p",)


def test_the_shipped_gpu_cluster_file_places_gpu_workers_on_its_node_types(tmp_path):
    capacity = Capacity.from_file(ROOT / "cluster" / "aws-gpu.yaml")
    nodes = capacity.place(Shape(4, 2, gpus_per_worker=1.0, cpus_per_worker=4.0))
    assert nodes is not None and sum(nodes.values()) >= 2
    assert capacity.place(Shape(4, 64, gpus_per_worker=1.0, cpus_per_worker=4.0)) is None  # past max_workers


def test_no_history_is_refused_with_what_to_do(tmp_path):
    with pytest.raises(ConfigError, match="--from NAME, or run a pilot with --pilot N"):
        plan(sweep_file(tmp_path / "s.yaml"), history=[])


def test_hpo_plan_is_the_function_and_its_package_loads_no_numpy():
    assert callable(hpo.plan) and hpo.plan.__module__ == "hpo.api"


# -- hpo plan ------------------------------------------------------------------------------------------------


@pytest.fixture
def planned(tmp_path):
    """A storage with an earlier round of sweep 'p', and its sweep file."""
    past_sweep(tmp_path / "runs" / "p", epochs=[[2.0, 1.0]] * 6, max_epochs=2, startup_s=1.0, before_s=4.0,
               after_s=2.0)
    return tmp_path, sweep_file(tmp_path / "s.yaml", trials=6, max_epochs=2)


def test_hpo_plan_prints_the_table_with_the_recommended_option_marked(planned):
    tmp_path, file = planned
    proc = hpo_cli("plan", file, "--deadline", "10m", "--storage", tmp_path / "runs", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "plan for p: 6 trials, deadline in 10m00s, on this machine" in proc.stdout
    assert "→" in proc.stdout and "recommended: " in proc.stdout
    assert "numbers from earlier rounds: p (6 trials at 1×1w b32)" in proc.stdout


def test_hpo_plan_json(planned):
    tmp_path, file = planned
    proc = hpo_cli("plan", file, "--deadline", "10m", "--storage", tmp_path / "runs", "--json", cwd=tmp_path)
    data = json.loads(proc.stdout)
    assert data["deadline_s"] == 600 and data["source"]["kind"] == "earlier rounds"
    chosen = data["options"][data["recommended_index"]]
    assert chosen == data["recommended"] and chosen["p_meet"] >= 0.8
    assert {"workers_per_trial", "gpus_per_worker", "max_concurrent", "nodes", "wall_s_median", "wall_s_low",
            "wall_s_high", "p_meet", "cost_median", "cost_high"} <= set(chosen)


@pytest.mark.parametrize(("args", "message"), [
    (["--deadline", "soon"], "--deadline: 'soon' is neither a duration nor a time; write e.g. 6h"),
    (["--deadline", "2001-01-01T00:00"], "--deadline: 2001-01-01T00:00 has passed;"),
    (["--from", "nope"], "--from: no sweep 'nope' with a progress journal in"),
    (["--pilot", "0"], "--pilot: 0 is no trial; give the pilot's trials"),
])
def test_hpo_plan_bad_input_is_one_line_and_exit_2(planned, args, message):
    tmp_path, file = planned
    proc = hpo_cli("plan", file, "--storage", tmp_path / "runs", *args, cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1 and lines[0].startswith(f"error: {file}: ") and message in lines[0], proc.stderr


def test_hpo_plan_without_history_says_how_to_get_some(tmp_path):
    file = sweep_file(tmp_path / "s.yaml")
    proc = hpo_cli("plan", file, "--storage", tmp_path / "runs", cwd=tmp_path)
    assert proc.returncode == 2
    assert proc.stderr.strip() == (f"error: {file}: (history): no earlier round of sweep 'p' in {tmp_path / 'runs'}; "
                                   "name sweeps of the same model with --from NAME, or run a pilot with --pilot N")


def test_hpo_plan_json_has_the_documented_keys(planned):
    import re

    tmp_path, file = planned
    real = json.loads(hpo_cli("plan", file, "--storage", tmp_path / "runs", "--json", cwd=tmp_path).stdout)
    section = (ROOT / "docs" / "cli.md").read_text().split("### `hpo plan`")[1].split("\n### ")[0]
    documented = json.loads(re.findall(r"```json\n(.*?)```", section, flags=re.S)[0])
    assert set(documented) == set(real)
    assert set(documented["options"][0]) == set(real["options"][0])
    assert set(documented["source"]) == set(real["source"])
    assert real["deadline_s"] is None and all(o["p_meet"] is None for o in real["options"])


def test_the_journal_gets_the_commands_end_after_every_later_exit_handler(tmp_path):
    import subprocess
    import sys

    journal, mark = tmp_path / "progress_events.jsonl", tmp_path / "mark"
    journal.write_text("")
    code = (
        "import atexit, time\n"
        "from pathlib import Path\n"
        "from hpo.progress.journal import record_exit\n"
        "ended = record_exit()\n"
        f"atexit.register(lambda: (time.sleep(0.2), Path({str(mark)!r}).write_text(repr(time.time()))))\n"
        f"Path({str(journal)!r}).write_text('{{\"event\": \"sweep\"}}\\n')\n"  # the sweep writes its journal
        f"ended(Path({str(journal)!r}))\n"
    )
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=60)
    sweep, event = [json.loads(line) for line in journal.read_text().splitlines()]
    assert sweep == {"event": "sweep"}
    assert event["event"] == "exit" and event["t"] >= float(mark.read_text())


def test_a_command_that_wrote_nothing_to_the_journal_leaves_it_as_it_was(tmp_path):
    import os
    import subprocess
    import sys

    journal = tmp_path / "progress_events.jsonl"
    journal.write_text('{"event": "sweep"}\n')
    os.utime(journal, (1_000_000_000, 1_000_000_000))  # written by an earlier command
    code = ("from pathlib import Path\nfrom hpo.progress.journal import record_exit\n"
            f"record_exit()(Path({str(journal)!r}))\n")
    subprocess.run([sys.executable, "-c", code], check=True, cwd=ROOT, timeout=60)
    assert journal.read_text() == '{"event": "sweep"}\n'  # a --resume of a finished sweep changes nothing
