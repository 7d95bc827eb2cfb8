"""The search benchmark's peers that live in a venv of their own (DEHB, SMAC3, Syne Tune), each by its own library.

Every peer runs in the same loop as hpo's replay: ``concurrency`` trials at once on a simulated clock (each
epoch takes the seconds its curve says), the same budget of epochs, the same trial-level stopping (Keras
EarlyStopping's ``patience`` and ``max_epochs``), and curves answered by the same
:class:`hpo.replay.Surrogate` (or the nearest recorded configuration) of the same table. A peer only
proposes (``ask``), hears each epoch (``result``: continue or not) and the end of a trial (``tell``).

- ``syne_asha``, ``syne_bohb``: Syne Tune's ``ASHA`` and ``BOHB`` (ASHA's stopping with a KDE searcher),
  stopping variant, grace 1, reduction 3, driven through their scheduler API (``suggest`` /
  ``on_trial_result`` / ``on_trial_complete``) as Syne Tune's ``Tuner`` drives them. Syne Tune 0.16 has no
  MOBSTER or HyperTune any more (they left with its GP searchers).
- ``dehb``: DEHB (``dehb``), fidelity = epochs 1..max_epochs, eta 3, by ``ask`` / ``tell``; a job trains
  its configuration from scratch to the fidelity asked (DEHB does not continue trials).
- ``smac_hb``: SMAC3's ``MultiFidelityFacade`` with its ``Hyperband`` intensifier, budget = epochs, eta 3,
  by ``ask`` / ``tell``; a trial trains from scratch to its budget.

Conditional parameters are sampled always (Syne Tune has no conditions) and dropped where inactive before
the surrogate answers. A diverged epoch (NaN) is told to a peer as the table's worst value.

Run as a script in the peers' venv (``benchmarks/search_peers.py`` does, with the repository on
``PYTHONPATH``): ``python benchmarks/peers/adapters.py --table T.json --methods dehb,smac_hb --seeds 0,1
--concurrency 2 --budget 1000 --patience 3 --out events.json``. Only numpy and hpo's table, surrogate and
stopping modules are imported, without the rest of hpo (whose stack is not in that venv); the table comes as
JSON (:func:`write_json`), since pyarrow there wants a numpy that SMAC's pins refuse.
"""

from __future__ import annotations

import argparse
import heapq
import json
import math
import sys
import tempfile
import types
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[2]


def _light_hpo() -> None:
    """Makes ``hpo.replay.table``, ``hpo.replay.surrogate`` and ``hpo.progress.stopping`` importable alone.

    Where ``hpo`` is not imported yet, its packages are registered bare (their ``__init__`` not run), so
    that importing these three modules does not import hpo's whole stack.
    """
    if "hpo" in sys.modules:
        return
    for name in ("hpo", "hpo.replay", "hpo.progress"):
        package = types.ModuleType(name)
        package.__path__ = [str(ROOT.joinpath(*name.split(".")))]
        sys.modules[name] = package


_light_hpo()

import numpy as np  # noqa: E402

from hpo.progress.stopping import Rules, State, advance, higher_is_better  # noqa: E402
from hpo.replay.surrogate import Surrogate  # noqa: E402
from hpo.replay.table import Curve, CurveTable, Task  # noqa: E402

#: ``(simulated seconds, epochs trained so far, value)`` of every epoch a method trained, in time order.
Events = list[tuple[float, int, float]]
#: ``--answers``: the surrogate whose noisy answers are clipped to the neighbours' recorded range per epoch, the
#: surrogate clipped to the whole table's range (runs before that clip), or the nearest recorded configuration.
ANSWERS = ("surrogate", "surrogate-table", "nearest")
METRIC = "objective"
TIME_ATTR = "epoch"


def noise_clip(answers: str) -> str | None:
    """What the surrogate clips a noisy answer to under ``--answers answers`` (None: no surrogate)."""
    return {"surrogate": "neighbours", "surrogate-table": "table"}.get(answers)


def surrogate(table: CurveTable, answers: str) -> Surrogate | None:
    """The surrogate that answers under ``--answers answers`` (None: the nearest recorded configuration does)."""
    clip = noise_clip(answers)
    return Surrogate(table, clip=clip) if clip else None  # type: ignore[arg-type]


