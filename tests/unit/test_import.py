"""``import hpo`` leaves the caller's process as it was; the import graph points one way."""

from __future__ import annotations

import ast
import os
import subprocess
import sys
from pathlib import Path

from tests.conftest import ROOT

_PROBE = """
import logging, os, sys, warnings
env, filters, path = dict(os.environ), list(warnings.filters), list(sys.path)
levels = {n: logging.getLogger(n).level for n in ("ray.tune", "alembic")}
import hpo
hpo.load_sweep  # the API is there
assert dict(os.environ) == env, set(os.environ.items()) ^ set(env.items())
assert list(warnings.filters) == filters
assert list(sys.path) == path
assert {n: logging.getLogger(n).level for n in levels} == levels
assert "tensorflow" not in sys.modules and "horovod" not in sys.modules and "ray" not in sys.modules
assert "petastorm" not in sys.modules  # a pip install without the stack imports hpo (preflight says what is missing)
print("clean")
"""


def test_import_hpo_changes_nothing_in_the_callers_process():
    env = {k: v for k, v in os.environ.items() if not k.startswith(("TF_", "RAY_", "TUNE_", "MLFLOW_", "PYTHONWARN"))}
    proc = subprocess.run([sys.executable, "-c", _PROBE], cwd=ROOT, env=env, capture_output=True, text=True,
                          timeout=120)
    assert proc.returncode == 0 and "clean" in proc.stdout, proc.stderr[-2000:]


#: Layers from the top: a module may import its own layer's modules and any lower layer, never a higher one.
LAYERS = [
    {"cli"},
    {"api"},
    {"partition"},
    {"sweep", "deadline"},
    {"tuner"},
    {"preflight", "summary", "ray_session", "progress", "rerun", "report", "queue", "replay", "plan"},
    {"search", "trial", "tracking", "cluster", "repeats", "interrupt", "driver"},
    {"data", "models", "compat", "stack_check", "memory"},
    {"config", "kinds", "cutoffs", "objective", "stats", "options", "storage", "object_store", "errors",
     "_env", "trial.protocol", "writable", "sweep_summary", "data.sources", "results",
     "queue.entry", "queue.store"},
]


def _layer(module: str) -> int:
    parts = module.split(".")[1:]
    for i, names in enumerate(LAYERS):
        if ".".join(parts[:2]) in names:
            return i
    for i, names in enumerate(LAYERS):
        if parts[0] in names:
            return i
    top = parts[0]
    raise AssertionError(f"hpo.{top} is in no layer of this test; add it to LAYERS")


def _imports(path: Path) -> set[str]:
    out = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.ImportFrom) and node.module and node.module.startswith("hpo"):
            names = [f"{node.module}.{a.name}" for a in node.names] if node.module == "hpo" else [node.module]
            out.update(n for n in names if n.count(".") >= 1)
        elif isinstance(node, ast.Import):
            out.update(a.name for a in node.names if a.name.startswith("hpo."))
    return out


def test_imports_point_down_the_layers():
    wrong = []
    for path in sorted((ROOT / "hpo").rglob("*.py")):
        module = ".".join(path.relative_to(ROOT).with_suffix("").parts).removesuffix(".__init__")
        if module == "hpo":
            continue
        mine = _layer(module)
        for target in _imports(path):
            if target.split(".")[1] == module.split(".")[1] and _layer(target) == mine:
                continue
            if _layer(target) < mine:
                wrong.append(f"{module} imports {target}")
    assert not wrong, wrong


def test_the_install_leaves_out_what_the_reader_never_uses():
    # Petastorm 0.13.1 declares pyspark (~0.5 GB); scripts/install_petastorm.sh installs it without, and
    # its reader imports without it.
    import importlib.util

    from petastorm.reader import Reader  # noqa: F401

    assert importlib.util.find_spec("pyspark") is None


def test_the_cli_starts_without_the_heavy_stack():
    """``hpo status`` / ``report`` / ``validate`` are polled from terminals and scripts: loading the CLI
    imports none of Ray, TensorFlow, Horovod, MLflow, SciPy, pandas or Optuna; each command imports what it uses."""
    heavy = ("ray", "tensorflow", "horovod", "mlflow", "scipy", "pandas", "optuna", "petastorm", "sklearn")
    probe = f"import sys, hpo.cli.main; print(sorted(m for m in {heavy!r} if m in sys.modules))"
    proc = subprocess.run([sys.executable, "-c", probe], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert proc.stdout.strip() == "[]"


def _package(module: str) -> str:
    """The node of the package graph a module belongs to: its package under hpo, or itself at top level."""
    return module.split(".")[1]


def package_graph(root: Path) -> dict[str, dict[str, str]]:
    """``hpo.<package>`` → ``hpo.<package>`` imports (lazy ones included), each with one place it happens.

    Args:
        root: The directory holding the ``hpo`` package.

    Returns:
        Importing node → imported node → ``"module imports target"`` (the first such import found).
    """
    graph: dict[str, dict[str, str]] = {}
    for path in sorted((root / "hpo").rglob("*.py")):
        module = ".".join(path.relative_to(root).with_suffix("").parts).removesuffix(".__init__")
        if module == "hpo":
            continue
        for target in sorted(_imports(path)):
            if _package(target) != _package(module):
                graph.setdefault(_package(module), {}).setdefault(_package(target), f"{module} imports {target}")
    return graph


def import_cycles(graph: dict[str, dict[str, str]]) -> list[list[str]]:
    """The cycles of ``graph``: each strongly connected part of two or more nodes, sorted."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    cycles = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for nxt in graph.get(node, {}):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            part = []
            while True:
                member = stack.pop()
                part.append(member)
                if member == node:
                    break
            if len(part) > 1:
                cycles.append(sorted(part))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return cycles


def test_no_import_cycle_between_packages():
    graph = package_graph(ROOT)
    cycles = import_cycles(graph)
    assert not cycles, [
        [graph[a][b] for a in part for b in part if b in graph.get(a, {})] for part in cycles
    ]


def test_the_cycle_check_finds_a_cycle(tmp_path):
    """A package cycle through a submodule (objective ↔ trial.protocol) and one closed by a lazy import are found."""
    files = {
        "hpo/objective.py": "from hpo.trial.protocol import REPEAT_KEY\n",
        "hpo/trial/__init__.py": "",
        "hpo/trial/protocol.py": "",
        "hpo/trial/callbacks.py": "from hpo.objective import reaches_goal\n",
        "hpo/api.py": "def run():\n    from hpo.partition import split\n",
        "hpo/partition.py": "def again():\n    from hpo import api\n",
        "hpo/cli/__init__.py": "",
        "hpo/cli/main.py": "from hpo.partition import named_urls\nfrom hpo.api import run\n",
    }
    for name, text in files.items():
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        (tmp_path / name).write_text(text)
    graph = package_graph(tmp_path)
    assert graph["objective"] == {"trial": "hpo.objective imports hpo.trial.protocol"}
    assert import_cycles(graph) == [["api", "partition"], ["objective", "trial"]]
