"""The Tune searchers of the searcher kinds (:mod:`hpo.kinds`): ``search.algorithm`` → a Tune search algorithm.

``optuna-tpe``, ``optuna-gp`` and ``random`` are Optuna samplers behind Ray's ``OptunaSearch``
(:class:`OptunaSearcher`), with the study persisted in ``STORAGE/NAME/optuna.db`` (readable by
``optuna-dashboard``); ``grid`` is Tune's grid expansion. ``search.repeats`` wraps the searcher in Tune's
``Repeater``: each sampled configuration runs ``repeats`` times with different seeds and the searcher is
told the mean.

One rule for a trial's value, the one ``summary.json`` ranks by: its **best epoch** (the weights
EarlyStopping restores), not the last epoch Tune hands a searcher. A finished trial is told its best epoch;
with repeats, a configuration is told the mean of its repeats' best epochs. A trial the scheduler stopped is
told PRUNED, whose value Optuna takes from its last reported epoch; TPE and GP compare trials at one budget
before learning from them (``search.match_budget``, :mod:`hpo.search.matched`).
"""

from __future__ import annotations

import logging
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ray.tune.search import BasicVariantGenerator, Repeater
from ray.tune.search.optuna import OptunaSearch

from hpo import compat, kinds
from hpo.config import SweepConfig
from hpo.kinds import WarmPoints
from hpo.objective import best_value
from hpo.options import WarmStartMode
from hpo.results import DIVERGED_KEY, FINISHED_KEY
from hpo.search.budget import TIME_ATTR
from hpo.search.space import SearchSpace
from hpo.search.warmstart import seed_study

logger = logging.getLogger(__name__)


def _startup(config: SweepConfig) -> dict[str, int]:
    n = config.search.startup_trials
    return {} if n is None else {"n_startup_trials": n}


def _wrapped(config: SweepConfig, model: Any) -> Any:
    """``model`` as the sweep file's search keys wrap it.

    ``search.match_budget``: shown trials compared at one budget (:mod:`hpo.search.matched`);
    ``search.random_fraction``: that share of the trials proposed at random (:mod:`hpo.search.interleave`),
    from trial ``search.random_after`` on (the searcher's defaults where unset).
    """
    from hpo.search.interleave import interleaved
    from hpo.search.matched import BudgetMatched

    if config.search.budget_matched:
        model = BudgetMatched(model)
    return interleaved(model, config.search.random_share, config.search.seed, config.search.random_start)


def _tpe(config: SweepConfig) -> Any:
    """Optuna's TPE, multivariate over each group of parameters that occur together (``group``).

    Optuna's default TPE models jointly only the parameters every trial has, and any other one (a
    conditional parameter, ``when:``) on its own. With ``group`` each set of parameters that occur together
    is modelled jointly, conditional ones included. Replayed on recorded learning curves
    (``benchmarks/search_peers.py``, its two development tasks, ASHA stopping, 2 and 8 trials at once, 20
    seeds) it reached random search's final best in a median 0.09-0.12 of the budget (worst of the four
    settings 0.12), against 0.07-0.19 without ``group`` and 0.09-0.15 for random search with the same ASHA.
    """
    import optuna

    with warnings.catch_warnings():
        warnings.simplefilter("ignore", optuna.exceptions.ExperimentalWarning)  # ``group`` is marked experimental
        model = optuna.samplers.TPESampler(seed=config.search.seed, multivariate=True, group=True, **_startup(config))
    return _wrapped(config, model)


def _gp(config: SweepConfig) -> Any:
    import optuna

    return _wrapped(config, optuna.samplers.GPSampler(seed=config.search.seed, **_startup(config)))


def _random(config: SweepConfig) -> Any:
    import optuna

    return optuna.samplers.RandomSampler(seed=config.search.seed)


def study_url(sweep_dir: Path) -> str:
    """The Optuna RDB storage URL of a sweep's study."""
    return f"sqlite:///{sweep_dir / 'optuna.db'}"


