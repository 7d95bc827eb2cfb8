"""A new sqlite MLflow store made from hpo's cached empty schema is the store MLflow would have made."""

from __future__ import annotations

import sqlite3
from pathlib import Path

import pytest

from hpo.tracking.store import empty_schema, mlflow_client, prepare_sqlite_store


@pytest.fixture
def cache(tmp_path, monkeypatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "cache"))
    return tmp_path / "cache" / "hpo" / "mlflow"


def schema(path: Path) -> tuple[set[tuple[str, str, tuple[str, ...]]], list[tuple[str]]]:
    """Every table, index and trigger with its definition's lines in sorted order, and the schema revision.

    MLflow's migrations recreate some tables with their constraints in set order, which changes with
    Python's string hashing: two stores MLflow builds itself differ in the order of those lines only.
    """
    with sqlite3.connect(path) as db:
        rows = db.execute("SELECT type, name, sql FROM sqlite_master").fetchall()
        version = db.execute("SELECT version_num FROM alembic_version").fetchall()
    return {(kind, name, sorted_lines(sql)) for kind, name, sql in rows}, version


def sorted_lines(sql: str | None) -> tuple[str, ...]:
    return tuple(sorted(line.strip().rstrip(",").strip() for line in (sql or "").splitlines()))


def test_a_new_store_has_mlflows_own_schema_and_works(cache, tmp_path, monkeypatch):
    from mlflow.tracking import MlflowClient

    monkeypatch.chdir(tmp_path)
    MlflowClient(f"sqlite:///{tmp_path}/by_mlflow.db").search_experiments()  # every migration, by MLflow
    uri = f"sqlite:///{tmp_path}/by_hpo.db"
    assert prepare_sqlite_store(uri)
    assert schema(tmp_path / "by_hpo.db") == schema(tmp_path / "by_mlflow.db")
    ours, theirs = mlflow_client(uri), MlflowClient(f"sqlite:///{tmp_path}/by_mlflow.db")
    assert [(e.name, e.artifact_location) for e in ours.search_experiments()] == [
        (e.name, e.artifact_location) for e in theirs.search_experiments()]  # Default, made on first open
    run = ours.create_run(ours.create_experiment("x"))
    ours.log_metric(run.info.run_id, "m", 1.0)
    assert ours.get_run(run.info.run_id).data.metrics == {"m": 1.0}
    assert sorted(p.name for p in tmp_path.iterdir() if p.name.startswith(".")) == []  # no partial copy


def test_an_existing_file_is_never_touched(cache, tmp_path):
    user = tmp_path / "mine.db"
    user.write_bytes(b"not a database")
    assert not prepare_sqlite_store(f"sqlite:///{user}")
    assert user.read_bytes() == b"not a database"
    assert not cache.exists()  # nothing built for a store that exists


@pytest.mark.parametrize("uri", ["http://127.0.0.1:5000", "file:///tmp/mlruns", "sqlite:///{tmp}/missing/m.db"])
def test_other_stores_and_missing_directories_are_left_to_mlflow(cache, tmp_path, uri):
    assert not prepare_sqlite_store(uri.format(tmp=tmp_path))
    assert not (tmp_path / "missing").exists() and not cache.exists()


def test_the_schema_is_built_once_per_mlflow_version(cache, tmp_path):
    import mlflow

    first = empty_schema()
    assert first == cache / f"empty-store-{mlflow.__version__}.db"
    stamp = first.stat().st_mtime_ns
    for name in ("a.db", "b.db"):
        assert prepare_sqlite_store(f"sqlite:///{tmp_path}/{name}")
    assert empty_schema().stat().st_mtime_ns == stamp
    assert [p.name for p in cache.iterdir()] == [first.name]
