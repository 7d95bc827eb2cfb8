"""Can a trial ever be placed? A trial's placement group against the cluster and its autoscaler.

Once connected to Ray, a trial's placement group (one bundle per Horovod worker) is checked against the
nodes the cluster has now plus the node types its autoscaler may launch. Without this, an impossible
shape waits forever for a node that never comes.
"""

from __future__ import annotations

import math
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from hpo.cluster.files import UNBOUNDED, launchable_node_types, load_cluster_file
from hpo.cluster.shapes import NodeShape
from hpo.errors import ConfigError

#: Environment variable naming the autoscaler config of the cluster hpo connects to.
CLUSTER_CONFIG_ENV = "HPO_CLUSTER_CONFIG"
#: Where ``ray up`` leaves the autoscaler config on the head node (``ray job submit`` runs there).
RAY_BOOTSTRAP_CONFIG = Path("~/ray_bootstrap_config.yaml")


def bundles_per_node(node: dict[str, float], bundle: dict[str, float]) -> int:
    """How many copies of ``bundle`` fit on one node with resources ``node``."""
    fits = math.inf
    for resource, amount in bundle.items():
        if amount <= 0:
            continue
        fits = min(fits, math.floor(node.get(resource, 0.0) / amount + 1e-9))
    return 0 if fits == math.inf else int(fits)


def max_bundles(
    bundle: dict[str, float], live: list[NodeShape], launchable: list[NodeShape], max_launched: int
) -> int:
    """The most worker bundles the cluster can ever hold at once.

    Args:
        bundle: One worker's resources.
        live: Nodes the cluster has now (``count`` 1 each).
        launchable: Node types the autoscaler may add.
        max_launched: The autoscaler's global ``max_workers``.
    """
    total = sum(bundles_per_node(n.resources, bundle) * n.count for n in live)
    slots = sorted(
        (bundles_per_node(t.resources, bundle) for t in launchable for _ in range(t.count)), reverse=True
    )
    return total + sum(slots[:max_launched])


def _fmt(resources: dict[str, float]) -> str:
    shown = {k: v for k, v in resources.items() if k in ("CPU", "GPU") or not k.startswith(("node:", "memory"))}
    shown = {k: v for k, v in shown.items() if k != "object_store_memory"}
    return "{" + ", ".join(f"{k}: {v:g}" for k, v in sorted(shown.items())) + "}"


def check_trial_fits(
    bundle: dict[str, float],
    workers: int,
    *,
    source: str,
    live: list[NodeShape],
    launchable: list[NodeShape] | None,
    max_launched: int = 0,
) -> None:
    """Raises unless ``workers`` copies of ``bundle`` can ever be placed on the cluster.

    Args:
        bundle: One Horovod worker's resources (e.g. ``{"CPU": 1, "GPU": 1}``).
        workers: Workers per trial (the trial's placement group holds one bundle per worker).
        source: The sweep file, for the message.
        live: The cluster's nodes now.
        launchable: Node types its autoscaler may add; None for a local Ray without an autoscaler.
        max_launched: The autoscaler's global ``max_workers``.

    Raises:
        ConfigError: If the trial can never be placed.
    """
    capacity = max_bundles(bundle, live, launchable or [], max_launched)
    if capacity >= workers:
        return
    key = "trial.gpus_per_worker" if bundle.get("GPU", 0) > 0 else "trial.cpus_per_worker"
    nodes = ", ".join(f"{n.name} {_fmt(n.resources)}" for n in live) or "none"
    types = ", ".join(f"{t.name} {_fmt(t.resources)} x{t.count}" for t in launchable or []) or "none"
    local = " (a local Ray: this machine is all there is; use --address for a cluster)"
    known = "" if launchable is not None else local
    plural = "s" if workers != 1 else ""
    raise ConfigError(
        f"{source}: {key}: a trial needs {workers} worker{plural} x {_fmt(bundle)} but the cluster can never hold "
        f"more than {capacity} (nodes: {nodes}; launchable node types: {types}){known}; lower "
        "trial.workers or the per-worker resources, or add a node type that fits"
    )


