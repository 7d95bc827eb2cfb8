"""docs/results.md's model-loading snippet works as written, in a fresh process without hpo's environment."""

from __future__ import annotations

import os
import re
import subprocess
import sys

from tests.conftest import ROOT


def results_snippet() -> str:
    """The ```python block of docs/results.md that loads the registered model."""
    blocks = re.findall(r"```python\n(.*?)```", (ROOT / "docs" / "results.md").read_text(), re.S)
    (block,) = [b for b in blocks if "models:/digits-mlp/1" in b]
    return "\n".join(line[2:] if line.startswith("  ") else line for line in block.splitlines())


def test_the_documented_snippet_loads_a_registered_model(tmp_path):
    import mlflow
    import numpy as np

    from hpo.models.mlp import build
    from hpo.tracking.best_model import log_best_model

    build({"units": 16, "dropout": 0.1}, (64,), 10).save(tmp_path / "model.keras")  # a functional tf-keras model
    uri = f"sqlite:///{tmp_path / 'mlflow.db'}"
    client = mlflow.MlflowClient(uri)
    run = client.create_run(client.create_experiment("digits-mlp"))
    log_best_model(uri, run.info.run_id, tmp_path / "model.keras", np.zeros((4, 64), np.float32), "digits-mlp")

    # A user's shell: none of the variables hpo sets for its own processes.
    env = {k: v for k, v in os.environ.items() if k != "TF_USE_LEGACY_KERAS"}
    code = results_snippet() + "\nprint('probabilities', probabilities.shape, round(float(probabilities.sum()), 3))\n"
    proc = subprocess.run([sys.executable, "-c", code], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert re.search(r"probabilities \(2, 10\) 2\.0", proc.stdout), proc.stdout

    # Without its first two lines (Keras 3 then reads the model) the snippet fails: the variable is needed.
    without = "\n".join(line for line in code.splitlines() if "TF_USE_LEGACY_KERAS" not in line)
    proc = subprocess.run([sys.executable, "-c", without], cwd=tmp_path, env=env, capture_output=True, text=True,
                          timeout=300)
    assert proc.returncode != 0 and "Could not locate class 'Functional'" in proc.stderr, proc.stderr[-3000:]
