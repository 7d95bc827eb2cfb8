"""``hpo queue`` / ``cancel`` / ``submit`` on a queue in a storage, without a cluster: what each does with no
job server to ask, its JSON against docs/cli.md, and the refusals (exit 2, nothing queued)."""

from __future__ import annotations

import json
import re

import yaml

from hpo.queue import EntryState, QueueEntry, QueueStore
from tests.conftest import ROOT, base_sweep, hpo_cli

DOC = (ROOT / "docs" / "cli.md").read_text()


def _doc_json(command: str) -> list:
    section = DOC.split(f"### `{command}`")[1].split("\n### ")[0]
    return json.loads(re.findall(r"```json\n(.*?)```", section, flags=re.S)[0])


def test_hpo_queue_json_lists_running_then_queued_in_order_then_ended_with_the_documented_keys(tmp_path):
    store = QueueStore(tmp_path / "runs")
    store.put(QueueEntry(name="late", submitted_at=30.0))
    store.put(QueueEntry(name="first", submitted_at=20.0, priority=2))
    store.put(QueueEntry(name="run", submitted_at=10.0, state=EntryState.RUNNING, started_at=11.0, job_id="j"))
    store.put(QueueEntry(name="done", submitted_at=1.0, state=EntryState.SUCCEEDED, ended_at=9.0))
    proc = hpo_cli("queue", "--storage", str(tmp_path / "runs"), "--json", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    rows = json.loads(proc.stdout)
    assert [(r["name"], r["state"], r["position"]) for r in rows] == [
        ("run", "running", None), ("first", "queued", 1), ("late", "queued", 2), ("done", "succeeded", None)]
    assert set(rows[0]) == set(_doc_json("hpo queue")[0])
    table = hpo_cli("queue", "--storage", str(tmp_path / "runs"), cwd=tmp_path)
    assert table.returncode == 0 and "first" in table.stdout


def test_hpo_cancel_drops_a_queued_sweep_and_refuses_an_ended_or_unknown_one(tmp_path):
    store = QueueStore(tmp_path / "runs")
    store.put(QueueEntry(name="q", submitted_at=1.0))
    store.put(QueueEntry(name="done", submitted_at=1.0, state=EntryState.FAILED, ended_at=2.0))
    proc = hpo_cli("cancel", "q", "--storage", str(tmp_path / "runs"), cwd=tmp_path)
    assert proc.returncode == 0 and proc.stdout.startswith("q: cancelled"), proc.stderr
    assert store.get("q").state == EntryState.CANCELLED and store.get("q").ended_at is not None
    for name, problem in (("done", "failed already"), ("nope", "not on the queue")):
        proc = hpo_cli("cancel", name, "--storage", str(tmp_path / "runs"), cwd=tmp_path)
        assert proc.returncode == 2 and problem in proc.stderr, proc.stderr


def test_hpo_submit_refuses_before_queueing_anything(tmp_path):
    for name in ("a", "b"):
        (tmp_path / f"{name}.yaml").write_text(yaml.safe_dump(base_sweep(name=name)))
    runs = str(tmp_path / "runs")
    cases = [
        (["a.yaml", "b.yaml", "--name", "x"], "--name: names one sweep"),
        (["a.yaml"], "--address: required"),  # no cluster given
        (["a.yaml", "--set", "nokey"], "--set: 'nokey' is not KEY=VALUE"),
    ]
    for args, problem in cases:
        proc = hpo_cli("submit", *args, "--storage", runs, cwd=tmp_path)
        assert proc.returncode == 2 and problem in proc.stderr, (args, proc.stderr)
    QueueStore(runs).put(QueueEntry(name="a", submitted_at=1.0))
    proc = hpo_cli("submit", "a.yaml", "--storage", runs, "--address", "http://127.0.0.1:9", cwd=tmp_path)
    assert proc.returncode == 2 and "sweep 'a' is on the queue" in proc.stderr, proc.stderr
    assert [e.name for e in QueueStore(runs).entries()] == ["a"]
    assert not (tmp_path / "runs" / "_queue" / "packages").exists()
