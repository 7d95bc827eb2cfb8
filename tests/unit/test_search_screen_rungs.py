"""The rung screen's ASHA kinds: rungs above an epoch removed; later rungs that cut only once validated."""

from __future__ import annotations

from pathlib import Path

from ray.tune.experiment import Trial
from ray.tune.schedulers import TrialScheduler

from hpo import compat
from tests.conftest import benchmark_script

ROOT = Path(__file__).resolve().parents[2]
BRACKET = dict(min_t=1, max_t=20, reduction_factor=2, s=0, stop_last_trials=True)


def screen():
    return benchmark_script("benchmarks/search_screen_rungs.py", "search_screen_rungs")


def rung(bracket, milestone):
    return next(recorded for at, recorded in compat.bracket_rungs(bracket) if at == milestone)


def test_up_to_keeps_the_rungs_at_or_below_its_epoch():
    bench = screen()
    assert [at for at, _ in compat.bracket_rungs(bench._UpTo(**BRACKET, last=2))] == [2, 1]
    assert [at for at, _ in compat.bracket_rungs(bench._UpTo(**BRACKET, last=4))] == [4, 2, 1]


def test_a_checked_rung_cuts_only_while_the_best_finished_trial_stands_at_or_above_its_cutoff():
    bench = screen()
    bracket = bench._Checked(**BRACKET, top=1)
    rung(bracket, 4).update({"a": 0.9, "b": 0.8, "c": 0.7})  # cutoff: their median, 0.8
    low = [Trial("t", trial_id=f"low{i}", stub=True) for i in range(3)]

    assert bracket.on_result(low[0], 4, 0.5) == TrialScheduler.CONTINUE  # no finished trial yet
    bracket.curves.update({"a": {4: 0.9}, "b": {4: 0.8}, "c": {4: 0.7}})
    bracket.finished.update({"a": 0.95, "b": 0.85, "c": 0.75})
    assert bracket.on_result(low[1], 4, 0.5) == TrialScheduler.STOP
    assert bracket.stopped == {"low1"}

    bracket.finished["late"] = 0.99  # the best finished trial was under today's cutoff at epoch 4
    bracket.curves["late"] = {4: 0.6}
    assert bracket.on_result(low[2], 4, 0.5) == TrialScheduler.CONTINUE


def test_the_rungs_up_to_epoch_2_cut_from_the_start():
    bench = screen()
    bracket = bench._Checked(**BRACKET, top=3)
    rung(bracket, 2).update({"a": 0.9, "b": 0.8, "c": 0.7})
    assert bracket.on_result(Trial("t", trial_id="low", stub=True), 2, 0.5) == TrialScheduler.STOP


def test_a_probe_passes_the_later_rungs_and_the_best_finished_probe_switches_them_on():
    bench = screen()
    bracket = bench._Probed(**BRACKET, every=3, start_on=False)
    rung(bracket, 4).update({"a": 0.9, "b": 0.8, "c": 0.7})  # cutoff 0.8
    first, second = (Trial("t", trial_id=name, stub=True) for name in ("first", "second"))
    assert bracket.on_result(first, 1, 0.95) == TrialScheduler.CONTINUE  # the first trial is a probe
    assert bracket.on_result(second, 1, 0.95) == TrialScheduler.CONTINUE
    assert bracket.probes == {"first"}
    assert bracket.on_result(first, 4, 0.5) == TrialScheduler.CONTINUE  # a probe is never cut above epoch 2
    assert bracket.on_result(second, 4, 0.5) == TrialScheduler.CONTINUE  # no probe has finished: off
    assert "first" not in bracket.stopped

    bracket.probes |= {"p1", "p2", "p3"}
    bracket.curves.update({"p1": {4: 0.85}, "p2": {4: 0.6}, "p3": {4: 0.7}})
    bracket.finished.update({"p1": 0.97, "p2": 0.9, "p3": 0.8, "a": 0.99})  # "a" is no probe: not the test
    third = Trial("t", trial_id="third", stub=True)
    bracket.on_result(third, 1, 0.95)  # the third trial is no probe (every=3)
    assert bracket.on_result(third, 4, 0.5) == TrialScheduler.STOP  # best probe p1 stood at 0.85 >= the cutoff


class Live:
    """The one controller call the median rule makes here: no trial waits, so it never pauses one."""

    def get_live_trials(self) -> list[Trial]:
        return []


def test_median_after_rungs_stops_at_the_early_rungs_then_by_the_median_rule():
    from hpo.search.budget import TIME_ATTR

    bench = screen()
    scheduler = bench._MedianAfterRungs({"grace_period": 1, "max_t": 20, "reduction_factor": 2})
    scheduler.set_search_properties("acc", "max")
    scheduler.set_search_properties(None, None)  # no mode given again: the sign stays
    assert scheduler.sign == 1

    def report(trial, epoch, acc):
        return scheduler.on_trial_result(Live(), trial, {TIME_ATTR: epoch, "acc": acc})

    rising = [Trial("t", trial_id=f"rising{i}", stub=True) for i in range(3)]
    for epoch, acc in ((1, 0.5), (2, 0.6), (3, 0.7)):  # running mean from the rule's grace (3) to 3: 0.7
        assert all(report(trial, epoch, acc) == TrialScheduler.CONTINUE for trial in rising)
    early = Trial("t", trial_id="early", stub=True)
    assert report(early, 1, 0.1) == TrialScheduler.STOP  # under rung 1's cutoff

    weak, strong = (Trial("t", trial_id=name, stub=True) for name in ("weak", "strong"))
    for epoch, acc in ((1, 0.55), (2, 0.65)):  # both pass the rungs at 1 and 2
        assert report(weak, epoch, acc) == TrialScheduler.CONTINUE
        assert report(strong, epoch, acc + 0.2) == TrialScheduler.CONTINUE
    assert report(strong, 3, 0.5) == TrialScheduler.CONTINUE  # its best, 0.85, is over the median
    assert report(weak, 3, 0.6) == TrialScheduler.STOP  # its best, 0.65, is under the others' median
