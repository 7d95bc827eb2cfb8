"""The driver's MLflow work per trial does not grow with the sweep (a real sqlite MLflow store, counted)."""

from __future__ import annotations

import collections
import json
import socket
from types import SimpleNamespace
from typing import Any

import pytest
from mlflow.tracking import MlflowClient

from hpo.tracking.nesting import MlflowNesting
from hpo.tracking.runs import SweepRun, start_sweep_run, trial_run_ids


class CountingStore:
    """The real MLflow store of a client, with every call to it counted by method name."""

    def __init__(self, store: Any) -> None:
        self._store = store
        self.calls: collections.Counter[str] = collections.Counter()

    def __getattr__(self, name: str) -> Any:
        attr = getattr(self._store, name)
        if not callable(attr):
            return attr

        def counted(*args: Any, **kwargs: Any) -> Any:
            self.calls[name] += 1
            return attr(*args, **kwargs)

        return counted


def _nesting(tmp_path, monkeypatch, resume: bool = False, sweep=None) -> tuple[MlflowNesting, CountingStore, Any]:
    """A nesting callback on a real sqlite store; the calls its client makes to the store are counted."""
    from mlflow.tracking._tracking_service.client import TrackingServiceClient

    uri = f"sqlite:///{tmp_path}/mlflow.db"
    sweep = sweep or start_sweep_run(uri, "scale", "scale", {}, {})
    nesting = MlflowNesting(sweep, "val_accuracy", "max", "scale", tmp_path / "spool.jsonl", resume=resume,
                            flush_every_s=0.0, flush_share=float("inf"))
    counting = CountingStore(nesting.outbox.client._tracking_client.store)
    monkeypatch.setattr(TrackingServiceClient, "store", property(lambda self: counting))
    return nesting, counting, sweep


def _trial(number: int) -> SimpleNamespace:
    return SimpleNamespace(trial_id=f"t{number:05d}", config={"lr": 0.01 * number, "units": 8}, last_result=None,
                           error_msg=None)


def _run_trial(nesting: MlflowNesting, number: int, epochs: int = 3) -> None:
    trial = _trial(number)
    nesting.on_trial_start(0, [], trial)
    for epoch in range(1, epochs + 1):
        result = {"val_accuracy": 0.1 * epoch, "loss": 1.0 / epoch, "epoch": epoch, "training_iteration": epoch,
                  "timestamp": 1_700_000_000 + epoch, "effective_learning_rate": 0.01}
        nesting.on_trial_result(0, [], trial, result)
        nesting.on_step_end(0, [])
    trial.last_result = {"val_accuracy": 0.3, "epoch": epochs, "trial_finished": True}
    nesting.on_trial_complete(0, [], trial)


#: Store methods that touch no database (MLflow's client calls it when it closes a run).
NOT_STORE_WORK = {"shut_down_async_logging"}


def _calls_for_one_trial(nesting: MlflowNesting, store: CountingStore, number: int) -> dict[str, int]:
    store.calls.clear()
    _run_trial(nesting, number)
    return {name: count for name, count in store.calls.items() if name not in NOT_STORE_WORK}


def test_store_calls_per_trial_do_not_depend_on_earlier_trials(tmp_path, monkeypatch):
    nesting, store, sweep = _nesting(tmp_path, monkeypatch)
    first = _calls_for_one_trial(nesting, store, 0)
    for number in range(1, 60):
        _run_trial(nesting, number)
    later = _calls_for_one_trial(nesting, store, 60)
    assert later == first
    assert "search_runs" not in first and "get_metric_history" not in first  # a new sweep looks nothing up
    # create the run, the queued epochs (flushed at every step here), the final tags, close it
    assert first == {"create_run": 1, "log_batch": 4, "update_run_info": 1}
    runs = trial_run_ids(sweep)
    assert len(runs) == 61 and runs == nesting.run_ids


def test_epochs_are_sent_together_when_the_flush_interval_has_not_passed(tmp_path, monkeypatch):
    nesting, store, _ = _nesting(tmp_path, monkeypatch)
    nesting.flush_every_s = 3600.0
    calls = _calls_for_one_trial(nesting, store, 0)
    assert calls == {"create_run": 1, "log_batch": 1, "update_run_info": 1}  # params, 3 epochs and tags in one
    client = nesting.outbox.client
    run_id = nesting.run_ids["t00000"]
    assert [m.step for m in client.get_metric_history(run_id, "val_accuracy")] == [1, 2, 3]
    run = client.get_run(run_id)
    assert run.data.params["lr"] == "0.0" and run.data.params["effective_learning_rate"] == "0.01"
    assert run.data.tags["hpo.status"] == "completed" and run.info.status == "FINISHED"


