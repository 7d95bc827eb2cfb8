"""Sweeps replayed from recorded learning curves, on a simulated clock: search and scheduling at no training cost.

:class:`CurveTable` holds a task's recorded curves (one Parquet file); :func:`replay_sweep` runs a sweep
file's searcher and scheduler over it (or Tune ones given), as a real sweep would call them, several trials at
once, HyperBand's pauses included;
:class:`Surrogate` answers any configuration with a curve interpolated from the recorded ones.
"""

from hpo.replay.surrogate import Surrogate
from hpo.replay.sweep import ReplayedTrial, ReplayResult, replay_sweep
from hpo.replay.table import Curve, CurveTable, Task

__all__ = ["Curve", "CurveTable", "ReplayResult", "ReplayedTrial", "Surrogate", "Task", "replay_sweep"]
