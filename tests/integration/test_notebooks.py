"""The notebooks in notebooks/ run top to bottom on CPU (nbclient, a real kernel) and are stored with their outputs.

``HPO_STORE_NOTEBOOKS=1`` stores the copies this test ran (``make notebook-outputs``).
"""

from __future__ import annotations

import json
import os
import shutil
import tempfile
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

from tests.conftest import ROOT

pytestmark = pytest.mark.slow
NOTEBOOKS = sorted((ROOT / "notebooks").glob("*.ipynb"))


def _scratch_dirs(root: Path) -> set[Path]:
    """The scratch directories the two notebooks make (``tempfile.mkdtemp(prefix=...)``)."""
    return set(root.glob("hpo-quickstart-*")) | set(root.glob("hpo-analyse-*"))


def test_there_are_the_two_notebooks():
    assert [p.name for p in NOTEBOOKS] == ["01_quickstart.ipynb", "02_analyse_a_sweep.ipynb"]


#: Stored notebooks carry their outputs (they read on a code host) but stay small.
MAX_STORED_BYTES = 150_000
#: Run after the notebook in the same kernel (never stored): the values the test checks, as one JSON line.
CHECKS = {
    "01_quickstart": 'import json; print("CHECK", json.dumps({"trials": len(summary["trials"]), '
                     '"best": summary["best"] is not None, '
                     '"kinds": sorted({r.data.tags.get("hpo.kind") for r in runs})}))',
    "02_analyse_a_sweep": 'import json; print("CHECK", json.dumps({"trials": len(summary["trials"]), '
                          '"children": len(children), "same_verdict": comparison.verdict() == '
                          'summary["statistics"]["verdict"], "predicted": len(predicted)}))',
}


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stored_with_its_outputs(path):
    """Every code cell has run, in order, without an error; no cell checks with assert (the test does)."""
    book = nbformat.read(path, as_version=4)
    code = [c for c in book.cells if c.cell_type == "code"]
    assert code and [c.execution_count for c in code] == list(range(1, len(code) + 1))
    assert code[-1].outputs and sum(bool(c.outputs) for c in code) >= len(code) - 1, "store the notebook run"
    assert not [o for c in code for o in c.outputs if o.get("output_type") == "error"]
    assert not [c for c in code if "assert " in c.source], "tutorial cells do not assert; the test checks"
    assert path.stat().st_size < MAX_STORED_BYTES


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_top_to_bottom(path, tmp_path, monkeypatch):
    """Runs the notebook in a real kernel, then reads its variables; HPO_STORE_NOTEBOOKS=1 stores it run."""
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    scratch = Path(tempfile.gettempdir())  # the notebooks' scratch directories (hpo-*), removed afterwards
    before = _scratch_dirs(scratch)
    book = nbformat.read(path, as_version=4)
    for cell in book.cells:
        if cell.cell_type == "code":
            cell.outputs, cell.execution_count = [], None
    book.cells.append(nbformat.v4.new_code_cell(CHECKS[path.stem]))
    try:
        NotebookClient(book, timeout=600, kernel_name="python3",
                       resources={"metadata": {"path": str(tmp_path)}}).execute()
    finally:
        for made in _scratch_dirs(scratch) - before:
            shutil.rmtree(made, ignore_errors=True)
    check = book.cells.pop()
    values = json.loads(next(o["text"] for o in check.outputs if "CHECK" in o.get("text", "")).split("CHECK", 1)[1])
    text = "\n".join(out.get("text", "") for cell in book.cells for out in cell.get("outputs", []))
    errors = [out for cell in book.cells for out in cell.get("outputs", []) if out.get("output_type") == "error"]
    assert not errors
    if path.stem.startswith("01"):
        assert values == {"trials": 3, "best": True, "kinds": ["sweep", "trial"]}
        assert "best:" in text and "hpo ui --mlflow-uri" in text
    else:
        assert values == {"trials": 6, "children": 6, "same_verdict": True, "predicted": 10}
        assert "predicted:" in text
        assert any("image/png" in out.get("data", {}) for cell in book.cells for out in cell.get("outputs", []))
    if os.environ.get("HPO_STORE_NOTEBOOKS") == "1":
        nbformat.write(book, path)
