"""Does a sweep survive losing its worker node? The node killed mid-trial, again and again.

On the two-node setup of ``tests/integration/test_two_nodes.py`` (a head with 0 CPUs, one worker node with
a disk of its own, ``--storage s3://…`` on a moto server; needs root and ``unshare``), each run is one real
sweep of the digits MLP: 2 trials of 2 Horovod workers × 0.5 CPU, 8 epochs, one at a time. Once the first
trial has its second checkpoint in the bucket, the worker node's whole process tree (``ray start``, the
raylet, every worker) is SIGKILLed, as when a spot instance is reclaimed, and a new worker node with a fresh
disk joins ``--delay`` seconds later, as an autoscaler would start one. Cases:

- ``loss`` (``--runs`` times in a row, on one cluster): the sweep must end with exit 0 and every trial
  ended; figures: from the new node joining to the interrupted trial's next epoch (median, worst), the
  epochs that trial trained twice, the sweep's wall time;
- ``no_replacement``: the node is lost and none comes for ``--wait`` seconds: the sweep must say it is
  waiting for resources, and finish once a node joins;
- ``budget``: the node is lost, none comes, and the sweep's ``search.time_budget_s`` runs out: the sweep
  must stop on its own with the trials it has (no hang).

Writes ``benchmarks/results/faults.json``. Never asserts on time.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from _report import write_report  # noqa: E402

#: Seconds a sweep may take after the node loss before the run counts as hung.
HANG_S = 480


def _sweep(nodes, name: str, budget_s: float | None = None) -> str:
    sweep = yaml.safe_load((ROOT / "tests" / "integration" / "sweeps" / "small.yaml").read_text())
    sweep["name"] = name
    sweep["data"] = {"train": "builtin:digits", "validation_fraction": 0.2}
    sweep["search"].update(num_samples=2, max_concurrent=1)
    sweep["scheduler"] = {"type": "fifo"}
    sweep["trial"].update(max_epochs=8, early_stopping={"patience": 100})
    if budget_s is not None:
        sweep["search"]["time_budget_s"] = budget_s
    sweep["tracking"] = {"mlflow_uri": f"sqlite:///{nodes.disk}/mlflow.db"}
    (nodes.disk / f"{name}.yaml").write_text(yaml.safe_dump(sweep))
    return f"{name}.yaml"


def _histories(nodes, name: str) -> dict[str, list[dict]]:
    """Every trial's ``result.json`` rows from the bucket (trial directory → rows)."""
    client = nodes.moto.client()
    out: dict[str, list[dict]] = {}
    for key in nodes.moto.keys(nodes.bucket, f"runs/{name}/"):
        if key.endswith("/result.json"):
            body = client.get_object(Bucket=nodes.bucket, Key=key)["Body"].read().decode()
            out[key.split("/")[2]] = [json.loads(line) for line in body.splitlines() if line.strip()]
    return out


def _placement(nodes) -> str:
    """Ray's view of the placement groups and nodes (printed for a hung run)."""
    probe = (
        "import ray, sys, json; ray.init(address=sys.argv[1], logging_level='ERROR', log_to_driver=False)\n"
        "print(json.dumps({'pgs': {k: (v['state'], v['bundles']) for k, v in "
        "ray.util.placement_group_table().items()},"
        " 'nodes': [(n['NodeManagerPort'], n['Alive'], n['Resources']) for n in ray.nodes()],"
        " 'available': ray.available_resources()}, default=str))\n"
    )
    out = subprocess.run([sys.executable, "-c", probe, nodes.address], capture_output=True, text=True,
                         env={**nodes.env(), "RAY_AUTH_MODE": "token"}, timeout=120)
    return out.stdout[-3000:] + out.stderr[-1000:]


