"""Ray Tune's BOHB searcher (``TuneBOHB``, HpBandSter's model) for the search benchmark, in hpo's own process.

``TuneBOHB`` lives in Ray Tune, which is hpo's, but needs HpBandSter and ConfigSpace, which hpo does not
depend on: ``benchmarks/peers/make_venv.sh`` installs them (and what they need that hpo's venv lacks) into
``benchmarks/.tune-bohb-site``, which :func:`searcher` puts at the end of ``sys.path`` (hpo's own packages
come first). As for the other peers, the space is flat: an int with a step is its step index, conditional
parameters are always sampled and dropped where inactive (:class:`Decoded`); categoricals stay categorical
(BOHB's KDE has a kernel for them).
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

from ray.tune.search import Searcher

SITE = Path(__file__).resolve().parents[1] / ".tune-bohb-site"


def missing() -> str | None:
    """Why ``TuneBOHB`` cannot run here (None: it can)."""
    if not (SITE / "hpbandster").is_dir():
        return f"tune_bohb: no HpBandSter at {SITE} (benchmarks/peers/make_venv.sh installs it)"
    return None


def _on_path() -> None:
    if str(SITE) not in sys.path:
        sys.path.append(str(SITE))


def versions() -> dict[str, str]:
    """HpBandSter's and ConfigSpace's versions, as installed in :data:`SITE`."""
    from importlib.metadata import version

    _on_path()
    return {package: version(package) for package in ("hpbandster", "ConfigSpace")}


def config_space(space: dict[str, Any], seed: int) -> Any:
    """The table's space as a flat ConfigSpace (see the module)."""
    _on_path()
    import ConfigSpace as CS

    flat = CS.ConfigurationSpace(seed=seed)
    for name, spec in space.items():
        if spec["type"] == "categorical":
            flat.add(CS.CategoricalHyperparameter(name, list(spec["choices"])))
        elif spec["type"] == "int":
            steps = (int(spec["high"]) - int(spec["low"])) // int(spec.get("step", 1))
            flat.add(CS.UniformIntegerHyperparameter(name, 0, steps))
        else:
            flat.add(CS.UniformFloatHyperparameter(name, float(spec["low"]), float(spec["high"]),
                                                   log=bool(spec.get("log"))))
    return flat


def decode(space: dict[str, Any], flat: dict[str, Any]) -> dict[str, Any]:
    """The sweep-file parameters of a flat sample: step indices to values, inactive parameters dropped."""
    params: dict[str, Any] = {}
    for name, spec in space.items():
        raw = flat[name]
        params[name] = int(spec["low"]) + int(raw) * int(spec.get("step", 1)) if spec["type"] == "int" else raw
    for name, spec in space.items():
        if any(params.get(parent) != value for parent, value in (spec.get("when") or {}).items()):
            del params[name]
    return params


class Decoded(Searcher):
    """A Tune searcher whose suggestions are :func:`decode`-d; everything else goes to it unchanged.

    Args:
        searcher: The searcher (``TuneBOHB``).
        space: The table's sweep-file space.
    """

    def __init__(self, searcher: Any, space: dict[str, Any]) -> None:
        super().__init__(metric=searcher.metric, mode=searcher.mode)
        self.searcher, self.space = searcher, space

    def suggest(self, trial_id: str) -> dict[str, Any] | None:
        """The searcher's suggestion, decoded."""
        flat = self.searcher.suggest(trial_id)
        return decode(self.space, flat) if isinstance(flat, dict) else flat

    def on_trial_result(self, trial_id: str, result: dict[str, Any]) -> None:
        """Passed on."""
        self.searcher.on_trial_result(trial_id, result)

    def on_trial_complete(self, trial_id: str, result: dict[str, Any] | None = None, error: bool = False) -> None:
        """Passed on."""
        self.searcher.on_trial_complete(trial_id, result=result, error=error)

    def on_pause(self, trial_id: str) -> None:
        """Passed on (``HyperBandForBOHB`` tells the searcher)."""
        self.searcher.on_pause(trial_id)

    def on_unpause(self, trial_id: str) -> None:
        """Passed on."""
        self.searcher.on_unpause(trial_id)


def searcher(space: dict[str, Any], metric: str, mode: str, seed: int, concurrency: int) -> Decoded:
    """``TuneBOHB`` over ``space``, ``concurrency`` trials running at most, as Ray's BOHB example sets it up."""
    _on_path()
    from ray.tune.search.bohb import TuneBOHB

    bohb = TuneBOHB(space=config_space(space, seed), metric=metric, mode=mode, max_concurrent=concurrency,
                    seed=seed)
    return Decoded(bohb, space)
