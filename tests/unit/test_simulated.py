"""The simulated backend: its curves and stopping rule (its sweeps: the search contract tests), the warm pool."""

from __future__ import annotations

import typing

import numpy as np
import pytest

from hpo.config import TrialConfig
from hpo.results import REPEAT_KEY
from hpo.trial.driver import BACKENDS
from hpo.trial.simulated import EarlyStopping, SyntheticCurve


class _Spec:
    seed = 3
    max_epochs = 12


def test_every_configurable_backend_is_registered():
    (choices,) = [typing.get_args(f.annotation) for n, f in TrialConfig.model_fields.items() if n == "backend"]
    assert set(choices) == set(BACKENDS)


def test_curve_is_determined_by_params_seed_and_repeat():
    params = {"learning_rate": 0.01, "units": 16}
    a, b = SyntheticCurve.for_trial(_Spec, params), SyntheticCurve.for_trial(_Spec, dict(params))
    assert [a.accuracy(e) for e in range(1, 13)] == [b.accuracy(e) for e in range(1, 13)]
    other = SyntheticCurve.for_trial(_Spec, {**params, REPEAT_KEY: 1})
    assert other.ceiling == a.ceiling and other.noise != a.noise  # same configuration, another seed
    assert all(0.0 <= a.accuracy(e) <= 1.0 for e in range(1, 13))
    assert a.metrics(12)["val_loss"] < a.metrics(1)["val_loss"]  # loss falls as accuracy rises


def test_learning_rate_far_from_its_best_lowers_the_ceiling():
    near = SyntheticCurve.for_trial(_Spec, {"learning_rate": 0.01})
    far = SyntheticCurve.for_trial(_Spec, {"learning_rate": 1e-5})
    assert far.ceiling < near.ceiling


def _keras_stop(values, mode, patience, min_delta):
    import tensorflow as tf

    model = tf.keras.Sequential([tf.keras.layers.Dense(1, input_shape=(1,))])
    rule = tf.keras.callbacks.EarlyStopping(monitor="m", mode=mode, patience=patience, min_delta=min_delta)
    rule.set_model(model)
    rule.on_train_begin()
    for epoch, value in enumerate(values):
        rule.on_epoch_end(epoch, {"m": value})
        if model.stop_training:
            return epoch, rule.best, rule.best_epoch
    return None, rule.best, rule.best_epoch


def _own_stop(values, mode, patience, min_delta):
    rule = EarlyStopping(mode, patience, min_delta)
    for epoch, value in enumerate(values):
        rule.update(value, epoch)
        if rule.stopped:
            return epoch, rule.best, rule.best_epoch
    return None, rule.best, rule.best_epoch


@pytest.mark.parametrize("mode", ["max", "min"])
def test_early_stopping_decides_as_keras_does(mode):
    rng = np.random.default_rng(0)
    for case in range(40):
        values = list(np.cumsum(rng.normal(0.0, 0.02, 15)) + 0.5)
        patience, min_delta = int(rng.integers(0, 4)), float(rng.choice([0.0, 0.01]))
        assert _own_stop(values, mode, patience, min_delta) == _keras_stop(values, mode, patience, min_delta), case


def test_early_stopping_resumes_from_its_checkpointed_state():
    values = [0.5, 0.6, 0.55, 0.54, 0.53]
    whole = EarlyStopping("max", 2, 0.0)
    for epoch, value in enumerate(values):
        whole.update(value, epoch)
    first = EarlyStopping("max", 2, 0.0)
    for epoch, value in enumerate(values[:3]):
        first.update(value, epoch)
    resumed = EarlyStopping("max", 2, 0.0, first.state())
    for epoch, value in enumerate(values[3:], start=3):
        resumed.update(value, epoch)
    assert resumed.state() == whole.state() and resumed.stopped == whole.stopped


class _Group:
    """Stands in for a started Horovod group: its shape, whether it answers, whether it was torn down."""

    def __init__(self, shape, answers=True):
        self.shape, self.answers, self.torn_down = shape, answers, False

    def alive(self):
        return self.answers

    def release(self, reusable):
        self.torn_down = not reusable


def test_warm_pool_hands_back_a_live_group_of_the_same_shape_once():
    from hpo.trial.backend import WarmPool

    pool, group = WarmPool(), _Group((2, 1.0, 0.0))
    pool.keep(group)
    assert pool.take((2, 1.0, 0.0)) is group and pool.take((2, 1.0, 0.0)) is None
    pool.keep(group)
    assert pool.take((4, 1.0, 0.0)) is None and group.torn_down  # another shape: torn down, not leaked
    dead = _Group((2, 1.0, 0.0), answers=False)
    pool.keep(dead)
    assert pool.take((2, 1.0, 0.0)) is None and dead.torn_down
    pool.keep(group)
    pool.forget(group)
    assert pool.take((2, 1.0, 0.0)) is None


