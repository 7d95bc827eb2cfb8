"""Shared fixtures: paths and a sweep-file writer."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest
import yaml

from hpo import _env
from hpo.cluster.launch import kill_tree  # noqa: F401 - the test clusters' teardown, by PID

_env.apply()  # TF_USE_LEGACY_KERAS before TensorFlow loads
# Every Ray the tests start (in process, ``ray start``, a CLI subprocess) starts no idle workers ahead of need:
# a test cluster of 2 CPUs would otherwise start 2 to 4 of them at every start, importing Ray for nothing.
os.environ.setdefault("RAY_enable_worker_prestart", "0")
os.environ.setdefault("RAY_prestart_worker_first_driver", "0")

ROOT = Path(__file__).resolve().parents[1]
HPO = str(Path(sys.executable).with_name("hpo"))
#: Integration modules, slowest first (``make test --durations``). ``make test`` hands whole modules to its
#: two processes in collection order (``--dist loadscope --no-loadscope-reorder``): the long ones start
#: first and the hundreds of short unit tests, collected last, fill the end, so both processes finish
#: together instead of one running the last long module alone.
SLOWEST_FIRST = (
    "test_mlflow", "test_search_contract", "test_two_nodes", "test_queue", "test_interrupt", "test_trial_runtime",
    "test_notebooks", "test_partition_cli", "test_cluster", "test_cluster_up", "test_examples",
    "test_schedulers_real",
    "test_sweep", "test_plan_real", "test_kinds_sweep", "test_storage_stalls", "test_resume", "test_data_sweep",
    "test_horovod_build",
)


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """Orders the slow integration modules first (see :data:`SLOWEST_FIRST`); the order inside a module stays."""
    def rank(item: pytest.Item) -> int:
        path = Path(str(item.fspath))
        if path.parent.name == "integration" and path.stem in SLOWEST_FIRST:
            return SLOWEST_FIRST.index(path.stem)
        return len(SLOWEST_FIRST)

    items.sort(key=rank)


def hpo_cli(*args: str, cwd: Path) -> subprocess.CompletedProcess:
    """Runs an ``hpo`` command in this process, in ``cwd``, as the executable would (exit code, stdout, stderr).

    The same commands and error handling as the ``hpo`` executable, without a new interpreter importing
    TensorFlow for every call; ``tests/unit/test_cli.py`` runs the executable itself too.
    """
    from typer.testing import CliRunner

    from hpo.cli.main import app

    before = os.getcwd()
    os.chdir(cwd)
    try:
        result = CliRunner().invoke(app, [str(a) for a in args])
    finally:
        os.chdir(before)
    if result.exception is not None and not isinstance(result.exception, SystemExit):
        raise result.exception
    return subprocess.CompletedProcess(["hpo", *args], result.exit_code, result.stdout, result.stderr)


#: The blocks of :func:`quiet_ports`, one per kind of user. A test cluster's worker-port range is free until
#: its workers start, so a server that picked a port free at that moment inside it (the restarted MLflow
#: server of one test process, inside the two-node cluster of the other) took a Ray worker's port: the
#: sweep's writes went to a gRPC server and the cluster's workers could not start. Disjoint blocks rule it out.
QUIET_BLOCKS = {"server": (20000, 24000), "cluster": (24000, None)}


def quiet_ports(count: int, block: str) -> list[int]:
    """``count`` consecutive TCP ports, free now, in ``block`` of the range from 20000 to the ephemeral one.

    No process is handed these by chance: a bind to port 0 (Ray's gRPC servers, every client socket) gets
    a port of the ephemeral range, and Ray's default worker ports are 10002-19999. A test server that is
    killed and restarted on the same port (``block="server"``), or a test cluster whose every port is
    explicit (``block="cluster"``), takes its ports here, so that the other test process of ``make test``
    cannot take them in between.
    """
    import random
    import socket

    ephemeral = int(Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()[0])
    first, end = QUIET_BLOCKS[block]
    for start in random.sample(range(first, min(end or ephemeral, ephemeral) - count), 200):
        try:
            for port in range(start, start + count):
                with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
                    sock.bind(("127.0.0.1", port))
        except OSError:
            continue
        return list(range(start, start + count))
    raise RuntimeError(f"no {count} free ports in the quiet block '{block}'")


def ensure_ray_token(ray_cli: str) -> None:
    """Makes Ray's default auth token (``~/.ray/auth_token``) if the machine has none yet.

    A head started by ``ray start`` on a machine without a token generates one itself; made once up front,
    every node, driver and probe of a test cluster presents the same token from its first call.
    """
    if os.environ.get("RAY_AUTH_TOKEN") or os.environ.get("RAY_AUTH_TOKEN_PATH"):
        return
    if not (Path.home() / ".ray" / "auth_token").exists():
        subprocess.run([ray_cli, "get-auth-token", "--generate"], check=True, capture_output=True, timeout=60)


def benchmark_script(path: str, name: str) -> Any:
    """The benchmark script ``path`` (under the repository root) imported as module ``name``.

    ``benchmarks/`` goes on ``sys.path`` (the scripts import their ``_report`` helper) and the module into
    ``sys.modules`` (dataclasses look their module up).
    """
    import importlib.util

    if str(ROOT / "benchmarks") not in sys.path:
        sys.path.insert(0, str(ROOT / "benchmarks"))
    spec = importlib.util.spec_from_file_location(name, ROOT / path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def base_sweep(**changes: Any) -> dict[str, Any]:
    """A small valid sweep as a mapping; ``changes`` replace top-level sections."""
    sweep: dict[str, Any] = {
        "name": "t",
        "model": "hpo.models.mlp:build",
        "data": {"train": "builtin:digits"},
        "space": {"learning_rate": {"type": "float", "low": 0.001, "high": 0.1, "log": True}},
    }
    sweep.update(changes)
    return sweep


@pytest.fixture
def write_sweep(tmp_path: Path):
    """Writes a mapping as a YAML sweep file and returns its path."""

    def write(data: dict[str, Any], name: str = "sweep.yaml") -> Path:
        path = tmp_path / name
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        return path

    return write


@pytest.fixture
def in_tmp(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    """Runs the test inside its tmp dir (sqlite:///mlflow.db and hpo_runs land there)."""
    monkeypatch.chdir(tmp_path)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    return tmp_path