def answerer(table: CurveTable, answers: str) -> Callable[[dict[str, Any], int], Curve]:
    """``(params, draw) → curve`` under ``--answers answers``: the surrogate's, or the nearest recorded one's."""
    fitted = surrogate(table, answers)
    if fitted is not None:
        return fitted.curve
    return lambda params, draw: table.curve(table.nearest(params), draw)


@dataclass(frozen=True)
class Ask:
    """A trial a peer wants run: its key (the peer's handle), parameters, and epochs to train at most."""

    key: Any
    params: dict[str, Any]
    epochs: int


class Codec:
    """The table's space as flat, unconditional numbers a peer library samples, and back.

    A float is a float (log where the space says); an int with a step is its step index; a categorical is
    its choice's index; conditional parameters are always sampled and dropped where inactive.
    """

    def __init__(self, space: dict[str, Any]) -> None:
        self.space = space

    def kinds(self) -> dict[str, tuple[str, float, float, bool]]:
        """``name → (float|int, low, high, log)`` of each flat parameter (ints and choices as indices)."""
        out: dict[str, tuple[str, float, float, bool]] = {}
        for name, spec in self.space.items():
            if spec["type"] == "categorical":
                out[name] = ("int", 0, len(spec["choices"]) - 1, False)
            elif spec["type"] == "int":
                step = int(spec.get("step", 1))
                out[name] = ("int", 0, (int(spec["high"]) - int(spec["low"])) // step, False)
            else:
                out[name] = ("float", float(spec["low"]), float(spec["high"]), bool(spec.get("log")))
        return out

    def decode(self, flat: dict[str, Any]) -> dict[str, Any]:
        """The sweep-file parameters of a flat sample, conditionals honoured."""
        params: dict[str, Any] = {}
        for name, spec in self.space.items():
            raw = flat[name]
            if spec["type"] == "categorical":
                params[name] = spec["choices"][round(float(raw))]
            elif spec["type"] == "int":
                params[name] = int(spec["low"]) + round(float(raw)) * int(spec.get("step", 1))
            else:
                params[name] = min(max(float(raw), float(spec["low"])), float(spec["high"]))
        for name, spec in self.space.items():
            if any(params.get(parent) != value for parent, value in (spec.get("when") or {}).items()):
                del params[name]
        return params


def simulate(peer: Any, table: CurveTable, answer: Callable[[dict[str, Any], int], Any], *, seed: int,
             concurrency: int, budget: int, patience: int) -> Events:
    """Runs ``peer`` on ``table`` until ``budget`` epochs are trained; returns every epoch, in time order.

    Args:
        peer: Has ``ask() -> Ask | None``, ``result(key, epoch, value) -> bool`` (continue?) and
            ``tell(key, epoch, value)`` (the trial ended on its own rules or its epochs).
        table: The task.
        answer: ``(params, draw) -> Curve`` (a surrogate's ``curve``).
        seed: Seeds the draws of the answers' noise.
        concurrency: Trials at once.
        budget: Epochs in all.
        patience: EarlyStopping's patience (min_delta 0), as hpo's replay.
    """
    task = table.task
    worst = _worst(table)
    rules = Rules(patience, 0.0, task.max_epochs)
    draws = np.random.default_rng(seed)
    events: Events = []
    queue: list[tuple[float, int, int]] = []
    running: dict[int, dict[str, Any]] = {}
    counter = 0

    def start(now: float) -> None:
        nonlocal counter
        ask = peer.ask()
        if ask is None:
            return
        curve = answer(ask.params, int(draws.integers(1 << 30)))
        state = advance(State.start(1), higher_is_better(curve.values, task.mode)[None, :], rules)
        stop = min(int(state.stop[0]), max(1, int(ask.epochs)))
        running[counter] = {"ask": ask, "curve": curve, "stop": stop, "epoch": 0}
        heapq.heappush(queue, (now + float(curve.epoch_s[0]), counter, counter))
        counter += 1

    for _ in range(concurrency):
        start(0.0)
    while queue and len(events) < budget:
        now, _, number = heapq.heappop(queue)
        trial = running[number]
        trial["epoch"] += 1
        epoch = trial["epoch"]
        value = float(trial["curve"].values[epoch - 1])
        events.append((now, len(events) + 1, value))
        told = worst if math.isnan(value) else value
        if epoch >= trial["stop"]:
            peer.tell(trial["ask"].key, epoch, told)
        elif peer.result(trial["ask"].key, epoch, told):
            heapq.heappush(queue, (now + float(trial["curve"].epoch_s[epoch]), number, number))
            continue
        del running[number]
        if len(events) < budget:
            start(now)
    return events


def _worst(table: CurveTable) -> float:
    finite = np.concatenate([c.values[~np.isnan(c.values)] for c in table.curves.values()])
    return float(finite.min() if table.task.mode == "max" else finite.max())


class SyneTune:
    """Syne Tune's ``ASHA`` or ``BOHB`` scheduler, stopping variant, driven as its ``Tuner`` drives it."""

    def __init__(self, kind: str, table: CurveTable, seed: int) -> None:
        from syne_tune.config_space import loguniform, randint, uniform
        from syne_tune.optimizer import baselines

        self.codec = Codec(table.task.space)
        space = {name: (randint(int(lo), int(hi)) if t == "int" else loguniform(lo, hi) if log else uniform(lo, hi))
                 for name, (t, lo, hi, log) in self.codec.kinds().items()}
        cls = {"asha": baselines.ASHA, "bohb": baselines.BOHB}[kind]
        self.scheduler = cls(space, metric=METRIC, time_attr=TIME_ATTR, max_t=table.task.max_epochs,
                             do_minimize=table.task.mode == "min", random_seed=seed, grace_period=1,
                             reduction_factor=3)
        self.trials: dict[int, Any] = {}

    def ask(self) -> Ask | None:
        import datetime

        from syne_tune.backend.trial_status import Trial

        suggestion = self.scheduler.suggest()
        if suggestion is None:
            return None
        trial = Trial(trial_id=len(self.trials), config=suggestion.config, creation_time=datetime.datetime.now())
        self.trials[trial.trial_id] = trial
        self.scheduler.on_trial_add(trial)
        return Ask(trial.trial_id, self.codec.decode(suggestion.config), 10**9)

    def result(self, key: int, epoch: int, value: float) -> bool:
        return self.scheduler.on_trial_result(self.trials[key], {METRIC: value, TIME_ATTR: epoch}) == "CONTINUE"

    def tell(self, key: int, epoch: int, value: float) -> None:
        decision = self.scheduler.on_trial_result(self.trials[key], {METRIC: value, TIME_ATTR: epoch})
        if decision == "CONTINUE":  # it ended on its own rules (patience): completed, as the Tuner tells it
            self.scheduler.on_trial_complete(self.trials[key], {METRIC: value, TIME_ATTR: epoch})


def _configspace(codec: Codec, seed: int) -> Any:
    from ConfigSpace import ConfigurationSpace, Float, Integer

    space = ConfigurationSpace(seed=seed)
    space.add([Integer(name, (int(lo), int(hi))) if t == "int" else Float(name, (lo, hi), log=log)
               for name, (t, lo, hi, log) in codec.kinds().items()])
    return space


class Dehb:
    """DEHB by ask and tell: fidelity = epochs, a job trained from scratch to its fidelity.

    ``n_workers=1``: DEHB starts a Dask cluster of ``n_workers`` processes for its own ``run`` loop, which ask
    and tell do not use (the jobs run in this module's loop, ``concurrency`` at once); with ``n_workers`` set
    to the concurrency, every run left a cluster of idle worker processes behind (a hundred in one benchmark).
    """

    def __init__(self, table: CurveTable, seed: int, concurrency: int, workdir: Path) -> None:
        from dehb import DEHB

        self.codec, self.sign = Codec(table.task.space), (-1.0 if table.task.mode == "max" else 1.0)
        space = _configspace(self.codec, seed)
        self.dehb = DEHB(cs=space, dimensions=len(space), min_fidelity=1, max_fidelity=table.task.max_epochs,
                         eta=3, n_workers=1, seed=seed, output_path=str(workdir), log_level="ERROR",
                         save_freq=None)
        self.jobs: dict[int, dict[str, Any]] = {}

    def ask(self) -> Ask | None:
        job = self.dehb.ask()
        key = self.asked = getattr(self, "asked", -1) + 1
        self.jobs[key] = job
        return Ask(key, self.codec.decode(dict(job["config"])), round(float(job["fidelity"])))

    def result(self, key: int, epoch: int, value: float) -> bool:
        return True

    def tell(self, key: int, epoch: int, value: float) -> None:
        self.dehb.tell(self.jobs.pop(key), {"fitness": self.sign * value, "cost": float(epoch)})


class SmacHyperband:
    """SMAC3's multi-fidelity facade with its Hyperband intensifier, by ask and tell: budget = epochs."""

    def __init__(self, table: CurveTable, seed: int, workdir: Path) -> None:
        from smac import MultiFidelityFacade, Scenario
        from smac.intensifier.hyperband import Hyperband

        self.codec, self.sign = Codec(table.task.space), (-1.0 if table.task.mode == "max" else 1.0)
        scenario = Scenario(_configspace(self.codec, seed), deterministic=True, n_trials=10**6, min_budget=1,
                            max_budget=table.task.max_epochs, seed=seed, output_directory=workdir / "smac")
        self.smac = MultiFidelityFacade(scenario, lambda config, seed=0, budget=1: 0.0,
                                        intensifier=Hyperband(scenario, eta=3, incumbent_selection="highest_budget"),
                                        overwrite=True, logging_level=40)
        self.trials: dict[int, Any] = {}

    def ask(self) -> Ask | None:
        info = self.smac.ask()
        key = self.asked = getattr(self, "asked", -1) + 1
        self.trials[key] = info
        return Ask(key, self.codec.decode(dict(info.config)), round(float(info.budget)))

    def result(self, key: int, epoch: int, value: float) -> bool:
        return True

    def tell(self, key: int, epoch: int, value: float) -> None:
        from smac.runhistory.dataclasses import TrialValue

        self.smac.tell(self.trials.pop(key), TrialValue(cost=self.sign * value, time=float(epoch)))


def write_json(table: CurveTable, path: Path) -> None:
    """Writes ``table`` as JSON, which the peers' venv reads (its pyarrow and its numpy pin do not agree)."""
    curves = [[c, s, [None if math.isnan(v) else float(v) for v in curve.values], curve.epoch_s.tolist()]
              for (c, s), curve in sorted(table.curves.items())]
    path.write_text(json.dumps({"task": table.task.to_json(), "params": table.params, "curves": curves}))


def read_table(path: Path) -> CurveTable:
    """A table from :func:`write_json`'s JSON (``.json``) or its Parquet file."""
    if path.suffix != ".json":
        return CurveTable.read(path)
    data = json.loads(path.read_text())
    curves = {(int(c), int(s)): Curve(np.array([math.nan if v is None else v for v in values], dtype=float),
                                      np.array(seconds, dtype=float))
              for c, s, values, seconds in data["curves"]}
    return CurveTable(Task.from_json(data["task"]), data["params"], curves)


PEERS = ("syne_asha", "syne_bohb", "dehb", "smac_hb")


def make_peer(name: str, table: CurveTable, seed: int, concurrency: int, workdir: Path) -> Any:
    """The peer ``name`` (one of :data:`PEERS`) for one run."""
    if name == "syne_asha":
        return SyneTune("asha", table, seed)
    if name == "syne_bohb":
        return SyneTune("bohb", table, seed)
    if name == "dehb":
        return Dehb(table, seed, concurrency, workdir)
    if name == "smac_hb":
        return SmacHyperband(table, seed, workdir)
    raise ValueError(f"method: '{name}' is no peer here; one of {', '.join(PEERS)}")


def versions() -> dict[str, str]:
    """The installed versions of the peers' libraries."""
    from importlib.metadata import PackageNotFoundError, version

    out = {}
    for package in ("syne-tune", "dehb", "smac", "ConfigSpace", "numpy"):
        try:
            out[package] = version(package)
        except PackageNotFoundError:
            out[package] = "missing"
    return out


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--table", type=Path, required=True)
    parser.add_argument("--methods", default=",".join(PEERS))
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--budget", type=int, required=True, help="epochs in all")
    parser.add_argument("--patience", type=int, default=3)
    parser.add_argument("--answers", choices=ANSWERS, default="surrogate")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    import logging
    import random
    import warnings

    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    table = read_table(args.table)
    answer = answerer(table, args.answers)
    runs: dict[str, dict[str, Events]] = {}
    for name in args.methods.split(","):
        runs[name] = {}
        for seed in (int(s) for s in args.seeds.split(",")):
            random.seed(seed)
            np.random.seed(seed)  # Syne Tune draws ASHA's bracket from numpy's global generator
            with tempfile.TemporaryDirectory() as workdir:
                peer = make_peer(name, table, seed, args.concurrency, Path(workdir))
                runs[name][str(seed)] = simulate(peer, table, answer, seed=seed, concurrency=args.concurrency,
                                                 budget=args.budget, patience=args.patience)
    args.out.write_text(json.dumps({"versions": versions(), "runs": runs}))


if __name__ == "__main__":
    main()