def test_hosted_channel_calls_the_named_method_of_its_own_channel():
    from hpo.trial.simhost import HostedChannel, SimulatorHost

    class Direct:  # stands for the actor handle: .call.remote runs the host's method at once
        def __init__(self, host):
            self.call = type("M", (), {"remote": staticmethod(host.call)})

    host = SimulatorHost()
    a, b = HostedChannel(Direct(host), "a"), HostedChannel(Direct(host), "b")
    a.put.remote("epoch 1")
    b.request_stop.remote()
    assert a.drain.remote() == ["epoch 1"] and a.drain.remote() == []
    assert b.should_stop.remote() and not a.should_stop.remote()
    b.reset.remote()
    assert not b.should_stop.remote()
    host.close("a")
    assert set(host.channels) == {"b"}
    with pytest.raises(AttributeError):
        a._private  # noqa: B018


def _replay_epochs(epoch_s: float, epochs: int):
    """A replay function for :meth:`SimulatorHost.replay`: ``epochs`` epochs of ``epoch_s``, as run_simulated does."""
    from hpo.trial.protocol import EpochCheckpoint, EpochReport

    def fn(spec, params, replay, resume):
        for epoch in range(1, epochs + 1):
            if replay.should_stop() or not replay.pause(epoch_s):
                return "stopped"
            replay.put(EpochReport(epoch, {"val_accuracy": 0.5}, epoch_s, replay.now(), epoch == epochs,
                                   checkpoint=EpochCheckpoint({"epoch": epoch}, weights="w")))
            if epoch < epochs:
                replay.taken()
        return "finished"

    return fn


def _driver(host, key: str, log: list, stop_after: int | None = None, others: tuple = ()) -> None:
    """Stands for the trial driver: drains the channel, records each report and hands it back (or stops)."""
    import time

    seen = 0
    while True:
        for msg in host.call(key, "drain"):
            seen += 1
            log.append((msg.time, key, msg.epoch))
            if msg.last:
                return
            if stop_after is not None and seen >= stop_after:
                host.call(key, "request_stop")
                host.expect("sweep", 2, others, [])  # Tune's loop no longer runs the trial
                return
            host.call(key, "checkpoint_done")
        time.sleep(0.001)


def test_replays_in_the_host_report_epochs_in_the_order_of_the_sweeps_clock():
    # Two trials at once, epochs of 1 s and 3 s: their reports reach the drivers at 1, 2, 3, 3, 4, ... simulated
    # seconds, each handed to Tune (the driver) before time moves on.
    import threading

    from hpo.trial.simhost import HostedChannel, SimulatorHost

    host, log, results = SimulatorHost(), [], {}
    host.open_clock("sweep", 1000.0)
    host.expect("sweep", 1, ["a", "b"], [])  # as Tune's loop says: both trials run (the first waits for the second)
    runs = {"a": _replay_epochs(1.0, 6), "b": _replay_epochs(3.0, 2)}
    threads = []
    for key, fn in runs.items():
        host.call(key, "reset")
        threads.append(threading.Thread(target=lambda k=key, f=fn: results.__setitem__(
            k, host.replay(f, [None, {}, HostedChannel(None, k), None], "sweep", k))))
        threads.append(threading.Thread(target=_driver, args=(host, key, log)))
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert results == {"a": "finished", "b": "finished"}
    assert [t - 1000 for t, _, _ in log] == [1, 2, 3, 3, 4, 5, 6, 6]
    assert [(t - 1000, e) for t, k, e in log if k == "b"] == [(3, 1), (6, 2)]
    assert host.now("sweep") == 1006
    host.close_clock("sweep")
    assert host.now("sweep") is None


def test_a_stop_request_ends_a_replay_sleeping_on_the_clock_at_once():
    # "a" is stopped after its first epoch; "b" (an epoch of an hour) goes on alone, and no time passes
    # for "a"'s second epoch.
    import threading
    import time

    from hpo.trial.simhost import HostedChannel, SimulatorHost

    host, log, results = SimulatorHost(), [], {}
    host.open_clock("sweep", 0.0)
    host.expect("sweep", 1, ["a", "b"], [])
    started = time.monotonic()
    threads = []
    for key, fn, stop in (("a", _replay_epochs(1.0, 5), 1), ("b", _replay_epochs(3600.0, 2), None)):
        threads.append(threading.Thread(target=lambda k=key, f=fn: results.__setitem__(
            k, host.replay(f, [None, {}, HostedChannel(None, k), None], "sweep", k))))
        threads.append(threading.Thread(target=_driver, args=(host, key, log, stop, ["b"])))
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout=30)
    assert results == {"a": "stopped", "b": "finished"}
    assert sorted((k, t) for t, k, _ in log) == [("a", 1.0), ("b", 3600.0), ("b", 7200.0)]
    assert time.monotonic() - started < 10
