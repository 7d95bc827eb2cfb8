"""``summary.json`` as a typed value: :class:`SweepSummary`, the one way a sweep's summary is read and written.

``STORAGE/NAME/summary.json`` is the contract CI jobs, notebooks and hpo's own commands read. Its
serialisation is :meth:`SweepSummary.to_json` (the keys below, ``schema_version`` first); a key that a
sweep did not produce stays out of the file (``goal`` without ``objective.goal``, ``repeat_of`` unless
``hpo repeat`` started it, ``deadline`` without ``--deadline``,
``best``'s ``mean``/``std``/``ci_low``/``ci_high``/``n`` without repeats, a
trial's ``error`` unless it failed, ``mlflow``'s ``model``/``pending_writes``/``spool`` until the tracker
filled them in). Keys hpo does not know are kept as they were.

Versions: files written before ``schema_version`` existed are version 0 and still read (older shapes
lack ``status``, ``statistics`` and a trial's ``checkpoint``/``repeat``: they are filled in as those
sweeps had them); a version newer than :data:`SCHEMA_VERSION` is refused in one line naming the file.
A new key is a new field (with a default, so older files still read); a change an older hpo would misread
raises :data:`SCHEMA_VERSION` and adds the step that upgrades the previous shape (as ``_upgrade`` does for 0).
"""

from __future__ import annotations

import json
from dataclasses import replace
from pathlib import Path
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_serializer, model_validator

from hpo.errors import ConfigError
from hpo.options import summary_path
from hpo.storage import Storage, write_text_atomic
from hpo.trial.protocol import TrialRow

#: The ``schema_version`` this hpo writes (and the newest it reads); files without one are version 0.
SCHEMA_VERSION = 1
#: The placeholder older hpo wrote into the verdict instead of the sweep's name.
_NAME_PLACEHOLDER = "`hpo repeat NAME "

SweepStatus = Literal["finished", "interrupted"]


class _Part(BaseModel):
    """A part of the summary: unknown keys are kept; keys never given stay out of the file."""

    model_config = ConfigDict(extra="allow")


class Objective(_Part):
    """``objective``: the metric the sweep ranks by and whether higher (``max``) or lower is better."""

    metric: str
    mode: Literal["max", "min"]


class Best(_Part):
    """``best``: the best trial (with repeats: the best repeat of the configuration with the best mean).

    Attributes:
        trial_id: Its Tune trial id.
        params: Its parameters.
        metric: Its objective at its best epoch.
        mean: With repeats, the mean of its configuration's repeats (and ``std``, ``ci_low``, ``ci_high``, ``n``).
    """

    trial_id: str
    params: dict[str, Any]
    metric: float
    mean: float | None = None
    std: float | None = None
    ci_low: float | None = None
    ci_high: float | None = None
    n: int | None = None


class ConfigurationStats(_Part):
    """One of the top configurations in ``statistics``: its repeats' figures and p-value against the winner."""

    rank: int
    params: dict[str, Any]
    n: int
    mean: float
    std: float | None
    ci_low: float | None
    ci_high: float | None
    p_value: float | None


class Statistics(_Part):
    """``statistics``: the configurations compared (:func:`hpo.stats.compare`) and the verdict in words."""

    winner: str
    significant: bool
    test: str
    alpha: float
    verdict: str
    configurations: list[ConfigurationStats]


class Goal(_Part):
    """``goal``: whether a trial (with repeats: a configuration's mean) reached ``objective.goal``, and which first."""

    value: float | None
    reached: bool
    trial_id: str | None
    trial_ids: list[str] | None = None


class RegisteredModel(_Part):
    """``mlflow.model``: the best model as logged and registered under the sweep's name."""

    trial_id: str
    model_uri: str
    registered_name: str
    version: int | str


class MlflowSection(_Part):
    """``mlflow``: where the sweep's runs are, the registered model, and writes still waiting in the spool."""

    uri: str | None = None
    experiment_id: str | None = None
    parent_run_id: str | None = None
    model: RegisteredModel | None = None
    pending_writes: int | None = None
    spool: str | None = None


