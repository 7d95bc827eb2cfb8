"""Progress of trials and sweeps: Monte-Carlo estimates of epochs, time left and cost, and console output.

The estimator (after Dong & Luo, "Progress indication for deep learning model training") is pure
Python/NumPy/SciPy and imports no Ray: :func:`estimate_trial` projects one trial's length from its
validation curve, :func:`estimate_sweep` a whole sweep's from its trials and its plan. Modules:
:mod:`~hpo.progress.curves` (trend families and their fit), :mod:`~hpo.progress.stopping` (EarlyStopping,
goal, max_epochs), :mod:`~hpo.progress.trial`, :mod:`hpo.cutoffs` (scheduler decisions),
:mod:`~hpo.progress.schedule` (trials queueing for slots), :mod:`~hpo.progress.sweep`. The live side:
:mod:`~hpo.progress.live` (a running sweep's record and its :class:`~hpo.progress.live.Snapshot`),
:mod:`~hpo.progress.views` (plain lines, live view, JSON lines), :mod:`~hpo.progress.monitor` (the Ray Tune
callback; import it from there: it needs Ray) and :mod:`~hpo.progress.setup` (built from a sweep file).
"""

from __future__ import annotations

from hpo.progress.sweep import SweepEstimate, SweepPlan, TrialHistory, estimate_sweep
from hpo.progress.trial import TrialEstimate, estimate_trial

__all__ = [
    "SweepEstimate",
    "SweepPlan",
    "TrialEstimate",
    "TrialHistory",
    "estimate_sweep",
    "estimate_trial",
]
