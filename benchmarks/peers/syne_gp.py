"""The search benchmark's Syne Tune peers with Gaussian-process models: MOBSTER and Hyper-Tune (Syne Tune 0.13).

Syne Tune dropped its GP searchers, and with them ``MOBSTER`` and ``HyperTune``, after 0.13; the other Syne
Tune peers (``adapters.py``) run 0.16. So these two run in a venv of their own, ``benchmarks/.syne-gp-venv``
(``benchmarks/peers/make_venv.sh``; ``syne-gp-requirements.txt`` pins it), through the same loop, surrogate,
budget, trial-level stopping and codec as every venv peer (``adapters.simulate``), driven as Syne Tune's
``Tuner`` drives a scheduler (``suggest(trial_id)``, ``on_trial_add``, ``on_trial_result``,
``on_trial_complete``):

- ``syne_mobster``: ``MOBSTER`` (asynchronous successive halving, stopping variant, with a multi-task GP
  over configuration and epoch proposing new trials; Syne Tune's default model, ``gp_multitask``), grace 1,
  reduction factor 3, as the other Syne Tune peers.
- ``syne_hypertune``: ``HyperTune`` (Hyper-Tune: independent GPs per rung level, an ensemble of them
  proposing, and each new trial's bracket drawn from a distribution that the rung levels' rank agreement with
  the last one sets), grace 1, reduction factor 3, with every bracket there is (3 for rungs at 1, 3 and 9 of
  20 epochs: with one bracket, Syne Tune's default, there would be no brackets to choose between).

Run as a script in that venv (``benchmarks/search_peers.py`` does, with the repository on ``PYTHONPATH``),
with ``adapters.py``'s arguments: ``python benchmarks/peers/syne_gp.py --table T.json --methods syne_mobster
--seeds 0,1 --concurrency 2 --budget 1000 --patience 3 --out events.json``.
"""

from __future__ import annotations

import argparse
import datetime
import json
import logging
import random
import sys
import warnings
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parent))

import adapters
import numpy as np

PEERS = ("syne_mobster", "syne_hypertune")
#: ``rung levels`` of grace 1 and reduction factor 3 below 20 epochs: 1, 3, 9; Hyper-Tune gets a bracket each.
HYPERTUNE_BRACKETS = 3


class SyneGP(adapters.SyneTune):
    """Syne Tune 0.13's ``MOBSTER`` or ``HyperTune``, stopping variant, driven as its ``Tuner`` drives it.

    Results and ends of trials go to the scheduler as :class:`adapters.SyneTune` tells them; what differs is
    0.13's constructor arguments and ``suggest(trial_id)``.
    """

    def __init__(self, kind: str, table: adapters.CurveTable, seed: int) -> None:
        from syne_tune.config_space import loguniform, randint, uniform
        from syne_tune.optimizer.baselines import MOBSTER, HyperTune

        self.codec = adapters.Codec(table.task.space)
        space: dict[str, Any] = {
            name: (randint(int(lo), int(hi)) if t == "int" else loguniform(lo, hi) if log else uniform(lo, hi))
            for name, (t, lo, hi, log) in self.codec.kinds().items()}
        extra = {"brackets": HYPERTUNE_BRACKETS} if kind == "hypertune" else {}
        cls = {"mobster": MOBSTER, "hypertune": HyperTune}[kind]
        self.scheduler = cls(space, metric=adapters.METRIC, resource_attr=adapters.TIME_ATTR,
                             max_t=table.task.max_epochs, mode=table.task.mode, random_seed=seed, grace_period=1,
                             reduction_factor=3, type="stopping", search_options={"debug_log": False}, **extra)
        self.trials: dict[int, Any] = {}

    def ask(self) -> adapters.Ask | None:
        from syne_tune.backend.trial_status import Trial

        trial_id = len(self.trials)
        suggestion = self.scheduler.suggest(trial_id=trial_id)
        if suggestion is None:
            return None
        trial = Trial(trial_id=trial_id, config=suggestion.config, creation_time=datetime.datetime.now())
        self.trials[trial_id] = trial
        self.scheduler.on_trial_add(trial)
        return adapters.Ask(trial_id, self.codec.decode(suggestion.config), 10**9)


def versions() -> dict[str, str]:
    """The versions this venv ran, named apart from the other peers' venv (which has another Syne Tune)."""
    from importlib.metadata import version

    return {f"{package} (MOBSTER, Hyper-Tune venv)": version(package)
            for package in ("syne-tune", "numpy", "scipy", "autograd")}


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--table", type=Path, required=True)
    parser.add_argument("--methods", default=",".join(PEERS))
    parser.add_argument("--seeds", default="0")
    parser.add_argument("--concurrency", type=int, default=2)
    parser.add_argument("--budget", type=int, required=True, help="epochs in all")
    parser.add_argument("--patience", type=int, default=3)
    parser.add_argument("--answers", choices=adapters.ANSWERS, default="surrogate")
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    logging.disable(logging.WARNING)
    warnings.simplefilter("ignore")
    table = adapters.read_table(args.table)
    answer = adapters.answerer(table, args.answers)
    runs: dict[str, dict[str, adapters.Events]] = {}
    for name in args.methods.split(","):
        if name not in PEERS:
            raise SystemExit(f"method: '{name}' is no peer here; one of {', '.join(PEERS)}")
        runs[name] = {}
        for seed in (int(s) for s in args.seeds.split(",")):
            random.seed(seed)
            np.random.seed(seed)  # Syne Tune draws from numpy's global generator too
            peer = SyneGP(name.removeprefix("syne_"), table, seed)
            runs[name][str(seed)] = adapters.simulate(peer, table, answer, seed=seed, concurrency=args.concurrency,
                                                      budget=args.budget, patience=args.patience)
    args.out.write_text(json.dumps({"versions": versions(), "runs": runs}))


if __name__ == "__main__":
    main()
