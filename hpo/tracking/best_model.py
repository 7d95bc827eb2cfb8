"""The sweep's best model in MLflow: logged on the parent run and registered under the sweep name.

The trial's final checkpoint holds ``model.keras``: a tf-keras (Keras 2) model with the best weights.
MLflow 3.17's ``mlflow.keras`` flavor is for Keras 3 and cannot save it; ``mlflow.tensorflow`` can: it
checks ``isinstance(model, tensorflow.keras.Model)``, which under ``TF_USE_LEGACY_KERAS=1`` is tf-keras,
saves ``data/model.keras`` and records ``keras_module = tensorflow.keras``. Loading it back
(``mlflow.pyfunc.load_model`` or ``mlflow.tensorflow.load_model``) therefore also needs
``TF_USE_LEGACY_KERAS=1`` in that process, set before TensorFlow is imported (hpo's CLI sets it for itself).
"""

from __future__ import annotations

import math
import os
import shutil
from pathlib import Path
from typing import Any

from hpo import _env
from hpo.storage import Storage
from hpo.trial.protocol import TrialRow

#: Artifact name of the model on the parent run.
MODEL_NAME = "model"
#: The model file a trial's final checkpoint holds (and its copy on the driver).
MODEL_FILE = "model.keras"
#: Rows of validation data used to infer the signature (no input example: MLflow would run the model on
#: it to validate it, printing Keras progress bars).
SAMPLE_ROWS = 5


def pick_model_trial(rows: list[TrialRow], mode: str, storage: Storage, dest: Path) -> tuple[TrialRow, Path] | None:
    """The best completed trial whose final checkpoint holds ``model.keras`` (never a diverged one).

    The checkpoint is read through Ray's checkpoint API from wherever the storage keeps it (a local
    directory, a shared mount, object storage), and its model is copied to ``dest/model.keras`` on the
    driver, where the (possibly spooled) MLflow write finds it.

    Returns:
        ``(row, path of the local model.keras)``, or None if no completed trial left a model.
    """
    candidates = [r for r in rows if r.metric is not None and r.checkpoint and r.status == "completed"]
    candidates.sort(key=lambda r: r.metric, reverse=mode == "max")
    for row in candidates:
        with storage.open_checkpoint(row.checkpoint).as_directory() as directory:
            model = Path(directory) / MODEL_FILE
            if not model.is_file():
                continue
            dest.mkdir(parents=True, exist_ok=True)
            tmp = dest / f".{MODEL_FILE}.tmp"
            shutil.copyfile(model, tmp)
            os.replace(tmp, dest / MODEL_FILE)
        return row, dest / MODEL_FILE
    return None


def sample_features(url: str, column: str, rows: int = SAMPLE_ROWS) -> Any:
    """The first ``rows`` feature vectors of a dataset, as a float32 array."""
    import numpy as np
    import pyarrow.parquet as pq

    from hpo.data import filesystem, parquet_files

    fs, path = filesystem(url)
    with fs.open(parquet_files(fs, path)[0], "rb") as f:
        table = pq.ParquetFile(f).read_row_group(0, columns=[column]).slice(0, rows)
    return np.asarray(table.column(column).to_pylist(), dtype=np.float32)


def as_model_input(sample: Any, input_shape: Any) -> Any:
    """Feature rows (stored flat) in the shape the model takes, as the trials' input pipeline feeds them.

    Args:
        sample: A ``(rows, n)`` array.
        input_shape: The model's ``input_shape`` (``(None, 8, 8, 1)``); a multi-input model's list is left
            alone, as is a shape whose size is not ``n``.
    """
    dims = input_shape[1:] if isinstance(input_shape, tuple) else None
    if not dims or not all(isinstance(d, int) for d in dims) or math.prod(dims) != sample[0].size:
        return sample
    return sample.reshape((len(sample), *dims))


def log_best_model(uri: str, run_id: str, model_path: Path, sample: Any, registered_name: str) -> tuple[str, str]:
    """Logs ``model_path`` with its signature on run ``run_id`` and registers a new version.

    Args:
        uri: Tracking URI (the registry is the tracking store).
        run_id: The sweep's parent run.
        model_path: A ``model.keras`` file saved by tf-keras.
        sample: Input rows for the signature and input example.
        registered_name: Model Registry name (the sweep name).

    Returns:
        The logged model's URI and the new registered version.
    """
    _env.apply()  # TF_USE_LEGACY_KERAS before TensorFlow is imported
    import mlflow
    import tensorflow as tf
    import tf_keras
    from mlflow.models import infer_signature

    from hpo.compat import mlflow_skips_requirement_check, use_tracking_uri

    model = tf_keras.models.load_model(model_path, compile=False)
    sample = as_model_input(sample, model.input_shape)
    signature = infer_signature(sample, model.predict(sample, verbose=0))
    with use_tracking_uri(uri), mlflow_skips_requirement_check():  # the requirements are this environment's
        info = mlflow.tensorflow.log_model(
            model,
            name=MODEL_NAME,
            signature=signature,
            registered_model_name=registered_name,
            run_id=run_id,
            # Given, not inferred: inference loads the model again in a subprocess (~15 s of TF import).
            pip_requirements=[
                f"tensorflow=={tf.__version__}",
                f"tf-keras=={tf_keras.__version__}",
                f"mlflow=={mlflow.__version__}",
            ],
        )
    return info.model_uri, str(info.registered_model_version)