class TrackingUpdate(BaseModel):
    """What the tracker knows at the end of a sweep, handed to :meth:`SweepSummary.record_tracking`.

    Attributes:
        run_ids: Trial id → its nested MLflow run (trials not listed keep the run they have).
        model: The registered best model, or None if none was registered.
        pending_writes: MLflow writes still waiting in the spool.
        spool: The spool file while writes wait there, else None.
    """

    model_config = ConfigDict(frozen=True)

    run_ids: dict[str, str]
    model: RegisteredModel | None
    pending_writes: int
    spool: str | None


class DeadlineSection(_Part):
    """``deadline``: the time a sweep was run to (``--deadline``), and whether it ended by it.

    Attributes:
        deadline_at: The deadline (Unix time).
        deadline_s: Seconds from the command's start to the deadline.
        p_meet: The last probability of ending by it the live forecast gave while trials were left (None:
            the sweep ended before a forecast).
        met: Whether the sweep ended (its summary written) by the deadline.
        warning: The line hpo said when ``p_meet`` first fell below 0.5 (None: it never did).
        predicted_wall_s: The plan's median wall time for the sweep's shape at its start (None: no plan).
        requested: Node type → nodes asked of the cluster's autoscaler at the start (None: none asked).
    """

    deadline_at: float
    deadline_s: float
    p_meet: float | None = None
    met: bool
    warning: str | None = None
    predicted_wall_s: float | None = None
    requested: dict[str, int] | None = None


