"""Random proposals interleaved with a model's (``search.random_fraction``).

A model-based sampler (TPE, GP) proposes where its model of the trials so far says to look; a share of
trials drawn at random keeps it from spending the sweep in one region its first trials happened to favour,
as BOHB (its ``random_fraction``) and SMAC (random interleaving) do. Which trials are random is fixed by the
study's seed and the trial's number, so a sweep with a seed, replayed or resumed, makes the same choices.
``search.random_after: N`` keeps the first N trials the model's (its own start-up trials among them): a
short sweep is then the model's alone, and the random share begins once the sweep is long enough to afford it.
"""

from __future__ import annotations

import secrets
from typing import Any

import numpy as np
from optuna.distributions import BaseDistribution
from optuna.samplers import BaseSampler, RandomSampler
from optuna.study import Study
from optuna.trial import FrozenTrial

from hpo.search.wrapper import SamplerWrapper


class RandomInterleaved(SamplerWrapper):
    """A sampler that answers a share of the trials at random and the others with ``model``.

    Args:
        model: The model-based sampler (its own random start-up trials still come first).
        fraction: The share of trials proposed at random, in [0, 1).
        seed: Fixes which trials are random and their parameters; None: drawn once per sampler.
        after: Trials numbered below it are never random (0: the share applies from the first trial).
    """

    def __init__(self, model: BaseSampler, fraction: float, seed: int | None = None, after: int = 0) -> None:
        if not 0 <= fraction < 1:
            raise ValueError(f"fraction {fraction!r} is not in [0, 1)")
        if after < 0:
            raise ValueError(f"after {after!r} is negative")
        super().__init__(model)
        self.fraction = fraction
        self.after = after
        self._seed = secrets.randbits(32) if seed is None else seed
        self._random = RandomSampler(seed=None if seed is None else (seed + 1) % 2**32)  # another stream than TPE's

    def is_random(self, trial: FrozenTrial) -> bool:
        """True if ``trial`` (by its number) is one of the trials proposed at random."""
        if trial.number < self.after:
            return False
        return bool(np.random.default_rng([self._seed, trial.number]).random() < self.fraction)

    def infer_relative_search_space(self, study: Study, trial: FrozenTrial) -> dict[str, BaseDistribution]:
        """The model's joint search space, or none for a random trial (each parameter drawn on its own)."""
        return {} if self.is_random(trial) else self.model.infer_relative_search_space(study, trial)

    def sample_relative(
        self, study: Study, trial: FrozenTrial, search_space: dict[str, BaseDistribution]
    ) -> dict[str, Any]:
        """The model's joint proposal (nothing for a random trial)."""
        return {} if self.is_random(trial) else self.model.sample_relative(study, trial, search_space)

    def sample_independent(
        self, study: Study, trial: FrozenTrial, param_name: str, param_distribution: BaseDistribution
    ) -> Any:
        """One parameter, at random for a random trial, else as the model draws parameters on their own."""
        sampler = self._random if self.is_random(trial) else self.model
        return sampler.sample_independent(study, trial, param_name, param_distribution)

    def reseed_rng(self) -> None:
        """Reseeds both samplers (Optuna calls it for parallel workers of one study)."""
        super().reseed_rng()
        self._random.reseed_rng()


def interleaved(model: BaseSampler, fraction: float, seed: int | None, after: int = 0) -> BaseSampler:
    """``model`` with ``fraction`` of its trials from number ``after`` on proposed at random (``model`` for 0)."""
    return model if fraction == 0 else RandomInterleaved(model, fraction, seed, after)


__all__ = ["RandomInterleaved", "interleaved"]
