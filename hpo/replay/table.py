"""A table of recorded learning curves: every configuration's whole validation curve, trained once.

One Parquet file per task. Its rows are epochs: ``config_id``, ``seed``, ``epoch`` (1-based), the objective
column(s), ``epoch_s`` (that epoch's recorded seconds) and one ``p.<name>`` column per hyperparameter (null
where a conditional parameter is inactive). The task itself (name, objective, ``max_epochs``, the space in
the sweep file's ``space:`` syntax, where the curves came from) is JSON in the file's schema metadata under
``hpo.replay``, so a table is one self-describing file.

A configuration a searcher proposes is answered by the recorded configuration nearest to it (one nearest
neighbour in the unit cube of the space: log scale where the space says so, a categorical or an inactive
parameter counts 1 when it differs), as tabulated benchmarks answer proposals that fall between their
recorded points.
A differing categorical (or a parameter active in one and inactive in the other) outweighs any numeric
distance: a proposal is answered by a configuration with its categoricals first, the nearest numbers next.
"""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

#: The schema metadata key holding the task's description.
META_KEY = b"hpo.replay"
#: Prefix of the hyperparameter columns.
PARAM_PREFIX = "p."


@dataclass(frozen=True)
class Task:
    """What a table records.

    Attributes:
        name: The task's name (``digits_mlp``).
        metric: The objective column (``val_accuracy``).
        mode: ``max`` or ``min``.
        max_epochs: Epochs every curve was trained for.
        space: The hyperparameter space, as a sweep file's ``space:`` mapping.
        source: How the curves were made (library, model, dataset), in words.
    """

    name: str
    metric: str
    mode: str
    max_epochs: int
    space: dict[str, Any]
    source: str = ""

    def to_json(self) -> str:
        """The task as JSON (stored in the table's schema metadata)."""
        return json.dumps({"name": self.name, "metric": self.metric, "mode": self.mode,
                           "max_epochs": self.max_epochs, "space": self.space, "source": self.source})

    @classmethod
    def from_json(cls, text: str | bytes) -> Task:
        """The task stored by :meth:`to_json`."""
        data = json.loads(text)
        return cls(data["name"], data["metric"], data["mode"], int(data["max_epochs"]), data["space"],
                   data.get("source", ""))


@dataclass(frozen=True)
class Curve:
    """One recorded run of one configuration.

    Attributes:
        values: The objective after each epoch (``max_epochs`` of them; NaN where training broke down).
        epoch_s: Each epoch's recorded seconds.
    """

    values: np.ndarray
    epoch_s: np.ndarray