def study_storage(sweep_dir: Path) -> Any:
    """The sweep's study storage, committing without waiting for the disk.

    Optuna commits a dozen times per trial (the trial, each parameter, each intermediate value, its end),
    and sqlite waits for the disk at every commit (1.6-4 ms here): in a sweep of 600 short simulated trials
    that was the driver's largest single cost. With ``PRAGMA synchronous=OFF`` each commit is handed to the
    operating system at once: the study survives the driver being killed (what ``--resume`` is for), not the
    machine losing power in the middle of a write. The setting is part of the storage's connection factory,
    so a storage unpickled from Tune's saved state commits the same way.
    """
    import functools

    import optuna

    path = sweep_dir / "optuna.db"
    return optuna.storages.RDBStorage(
        study_url(sweep_dir), engine_kwargs={"creator": functools.partial(_fast_sqlite, str(path))}
    )


def _fast_sqlite(path: str) -> Any:
    """A sqlite connection to ``path`` that does not wait for the disk at each commit."""
    import sqlite3

    connection = sqlite3.connect(path, timeout=30, check_same_thread=False)
    connection.execute("PRAGMA synchronous=OFF")
    return connection


def close_study(config: SweepConfig, sweep_dir: Path) -> int:
    """Ends the trials a finished sweep's study still has RUNNING, as FAIL; returns how many.

    Once Tune has ended every trial, a RUNNING trial in the study is one Optuna handed out that Tune never
    recorded: the driver was killed between the two (the study is written at once, Tune's state every few
    seconds), and the resumed sweep asked again. Left RUNNING, it would look like a live trial to
    optuna-dashboard and to a warm start.

    Only the RUNNING trials are read (a query on their state, not the whole study through Optuna's cache:
    at thousands of trials that read took tens of seconds and held every trial in the driver's memory).
    """
    path = sweep_dir / "optuna.db"
    if not kinds.searcher(config.search.algorithm).study or not path.is_file():
        return 0
    from optuna.trial import TrialState

    storage = study_storage(sweep_dir)
    try:
        study_id = storage.get_study_id_from_name(config.name)
        lost = storage.get_all_trials(study_id, deepcopy=False, states=(TrialState.RUNNING,))
        for trial in lost:
            trial_id = storage.get_trial_id_from_study_id_trial_number(study_id, trial.number)
            storage.set_trial_state_values(trial_id, TrialState.FAIL)
    except KeyError:
        return 0
    finally:
        storage.engine.dispose()
    return len(lost)


def grid(config: SweepConfig, sweep_dir: Path, resume: bool, warm: WarmPoints, warm_mode: WarmStartMode) -> Any:
    """``grid``: Tune's grid expansion (of :meth:`SearchSpace.param_space`), capped at ``search.max_trials``."""
    return CappedGrid(config.search.max_trials, random_state=config.search.seed)


@dataclass(frozen=True)
class OptunaSearcher:
    """A searcher factory: an Optuna sampler behind :class:`DurableOptunaSearch`, its study in ``optuna.db``.

    Attributes:
        sampler: ``config`` → the Optuna sampler.
    """

    sampler: Callable[[SweepConfig], Any]

    def __call__(
        self, config: SweepConfig, sweep_dir: Path | None, resume: bool, warm: WarmPoints, warm_mode: WarmStartMode
    ) -> Any:
        """The searcher of ``config`` (the study continued on a resume, else made afresh and seeded by ``warm``).

        A ``sweep_dir`` of None keeps the study in memory (a replayed sweep: nothing to resume or look at).
        """
        import optuna

        optuna.logging.set_verbosity(optuna.logging.WARNING)
        if sweep_dir is None:
            storage = optuna.storages.InMemoryStorage()
        else:
            sweep_dir.mkdir(parents=True, exist_ok=True)
            storage = study_storage(sweep_dir)
        if not resume and sweep_dir is not None:
            try:
                optuna.delete_study(study_name=config.name, storage=storage)
            except KeyError:
                pass
            if warm:
                seed_study(study_url(sweep_dir), config, warm, warm_mode)
        return DurableOptunaSearch(
            space=SearchSpace(config).define_by_run(),
            metric=config.objective.metric,
            mode=config.objective.mode,
            sampler=self.sampler(config),
            storage=storage,
            study_name=config.name,
        )


