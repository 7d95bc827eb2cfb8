"""`hpo tune --partition-by COL`: one sweep (study, MLflow parent, summary) per partition, one command.

The command runs in this process (``tests.conftest.hpo_cli``: the same command and error handling as the
executable) on a local Ray the module starts once, as ``hpo tune --address`` would use a running cluster.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from mlflow.tracking import MlflowClient
from sklearn.datasets import load_digits

from hpo.data import path_to_url
from tests.conftest import base_sweep, hpo_cli

pytestmark = pytest.mark.slow
#: Partitioning is about data, studies and runs, not Horovod: one worker, one trial at a time, so each
#: partition's two trials share one warm worker.
PARTITION_TRIAL = {"workers": 1, "cpus_per_worker": 1, "max_epochs": 2, "batch_size_per_worker": 64}


@pytest.fixture(scope="module")
def ray_session():
    import ray

    from hpo.ray_session import start_ray

    start_ray(num_cpus=2)
    yield
    ray.shutdown()


def test_one_sweep_per_region(ray_session, tmp_path, write_sweep):
    digits = load_digits()
    (tmp_path / "ds").mkdir()
    region = np.where(np.arange(len(digits.target)) % 2 == 0, "eu", "us")
    table = pa.table({
        "features": pa.array([list(r) for r in (digits.data / 16).astype(np.float32)], type=pa.list_(pa.float32())),
        "label": pa.array(digits.target.astype(np.int64)),
        "region": pa.array(region),
    })
    pq.write_table(table, tmp_path / "ds" / "part.parquet", row_group_size=64)
    sweep = base_sweep(
        name="demand",
        data={"train": path_to_url(tmp_path / "ds")},
        search={"algorithm": "random", "num_samples": 2, "max_concurrent": 1, "seed": 1},
        scheduler={"type": "fifo"},
        trial=PARTITION_TRIAL,
    )
    proc = hpo_cli("tune", write_sweep(sweep), "--partition-by", "region", "--storage", tmp_path / "runs",
                   cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    parents = set()
    for value in ("eu", "us"):
        summary = json.loads((tmp_path / "runs" / f"demand-{value}" / "summary.json").read_text())
        assert summary["name"] == f"demand-{value}" and len(summary["trials"]) == 2
        assert all(t["status"] == "completed" for t in summary["trials"])
        assert (tmp_path / "runs" / f"demand-{value}" / "optuna.db").is_file()
        client = MlflowClient(tracking_uri=summary["mlflow"]["uri"])
        parent = client.get_run(summary["mlflow"]["parent_run_id"])
        assert parent.info.run_name == f"demand-{value}"
        parents.add(parent.info.run_id)
        rows = pq.read_table(tmp_path / "runs" / "_data" / "demand" / f"region={value}").num_rows
        assert rows == int((region == value).sum())
    assert len(parents) == 2


def test_one_sweep_per_data_url(ray_session, tmp_path, write_sweep):
    """data.partitions (name → URL): each URL its own study, MLflow parent run and summary; one command."""
    digits = load_digits()
    x = (digits.data / 16).astype(np.float32)
    urls = {}
    for region, rows in (("eu", slice(0, 900)), ("us", slice(900, None))):
        table = pa.table({
            "features": pa.array([list(r) for r in x[rows]], type=pa.list_(pa.float32())),
            "label": pa.array(digits.target[rows].astype(np.int64)),
        })
        (tmp_path / "data" / f"region={region}").mkdir(parents=True)
        pq.write_table(table, tmp_path / "data" / f"region={region}" / "part.parquet", row_group_size=64)
        urls[region] = path_to_url(tmp_path / "data" / f"region={region}")
    sweep = base_sweep(
        name="sales",
        data={"partitions": urls},
        search={"algorithm": "optuna-tpe", "num_samples": 2, "max_concurrent": 1, "seed": 1},
        scheduler={"type": "fifo"},
        trial=PARTITION_TRIAL,
    )
    proc = hpo_cli("tune", write_sweep(sweep), "--storage", tmp_path / "runs", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert proc.stdout.count("== partition ") == 2 and proc.stdout.count("summary: ") == 2
    parents, experiments = set(), set()
    for region in ("eu", "us"):
        sweep_dir = tmp_path / "runs" / f"sales-{region}"
        summary = json.loads((sweep_dir / "summary.json").read_text())
        assert summary["name"] == f"sales-{region}" and len(summary["trials"]) == 2
        assert all(t["status"] == "completed" for t in summary["trials"])
        import optuna

        study = optuna.load_study(study_name=f"sales-{region}", storage=f"sqlite:///{sweep_dir / 'optuna.db'}")
        assert len(study.trials) == 2  # each partition its own study, with only its own trials
        client = MlflowClient(tracking_uri=summary["mlflow"]["uri"])
        parent = client.get_run(summary["mlflow"]["parent_run_id"])
        assert parent.info.run_name == f"sales-{region}"
        assert parent.data.params["data.train"] == urls[region]
        parents.add(parent.info.run_id)
        experiments.add(summary["mlflow"]["experiment_id"])
    assert len(parents) == 2 and len(experiments) == 2