def run_loss(nodes, scratch: Path, name: str, delay_s: float | None, budget_s: float | None = None) -> dict:
    """One sweep whose worker node is lost after the first trial's second checkpoint.

    Args:
        delay_s: Seconds until a new worker node joins (None: none joins until the sweep ends).
        budget_s: The sweep's ``search.time_budget_s``.
    """
    cmd = [sys.executable, "-m", "hpo.cli.main", "tune", _sweep(nodes, name, budget_s), "--address",
           nodes.address, "--storage", f"s3://{nodes.bucket}/runs"]
    log_path = scratch / f"{name}.log"
    log = log_path.open("w")
    started = time.time()
    proc = subprocess.Popen(cmd, cwd=nodes.disk, stdout=log, stderr=subprocess.STDOUT, env=nodes.env(),
                            start_new_session=True)
    lost = joined = None
    hung = ""
    try:
        while proc.poll() is None and not any(
                "/checkpoint_000001/" in k for k in nodes.moto.keys(nodes.bucket, f"runs/{name}/")):
            time.sleep(0.3)
        if proc.poll() is None:
            nodes.lose_worker()
            lost = time.time()
            if delay_s is not None:
                time.sleep(max(0.0, lost + delay_s - time.time()))
                joined = nodes.replace_worker()
        try:
            rc = proc.wait(timeout=HANG_S)
        except subprocess.TimeoutExpired:
            hung = _placement(nodes)
            os.killpg(proc.pid, signal.SIGKILL)
            rc = proc.wait()
    finally:
        if proc.poll() is None:
            os.killpg(proc.pid, signal.SIGKILL)
        log.close()
        if delay_s is None and lost is not None:
            joined = nodes.replace_worker()  # the next case needs a worker node
    output = log_path.read_text()
    histories = _histories(nodes, name)
    resumed = {t: rows for t, rows in histories.items() if any(r.get("resumed_from_epoch") for r in rows)}
    figures: dict = {}
    for rows in resumed.values():
        first = next(i for i, r in enumerate(rows) if r.get("resumed_from_epoch"))
        before = [r["epoch"] for r in rows[:first]]
        figures = {
            "epochs_before_loss": max(before, default=0),
            "resumed_from_epoch": rows[first]["resumed_from_epoch"],
            "epochs_trained_twice": max(before, default=0) - rows[first]["resumed_from_epoch"],
            "join_to_next_epoch_s": round(rows[first]["epoch_end_time"] - joined, 2) if joined else None,
            "loss_to_next_epoch_s": round(rows[first]["epoch_end_time"] - lost, 2) if lost else None,
        }
    summaries = list(nodes.disk.glob(f"hpo_runs/_shared/s3-*/{name}/summary.json"))
    trials = json.loads(summaries[0].read_text())["trials"] if summaries else []
    return {
        "rc": rc,
        "hung": bool(hung),
        "trial_status": [t["status"] for t in trials],
        **figures,
        "wall_s": round(time.time() - started, 1),
        "waiting_lines": [line.strip()[:300] for line in output.splitlines() if "waiting for resources" in line][:2],
        "watch_lines": watch_lines(output),
        "sweep_end": next((line.strip()[:300] for line in reversed(output.splitlines())
                           if line.startswith("sweep: ")), ""),
        "tail": output[-1500:] if rc or hung else "",
        "placement": hung,
    }


def watch_lines(output: str) -> list[str]:
    """What the placement watch did (``placement group 3d25a525 recreate: …``) and the nodes it saw lost."""
    return [line.strip()[:300] for line in output.splitlines() if (line.startswith("placement group ") and any(
        f" {action}: " in line for action in ("recreate", "retry", "fail"))) or line.startswith("node ")][:4]


def summarize(losses: list[dict]) -> dict:
    """The ``loss`` case: how many runs completed, and the times from the new node to the next epoch."""
    ok = [r for r in losses if r["rc"] == 0 and r["trial_status"] and all(
        s in ("completed", "stopped_early") for s in r["trial_status"])]
    join = [r["join_to_next_epoch_s"] for r in losses if r.get("join_to_next_epoch_s") is not None]
    lost = [r["loss_to_next_epoch_s"] for r in losses if r.get("loss_to_next_epoch_s") is not None]
    return {
        "runs": len(losses), "complete": len(ok), "hung": sum(r["hung"] for r in losses),
        "join_to_next_epoch_s": {"median": statistics.median(join) if join else None,
                                 "worst": max(join, default=None)},
        "loss_to_next_epoch_s": {"median": statistics.median(lost) if lost else None,
                                 "worst": max(lost, default=None)},
        "epochs_trained_twice_max": max((r.get("epochs_trained_twice", 0) for r in losses), default=None),
        "watch_acted": sum(any(line.startswith("placement group") for line in r.get("watch_lines", []))
                           for r in losses),
        "said_waiting": sum(bool(r.get("waiting_lines")) for r in losses),
        "wall_s_median": statistics.median(r["wall_s"] for r in losses),
        "each": losses,
    }