#: ``optuna-tpe``, ``optuna-gp`` and ``random``.
tpe, gp, random_search = OptunaSearcher(_tpe), OptunaSearcher(_gp), OptunaSearcher(_random)


def build_searcher(
    config: SweepConfig,
    sweep_dir: Path | None,
    resume: bool = False,
    warm_points: WarmPoints = None,
    warm_mode: WarmStartMode = "prior",
) -> Any:
    """Returns the Tune search algorithm of the ``search.algorithm`` kind (wrapped for repeats).

    Args:
        config: The sweep.
        sweep_dir: ``STORAGE/NAME``; the Optuna study is kept there (None: in memory, for a replay).
        resume: Continue the persisted study instead of starting a fresh one.
        warm_points: ``(params, metric)`` of a previous sweep to seed the study with.
        warm_mode: ``prior`` (told as finished trials) or ``reevaluate`` (queued to run first).
    """
    searcher = kinds.searcher(config.search.algorithm).factory(config, sweep_dir, resume, warm_points, warm_mode)
    if config.search.repeats > 1:
        return BestEpochRepeater(searcher, repeat=config.search.repeats, set_index=True)
    return searcher


class BestEpochs:
    """Each running trial's best objective value over its epochs, kept from its epoch results.

    Args:
        metric: The objective.
        mode: ``max`` or ``min``.
    """

    def __init__(self, metric: str, mode: str) -> None:
        self.metric, self.mode = metric, mode
        self.best: dict[str, float] = {}

    def see(self, trial_id: str, result: dict[str, Any]) -> None:
        """Takes one epoch's result into the trial's best."""
        value = best_value([self.best.get(trial_id), result.get(self.metric)], self.mode)
        if value is not None:
            self.best[trial_id] = value

    def final(self, trial_id: str, result: dict[str, Any] | None) -> dict[str, Any] | None:
        """The trial's last result with the objective replaced by its best epoch (the trial is forgotten)."""
        if result:
            self.see(trial_id, result)
        best = self.best.pop(trial_id, None)
        return result if not result or best is None else {**result, self.metric: best}


class KeepsBestEpochs:
    """hpo's searchers keep each running trial's best epoch in their own :class:`BestEpochs`.

    It is an attribute of the searcher, so Tune saves and restores it with the searcher's state.
    """

    #: None until first used (a searcher restored from a state saved without it has none).
    _hpo_best_epochs: BestEpochs | None = None

    @property
    def best_epochs(self) -> BestEpochs:
        """The running trials' best epochs (made for this searcher's metric and mode on first use)."""
        if self._hpo_best_epochs is None:
            self._hpo_best_epochs = BestEpochs(self.metric, self.mode)  # type: ignore[attr-defined]
        return self._hpo_best_epochs


class BestEpochRepeater(KeepsBestEpochs, Repeater):
    """Tune's ``Repeater``, averaging its repeats' best epochs (Tune's averages their last epochs)."""

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        """Keeps the repeat's best epoch so far."""
        self.best_epochs.see(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None, **kwargs: Any) -> None:
        """Reports the repeat's best epoch to its configuration's group."""
        super().on_trial_complete(trial_id, result=self.best_epochs.final(trial_id, result), **kwargs)


