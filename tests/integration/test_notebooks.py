"""The notebooks in notebooks/ run top to bottom on CPU (nbclient, a real kernel), and are kept without outputs."""

from __future__ import annotations

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


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_is_stored_without_outputs(path):
    book = nbformat.read(path, as_version=4)
    code = [c for c in book.cells if c.cell_type == "code"]
    assert code and all(not c.outputs and c.execution_count is None for c in code)


@pytest.mark.parametrize("path", NOTEBOOKS, ids=lambda p: p.stem)
def test_notebook_runs_top_to_bottom(path, tmp_path, monkeypatch):
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]))
    scratch = Path(tempfile.gettempdir())  # the notebooks' scratch directories (hpo-*), removed afterwards
    before = _scratch_dirs(scratch)
    book = nbformat.read(path, as_version=4)
    try:
        NotebookClient(book, timeout=600, kernel_name="python3",
                       resources={"metadata": {"path": str(tmp_path)}}).execute()
    finally:
        for made in _scratch_dirs(scratch) - before:
            shutil.rmtree(made, ignore_errors=True)
    text = "\n".join(out.get("text", "") for cell in book.cells for out in cell.get("outputs", []))
    errors = [out for cell in book.cells for out in cell.get("outputs", []) if out.get("output_type") == "error"]
    assert not errors
    if path.stem.startswith("01"):
        assert "best:" in text and "hpo ui --mlflow-uri" in text
    else:
        assert "analyse 6 trials" in text and "predicted:" in text