def main() -> None:
    """Runs the cases and writes the JSON result."""
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20, help="node losses with a replacement, in a row")
    parser.add_argument("--delay", type=float, default=10.0, help="seconds from the loss to the new node")
    parser.add_argument("--wait", type=float, default=60.0, help="no_replacement: seconds without a worker node")
    parser.add_argument("--budget", type=float, default=90.0, help="budget: the sweep's time_budget_s")
    parser.add_argument("--skip", default="", help="cases to skip, comma-separated (no_replacement, budget)")
    parser.add_argument("--out", default=str(ROOT / "benchmarks" / "results" / "faults.json"))
    parser.add_argument("--keep", action="store_true",
                        help="keep the cases of --out that this run does not redo (losses: added to its runs)")
    args = parser.parse_args()

    from tests.integration.test_two_nodes import two_nodes

    scratch = Path(tempfile.mkdtemp(prefix="hpo-bench-faults-"))  # kept: each sweep's log
    print("scratch:", scratch, flush=True)
    cases: dict[str, dict] = {}
    (scratch / "cluster").mkdir()
    with two_nodes(scratch / "cluster", replacements=args.runs + 2) as nodes:
        os.environ.update(nodes.moto.env())
        losses = []
        for i in range(args.runs):
            losses.append(run_loss(nodes, scratch, f"loss-{i}", args.delay))
            print(f"loss-{i}", json.dumps({k: v for k, v in losses[-1].items() if k != "tail"}), flush=True)
        if losses:
            cases["loss"] = summarize(losses)
        if "no_replacement" not in args.skip:
            cases["no_replacement"] = run_loss(nodes, scratch, "late-node", args.wait)
            print("no_replacement", json.dumps(cases["no_replacement"]), flush=True)
        if "budget" not in args.skip:
            cases["budget"] = run_loss(nodes, scratch, "no-node", None, budget_s=args.budget)
            print("budget", json.dumps(cases["budget"]), flush=True)
    earlier = ""
    if args.keep and Path(args.out).is_file():
        previous = json.loads(Path(args.out).read_text())
        kept, earlier = previous["cases"], previous["command"]
        if "loss" in kept and "loss" in cases:  # the losses of both runs, in the order they ran
            cases["loss"] = summarize(kept["loss"]["each"] + cases["loss"]["each"])
        cases = {**kept, **cases}
    write_report({
        "what": "2 trials of 2 Horovod workers x 0.5 CPU (digits MLP, 8 epochs, a checkpoint per epoch to S3 on "
                "moto), head with 0 CPUs and one 2-CPU worker node; the worker node's process tree SIGKILLed "
                "after the first trial's second checkpoint, a new worker node joining --delay s later",
        "cases": cases,
        "machine": {"cpus": os.cpu_count(), "python": platform.python_version(),
                    "shared": "2 cores shared with other engineers' test runs: times are disturbed"},
        "command": f"python benchmarks/faults.py --runs {args.runs} --delay {args.delay} --wait {args.wait} "
                   f"--budget {args.budget}" + (f" --skip {args.skip}" if args.skip else "")
                   + (f" --keep (after: {earlier})" if earlier else ""),
        "measures": "join_to_next_epoch_s: from the new node first seen alive (a probe every ~1-5 s) to the end "
                    "of the interrupted trial's first epoch after the loss (rank 0's clock); epochs_trained_twice: "
                    "the last epoch in the trial's result.json before the loss (uploaded with a lag) less the "
                    "epoch it resumed from",
    }, args.out)


if __name__ == "__main__":
    main()