def live_nodes() -> list[NodeShape]:
    """The alive nodes of the connected Ray cluster, with their total resources."""
    import ray

    return [
        NodeShape(f"node {n['NodeID'][:8]}", {k: float(v) for k, v in n["Resources"].items()}, 1)
        for n in ray.nodes()
        if n.get("Alive")
    ]


def autoscaler_node_types() -> tuple[list[NodeShape], int] | None:
    """The node types the connected cluster's autoscaler may launch, if that can be known.

    Looks, in order, at the cluster config an autoscaler v2 publishes in the GCS, the file named by
    ``HPO_CLUSTER_CONFIG``, and ``~/ray_bootstrap_config.yaml`` (the head node of a ``ray up`` cluster).

    Returns:
        (node types, global max_workers), or None if no autoscaler config is known.
    """
    shapes = _gcs_node_types()
    if shapes is not None:
        return shapes
    named = os.environ.get(CLUSTER_CONFIG_ENV)
    path = Path(named) if named else RAY_BOOTSTRAP_CONFIG.expanduser()
    if not path.is_file():
        if named:
            raise ConfigError(f"{named}: (file): {CLUSTER_CONFIG_ENV} names no file; fix or unset it")
        return None
    config = load_cluster_file(path)
    return launchable_node_types(config), int(config.get("max_workers", 0) or 0)


def _gcs_node_types() -> tuple[list[NodeShape], int] | None:
    try:
        from hpo.compat import gcs_cluster_config

        cluster_config = gcs_cluster_config()
    except Exception:  # noqa: BLE001 - an internal API; absent or changed means "not known"
        return None
    if cluster_config is None or not cluster_config.node_group_configs:
        return None
    shapes = [
        NodeShape(
            g.name, {k: float(v) for k, v in g.resources.items()}, g.max_count if g.max_count >= 0 else UNBOUNDED
        )
        for g in cluster_config.node_group_configs
    ]
    return shapes, sum(s.count for s in shapes)


def check_trial_fits_cluster(bundle: dict[str, float], workers: int, *, source: str, local: bool) -> None:
    """:func:`check_trial_fits` against the connected Ray cluster.

    On a local Ray that hpo started itself, today's nodes are all there will ever be. On a cluster hpo
    connected to, the node types its autoscaler may launch count too; if they cannot be found, the check
    is skipped (a node type that fits may exist).

    Args:
        bundle: One Horovod worker's resources.
        workers: Workers per trial.
        source: The sweep file, for the message.
        local: True for the local Ray that hpo started (no autoscaler can add nodes to it).

    Raises:
        ConfigError: If the trial can never be placed.
    """
    known = ([], 0) if local else autoscaler_node_types()
    if known is None:
        return
    launchable, max_launched = known
    check_trial_fits(
        bundle,
        workers,
        source=source,
        live=live_nodes(),
        launchable=None if local else launchable,
        max_launched=max_launched,
    )


def never_fits(bundles: tuple[dict[str, float], ...], nodes: Sequence[Any],
               known: tuple[list[Any], int] | None) -> str:
    """Why no node and no node type of the cluster's autoscaler could ever hold ``bundles`` ("" if one could).

    Args:
        bundles: A group's bundles (hpo's are one worker's resources each).
        nodes: The cluster's nodes (each with ``node_id``, ``alive`` and ``total`` resources).
        known: The autoscaler's node types and global ``max_workers``
            (:func:`hpo.cluster.fit.autoscaler_node_types`); None: not known, so no verdict.
    """
    if known is None or not bundles:
        return ""
    launchable, max_launched = known
    live = [NodeShape(f"node {n.node_id[:8]}", n.total, 1) for n in nodes if n.alive]
    bundle = max(bundles, key=lambda b: sum(b.values()))
    capacity = max_bundles(bundle, live, launchable, max_launched)
    if capacity >= len(bundles):
        return ""
    shown = ", ".join(f"{k}: {v:g}" for k, v in sorted(bundle.items()))
    return (f"no node of the cluster and no node type of its autoscaler can hold the trial's {len(bundles)} "
            f"bundles of {{{shown}}} (at most {capacity} fit); lower trial.workers or the per-worker resources, "
            "or add a node type that fits")