class SweepSummary(_Part):
    """A sweep's ``summary.json``.

    Attributes:
        schema_version: The format version (:data:`SCHEMA_VERSION`).
        name: The sweep.
        status: ``finished``, or ``interrupted`` (Ctrl-C or SIGTERM: ``best`` is the best so far).
        objective: The metric and mode.
        best: The best trial, or None when no trial has a value.
        statistics: The comparison of the configurations, or None without values.
        trials: One row per trial, sorted by trial id.
        mlflow: The MLflow runs and model.
        wall_time_s: Seconds the sweep took.
        goal: Whether ``objective.goal`` was reached (only when the sweep has a goal).
        repeat_of: The sweep this one repeats (only for a sweep ``hpo repeat`` started).
        deadline: The deadline it ran to and whether it met it (only for a sweep run with ``--deadline``).
    """

    schema_version: int = SCHEMA_VERSION
    name: str
    status: SweepStatus = "finished"
    objective: Objective
    best: Best | None = None
    statistics: Statistics | None = None
    trials: list[TrialRow]
    mlflow: MlflowSection = Field(default_factory=MlflowSection)
    wall_time_s: float | None = None
    goal: Goal | None = None
    repeat_of: str | None = None
    deadline: DeadlineSection | None = None

    @model_validator(mode="before")
    @classmethod
    def _upgrade(cls, data: Any) -> Any:
        """An older shape in today's: version 0 (no ``schema_version``) gets the keys it lacked, as it ran."""
        if not isinstance(data, dict) or data.get("schema_version", 0) != 0:
            return data
        data = dict(data)
        data.setdefault("status", "finished")
        data.setdefault("statistics", None)
        if isinstance(data.get("trials"), list):
            data["trials"] = [_upgrade_row(row) for row in data["trials"]]
        statistics, name = data.get("statistics"), data.get("name")
        if isinstance(statistics, dict) and isinstance(statistics.get("verdict"), str) and isinstance(name, str):
            verdict = statistics["verdict"].replace(_NAME_PLACEHOLDER, f"`hpo repeat {name} ")
            data["statistics"] = {**statistics, "verdict": verdict}
        data["schema_version"] = SCHEMA_VERSION
        return data

    @field_serializer("trials")
    def _rows(self, trials: list[TrialRow]) -> list[dict[str, Any]]:
        return [row.to_dict() for row in trials]

    def to_json(self) -> dict[str, Any]:
        """The ``summary.json`` document (``schema_version`` first; keys never given left out)."""
        data = self.model_dump(exclude_unset=True)
        data.pop("schema_version", None)
        return {"schema_version": SCHEMA_VERSION, **data}

    def write(self, path: Path) -> None:
        """Writes ``summary.json`` atomically."""
        write_text_atomic(path, json.dumps(self.to_json(), indent=2, default=str))

    @classmethod
    def from_json(cls, data: Any, source: str) -> SweepSummary:
        """A summary from its JSON document.

        Args:
            data: The parsed ``summary.json``.
            source: Where it came from (the file), for error messages.

        Raises:
            ConfigError: A version this hpo does not read, or a document that is not a summary.
        """
        if not isinstance(data, dict):
            raise ConfigError(f"{source}: (file): not a sweep summary (a JSON object is expected); "
                              "pass the summary.json hpo wrote")
        version = data.get("schema_version", 0)
        if isinstance(version, bool) or not isinstance(version, int) or version < 0:
            raise ConfigError(f"{source}: schema_version: {version!r} is not a summary version (a whole number "
                              f"up to {SCHEMA_VERSION}); pass the summary.json hpo wrote")
        if version > SCHEMA_VERSION:
            raise ConfigError(f"{source}: schema_version: summary version {version} is newer than this hpo reads "
                              f"(up to {SCHEMA_VERSION}); upgrade hpo to read it")
        try:
            return cls.model_validate(data)
        except ValidationError as exc:
            error = exc.errors()[0]
            where = ".".join(str(part) for part in error["loc"]) or "(file)"
            raise ConfigError(f"{source}: {where}: {error['msg']}; pass the summary.json hpo wrote") from None

    @classmethod
    def read(cls, path: Path | str) -> SweepSummary:
        """Reads a ``summary.json`` file.

        Raises:
            ConfigError: No such file, not JSON, or not a summary this hpo reads (one line naming the file).
        """
        path = Path(path)
        try:
            text = path.read_text()
        except FileNotFoundError:
            raise ConfigError(f"{path}: (file): no summary there; check the name or --storage") from None
        except OSError as exc:
            why = exc.strerror or exc
            raise ConfigError(f"{path}: (file): cannot be read ({why}); check its permissions") from None
        try:
            data = json.loads(text)
        except ValueError as exc:
            raise ConfigError(f"{path}: (file): not JSON ({exc}); pass the summary.json hpo wrote") from None
        return cls.from_json(data, str(path))

    @classmethod
    def load(cls, storage: Storage | Path | str, name: str) -> SweepSummary:
        """Reads sweep ``name``'s summary (from a shared storage's copy when this driver has none).

        Raises:
            ConfigError: If the sweep has no summary there, or it cannot be read.
        """
        storage = Storage.parse(storage)
        path = summary_path(storage, name)
        if not path.is_file():
            storage.pull_state(name)
        if not path.is_file():
            raise ConfigError(f"{path}: (file): no summary for sweep '{name}'; run 'hpo tune' first or pass --storage")
        return cls.read(path)

    def record_tracking(self, update: TrackingUpdate) -> None:
        """Puts what the tracker knows into the summary: run ids, the registered model, unsent writes."""
        self.trials = [
            replace(row, mlflow_run_id=update.run_ids.get(row.trial_id, row.mlflow_run_id)) for row in self.trials
        ]
        fields: dict[str, Any] = {"pending_writes": update.pending_writes, "spool": update.spool}
        if update.model is not None:
            fields["model"] = update.model
        self.mlflow = self.mlflow.model_copy(update=fields)

    def status_counts(self) -> dict[str, int]:
        """How many trials ended each way (``completed``, ``stopped_early``, …)."""
        counts: dict[str, int] = {}
        for row in self.trials:
            counts[row.status] = counts.get(row.status, 0) + 1
        return counts


def _upgrade_row(row: Any) -> Any:
    """A version-0 trial row with the keys the first summaries lacked (no checkpoint kept, repeat 0).

    A row without its figures reads as :meth:`~hpo.trial.protocol.TrialRow.from_dict` reads it: no
    parameters, no value, no epoch.
    """
    if not isinstance(row, dict):
        return row
    out = {"params": {}, "epochs": 0, "metric": None, "mlflow_run_id": None, "checkpoint": None, "repeat": 0, **row}
    out.setdefault("stopped_early", out.get("status") == "stopped_early")
    return out
