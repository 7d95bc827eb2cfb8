"""The base of hpo's sampler wrappers (:mod:`hpo.search.interleave`, :mod:`hpo.search.matched`).

A wrapper holds a model-based Optuna sampler (TPE, GP) and changes how it proposes; what Optuna asks of a
sampler around a trial (its hooks, reseeding) goes to the model unchanged.
"""

from __future__ import annotations

from collections.abc import Sequence

from optuna.samplers import BaseSampler
from optuna.study import Study
from optuna.trial import FrozenTrial, TrialState


class SamplerWrapper(BaseSampler):
    """A sampler around ``model``, passing Optuna's trial hooks and reseeding on to it.

    Args:
        model: The sampler wrapped.
    """

    def __init__(self, model: BaseSampler) -> None:
        self.model = model

    def before_trial(self, study: Study, trial: FrozenTrial) -> None:
        """The model's hook (it sees every trial, on the study itself)."""
        self.model.before_trial(study, trial)

    def after_trial(
        self, study: Study, trial: FrozenTrial, state: TrialState, values: Sequence[float] | None
    ) -> None:
        """The model's hook (it learns from every trial, on the study itself)."""
        self.model.after_trial(study, trial, state, values)

    def reseed_rng(self) -> None:
        """Reseeds the model (Optuna calls it for parallel workers of one study)."""
        self.model.reseed_rng()


__all__ = ["SamplerWrapper"]
