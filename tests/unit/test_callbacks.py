"""Each Keras callback of a trial's workers, on a tiny real tf-keras model (no Ray, no Horovod)."""

from __future__ import annotations

import numpy as np
import pytest
import tf_keras as keras

from hpo.trial.callbacks import (
    Affinity,
    DivergenceStop,
    EpochStream,
    GoalStop,
    ResumableEarlyStopping,
    SyncedStop,
)
from hpo.trial.protocol import EpochCheckpoint, EpochReport, TrialStarted

X = np.random.default_rng(0).normal(size=(64, 4)).astype("float32")
Y = (X[:, 0] > 0).astype("float32")


class Scripted(keras.callbacks.Callback):
    """Replaces the epoch's logged metric with a scripted value (before the callbacks that read it)."""

    def __init__(self, values, metric="m"):
        super().__init__()
        self.values, self.metric = values, metric

    def on_epoch_end(self, epoch, logs=None):
        logs[self.metric] = self.values[epoch]


def fit(callbacks, epochs=6, initial_epoch=0, batch_size=4, values=None):
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.layers.Dense(1, input_shape=(4,))])
    model.compile(optimizer="sgd", loss="mse")
    scripted = [Scripted(values)] if values is not None else []
    history = model.fit(X, Y, epochs=epochs, initial_epoch=initial_epoch, batch_size=batch_size, verbose=0,
                        callbacks=scripted + callbacks)
    return model, len(history.epoch)


def early(**kwargs):
    return ResumableEarlyStopping(monitor="m", mode="max", patience=2, restore_best_weights=True, **kwargs)


def test_early_stopping_stops_after_patience_epochs_without_improvement():
    rule = early()
    _, ran = fit([rule], values=[0.1, 0.5, 0.4, 0.3, 0.2, 0.1])
    assert ran == 4 and rule.state() == {"best": 0.5, "wait": 2, "best_epoch": 1}


def test_early_stopping_resumes_best_wait_and_weights_from_the_checkpoint(tmp_path):
    from hpo.trial.driver import read_checkpoint, write_checkpoint

    model, _ = fit([], epochs=1)
    weights = model.get_weights()
    state = {"epoch": 2, "early_stopping": {"best": 0.5, "wait": 1, "best_epoch": 1}}
    write_checkpoint(tmp_path, EpochCheckpoint(state, weights))  # as the trial driver stores it
    resume = read_checkpoint(tmp_path)  # as the attempt that resumes gets it
    assert resume.epoch == 2 and resume.best_weights is None
    rule = early(resume=resume)
    _, ran = fit([rule], epochs=6, initial_epoch=2, values=[None, None, 0.3, 0.2, 0.1, 0.0])
    # one more epoch without improvement reaches patience 2: the run stops after epoch index 2
    assert ran == 1 and rule.best == 0.5 and rule.best_epoch == 1 and rule.stopped_epoch == 2
    assert all(np.array_equal(a, b) for a, b in zip(rule.best_weights, weights, strict=True))


def test_synced_stop_stops_at_the_batch_check_once_the_driver_asks():
    asked = []

    def ask(wait):
        asked.append(wait)
        return len(asked) >= 2  # the driver asks between the first and second check

    stop = SyncedStop(ask, broadcast=lambda value, name: value, steps_per_epoch=16)
    fit([stop], epochs=5, batch_size=4)  # 16 steps: a check every 10 batches and at each epoch end
    assert stop.requested and stop.every == 10
    assert asked == [False, True]  # batch 10 (no wait), the epoch end (waits): stopped there
    assert stop.model.stop_training


def test_synced_stop_never_asked_trains_every_epoch_and_uses_rank_0s_broadcast():
    names = []

    def broadcast(value, name):
        names.append(name)
        return value

    stop = SyncedStop(lambda wait: False, broadcast, steps_per_epoch=16)
    _, ran = fit([stop], epochs=3)
    assert ran == 3 and not stop.requested
    assert names.count("hpo.stop.epoch") == 3 and names.count("hpo.stop.batch") == 3


@pytest.mark.parametrize(("mode", "goal", "values", "epochs"), [
    ("max", 0.8, [0.1, 0.5, 0.85, 0.9], 3),
    ("min", 0.2, [0.9, 0.5, 0.1, 0.05], 3),
    ("max", None, [0.1, 0.5, 0.85, 0.9], 4),
    ("max", 0.99, [0.1, 0.5, 0.85, 0.9], 4),
])
def test_goal_stop_ends_training_at_the_first_epoch_that_reaches_the_goal(mode, goal, values, epochs):
    stop = GoalStop("m", goal, mode)
    _, ran = fit([stop], epochs=4, values=values)
    assert ran == epochs and stop.reached == (epochs < 4)


def test_affinity_refreshes_at_every_epoch():
    calls = []
    fit([Affinity(lambda: calls.append(1))], epochs=3)
    assert len(calls) == 3


def stream(values, goal=None, epochs=5):
    sent, rule, goal_stop = [], early(), GoalStop("m", goal, "max")
    clock = iter(range(1000)).__next__
    channel = EpochStream(sent.append, put=lambda w: ("ref", len(w)), early=rule, goal=goal_stop,
                          max_epochs=epochs, clock=lambda: float(clock()))
    fit([rule, goal_stop, channel], epochs=epochs, values=values)
    return sent


