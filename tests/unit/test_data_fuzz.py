"""Malformed tables through ``hpo data convert``: one line, exit 2, the file and the key named, nothing written.

Every case runs the real command (in-process) on a file that hpo cannot train on as it is. Besides the
error line, the whole directory is compared (paths and content hashes) before and after: no file outside
the destination changed and the destination was not created.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

import numpy as np
import pandas as pd
import pytest

from tests.conftest import hpo_cli


def good(rows: int = 30, seed: int = 0) -> pd.DataFrame:
    rng = np.random.default_rng(seed)
    return pd.DataFrame({"a": rng.random(rows), "b": rng.random(rows), "y": rng.integers(0, 3, rows)})


def with_value(column: str, value, row: int, seed: int = 0):
    def make() -> pd.DataFrame:
        df = good(seed=seed)
        df[column] = df[column].astype(object if isinstance(value, str) else float)
        df.loc[row, column] = value
        return df

    return make


# (case id, writer of the source file, extra CLI args, text the error names besides the file)
CASES = []
for row in (0, 7, 29):
    for value, name in ((np.nan, "nan"), (np.inf, "inf"), (-np.inf, "-inf")):
        CASES.append((f"feature-{name}-row{row}", ("csv", with_value("a", value, row)), [], "a: "))
    CASES.append((f"label-nan-row{row}", ("csv", with_value("y", np.nan, row)), [], "y: "))
    CASES.append((f"label-inf-row{row}", ("parquet", with_value("y", np.inf, row)), [], "y: "))
    CASES.append((f"text-feature-row{row}", ("csv", with_value("b", "oops", row)), [], "b: "))
for fmt in ("csv", "parquet"):
    CASES += [
        (f"negative-labels-{fmt}", (fmt, lambda: good().assign(y=lambda d: d["y"] - 1)), [], "y: "),
        (f"negative-labels-classification-{fmt}", (fmt, lambda: good().assign(y=lambda d: d["y"] - 1)),
         ["--task", "classification"], "y: "),
        (f"fractional-labels-classification-{fmt}", (fmt, lambda: good().assign(y=lambda d: d["y"] + 0.5)),
         ["--task", "classification"], "y: "),
        (f"text-labels-{fmt}", (fmt, lambda: good().assign(y=lambda d: d["y"].map({0: "a", 1: "b", 2: "c"}))), [],
         "y: "),
        (f"repeated-row-id-{fmt}", (fmt, lambda: good().assign(row_id=np.repeat(np.arange(15), 2))), [], "row_id: "),
        (f"fractional-row-id-{fmt}", (fmt, lambda: good().assign(row_id=np.arange(30) + 0.5)), [], "row_id: "),
        (f"split-by-empty-{fmt}", (fmt, lambda: good().assign(r=["eu", None] * 15)), ["--split-by", "r"],
         "--split-by: "),
        (f"missing-label-{fmt}", (fmt, good), ["--label", "target"], "target: "),
        (f"negative-seed-{fmt}", (fmt, good), ["--validation-fraction", "0.2", "--seed", "-1"], "--seed: "),
        (f"fraction-out-of-range-{fmt}", (fmt, good), ["--validation-fraction", "1.5"], "--validation-fraction: "),
        (f"bad-task-{fmt}", (fmt, good), ["--task", "ranking"], "--task: "),
    ]
CASES += [
    ("empty-csv", ("raw.csv", b""), [], "(file): "),
    ("empty-parquet", ("raw.parquet", b""), [], "(file): "),
    ("empty-npz", ("raw.npz", b""), [], "(file): "),
    ("header-only-csv", ("raw.csv", b"\n"), [], "(file): "),
    ("corrupt-parquet", ("raw.parquet", bytes(range(256)) * 8), [], "(file): "),
    ("truncated-parquet", ("truncated", None), [], "(file): "),
    ("latin1-csv", ("raw.csv", "a,b,y\n0.5,0.2,1\ncaf\u00e9,0.1,2\n".encode("latin-1")), [], "(file): "),
    ("npy-named-npz", ("npy", None), [], "(file): "),
    ("unsupported-extension", ("raw.json", b"{}"), [], "(file): "),
    ("npz-nan-features", ("npz-nan", None), ["--label", "label"], "features: "),
    ("npz-nan-labels", ("npz-nan-label", None), ["--label", "label"], "label: "),
]


def write_source(tmp_path: Path, spec) -> Path:
    kind, make = spec
    if kind in ("csv", "parquet"):
        path = tmp_path / f"src.{kind}"
        df = make()
        df.to_csv(path, index=False) if kind == "csv" else df.to_parquet(path)
        return path
    if kind == "truncated":
        good().to_parquet(tmp_path / "full.parquet")
        path = tmp_path / "src.parquet"
        path.write_bytes((tmp_path / "full.parquet").read_bytes()[:200])
        (tmp_path / "full.parquet").unlink()
        return path
    if kind == "npy":
        np.save(tmp_path / "arr.npy", np.zeros((4, 2)))
        path = tmp_path / "src.npz"
        (tmp_path / "arr.npy").rename(path)
        return path
    if kind.startswith("npz-nan"):
        x, y = np.random.default_rng(0).random((30, 2, 3)), np.arange(30) % 3
        x[4, 1, 2] = np.nan
        path = tmp_path / "src.npz"
        if kind == "npz-nan":
            np.savez(path, features=x, label=y)
        else:
            np.savez(path, features=np.nan_to_num(x), label=np.where(np.arange(30) == 3, np.nan, y))
        return path
    path = tmp_path / kind.replace("raw", "src")
    path.write_bytes(make)
    return path


def listing(root: Path) -> dict[str, str]:
    return {str(p.relative_to(root)): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def test_there_are_at_least_thirty_cases():
    assert len(CASES) >= 30 and len({c[0] for c in CASES}) == len(CASES)


@pytest.mark.parametrize(("spec", "extra", "key"), [c[1:] for c in CASES], ids=[c[0] for c in CASES])
def test_malformed_table_is_one_line_exit_2_and_changes_nothing(tmp_path, spec, extra, key):
    src = write_source(tmp_path, spec)
    before = listing(tmp_path)
    args = ["--label", "y", *extra] if "--label" not in extra else extra
    proc = hpo_cli("data", "convert", str(src), str(tmp_path / "out"), *args, cwd=tmp_path)
    lines = proc.stderr.strip().splitlines()
    assert proc.returncode == 2, (proc.returncode, proc.stdout, proc.stderr)
    assert len(lines) == 1 and lines[0].startswith(f"error: {src}: "), lines
    assert key in lines[0] and "Traceback" not in proc.stderr and "; " in lines[0], lines[0]
    assert listing(tmp_path) == before and not (tmp_path / "out").exists()
    assert [p.name for p in tmp_path.iterdir() if p.name.startswith(".")] == []  # no staging left behind
