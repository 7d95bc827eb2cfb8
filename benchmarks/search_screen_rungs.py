"""Screens two changes to ASHA's rungs on the replay benchmark, each registered as a scheduler kind of its own.

The kinds exist only in this script's process (``hpo.kinds.register_scheduler``, the plug-in point a new
scheduler uses); none of them is a setting of hpo's. Each is Tune's ASHA with one bracket, grace
``scheduler.grace_period``, η ``scheduler.reduction_factor``, max_t ``trial.max_epochs``:

- ``asha-upto2`` / ``asha-upto4``: without its rungs above epoch 2 / 4 (a trial that passes the last rung
  left trains to its end);
- ``asha-checked`` / ``asha-checked3``: a rung above epoch 2 stops a trial only once three trials have
  finished (ended without being stopped by the scheduler) and the best one (the best three) of them were at
  or above the rung's present cutoff when they passed it: a rung cuts only while it would not have cut the
  sweep's best finished trials;
- ``asha-probed`` / ``asha-probed-on`` / ``asha-probed8``: every fourth (eighth) trial is a probe, which the
  rungs above epoch 2 never stop; such a rung cuts the other trials once three probes have finished and the
  best of them stood at or above its present cutoff, and until then does not cut (cuts, ``-on``);
- ``asha2-median``: ASHA's rungs up to epoch 2, then Tune's median stopping rule (a trial stops where either
  stops it).

Usage: the arguments of ``benchmarks/search_peers.py``, with ``--variants`` naming the kinds, e.g.
``python benchmarks/search_screen_rungs.py --tasks synth_mlp,digits_linear --seeds 40 --methods
hpo,random_fifo --variants 'upto2:scheduler.type="asha-upto2";checked:scheduler.type="asha-checked"'``.
"""

from __future__ import annotations

import runpy
import sys
from pathlib import Path
from typing import Any

from ray.tune.schedulers import AsyncHyperBandScheduler, MedianStoppingRule, TrialScheduler

from hpo import compat, kinds
from hpo.config import SweepConfig
from hpo.search.budget import TIME_ATTR
from hpo.search.schedulers import asha_arguments

#: Rungs at or below this epoch always cut in the ``asha-checked`` kinds.
ALWAYS_UP_TO = 2
#: Finished trials an ``asha-checked`` rung above ``ALWAYS_UP_TO`` waits for before it cuts.
FINISHED_BEFORE_CUTS = 3


