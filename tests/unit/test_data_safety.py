"""``hpo data convert`` never deletes or overwrites a file it did not write; a failure changes nothing."""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from hpo.data import convert, path_to_url, write_dataset
from hpo.data.place import MARKER
from hpo.errors import ConfigError
from tests.conftest import hpo_cli


def listing(root: Path) -> dict[str, str]:
    """Every file under ``root`` with the hash of its bytes."""
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def table(rows: int = 40, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"a": rng.random(rows), "b": rng.random(rows), "y": rng.integers(0, 3, rows)})


@pytest.fixture
def user_files(tmp_path: Path) -> Path:
    """A user's directory: a Parquet table, a CSV and a notes file."""
    work = tmp_path / "work"
    work.mkdir()
    table().to_parquet(work / "x.parquet")
    table(seed=1).to_csv(work / "t.csv", index=False)
    (work / "notes.txt").write_text("mine")
    return work


def test_into_a_directory_holding_other_parquet_files_is_refused_and_nothing_changes(tmp_path, user_files):
    table(seed=2).to_csv(tmp_path / "src.csv", index=False)
    before = listing(tmp_path)
    with pytest.raises(ConfigError, match=r"src.csv: DEST: .*/work holds 3 file\(s\) hpo did not write \(notes.txt, "
                                          r"t.csv, x.parquet\); name a new or empty directory"):
        convert(tmp_path / "src.csv", path_to_url(user_files), label="y")
    with pytest.raises(ConfigError, match="hpo did not write"):  # --overwrite never replaces them either
        convert(tmp_path / "src.csv", path_to_url(user_files), label="y", overwrite=True)
    assert listing(tmp_path) == before


def test_a_source_file_inside_or_at_the_destination_is_refused(tmp_path, user_files):
    before = listing(tmp_path)
    for dest in (user_files / "x.parquet", user_files):
        with pytest.raises(ConfigError, match=r"x.parquet: DEST: .* is the source or holds it; write the dataset "
                                              r"to a new directory"):
            convert(user_files / "x.parquet", path_to_url(dest), label="y", overwrite=True)
    assert listing(tmp_path) == before


def test_an_hpo_dataset_is_replaced_only_with_overwrite(tmp_path, user_files):
    dest = tmp_path / "ds"
    [first] = convert(user_files / "t.csv", path_to_url(dest), label="y")
    assert first.num_rows == 40 and (dest / MARKER).is_file()
    written = listing(dest)
    with pytest.raises(ConfigError, match=r"x.parquet: DEST: .*/ds already holds an hpo dataset; pass --overwrite to "
                                          r"replace it"):
        convert(user_files / "x.parquet", path_to_url(dest), label="y")
    assert listing(dest) == written
    table(rows=24, seed=5).to_csv(user_files / "u.csv", index=False)
    [again] = convert(user_files / "u.csv", path_to_url(dest), label="y", overwrite=True)
    assert again.num_rows == 24 and listing(dest) != written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["ds", "work"]  # no staging or replaced dirs left


def test_a_failed_conversion_leaves_the_destination_as_it_was(tmp_path, user_files):
    dest = tmp_path / "ds"
    convert(user_files / "t.csv", path_to_url(dest), label="y", validation_fraction=0.25)
    before = listing(tmp_path)
    with pytest.raises(ConfigError, match="leaves an empty validation set"):
        convert(user_files / "t.csv", path_to_url(dest), label="y", validation_fraction=0.01, overwrite=True)
    with pytest.raises(ConfigError, match="label column not found"):
        convert(user_files / "t.csv", path_to_url(dest), label="nope", overwrite=True)
    assert listing(tmp_path) == before


def test_an_empty_directory_is_used_in_place(tmp_path, user_files):
    dest = tmp_path / "empty"
    dest.mkdir()
    [info] = convert(user_files / "t.csv", path_to_url(dest), label="y")
    assert info.url == path_to_url(dest) and info.num_rows == 40


def test_write_dataset_refuses_a_directory_with_a_users_parquet_file(tmp_path, user_files):
    before = listing(tmp_path)
    with pytest.raises(ConfigError, match=r"holds Parquet files hpo did not write \(x.parquet\); write the dataset"):
        write_dataset((np.zeros((4, 2)), np.arange(4)), path_to_url(user_files))
    assert listing(tmp_path) == before
    url = path_to_url(tmp_path / "mine")
    write_dataset((np.zeros((4, 2)), np.arange(4)), url)
    write_dataset((np.ones((6, 2)), np.arange(6)), url)  # its own earlier version is replaced
    assert len(list((tmp_path / "mine").glob("*.parquet"))) == 1


def test_cli_refusal_is_one_line_exit_2_and_overwrite_replaces(tmp_path, user_files):
    table(seed=2).to_csv(tmp_path / "src.csv", index=False)
    before = listing(user_files)
    proc = hpo_cli("data", "convert", str(tmp_path / "src.csv"), str(user_files), "--label", "y", cwd=user_files)
    assert proc.returncode == 2 and len(proc.stderr.strip().splitlines()) == 1, proc.stderr
    assert "hpo did not write" in proc.stderr and "Traceback" not in proc.stderr
    assert listing(user_files) == before
    ok = hpo_cli("data", "convert", "t.csv", str(tmp_path / "ds"), "--label", "y", cwd=user_files)
    assert ok.returncode == 0, ok.stderr
    refused = hpo_cli("data", "convert", "t.csv", str(tmp_path / "ds"), "--label", "y", cwd=user_files)
    assert refused.returncode == 2 and "--overwrite" in refused.stderr
    replaced = hpo_cli("data", "convert", "t.csv", str(tmp_path / "ds"), "--label", "y", "--overwrite", cwd=user_files)
    assert replaced.returncode == 0 and "40 rows" in replaced.stdout
