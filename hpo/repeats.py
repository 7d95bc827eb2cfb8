"""``hpo repeat NAME``: re-run the best configurations of a finished sweep with new seeds, as a new sweep.

Every sweep keeps the settings it ran with in its state directory (``STORAGE/NAME/sweep.yaml``, written by
hpo when the sweep starts). The repeat sweep ``NAME-repeat`` takes them with: the ``top`` best
configurations (by mean over their repeats, as ``summary.json`` ranks them) queued in its study, each run
``repeats`` times; a new seed (new initial weights and data order); no early stopping by the scheduler and
no goal, so every repeat trains to its own end; and ``repeat_of`` naming the first sweep in its summary
and on its MLflow parent run (``hpo.repeat_of``). Its summary then says whether the winner beats the
runner-up beyond noise (:mod:`hpo.stats`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from hpo import kinds
from hpo.config import SweepConfig
from hpo.errors import ConfigError
from hpo.storage import Storage, write_text_atomic

#: The file in a sweep's state directory that holds the settings it ran with.
CONFIG_FILE = "sweep.yaml"
#: Added to the first sweep's seed: the repeats start from other initial weights and data orders.
SEED_OFFSET = 104_729


def save_config(sweep_dir: Path, config: SweepConfig) -> Path:
    """Writes the sweep's settings to ``sweep_dir/sweep.yaml`` (hpo's own state directory)."""
    return write_text_atomic(sweep_dir / CONFIG_FILE, yaml.safe_dump(config.model_dump(mode="json"), sort_keys=False))


def load_config(storage: Storage, name: str) -> SweepConfig:
    """The settings sweep ``name`` ran with.

    Raises:
        ConfigError: The sweep is unknown or kept no settings (it ran before hpo kept them).
    """
    path = storage.state_dir(name) / CONFIG_FILE
    if not path.is_file():
        storage.pull_state(name)
    if not path.is_file():
        raise ConfigError(
            f"{path}: (file): sweep '{name}' kept no settings (unknown name, or it ran with an older hpo); "
            "check the name and --storage, or run it again with 'hpo tune'"
        )
    return SweepConfig.model_validate(yaml.safe_load(path.read_text()))


def repeat_config(first: SweepConfig, top: int, repeats: int, name: str | None = None) -> SweepConfig:
    """The repeat sweep of ``first``: ``top`` configurations × ``repeats`` runs each, new seed, to the end.

    Args:
        first: The finished sweep's settings.
        top: How many of its best configurations.
        repeats: Runs of each.
        name: The new sweep's name (default ``NAME-repeat``).

    Raises:
        ConfigError: ``top`` or ``repeats`` below 1 (or below 2 repeats: nothing to compare).
    """
    if isinstance(top, bool) or not isinstance(top, int) or top < 1:
        raise ConfigError(f"--top: {top!r} is not a positive whole number; use e.g. 3")
    if isinstance(repeats, bool) or not isinstance(repeats, int) or repeats < 2:
        raise ConfigError(f"--repeats: {repeats!r} gives no spread to compare; use 3 or more")
    data: dict[str, Any] = first.model_dump(mode="json")
    data["name"] = name or f"{first.name}-repeat"
    data["objective"]["goal"] = None
    data["search"].update(
        # Every configuration is queued; the sampler never has to propose one (a grid searcher has no queue).
        algorithm=first.search.algorithm if first.search.kind.warm_start else first.search.kind.instead,
        num_samples=top, repeats=repeats, max_trials=None, time_budget_s=None,
        seed=((first.search.seed or 0) + SEED_OFFSET) % 2**32, repeat_of=first.name,
    )
    data["scheduler"] = {"type": kinds.NO_EARLY_STOPPING}
    if first.search.kind.grid:
        data["space"] = {k: _as_categorical(v) if first.space[k].is_grid else v for k, v in data["space"].items()}
    return SweepConfig.model_validate(data)


def _as_categorical(spec: dict[str, Any]) -> dict[str, Any]:
    """A grid parameter as a categorical one (a study can queue its values)."""
    out = {k: v for k, v in spec.items() if k not in ("type", "values")}
    return {**out, "type": "categorical", "choices": spec["values"]}