def test_epoch_stream_sends_started_then_one_report_per_epoch_with_its_checkpoint():
    sent = stream([0.1, 0.2, 0.3, 0.4, 0.5])
    started, reports = sent[0], sent[1:]
    assert isinstance(started, TrialStarted)
    assert all(isinstance(r, EpochReport) for r in reports) and [r.epoch for r in reports] == [1, 2, 3, 4, 5]
    assert [r.last for r in reports] == [False] * 4 + [True]  # max_epochs
    assert reports[2].metrics["m"] == 0.3 and reports[2].epoch_time_s == 1.0
    assert reports[2].checkpoint.state == {"epoch": 3, "early_stopping": {"best": 0.3, "wait": 0, "best_epoch": 2}}
    assert reports[2].checkpoint.weights == ("ref", 2) and reports[2].checkpoint.best_weights is None


def test_epoch_stream_hands_over_weights_only_when_the_driver_has_room_and_always_at_the_end():
    from hpo.trial.backend import Channel

    channel, puts = Channel(), []
    rule, goal_stop = early(), GoalStop("m", None, "max")

    def put(weights):
        puts.append(len(weights))
        return ("ref", len(weights))

    stream_cb = EpochStream(channel.put, put, rule, goal_stop, max_epochs=5,
                            checkpoint_wanted=channel.checkpoint_wanted)
    fit([rule, goal_stop, stream_cb], epochs=5, values=[0.1, 0.2, 0.3, 0.4, 0.5])
    reports = [m for m in channel.drain() if isinstance(m, EpochReport)]
    # The driver never persisted epoch 1's checkpoint: epochs 2-4 go on without one; the last always has one.
    assert [r.checkpoint.weights is not None for r in reports] == [True, False, False, False, True]
    assert len(puts) == 2 and reports[1].checkpoint.state["epoch"] == 2
    channel.checkpoint_done()
    assert channel.checkpoint_wanted()


def test_epoch_stream_marks_a_patience_stop_and_keeps_the_best_weights_apart():
    reports = stream([0.1, 0.5, 0.4, 0.3, 0.2])[1:]
    assert [r.epoch for r in reports] == [1, 2, 3, 4]
    assert reports[-1].last and reports[-1].stopped_by_patience and not reports[-1].stopped_by_goal
    assert reports[2].checkpoint.best_weights == ("ref", 2)  # epoch 3 is not the best: best weights sent too


def test_epoch_stream_marks_a_goal_stop():
    reports = stream([0.1, 0.9, 0.95], goal=0.8)[1:]
    assert [r.epoch for r in reports] == [1, 2]
    assert reports[-1].last and reports[-1].stopped_by_goal and not reports[-1].stopped_by_patience


def test_divergence_stop_ends_at_the_first_nan_or_inf_loss_and_the_stream_marks_it():
    for bad in (float("nan"), float("inf")):
        rule, goal_stop, divergence, sent = early(), GoalStop("m", None, "max"), DivergenceStop(("loss", "m")), []
        channel = EpochStream(sent.append, put=lambda w: w, early=rule, goal=goal_stop, max_epochs=6,
                              divergence=divergence)
        _, ran = fit([divergence, rule, goal_stop, channel], values=[0.1, 0.2, bad, 0.4, 0.5, 0.6])
        reports = sent[1:]
        assert ran == 3 and divergence.diverged
        assert [r.diverged for r in reports] == [False, False, True] and reports[-1].last
        assert not reports[-1].stopped_by_patience and not reports[-1].stopped_by_goal


def test_divergence_stop_sees_a_real_nan_loss_and_leaves_finite_runs_alone():
    divergence = DivergenceStop()
    keras.utils.set_random_seed(1)
    model = keras.Sequential([keras.layers.Dense(1, input_shape=(4,))])
    model.compile(optimizer=keras.optimizers.SGD(learning_rate=1e12), loss="mse")  # blows up at once
    history = model.fit(X, Y, epochs=5, batch_size=4, verbose=0, callbacks=[divergence])
    assert divergence.diverged and len(history.epoch) < 5
    calm = DivergenceStop()
    _, ran = fit([calm], epochs=3)
    assert ran == 3 and not calm.diverged


def test_a_checkpoint_keeps_earlier_best_weights_apart_from_this_epochs(tmp_path):
    from hpo.trial.driver import read_checkpoint, write_checkpoint

    last, best = [np.ones((2, 2)), np.zeros(3)], [np.full((2, 2), 7.0), np.ones(3)]
    write_checkpoint(tmp_path, EpochCheckpoint({"epoch": 5, "early_stopping": {"best": 1.0, "wait": 2,
                                                                               "best_epoch": 2}}, last, best))
    resume = read_checkpoint(tmp_path)
    assert resume.epoch == 5 and resume.early_stopping == {"best": 1.0, "wait": 2, "best_epoch": 2}
    assert all(np.array_equal(a, b) for a, b in zip(resume.weights, last, strict=True))
    assert all(np.array_equal(a, b) for a, b in zip(resume.best_or_last_weights, best, strict=True))
    assert EpochCheckpoint({}, None).epoch == 0 and EpochCheckpoint({}, None).early_stopping is None