class DurableOptunaSearch(KeepsBestEpochs, OptunaSearch):
    """Tune's ``OptunaSearch``, telling scheduler stops as Optuna prunes, for a study that outlives Tune's state.

    A trial the scheduler stopped is told as PRUNED, with every epoch's value as an intermediate value (the
    last one becomes the trial's value, as Optuna does for its own pruners). Ray's ``OptunaSearch`` tells
    it COMPLETE, so TPE ranked an epoch-1 accuracy of a trial ASHA cut against the final accuracy of trials
    that trained to ``max_epochs``; as PRUNED, TPE ranks finished trials first, then stopped ones by how far
    they got and their last value. Trials that finished (or repeats' means) are told COMPLETE as before.

    Tune saves its experiment state (searcher included) every few seconds; the Optuna study is written at
    once. A sweep killed in between resumes with trials that Tune re-runs from their last checkpoint but
    that the study has already finished. Their repeated results and completions are logged and ignored
    (the study keeps the value it was told first) instead of stopping the sweep with Optuna's
    ``UpdateFinishedTrialError``.
    """

    def _adopt(self, trial_id: str, result: dict[str, Any] | None) -> bool:
        """True if this searcher has an Optuna trial for ``trial_id``, taking up the study's one if needed.

        Tune restores a killed sweep's trials and its searcher from state files saved, and on object
        storage uploaded, at different moments: a trial can come back that the restored searcher never
        handed out. The study trial asked for it before the kill (still RUNNING, same parameters) is taken
        up; without one the trial's outcomes are not told to the study (logged), never a crash of the sweep.
        """
        import optuna

        trials = compat.optuna_search_trials(self)
        if trial_id in trials:
            return True
        result = result or {}
        config = {k.split("/", 1)[1]: v for k, v in result.items() if k.startswith("config/")}
        config.update(result.get("config") or {})
        study = compat.optuna_search_study(self)
        taken = {t.number for t in trials.values()}
        for frozen in study.get_trials(deepcopy=False, states=(optuna.trial.TrialState.RUNNING,)):
            if frozen.number not in taken and frozen.params and all(
                    config.get(k, object()) == v for k, v in frozen.params.items()):
                trials[trial_id] = compat.optuna_trial_of(study, frozen)
                logger.info("trial %s taken up as study trial %d after a resume", trial_id, frozen.number)
                return True
        logger.warning("trial %s is unknown to the restored searcher and its study; not told", trial_id)
        return False

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        """Reports an intermediate value, unless the study already finished this trial."""
        from optuna.exceptions import UpdateFinishedTrialError

        self.best_epochs.see(trial_id, result)
        if not self._adopt(trial_id, result):
            return
        try:
            super().on_trial_result(trial_id, result)
        except UpdateFinishedTrialError:
            logger.info("trial %s finished in the study before the sweep was resumed; result not re-told", trial_id)
            compat.optuna_search_told(self).add(trial_id)

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False) -> None:
        """Tells the study how a trial ended: FAIL if diverged, PRUNED if the scheduler stopped it, else best epoch."""
        best = self.best_epochs.final(trial_id, result)
        if trial_id not in compat.optuna_search_told(self) and not self._adopt(trial_id, result):
            compat.optuna_search_told(self).add(trial_id)
            return
        if result and result.get(DIVERGED_KEY) and trial_id not in compat.optuna_search_told(self):
            super().on_trial_complete(trial_id, result=None, error=True)  # Ray tells a failed trial FAIL
            return
        stopped = bool(result) and not error and result.get(FINISHED_KEY) is False
        value = (result or {}).get(self.metric)
        step = (result or {}).get(TIME_ATTR)
        if not stopped or value is None or step is None or trial_id in compat.optuna_search_told(self):
            super().on_trial_complete(trial_id, result=best, error=error)
            return
        import optuna

        trial = compat.optuna_search_trial(self, trial_id)
        try:
            with warnings.catch_warnings():  # Optuna warns (and ignores it) if the step was reported already
                warnings.simplefilter("ignore")
                trial.report(value, step)  # the result that made the scheduler stop it is not reported yet
            compat.optuna_search_study(self).tell(trial, state=optuna.trial.TrialState.PRUNED)
        except (optuna.exceptions.UpdateFinishedTrialError, ValueError, RuntimeError) as exc:
            logger.info("trial %s not told as pruned: %s", trial_id, exc)  # e.g. finished before a resume
        compat.optuna_search_told(self).add(trial_id)


class CappedGrid(BasicVariantGenerator):
    """Tune's grid expansion that hands out at most ``max_trials`` trials (None: the whole grid).

    Args:
        max_trials: The cap (``search.max_trials``).
        **kwargs: Passed to ``BasicVariantGenerator``.
    """

    def __init__(self, max_trials: int | None = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self._max_trials = max_trials
        self._handed_out = 0

    def next_trial(self) -> Any:
        """The next grid point's trial, or None once ``max_trials`` were handed out (or the grid is done)."""
        if self._max_trials is not None and self._handed_out >= self._max_trials:
            self.set_finished()
            return None
        trial = super().next_trial()
        if trial is not None:
            self._handed_out += 1
        return trial