def test_a_resumed_sweep_reads_its_earlier_runs_once(tmp_path, monkeypatch):
    nesting, _, sweep = _nesting(tmp_path, monkeypatch)
    trial = _trial(0)
    nesting.on_trial_start(0, [], trial)
    nesting.on_trial_result(0, [], trial, {"val_accuracy": 0.1, "epoch": 1, "timestamp": 1_700_000_001})
    nesting.flush()  # the sweep was interrupted after one epoch of t00000; t00001 never started
    resumed, store, _ = _nesting(tmp_path, monkeypatch, resume=True, sweep=sweep)
    resumed.on_trial_start(0, [], trial)
    for number in range(1, 20):
        resumed.on_trial_start(0, [], _trial(number))
    assert store.calls["search_runs"] == 1
    assert resumed.run_ids["t00000"] == nesting.run_ids["t00000"]  # the same run goes on
    # the epoch logged before the interruption is not logged again
    resumed.on_trial_result(0, [], trial, {"val_accuracy": 0.1, "epoch": 1, "timestamp": 1_700_000_001})
    resumed.on_trial_result(0, [], trial, {"val_accuracy": 0.2, "epoch": 2, "timestamp": 1_700_000_002})
    resumed.flush()
    history = resumed.outbox.client.get_metric_history(resumed.run_ids["t00000"], "val_accuracy")
    assert [(m.step, m.value) for m in history] == [(1, 0.1), (2, pytest.approx(0.2))]


def test_flushes_come_less_often_when_the_store_is_slow(tmp_path, monkeypatch):
    nesting, store, _ = _nesting(tmp_path, monkeypatch)
    nesting.flush_every_s, nesting.flush_share = 0.0, 0.1
    nesting._flush_cost_s = 3600.0  # the last flush took an hour: the next waits ten
    trial = _trial(0)
    nesting.on_trial_start(0, [], trial)
    for epoch in range(1, 4):
        nesting.on_trial_result(0, [], trial, {"val_accuracy": 0.1 * epoch, "epoch": epoch, "timestamp": 1})
        nesting.on_step_end(0, [])
    assert store.calls["log_batch"] == 0  # queued, not lost: the trial's close sends it all
    trial.last_result = {"val_accuracy": 0.3, "epoch": 3, "trial_finished": True}
    nesting.on_trial_complete(0, [], trial)
    history = nesting.outbox.client.get_metric_history(nesting.run_ids["t00000"], "val_accuracy")
    assert [m.step for m in history] == [1, 2, 3] and store.calls["log_batch"] == 1


def _ops_sent(nesting: MlflowNesting, monkeypatch) -> collections.Counter[str]:
    """Counts the writes the driver hands to the writer process, by kind."""
    sent: collections.Counter[str] = collections.Counter()
    hand_over = nesting.outbox.submit

    def counted(op: dict) -> None:
        sent[op["op"]] += 1
        hand_over(op)

    monkeypatch.setattr(nesting.outbox, "submit", counted)
    return sent


def test_the_writer_process_sends_every_run_epoch_and_tag_and_the_driver_hands_it_a_fixed_few(tmp_path, monkeypatch):
    uri = f"sqlite:///{tmp_path}/mlflow.db"
    sweep = start_sweep_run(uri, "scale", "scale", {}, {})
    nesting = MlflowNesting(sweep, "val_accuracy", "max", "scale", tmp_path / "spool.jsonl", flush_every_s=0.0,
                            flush_share=float("inf"), writer_process=True)
    sent = _ops_sent(nesting, monkeypatch)
    try:
        _run_trial(nesting, 0)
        first = dict(sent)
        for number in range(1, 40):
            _run_trial(nesting, number)
        sent.clear()
        _run_trial(nesting, 40)
        assert dict(sent) == first == {"create_run": 1, "log": 4, "terminate": 1}
        runs = nesting.run_ids  # a barrier: every write handed over so far is in the store
        assert len(runs) == 41 and trial_run_ids(sweep) == runs
        assert nesting.outbox._proc is not None and nesting.outbox._proc.poll() is None  # a process of its own
    finally:
        nesting.outbox.close()
    client = MlflowClient(uri)
    for trial_id, run_id in runs.items():
        run = client.get_run(run_id)
        assert [m.step for m in client.get_metric_history(run_id, "val_accuracy")] == [1, 2, 3], trial_id
        assert run.info.status == "FINISHED" and run.data.tags["hpo.status"] == "completed"
        assert run.data.params["units"] == "8" and run.data.tags["mlflow.parentRunId"] == sweep.parent_run_id


def test_the_writer_process_spools_while_the_server_is_unreachable(tmp_path):
    with socket.socket() as s:  # a port nothing listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    sweep = SweepRun(f"http://127.0.0.1:{port}", "1", "parent")
    spool = tmp_path / "spool.jsonl"
    nesting = MlflowNesting(sweep, "val_accuracy", "max", "scale", spool, flush_every_s=0.0,
                            flush_share=float("inf"), writer_process=True)
    outbox = nesting.outbox
    outbox.retries, outbox.backoff_s = 1, 0.0
    try:
        _run_trial(nesting, 0, epochs=2)
        assert outbox.down  # a barrier: the child has spooled every write
        ops = [json.loads(line) for line in spool.read_text().splitlines()]
        assert [op["op"] for op in ops] == ["create_run", "log", "log", "log", "terminate"]
        assert outbox.flush() == len(ops)  # still unreachable: nothing sent, nothing lost
    finally:
        outbox.close()
    assert len(spool.read_text().splitlines()) == len(ops)