@dataclass
class CurveTable:
    """Recorded curves of one task, looked up by configuration.

    Attributes:
        task: What the table records.
        params: Each configuration's hyperparameters (``config_id`` is the index).
        curves: ``(config_id, seed)`` → its curve.
    """

    task: Task
    params: list[dict[str, Any]]
    curves: dict[tuple[int, int], Curve]
    _coords: np.ndarray | None = field(default=None, repr=False)

    @classmethod
    def read(cls, path: Path) -> CurveTable:
        """Reads a table written by :meth:`write`.

        Raises:
            ValueError: The file is no curve table (no task metadata, or columns missing).
        """
        import pyarrow.parquet as pq

        table = pq.read_table(path)
        meta = (table.schema.metadata or {}).get(META_KEY)
        if meta is None:
            raise ValueError(f"{path}: no '{META_KEY.decode()}' task metadata; write it with CurveTable.write")
        task = Task.from_json(meta)
        columns = table.to_pydict()
        missing = {"config_id", "seed", "epoch", "epoch_s", task.metric} - set(columns)
        if missing:
            raise ValueError(f"{path}: columns {sorted(missing)} missing")
        names = [c for c in columns if c.startswith(PARAM_PREFIX)]
        params: dict[int, dict[str, Any]] = {}
        values: dict[tuple[int, int], dict[int, tuple[float, float]]] = {}
        for i, config_id in enumerate(columns["config_id"]):
            key = (int(config_id), int(columns["seed"][i]))
            params.setdefault(key[0], {n[len(PARAM_PREFIX):]: columns[n][i] for n in names
                                       if columns[n][i] is not None})
            value = columns[task.metric][i]
            values.setdefault(key, {})[int(columns["epoch"][i])] = (
                math.nan if value is None else float(value), float(columns["epoch_s"][i]))
        if sorted(params) != list(range(len(params))):
            raise ValueError(f"{path}: config_id must run from 0 without gaps")
        curves = {}
        for key, epochs in values.items():
            if sorted(epochs) != list(range(1, task.max_epochs + 1)):
                raise ValueError(f"{path}: config {key[0]} seed {key[1]} lacks epochs of 1..{task.max_epochs}")
            ordered = [epochs[e] for e in range(1, task.max_epochs + 1)]
            curves[key] = Curve(np.array([v for v, _ in ordered]), np.array([s for _, s in ordered]))
        return cls(task, [params[i] for i in range(len(params))], curves)

    def write(self, path: Path) -> None:
        """Writes the table as one zstd-compressed Parquet file with the task in its metadata."""
        import pyarrow as pa
        import pyarrow.parquet as pq

        names = sorted({n for p in self.params for n in p})
        rows: dict[str, list[Any]] = {"config_id": [], "seed": [], "epoch": [], self.task.metric: [], "epoch_s": []}
        rows.update({PARAM_PREFIX + n: [] for n in names})
        for (config_id, seed), curve in sorted(self.curves.items()):
            for epoch, (value, seconds) in enumerate(zip(curve.values, curve.epoch_s, strict=True), start=1):
                rows["config_id"].append(config_id)
                rows["seed"].append(seed)
                rows["epoch"].append(epoch)
                rows[self.task.metric].append(None if math.isnan(value) else float(value))
                rows["epoch_s"].append(round(float(seconds), 5))
                for n in names:
                    rows[PARAM_PREFIX + n].append(self.params[config_id].get(n))
        table = pa.table(rows).replace_schema_metadata({META_KEY: self.task.to_json().encode()})
        path.parent.mkdir(parents=True, exist_ok=True)
        pq.write_table(table, path, compression="zstd", compression_level=9)

    def seeds(self, config_id: int) -> list[int]:
        """The seeds ``config_id`` was recorded with."""
        return sorted(seed for c, seed in self.curves if c == config_id)

    def curve(self, config_id: int, draw: int) -> Curve:
        """The curve of ``config_id`` for a trial's ``draw`` (which of its recorded seeds, in turn)."""
        seeds = self.seeds(config_id)
        return self.curves[(config_id, seeds[draw % len(seeds)])]

    def nearest(self, params: dict[str, Any]) -> int:
        """The recorded configuration nearest to ``params`` (the lowest ``config_id`` among equals)."""
        if self._coords is None:
            self._coords = np.array([self._point(p) for p in self.params])
        point = np.array(self._point(params))
        distance = np.sum((self._coords - point) ** 2, axis=1)
        return int(np.argmin(distance))

    def _point(self, params: dict[str, Any]) -> list[float]:
        """``params`` as coordinates.

        Numbers are scaled to [0, 1] (log where the space says); categoricals one-hot and an activity flag
        per parameter, scaled so that one difference there outweighs every number.
        """
        specs = sorted(self.task.space.items())
        numeric = sum(spec.get("type") not in ("categorical", "grid") for _, spec in specs)
        heavy = math.sqrt(numeric + 1.0)  # a squared distance of numeric + 1 > any numeric one
        point: list[float] = []
        for name, spec in specs:
            value = params.get(name)
            point.append(0.0 if value is not None else heavy)
            if spec.get("type") in ("categorical", "grid"):
                choices = spec.get("choices") or spec.get("values") or []
                point.extend((heavy / math.sqrt(2.0) if value == c else 0.0) for c in choices)
                continue
            if value is None:
                point.append(0.0)
                continue
            low, high = float(spec["low"]), float(spec["high"])
            if spec.get("log"):
                low, high, value = math.log(low), math.log(high), math.log(float(value))
            point.append((float(value) - low) / (high - low) if high > low else 0.0)
        return point