class _UpTo(compat.asha_bracket_base()):  # type: ignore[misc]
    """Tune's ASHA bracket without its rungs above epoch ``last``."""

    def __init__(self, *args: Any, last: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        rungs = compat.bracket_rungs(self)
        rungs[:] = [rung for rung in rungs if rung[0] <= last]


class _Checked(compat.asha_bracket_base()):  # type: ignore[misc]
    """Tune's ASHA bracket whose rungs above ``ALWAYS_UP_TO`` cut only while the best finished trials pass them.

    Args:
        top: How many of the best finished trials must be at or above a rung's cutoff for it to cut.
    """

    def __init__(self, *args: Any, top: int, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.top = top
        self.curves: dict[str, dict[int, float]] = {}
        self.stopped: set[str] = set()
        self.finished: dict[str, float] = {}

    def _tested(self) -> dict[str, float]:
        """The finished trials a later rung is tested on, with their best values."""
        return self.finished

    def _untested(self) -> bool:
        """Whether a later rung cuts before ``FINISHED_BEFORE_CUTS`` tested trials have finished."""
        return False

    def _cuts(self, milestone: int, cutoff: float) -> bool:
        if milestone <= ALWAYS_UP_TO:
            return True
        tested = self._tested()
        if len(tested) < FINISHED_BEFORE_CUTS:
            return self._untested()
        best = sorted(tested, key=lambda trial_id: -tested[trial_id])[: self.top]
        return all(self.curves[t].get(milestone, cutoff) >= cutoff for t in best)

    def on_result(self, trial: Any, cur_iter: int, cur_rew: float | None) -> str:
        """Tune's decision, with a STOP at a rung that does not cut yet turned into CONTINUE."""
        if cur_rew is not None:
            self.curves.setdefault(trial.trial_id, {})[cur_iter] = cur_rew
        milestone, cutoff = None, None
        for at, recorded in compat.bracket_rungs(self):
            if cur_iter >= at and trial.trial_id not in recorded:
                milestone, cutoff = at, self.cutoff(recorded)
                break
        action = super().on_result(trial, cur_iter, cur_rew)
        if action == TrialScheduler.STOP:
            if milestone is not None and cutoff is not None and not self._cuts(milestone, cutoff):
                return TrialScheduler.CONTINUE
            self.stopped.add(trial.trial_id)
        return action


class _Probed(_Checked):
    """:class:`_Checked` whose test is a share of trials that its rungs above ``ALWAYS_UP_TO`` never stop.

    Every ``every``-th new trial is a probe: it passes the later rungs whatever its value (it is still
    recorded there). A later rung cuts the other trials once three probes have finished and the best of them
    stood at or above the rung's present cutoff; before that it cuts if ``start_on``.
    """

    def __init__(self, *args: Any, every: int, start_on: bool, **kwargs: Any) -> None:
        super().__init__(*args, top=1, **kwargs)
        self.every = every
        self.start_on = start_on
        self.seen = 0
        self.probes: set[str] = set()

    def _tested(self) -> dict[str, float]:
        """The finished probes."""
        return {t: v for t, v in self.finished.items() if t in self.probes}

    def _untested(self) -> bool:
        """``start_on``."""
        return self.start_on

    def on_result(self, trial: Any, cur_iter: int, cur_rew: float | None) -> str:
        """:class:`_Checked`'s decision, except that a probe is stopped only at the rungs up to ``ALWAYS_UP_TO``."""
        if trial.trial_id not in self.curves:
            if self.seen % self.every == 0:
                self.probes.add(trial.trial_id)
            self.seen += 1
        action = super().on_result(trial, cur_iter, cur_rew)
        if action == TrialScheduler.STOP and trial.trial_id in self.probes and cur_iter > ALWAYS_UP_TO:
            self.stopped.discard(trial.trial_id)
            return TrialScheduler.CONTINUE
        return action


class _MedianAfterRungs(MedianStoppingRule):
    """ASHA's rungs up to epoch ``ALWAYS_UP_TO`` (:class:`_UpTo`), then Tune's median stopping rule.

    A trial stops where either stops it; the median rule sees every result, from epoch ``ALWAYS_UP_TO + 1``.
    """

    def __init__(self, arguments: dict[str, Any]) -> None:
        super().__init__(time_attr=TIME_ATTR, grace_period=ALWAYS_UP_TO + 1)
        self.sign = 1
        self.bracket = _UpTo(min_t=arguments["grace_period"], max_t=arguments["max_t"],
                             reduction_factor=arguments["reduction_factor"], s=0, stop_last_trials=False,
                             last=ALWAYS_UP_TO)

    def set_search_properties(self, metric: str | None, mode: str | None, **spec: Any) -> bool:
        """The median rule's, keeping the sign that turns the metric into ASHA's reward."""
        if mode:
            self.sign = 1 if mode == "max" else -1
        return super().set_search_properties(metric, mode, **spec)

    def on_trial_result(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> str:
        """STOP where the rungs or the median rule stop the trial."""
        median = super().on_trial_result(tune_controller, trial, result)
        if TIME_ATTR not in result or self.metric not in result:
            return median
        early = self.bracket.on_result(trial, result[TIME_ATTR], self.sign * result[self.metric])
        return TrialScheduler.STOP if TrialScheduler.STOP in (median, early) else median


class _CheckingASHA(AsyncHyperBandScheduler):
    """ASHA with one :class:`_Checked` bracket, told which trials finished."""

    def on_trial_complete(self, tune_controller: Any, trial: Any, result: dict[str, Any]) -> None:
        """Tune's bookkeeping, then the trial counts as finished unless the bracket stopped it."""
        super().on_trial_complete(tune_controller, trial, result)
        bracket = compat.asha_brackets(self)[0]
        curve = bracket.curves.get(trial.trial_id)
        if curve and trial.trial_id not in bracket.stopped:
            bracket.finished[trial.trial_id] = max(curve.values())


def _with_bracket(scheduler: AsyncHyperBandScheduler, arguments: dict[str, Any], bracket: type,
                  **extra: Any) -> AsyncHyperBandScheduler:
    compat.set_asha_brackets(scheduler, [bracket(
        min_t=arguments["grace_period"],
        max_t=arguments["max_t"],
        reduction_factor=arguments["reduction_factor"],
        s=0,
        stop_last_trials=compat.asha_stop_last_trials(scheduler),
        **extra,
    )])
    return scheduler


def up_to(last: int) -> Any:
    """The factory of ``asha-upto{last}``."""

    def build(config: SweepConfig) -> TrialScheduler:
        arguments = asha_arguments(config)
        return _with_bracket(AsyncHyperBandScheduler(**arguments), arguments, _UpTo, last=last)

    return build


def checked(top: int) -> Any:
    """The factory of ``asha-checked`` (``top`` 1) and ``asha-checked3``."""

    def build(config: SweepConfig) -> TrialScheduler:
        arguments = asha_arguments(config)
        return _with_bracket(_CheckingASHA(**arguments), arguments, _Checked, top=top)

    return build


def probed(every: int, start_on: bool) -> Any:
    """The factory of ``asha-probed`` (a probe every fourth trial; later rungs off until validated) and kin."""

    def build(config: SweepConfig) -> TrialScheduler:
        arguments = asha_arguments(config)
        return _with_bracket(_CheckingASHA(**arguments), arguments, _Probed, every=every, start_on=start_on)

    return build


def median_after_rungs(config: SweepConfig) -> TrialScheduler:
    """The factory of ``asha2-median``."""
    return _MedianAfterRungs(asha_arguments(config))


def register() -> None:
    """Registers the screened kinds (forecast: ASHA's rule; the replay benchmark forecasts nothing)."""
    for name, factory in (("asha-upto2", up_to(2)), ("asha-upto4", up_to(4)), ("asha-checked", checked(1)),
                          ("asha-checked3", checked(3)), ("asha-probed", probed(4, False)),
                          ("asha-probed-on", probed(4, True)), ("asha-probed8", probed(8, False)),
                          ("asha2-median", median_after_rungs)):
        kinds.register_scheduler(kinds.SchedulerKind(name, factory, kinds.AshaRungs(), rungs=True))


if __name__ == "__main__":
    register()
    script = Path(__file__).with_name("search_peers.py")
    sys.argv = [str(script), *sys.argv[1:]]
    runpy.run_path(str(script), run_name="__main__")
