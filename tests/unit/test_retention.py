"""Superseded trial checkpoints are deleted one saved experiment state behind, never a trial's newest."""

from __future__ import annotations

from types import SimpleNamespace

import pyarrow.fs as pafs
from ray import tune

from hpo.trial.retention import CheckpointRetention


def _checkpoint(root, trial: str, index: int) -> tune.Checkpoint:
    path = root / trial / f"checkpoint_{index:06d}"
    path.mkdir(parents=True)
    (path / "state.json").write_text("{}")
    return tune.Checkpoint(str(path), filesystem=pafs.LocalFileSystem())


def _left(root, trial: str) -> list[str]:
    return sorted(p.name for p in (root / trial).iterdir())


def test_checkpoints_are_deleted_one_save_behind_and_the_newest_is_kept(tmp_path):
    retention = CheckpointRetention()
    a, b = SimpleNamespace(trial_id="a"), SimpleNamespace(trial_id="b")
    for index in range(3):
        retention.on_checkpoint(0, [], a, _checkpoint(tmp_path, "a", index))
    retention.on_checkpoint(0, [], b, _checkpoint(tmp_path, "b", 0))
    assert retention.prune() == 0  # the first save: nothing is older than what a save pointed at before
    for index in range(3, 5):
        retention.on_checkpoint(0, [], a, _checkpoint(tmp_path, "a", index))
    retention.get_state()  # the second save: what the first one pointed at (a's 2, b's 0) and newer stay
    retention.on_experiment_end([])
    assert _left(tmp_path, "a") == ["checkpoint_000002", "checkpoint_000003", "checkpoint_000004"]
    assert _left(tmp_path, "b") == ["checkpoint_000000"]
    retention.get_state()  # a third save, no new checkpoint: each trial keeps only its newest
    retention.on_experiment_end([])
    assert _left(tmp_path, "a") == ["checkpoint_000004"] and _left(tmp_path, "b") == ["checkpoint_000000"]
    assert retention.deleted == 4
    assert retention.prune() == 0 and not retention._pending  # nothing left to look at for either trial


def test_a_checkpoint_already_gone_or_undeletable_does_not_stop_the_sweep(tmp_path):
    failures = []

    def delete(checkpoint):
        failures.append(checkpoint.path)
        raise OSError("storage unreachable")

    retention = CheckpointRetention(delete)
    trial = SimpleNamespace(trial_id="a")
    for index in range(2):
        retention.on_checkpoint(0, [], trial, _checkpoint(tmp_path, "a", index))
    retention.prune()
    retention.on_checkpoint(0, [], trial, _checkpoint(tmp_path, "a", 2))
    retention.prune()
    retention.on_experiment_end([])
    assert len(failures) == 1 and retention.deleted == 0  # tried, logged, left behind
    default = CheckpointRetention()
    gone = tune.Checkpoint(str(tmp_path / "a" / "missing"), filesystem=pafs.LocalFileSystem())
    default._delete(gone)  # a checkpoint deleted already is fine


def test_a_pickled_retention_starts_empty():
    import pickle

    retention = CheckpointRetention()
    retention.on_checkpoint(0, [], SimpleNamespace(trial_id="a"), object())
    copy = pickle.loads(pickle.dumps(retention))
    assert copy._held == {} and copy.prune() == 0
