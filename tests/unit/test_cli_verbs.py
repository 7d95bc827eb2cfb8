"""The CLI's verbs and conventions: --version, -h, command order, list, stop, init, --json, --offline, env vars,
TensorFlow's start-up lines (no sweep is run here; `hpo stop` stops a real child process that holds hpo's
interrupt handler and driver record, as a sweep's driver does)."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pandas as pd
import pytest
import typer
import yaml

import hpo
from hpo.cli.main import app
from hpo.driver import DRIVER_FILE, read_driver
from hpo.progress.live import PROGRESS_FILE, SweepProgress
from tests.conftest import ROOT, hpo_cli

MLP = str(ROOT / "search_spaces" / "digits_mlp.yaml")


def one_line_error(proc: subprocess.CompletedProcess) -> str:
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert len(lines) == 1, proc.stderr
    return lines[0]


def command_paths() -> list[list[str]]:
    """Every command and group of the CLI, as argument lists (the root is [])."""
    paths: list[list[str]] = []

    def walk(cmd, path):
        paths.append(path)
        for name in getattr(cmd, "commands", {}):
            walk(cmd.commands[name], [*path, name])

    walk(typer.main.get_command(app), [])
    return paths


# -- version, help, order ------------------------------------------------------------------------------


def test_version_long_and_short(tmp_path):
    for flag in ("--version", "-V"):
        proc = hpo_cli(flag, cwd=tmp_path)
        assert proc.returncode == 0 and proc.stdout == f"hpo {hpo.__version__}\n"


@pytest.mark.parametrize("path", command_paths(), ids=lambda p: " ".join(p) or "hpo")
def test_dash_h_is_help_on_every_command(tmp_path, path):
    short, long = hpo_cli(*path, "-h", cwd=tmp_path), hpo_cli(*path, "--help", cwd=tmp_path)
    assert short.returncode == long.returncode == 0
    assert short.stdout == long.stdout and "Usage:" in short.stdout


def test_commands_are_listed_in_the_order_a_user_needs_them(tmp_path):
    help_text = hpo_cli("--help", cwd=tmp_path).stdout
    order = ["tune", "validate", "status", "plan", "report", "list", "stop", "repeat", "ui", "sync", "init", "data",
             "cluster"]
    rows = [line.strip("│ ").split(" ")[0] for line in help_text.splitlines() if line.startswith("│ ")]
    assert [name for name in rows if name in order] == order
    assert "--install-completion" in help_text and "--show-completion" in help_text  # completion is on


# -- tune's flags, env vars --------------------------------------------------------------------------------


def test_quiet_with_json_progress_is_refused(tmp_path):
    assert one_line_error(hpo_cli("tune", MLP, "--quiet", "--json-progress", cwd=tmp_path)) == (
        f"error: {MLP}: --quiet: cannot be combined with --json-progress; pass one of them")


def _summary(name: str, status: str = "finished", best: float | None = 0.9) -> dict:
    trial = {"trial_id": "t1", "status": "completed", "epochs": 3, "metric": best, "params": {"units": 16}}
    return {"name": name, "status": status, "objective": {"metric": "val_accuracy", "mode": "max"},
            "best": {"trial_id": "t1", "params": {"units": 16}, "metric": best} if best is not None else None,
            "statistics": None, "trials": [trial, {**trial, "trial_id": "t2", "metric": 0.5}],
            "mlflow": {"uri": "sqlite:///x.db"}, "wall_time_s": 3.0}


def _write_summary(storage: Path, name: str, **kwargs) -> None:
    (storage / name).mkdir(parents=True, exist_ok=True)
    (storage / name / "summary.json").write_text(json.dumps(_summary(name, **kwargs)))


def test_hpo_storage_env_var_sets_storage(tmp_path, monkeypatch):
    runs = tmp_path / "elsewhere"
    _write_summary(runs, "envsweep")
    assert hpo_cli("report", "envsweep", cwd=tmp_path).returncode == 2  # ./hpo_runs has no such sweep
    monkeypatch.setenv("HPO_STORAGE", str(runs))
    proc = hpo_cli("report", "envsweep", "--json", cwd=tmp_path)
    assert proc.returncode == 0 and json.loads(proc.stdout)["name"] == "envsweep"
    assert hpo_cli("report", "envsweep", "--storage", str(tmp_path / "none"), cwd=tmp_path).returncode == 2  # flag wins


def test_hpo_mlflow_uri_env_var_reaches_validate(tmp_path, monkeypatch):
    monkeypatch.setenv("HPO_MLFLOW_URI", "http://127.0.0.1:9")  # nothing listens on the discard port
    line = one_line_error(hpo_cli("validate", MLP, cwd=tmp_path))
    assert "127.0.0.1:9" in line
    proc = hpo_cli("validate", MLP, "--mlflow-uri", "sqlite:///ok.db", cwd=tmp_path)  # the flag wins
    assert proc.returncode == 0, proc.stderr


# -- validate --offline / --json, cluster validate --json ---------------------------------------------------------


def test_validate_offline_skips_only_the_mlflow_check(tmp_path):
    down = ["--set", "tracking.mlflow_uri=http://127.0.0.1:9"]
    line = one_line_error(hpo_cli("validate", MLP, *down, cwd=tmp_path))
    assert "tracking.mlflow_uri" in line or "127.0.0.1:9" in line
    proc = hpo_cli("validate", MLP, *down, "--offline", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert "ok — sweep 'digits-mlp'" in proc.stdout
    bad_model = hpo_cli("validate", MLP, *down, "--offline", "--set", "model=hpo.models.mlp:nope", cwd=tmp_path)
    assert "model: module 'hpo.models.mlp' has no function 'nope'" in one_line_error(bad_model)  # still checked


def test_validate_json_is_one_object(tmp_path):
    proc = hpo_cli("validate", MLP, "--offline", "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["ok"] is True and data["offline"] is True and data["file"] == MLP
    assert data["sweeps"] == [{"partition": None, "name": "digits-mlp", "parameters": 5, "algorithm": "optuna-tpe",
                               "scheduler": "asha", "trials": 8, "workers": 2, "train_rows": 1438,
                               "validation_rows": 359, "features": 64}]


def test_cluster_validate_json(tmp_path):
    path = ROOT / "cluster" / "aws-gpu.yaml"
    proc = hpo_cli("cluster", "validate", str(path), "--json", "--template", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    from hpo.cluster import validate_cluster_file

    info = validate_cluster_file(path, template=True)
    assert data["ok"] is True and data["name"] == info.name and data["provider"] == info.provider
    assert [t["name"] for t in data["gpu_types"]] == [t.name for t in info.gpu_types]
    assert data["gpu_types"][0]["resources"]["GPU"] >= 1


#: A ``statistics`` section as hpo writes it (one configuration of two repeats).
STATISTICS = {"winner": '{"units": 16}', "significant": False, "test": "t", "alpha": 0.05, "verdict": "wins",
              "configurations": [{"rank": 1, "params": {"units": 16}, "n": 2, "mean": 0.9, "std": 0.01,
                                  "ci_low": 0.8, "ci_high": 1.0, "p_value": None}]}


def test_repeat_json_carries_the_summary_verdict():
    from hpo.cli.main import repeat_json
    from hpo.sweep_summary import SweepSummary

    summary = _summary("s-repeat") | {"repeat_of": "s", "statistics": STATISTICS}
    assert repeat_json(SweepSummary.model_validate(summary), "/r/s-repeat/summary.json") == {
        "name": "s-repeat", "repeat_of": "s", "status": "finished", "summary": "/r/s-repeat/summary.json",
        "best": summary["best"], "verdict": "wins", "configurations": STATISTICS["configurations"]}


# -- list -----------------------------------------------------------------------------------------------------------


def _progress(storage: Path, name: str, age_s: float) -> None:
    from hpo.progress import SweepPlan

    plan = SweepPlan(planned_trials=4, max_concurrent=2, max_epochs=10, mode="max", patience=2, cpus_per_trial=1.0,
                     scheduler="fifo")
    now = time.time() - age_s
    progress = SweepProgress(name, "val_accuracy", plan, started=now - 10)
    progress.start("r1", {"units": 8}, now=now - 5)
    progress.result("r1", 1, 0.7, 1.0, now=now - 1)
    (storage / name).mkdir(parents=True, exist_ok=True)
    snapshot = progress.snapshot(now=now, state="running", estimate=False)
    (storage / name / PROGRESS_FILE).write_text(json.dumps(snapshot.to_dict(), default=str))


def test_list_reads_a_shared_storage(tmp_path):
    """A file:// storage is shared: a sweep another driver ran is found by its copy in STORAGE/NAME/_driver."""
    shared = tmp_path / "shared"
    (shared / "remote-sweep" / "_driver").mkdir(parents=True)
    (shared / "remote-sweep" / "_driver" / "summary.json").write_text(json.dumps(_summary("remote-sweep")))
    (shared / "_data").mkdir()
    proc = hpo_cli("list", "--storage", shared.as_uri(), "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["storage"] == shared.as_uri()
    assert [(s["name"], s["state"], s["best"]) for s in data["sweeps"]] == [("remote-sweep", "finished", 0.9)]


def test_list_shows_every_sweep_with_its_state(tmp_path):
    runs = tmp_path / "runs"
    _write_summary(runs, "done")
    _write_summary(runs, "halted", status="interrupted", best=None)
    _progress(runs, "live", age_s=1)
    _progress(runs, "gone", age_s=600)  # a driver killed outright: no summary, no update for 10 minutes
    (runs / "_data").mkdir()  # hpo's own directories are no sweeps
    (runs / "notes").mkdir()
    proc = hpo_cli("list", "--storage", str(runs), "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    data = json.loads(proc.stdout)
    assert data["storage"] == str(runs)
    rows = {row["name"]: row for row in data["sweeps"]}
    assert list(rows) == ["done", "gone", "halted", "live"]
    assert {name: row["state"] for name, row in rows.items()} == {
        "done": "finished", "gone": "stale", "halted": "interrupted", "live": "running"}
    assert rows["done"]["best"] == 0.9 and rows["done"]["trials"] == 2 and rows["done"]["metric"] == "val_accuracy"
    assert rows["halted"]["best"] is None and rows["live"]["trials"] == 1
    table = hpo_cli("list", "--storage", str(runs), cwd=tmp_path).stdout
    assert "val_accuracy=0.9000" in table and "stale" in table
    empty = hpo_cli("list", "--storage", str(tmp_path / "nothing"), cwd=tmp_path)
    assert empty.returncode == 0 and "no sweeps in" in empty.stdout


# -- stop -----------------------------------------------------------------------------------------------------------

DRIVER = """
import sys, time
from pathlib import Path
from hpo.driver import recorded_driver
from hpo.interrupt import Interruption
interrupt = None
try:
    with Interruption() as interrupt, recorded_driver(Path(sys.argv[1])):
        print("ready", flush=True)
        while True:
            time.sleep(0.05)
except KeyboardInterrupt:  # what a sweep's driver does before Tune's loop runs: write up, exit 128 + signal
    time.sleep(0.5)
    (Path(sys.argv[1]) / "summary.json").write_text('{"status": "interrupted", "trials": []}')
    sys.exit(128 + interrupt.signum)
"""


def test_stop_sends_the_drivers_stop_signal_and_waits(tmp_path):
    runs = tmp_path / "runs"
    state = runs / "busy"
    env = {**os.environ, "PYTHONPATH": f"{ROOT}{os.pathsep}{os.environ.get('PYTHONPATH', '')}"}
    child = subprocess.Popen([sys.executable, "-c", DRIVER, str(state)], stdout=subprocess.PIPE, text=True, env=env)
    try:
        assert child.stdout.readline().strip() == "ready"
        record = read_driver(state)
        assert record is not None and record.pid == child.pid and record.host == socket.gethostname()
        listed = json.loads(hpo_cli("list", "--storage", str(runs), "--json", cwd=tmp_path).stdout)
        assert listed["sweeps"][0]["name"] == "busy" and listed["sweeps"][0]["state"] == "running"
        again = hpo_cli("tune", MLP, "--name", "busy", "--storage", str(runs), "--overwrite", cwd=tmp_path)
        assert one_line_error(again) == (f"error: {MLP}: name: sweep 'busy' is running (pid {child.pid}); stop it "
                                         "first with 'hpo stop busy', or pass --name to start another one")
        proc = hpo_cli("stop", "busy", "--storage", str(runs), "--wait", cwd=tmp_path)
        assert proc.returncode == 0, proc.stderr
        assert proc.stdout.splitlines() == [
            f"busy: sent SIGTERM to its driver (pid {child.pid}); the running trials stop and keep their last "
            "checkpoint", "busy: stopped; see 'hpo status busy'"]
        assert child.poll() == 128 + signal.SIGTERM  # --wait returned after the driver ended; a sweep's exit: 143
        assert (state / "summary.json").is_file()
    finally:
        if child.poll() is None:
            child.kill()
            child.wait()
    assert not (state / DRIVER_FILE).exists()  # the driver removed its record
    line = one_line_error(hpo_cli("stop", "busy", "--storage", str(runs), cwd=tmp_path))
    assert line == "error: busy: not running (no driver.json); nothing to stop, see 'hpo status busy'"


def test_stop_refuses_unknown_ended_and_remote_sweeps(tmp_path):
    runs = tmp_path / "runs"
    assert one_line_error(hpo_cli("stop", "nosuch", "--storage", str(runs), cwd=tmp_path)) == (
        f"error: nosuch: no sweep of this name in {runs}; see 'hpo list' or pass --storage")
    _write_summary(runs, "done")
    assert one_line_error(hpo_cli("stop", "done", "--storage", str(runs), cwd=tmp_path)) == (
        "error: done: not running (no driver.json); nothing to stop, see 'hpo status done'")
    dead = subprocess.run([sys.executable, "-c", "import os; print(os.getpid())"], capture_output=True, text=True)
    record = {"pid": int(dead.stdout), "host": socket.gethostname(), "started": time.time() - 5}
    (runs / "done" / DRIVER_FILE).write_text(json.dumps(record))  # left by a driver killed outright
    assert one_line_error(hpo_cli("stop", "done", "--storage", str(runs), cwd=tmp_path)) == (
        f"error: done: not running (its driver, pid {record['pid']}, has ended); "
        "'hpo tune FILE --resume' continues it")
    (runs / "done" / DRIVER_FILE).write_text(json.dumps({**record, "host": "gpu-node-7"}))
    assert one_line_error(hpo_cli("stop", "done", "--storage", str(runs), cwd=tmp_path)) == (
        f"error: done: its driver runs on host gpu-node-7 (pid {record['pid']}); run 'hpo stop done' there")


# -- init -----------------------------------------------------------------------------------------------------------


def test_init_without_data_writes_a_sweep_that_validates(tmp_path):
    proc = hpo_cli("init", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["wrote sweep.yaml and my_model.py (classification); next:",
                                        "  hpo validate sweep.yaml", "  hpo tune sweep.yaml"]
    assert yaml.safe_load((tmp_path / "sweep.yaml").read_text())["data"]["train"] == "builtin:digits"
    checked = hpo_cli("validate", "sweep.yaml", "--offline", cwd=tmp_path)
    assert checked.returncode == 0, checked.stderr
    assert "ok — sweep 'my-sweep'" in checked.stdout


def test_init_refuses_to_write_over_any_file(tmp_path):
    (tmp_path / "my_model.py").write_text("# mine\n")
    assert one_line_error(hpo_cli("init", cwd=tmp_path)) == (
        "error: my_model.py: exists already; hpo init writes no file over another, "
        "so move it away or run 'hpo init' in a new directory")
    assert not (tmp_path / "sweep.yaml").exists()  # nothing written
    assert (tmp_path / "my_model.py").read_text() == "# mine\n"


@pytest.mark.parametrize(("suffix", "labels", "task"), [
    (".csv", np.arange(120) % 3, "classification"),
    (".parquet", np.linspace(0.0, 2.0, 120), "regression"),
    (".npz", np.arange(120) % 2, "classification"),
])
def test_init_for_own_data_then_convert_then_validate(tmp_path, suffix, labels, task):
    rng = np.random.default_rng(0)
    features = rng.normal(size=(120, 5)).astype("float32")
    path = tmp_path / f"my table{suffix}"
    if suffix == ".npz":
        np.savez(path, features=features, target=labels)
    else:
        frame = pd.DataFrame(features, columns=[f"f{i}" for i in range(5)]).assign(target=labels)
        frame.to_csv(path, index=False) if suffix == ".csv" else frame.to_parquet(path)
    missing = one_line_error(hpo_cli("init", "--data", str(path), cwd=tmp_path))
    assert missing.startswith(f"error: {path}: --label: required (columns: ") and "target" in missing
    proc = hpo_cli("init", "--data", str(path), "--label", "target", "--name", "mine", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    lines = proc.stdout.splitlines()
    assert lines[0] == f"wrote sweep.yaml and my_model.py ({task}); next:"
    convert = lines[1].strip()
    assert convert.startswith("hpo data convert ") and lines[2:] == ["  hpo validate sweep.yaml",
                                                                       "  hpo tune sweep.yaml"]
    assert convert in (tmp_path / "sweep.yaml").read_text()  # the file says it too
    assert one_line_error(hpo_cli("validate", "sweep.yaml", "--offline", cwd=tmp_path)).startswith(
        "error: sweep.yaml: data.train: ")  # not converted yet
    import shlex

    converted = hpo_cli(*shlex.split(convert)[1:], cwd=tmp_path)
    assert converted.returncode == 0, converted.stderr
    checked = hpo_cli("validate", "sweep.yaml", "--offline", "--json", cwd=tmp_path)
    assert checked.returncode == 0, checked.stderr
    sweep = json.loads(checked.stdout)["sweeps"][0]
    assert sweep["name"] == "mine" and sweep["features"] == 5 and sweep["train_rows"] + sweep["validation_rows"] == 120
    objective = yaml.safe_load((tmp_path / "sweep.yaml").read_text())["objective"]
    assert objective == ({"metric": "val_accuracy", "mode": "max"} if task == "classification"
                         else {"metric": "val_mae", "mode": "min"})


def test_init_for_a_converted_dataset_needs_no_convert_step(tmp_path):
    frame = pd.DataFrame(np.random.default_rng(1).normal(size=(80, 3)), columns=["a", "b", "c"])
    frame.assign(target=np.linspace(0.0, 1.0, 80)).to_csv(tmp_path / "t.csv", index=False)
    made = hpo_cli("data", "convert", "t.csv", "ds", "--label", "target", "--task", "regression",
                   "--validation-fraction", "0.25", cwd=tmp_path)
    assert made.returncode == 0, made.stderr
    proc = hpo_cli("init", "--data", "ds", "--label", "target", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.splitlines() == ["wrote sweep.yaml and my_model.py (regression); next:",
                                        "  hpo validate sweep.yaml", "  hpo tune sweep.yaml"]
    data = yaml.safe_load((tmp_path / "sweep.yaml").read_text())["data"]
    ds = tmp_path / "ds"
    assert data == {"train": (ds / "train").as_uri(), "validation": (ds / "validation").as_uri(), "label": "target",
                    "task": "regression"}
    checked = hpo_cli("validate", "sweep.yaml", "--offline", cwd=tmp_path)
    assert checked.returncode == 0, checked.stderr


def test_init_model_builds_for_both_tasks(tmp_path):
    hpo_cli("init", cwd=tmp_path)
    from hpo.trial.spec import resolve_model

    before = os.getcwd()
    os.chdir(tmp_path)
    try:
        build = resolve_model("my_model:build")
    finally:
        os.chdir(before)
        sys.modules.pop("my_model", None)
    params = {"units": 16, "layers": 2, "dropout": 0.1}
    assert build(params, (8, 8, 1), 10).output_shape == (None, 10)
    assert build(params, (5,), None).output_shape == (None, 1)


def test_init_with_an_unknown_label_or_file(tmp_path):
    pd.DataFrame({"a": [1.0, 2.0], "y": [0, 1]}).to_csv(tmp_path / "d.csv", index=False)
    assert one_line_error(hpo_cli("init", "--data", "d.csv", "--label", "z", cwd=tmp_path)) == (
        "error: d.csv: --label: no column 'z' (columns: a, y); pass --label with the one to predict")
    assert one_line_error(hpo_cli("init", "--data", "nope.csv", "--label", "y", cwd=tmp_path)) == (
        "error: nope.csv: --data: no such file or directory; pass a .csv, .parquet or .npz file")


# -- TensorFlow's start-up lines, the optuna-dashboard hint ------------------------------------------------------


def test_tensorflow_startup_lines_are_noise_and_other_lines_pass(capfd):
    from hpo.cli.native_logs import filtered_stderr, is_noise

    assert is_noise("WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n")
    assert is_noise("I0000 00:00:1795685734.941825   19138 cudart_stub.cc:31] Could not find cuda drivers on your "
                    "machine, GPU will not be used.")
    assert not is_noise("E0000 00:00:1795685740.167359    2751 cuda_platform.cc:52] failed call to cuInit: INTERNAL")
    assert not is_noise("UserWarning: something of the user's")
    with filtered_stderr():
        os.write(2, b"WARNING: All log messages before absl::InitializeLog() is called are written to STDERR\n")
        os.write(2, b"I0000 00:00:1.5   1 port.cc:153] oneDNN custom operations are on.\n")
        os.write(2, b"a line of the user's\n")
    assert capfd.readouterr().err == "a line of the user's\n"


def test_the_sweep_header_names_optuna_dashboard_only_where_it_is_installed(tmp_path):
    import importlib.util

    from hpo.config import load_sweep
    from hpo.options import RunOptions
    from hpo.progress.setup import header

    config = load_sweep(MLP)
    study = header(config, RunOptions(tmp_path / "runs"), 8).study
    installed = importlib.util.find_spec("optuna_dashboard") is not None
    assert study.startswith("optuna-dashboard sqlite:///") if installed else study == ""
