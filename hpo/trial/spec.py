"""What every worker of a trial needs to know, and the batch/learning-rate rules.

A :class:`TrialSpec` is built once per sweep on the driver and shipped to every trial; it holds no
Ray, TensorFlow or Horovod objects, so it pickles cheaply and this module imports quickly.
"""

from __future__ import annotations

import contextlib
import importlib
import math
import sys
import traceback
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Any

from hpo.config import SweepConfig
from hpo.config.keras_names import MOMENTUM_OPTIMIZERS
from hpo.data import DatasetInfo, ReaderCache
from hpo.errors import ConfigError

#: Parameters of the search space that the trainer itself understands.
TRAINER_PARAMS = ("learning_rate", "optimizer", "momentum", "batch_size_per_worker")


def optimizer_config(hyper: dict[str, Any]) -> dict[str, Any]:
    """The ``keras.optimizers.get`` identifier of one trial's optimizer.

    ``momentum`` (searched as ``space.momentum``) goes to the optimizers that take it (SGD, RMSprop) and is
    left out for the others, e.g. when the space searches it for ``sgd`` only (``when: {optimizer: sgd}``).

    Args:
        hyper: The trial's effective settings (:meth:`TrialSpec.hyper`).

    Returns:
        ``{"class_name": NAME, "config": {"learning_rate": LR[, "momentum": M]}}``.
    """
    config: dict[str, Any] = {"learning_rate": hyper["effective_learning_rate"]}
    if hyper.get("momentum") is not None and hyper["optimizer"].lower() in MOMENTUM_OPTIMIZERS:
        config["momentum"] = float(hyper["momentum"])
    return {"class_name": hyper["optimizer"], "config": config}


def scale_learning_rate(lr: float, global_batch: int, reference_batch: int, rule: str) -> float:
    """Rescales a learning rate for the global batch of data-parallel training.

    The searched rate is meant for ``reference_batch``; with ``global_batch`` = per-worker batch ×
    workers, ``linear`` multiplies it by ``global_batch / reference_batch`` (Goyal et al., 2017), ``sqrt``
    by its square root, ``none`` leaves it. A rate found on 2 workers thus means the same on 8.

    Args:
        lr: The learning rate as searched.
        global_batch: Examples per optimizer step, over all workers.
        reference_batch: The batch the searched rate refers to.
        rule: ``linear``, ``sqrt`` or ``none``.

    Returns:
        The learning rate the optimizer gets.
    """
    factor = global_batch / reference_batch
    if rule == "linear":
        return lr * factor
    if rule == "sqrt":
        return lr * math.sqrt(factor)
    if rule == "none":
        return lr
    raise ValueError(f"unknown lr_scaling rule {rule!r}")


def resolve_model(ref: str, source: str = "model") -> Callable[..., Any]:
    """Imports a ``package.module:function`` model builder.

    Raises:
        ConfigError: If the module or function cannot be found, or importing the module raises or exits.
    """
    module_name, _, func_name = ref.partition(":")
    try:
        with _working_dir_importable():
            module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        raise ConfigError(
            f"{source}: model: cannot import module '{module_name}' ({exc}); "
            "check the name and that it is on PYTHONPATH"
        ) from None
    except SyntaxError as exc:
        raise ConfigError(
            f"{source}: model: {exc.filename}:{exc.lineno}: syntax error ({exc.msg}); fix the model module"
        ) from None
    except SystemExit as exc:  # sys.exit() or exit() at import would end hpo itself, silently
        raise ConfigError(
            f"{source}: model: importing '{module_name}' called sys.exit({exc.code!r}) at {_origin(exc)}; "
            "a model module must not exit: move that code under 'if __name__ == \"__main__\":'"
        ) from None
    except Exception as exc:  # noqa: BLE001 - any error while the user's module runs is theirs to fix
        raise ConfigError(
            f"{source}: model: importing '{module_name}' raised {type(exc).__name__}: {exc} at {_origin(exc)}; "
            "fix the model module"
        ) from None
    func = getattr(module, func_name, None)
    if not callable(func):
        raise ConfigError(
            f"{source}: model: module '{module_name}' has no function '{func_name}'; check the name after ':'"
        )
    return func


def _origin(exc: BaseException) -> str:
    """``file:line`` of the innermost frame of ``exc`` outside the import machinery."""
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if "importlib" not in f.filename]
    return f"{frames[-1].filename}:{frames[-1].lineno}" if frames else "(unknown)"


@contextlib.contextmanager
def _working_dir_importable() -> Iterator[None]:
    """The working directory on ``sys.path`` while a user's model module is imported, then as it was."""
    added = "" not in sys.path
    if added:
        sys.path.insert(0, "")
    try:
        yield
    finally:
        if added and "" in sys.path:
            sys.path.remove("")


