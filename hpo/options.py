"""How one ``hpo tune`` runs, apart from the sweep file: one frozen :class:`RunOptions`, built once.

The CLI and :func:`hpo.tune` build it (or a caller passes its own); the sweep and partition runners
take it as it is.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Literal

from hpo.errors import ConfigError
from hpo.storage import DEFAULT_STORAGE, Storage

if TYPE_CHECKING:
    from hpo.config.sections import SearchConfig

__all__ = ["DEFAULT_STORAGE", "SUMMARY_FILE", "RunOptions", "Storage", "WarmStart", "summary_path"]
#: The file every finished sweep leaves in ``STORAGE/NAME/``.
SUMMARY_FILE = "summary.json"
WARM_START_MODES = ("prior", "reevaluate")

WarmStartMode = Literal["prior", "reevaluate"]
#: How a sweep's progress is shown: ``auto`` (a live view on a terminal or in a notebook, plain lines
#: elsewhere), ``plain``, ``live``, ``json`` (one JSON object per update on stdout) or ``off``.
ProgressMode = Literal["auto", "plain", "live", "json", "off"]
PROGRESS_MODES = ("auto", "plain", "live", "json", "off")


@dataclass(frozen=True)
class WarmStart:
    """Seed a sweep's study with the best configurations of a previous sweep.

    Attributes:
        source: The previous sweep's name (in the same storage) or its ``summary.json`` path.
        k: How many of its best configurations to take.
        mode: ``prior`` (their results are told to the searcher) or ``reevaluate`` (trained again first);
            None: ``prior`` for a searcher that models its proposals, ``reevaluate`` for one that does not
            (:meth:`mode_for`).
    """

    source: str
    k: int = 5
    mode: WarmStartMode | None = None

    def __post_init__(self) -> None:
        if self.mode is not None and self.mode not in WARM_START_MODES:
            raise ConfigError(f"--warm-start-mode: '{self.mode}' is not allowed; use prior or reevaluate")
        if isinstance(self.k, bool) or not isinstance(self.k, int) or self.k < 1:
            raise ConfigError(f"--warm-start-k: {self.k!r} is not a positive whole number; use e.g. 5")
        if not self.source:
            raise ConfigError("--warm-start: empty; pass a previous sweep's name or its summary.json path")

    @classmethod
    def from_flags(cls, source: str | None, k: int = 5, mode: str | None = None) -> WarmStart | None:
        """The warm start of ``--warm-start/-k/-mode`` (None without a source; the mode is checked anyway).

        Raises:
            ConfigError: For an unknown mode or a non-positive ``k``.
        """
        if mode is not None and mode not in WARM_START_MODES:
            raise ConfigError(f"--warm-start-mode: '{mode}' is not allowed; use prior or reevaluate")
        return cls(source, k, mode) if source else None  # type: ignore[arg-type]

    def mode_for(self, search: SearchConfig, source: str) -> WarmStartMode:
        """The mode for ``search``'s searcher: one that models its proposals (TPE, GP) or not (random search).

        Telling previous results to a searcher that does not model them would change nothing, so such a
        searcher trains the previous best again first, and an explicit ``prior`` for it is an error.

        Raises:
            ConfigError: ``prior`` asked of a searcher that does not model (``source``: the sweep file).
        """
        models = search.kind.startup_trials
        if self.mode is None:
            return "prior" if models else "reevaluate"
        if self.mode == "prior" and not models:
            raise ConfigError(f"{source}: search.algorithm: --warm-start-mode prior tells a model the previous "
                              f"results, and {search.algorithm} does not model; use --warm-start-mode reevaluate "
                              "(trains them again first) or set search.algorithm: optuna-tpe")
        return self.mode

    def summary_path(self, storage: Storage | Path | str) -> Path:
        """The previous sweep's ``summary.json``: the path given, or sweep SOURCE's in the storage."""
        if self.source.endswith(".json"):
            return Path(self.source)
        storage = Storage.parse(storage)
        path = summary_path(storage, self.source)
        if not path.is_file():
            storage.pull_state(self.source)  # a sweep another driver ran, with a shared storage
        return path

    def for_partition(self, label: str) -> WarmStart:
        """Partition ``label`` of a partitioned sweep warm-starts from ``SOURCE-label`` (a path is kept)."""
        if self.source.endswith(".json"):
            return self
        return WarmStart(f"{self.source}-{label}", self.k, self.mode)


@dataclass(frozen=True)
class RunOptions:
    """Everything about running a sweep that is not in the sweep file.

    Attributes:
        storage: Where sweeps live: a directory, ``file://`` (a shared mount), ``s3://`` or ``gs://``
            (parsed into a :class:`~hpo.storage.Storage`).
        address: Ray address to connect to (``auto``, ``host:6379``, ``ray://…``); None starts a local Ray.
        resume: Continue an interrupted sweep of the same name.
        console: A ``rich`` console for progress and messages; None keeps quiet (unless ``progress`` is
            ``json``).
        warm_start: Seed the study from a previous sweep; None: a fresh study.
        overwrite: Start a sweep again under a name that already ran (its Optuna study is dropped).
        progress: How progress is shown on ``console`` (see :data:`ProgressMode`).
        deadline_at: Unix time by which the sweep should end (``--deadline``): the views and ``hpo status``
            show ``p_meet``, hpo warns once when it falls below 0.5, and on a cluster asks the autoscaler for
            the nodes a plan recommends. Nothing is stopped or cut to meet it. None: no deadline.
    """

    storage: Storage = DEFAULT_STORAGE  # type: ignore[assignment]  # parsed in __post_init__
    address: str | None = None
    resume: bool = False
    console: Any = None
    warm_start: WarmStart | None = None
    overwrite: bool = False
    progress: ProgressMode = "auto"
    deadline_at: float | None = None

    def __post_init__(self) -> None:
        object.__setattr__(self, "storage", Storage.parse(self.storage))
        if self.deadline_at is not None and not (isinstance(self.deadline_at, (int, float))
                                                 and math.isfinite(self.deadline_at) and self.deadline_at > 0):
            raise ConfigError(f"--deadline: {self.deadline_at!r} is not a time; give e.g. 6h or 2026-11-30T06:00")
        if self.progress not in PROGRESS_MODES:
            raise ConfigError(f"progress: '{self.progress}' is not allowed; use one of {', '.join(PROGRESS_MODES)}")
        if self.resume and self.overwrite:
            raise ConfigError("--resume: cannot be combined with --overwrite; pass one of them")

    def sweep_dir(self, name: str) -> Path:
        """The local directory of sweep ``name``'s driver-only state (``STORAGE/NAME`` for a local storage)."""
        return self.storage.state_dir(name)


def summary_path(storage: Storage | Path | str, name: str) -> Path:
    """The driver's ``summary.json`` of sweep ``name``: the one rule for where a sweep's summary is.

    ``STORAGE/NAME/summary.json`` for a local storage; for a shared one, the local state directory (the
    storage keeps a copy in ``STORAGE/NAME/_driver/``).
    """
    return Storage.parse(storage).state_dir(name) / SUMMARY_FILE