#: Where each node keeps the sweeps' Petastorm caches unless ``data.cache.dir`` says otherwise.
DEFAULT_CACHE_DIR = "~/.cache/hpo/data"


def reader_cache(config: SweepConfig) -> ReaderCache | None:
    """What the sweep's readers keep on each node: dataset copies under ``DIR``, row groups under ``DIR/<name>``.

    None when ``data.cache`` turns both off.
    """
    c = config.data.cache
    if not c.enabled and not c.local_copy:
        return None
    root = (c.dir or DEFAULT_CACHE_DIR).rstrip("/")
    return ReaderCache(root=f"{root}/{config.name}", size_limit_mb=c.size_limit_mb,
                       copies=root if c.local_copy else None, row_groups=c.enabled)


@dataclass(frozen=True)
class TrialSpec:
    """Everything a trial needs besides its sampled parameters."""

    model: str
    train: DatasetInfo
    validation: DatasetInfo
    features: str
    label: str
    task: str
    loss: str
    metrics: tuple[str, ...]
    objective_metric: str
    objective_mode: str
    max_epochs: int
    workers: int
    cpus_per_worker: float
    gpus_per_worker: float
    batch_size_per_worker: int
    lr_scaling: str
    reference_batch_size: int | None
    optimizer: str
    learning_rate: float
    patience: int
    min_delta: float
    #: ``objective.goal``: training ends at the epoch whose (averaged) objective reaches it. None with
    #: ``search.repeats`` > 1: there a configuration's mean over its repeats is judged, after they all end.
    goal: float | None = None
    seed: int = 0
    pin_cpus: bool = True
    checkpoint_every_epoch: bool = True
    sys_path: tuple[str, ...] = field(default_factory=tuple)
    cache: ReaderCache | None = None
    #: ``trial.backend``: ``horovod`` (real training) or ``simulated`` (see :mod:`hpo.trial.simulated`).
    backend: str = "horovod"
    #: Seconds one simulated epoch takes.
    simulated_epoch_s: float = 0.1
    #: Simulated epochs take simulated time on the sweep's clock (False: real time).
    simulated_clock: bool = True
    #: The key of the sweep's simulated clock in the simulator host (set when the sweep starts; None: epochs
    #: take real time).
    clock_key: str | None = None
    #: Where Horovod's rendezvous listens: ``127.0.0.1`` when the sweep runs on a local Ray it started (every
    #: trial on this machine); None: the trial driver's node address (a cluster).
    rendezvous_host: str | None = None

    @classmethod
    def from_config(cls, config: SweepConfig, train: DatasetInfo, validation: DatasetInfo) -> TrialSpec:
        """Builds the spec of a sweep's trials."""
        t = config.trial
        return cls(
            model=config.model,
            train=train,
            validation=validation,
            features=config.data.features,
            label=config.data.label,
            task=config.data.task,
            loss=config.loss,
            metrics=tuple(config.metrics),
            objective_metric=config.objective.metric,
            objective_mode=config.objective.mode,
            goal=config.objective.goal if config.search.repeats == 1 else None,
            max_epochs=t.max_epochs,
            workers=t.workers,
            cpus_per_worker=t.cpus_per_worker,
            gpus_per_worker=t.gpus_per_worker,
            batch_size_per_worker=t.batch_size_per_worker,
            lr_scaling=t.lr_scaling,
            reference_batch_size=t.reference_batch_size,
            optimizer=t.optimizer,
            learning_rate=t.learning_rate,
            patience=t.early_stopping.patience,
            min_delta=t.early_stopping.min_delta,
            seed=config.search.seed or 0,
            pin_cpus=t.pin_cpus,
            checkpoint_every_epoch=t.checkpoint_every_epoch,
            sys_path=tuple(p for p in sys.path if p),
            cache=reader_cache(config),
            backend=t.backend,
            simulated_epoch_s=t.simulated_epoch_s,
            simulated_clock=t.simulated_clock,
        )

    def hyper(self, params: dict[str, Any]) -> dict[str, Any]:
        """The effective training settings for one trial's sampled ``params``."""
        batch = int(params.get("batch_size_per_worker", self.batch_size_per_worker))
        lr = float(params.get("learning_rate", self.learning_rate))
        reference = self.reference_batch_size or batch
        return {
            "optimizer": str(params.get("optimizer", self.optimizer)),
            "momentum": None if params.get("momentum") is None else float(params["momentum"]),
            "learning_rate": lr,
            "effective_learning_rate": scale_learning_rate(lr, batch * self.workers, reference, self.lr_scaling),
            "batch_size_per_worker": batch,
            "global_batch_size": batch * self.workers,
            "steps_per_epoch": self.train.steps(batch, self.workers),
            "validation_steps": self.validation.steps(batch, self.workers),
        }
