"""Where a shape's trials go: the nodes a cluster file can launch (or this machine), how many a shape needs.

A trial holds one bundle per worker (``{CPU: cpus_per_worker, GPU: gpus_per_worker}``); ``max_concurrent``
trials at once need ``max_concurrent × workers`` bundles. They are packed onto the cluster's worker node
types, the cheapest per bundle first (the sweep file's prices; without prices, the one holding most
bundles), within each type's ``max_workers`` and the cluster's global ``max_workers``. Without a cluster
file the one node is this machine. Reads the cluster file only (no Ray).
"""

from __future__ import annotations

import math
import os
from dataclasses import dataclass
from pathlib import Path

from hpo.cluster.files import launchable_node_types, load_cluster_file
from hpo.cluster.fit import bundles_per_node
from hpo.cluster.shapes import NodeShape
from hpo.errors import ConfigError
from hpo.plan.types import Shape

#: The node type name of this machine, for a plan without a cluster file.
LOCAL = "local"


@dataclass(frozen=True)
class Capacity:
    """The nodes a plan may use.

    Attributes:
        node_types: Worker node types (resources per node, most nodes of each).
        max_workers: The cluster's global ``max_workers`` (None: this machine only).
        source: The cluster file (None: this machine).
    """

    node_types: tuple[NodeShape, ...]
    max_workers: int | None
    source: str | None = None

    @classmethod
    def local(cls, cpus: int | None = None, gpus: float = 0.0) -> Capacity:
        """This machine as the one node (its CPUs, no GPUs unless told)."""
        resources = {"CPU": float(cpus or os.cpu_count() or 1), "GPU": float(gpus)}
        return cls((NodeShape(LOCAL, resources, 1),), None)

    @classmethod
    def from_file(cls, path: str | Path) -> Capacity:
        """The worker node types of a Ray cluster file.

        Raises:
            ConfigError: The file cannot be read or launches no worker node.
        """
        config = load_cluster_file(path)
        types = launchable_node_types(config)
        if not types:
            raise ConfigError(f"{path}: available_node_types: no worker node type to launch; "
                              "give one a max_workers above 0")
        return cls(tuple(types), int(config.get("max_workers", 0) or 0), str(path))

    def place(self, shape: Shape, cpu_price: float = 0.0, gpu_price: float = 0.0) -> dict[str, int] | None:
        """Node type → nodes that hold ``shape``'s trials at once; None where the cluster cannot."""
        bundle = {"CPU": shape.cpus_per_worker, "GPU": shape.gpus_per_worker}
        needed = shape.max_concurrent * shape.workers_per_trial
        # a trial's workers may spread over nodes (Horovod over Gloo/NCCL), so bundles are what is packed
        fits = [(t, bundles_per_node(t.resources, bundle)) for t in self.node_types]
        fits = [(t, n) for t, n in fits if n > 0]
        fits.sort(key=lambda tn: (node_rate(tn[0], cpu_price, gpu_price) / tn[1], -tn[1]))
        nodes: dict[str, int] = {}
        left = self.max_workers if self.max_workers is not None else math.inf
        for node_type, per_node in fits:
            if needed <= 0:
                break
            count = min(node_type.count, math.ceil(needed / per_node), left)
            if count > 0:
                nodes[node_type.name] = int(count)
                needed -= count * per_node
                left -= count
        return nodes if needed <= 0 else None

    def load(self, shape: Shape, nodes: dict[str, int]) -> float:
        """How full the busiest node's CPUs are (1.0: every CPU held), for the per-epoch time model."""
        busiest = 0.0
        left = shape.max_concurrent * shape.workers_per_trial
        for node_type in self.node_types:
            count = nodes.get(node_type.name, 0)
            if not count:
                continue
            cpus = node_type.resources.get("CPU", 0.0) or 1.0
            per_node = min(bundles_per_node(node_type.resources, {"CPU": shape.cpus_per_worker,
                                                                   "GPU": shape.gpus_per_worker}),
                           math.ceil(left / count))
            busiest = max(busiest, per_node * shape.cpus_per_worker / cpus)
            left -= per_node * count
        return max(busiest, 1e-3)

    def rate(self, nodes: dict[str, int], cpu_price: float, gpu_price: float) -> float:
        """What the nodes cost per second."""
        by_name = {t.name: t for t in self.node_types}
        return sum(count * node_rate(by_name[name], cpu_price, gpu_price) for name, count in nodes.items()) / 3600


def node_rate(node_type: NodeShape, cpu_price: float, gpu_price: float) -> float:
    """One node's price per hour."""
    return node_type.resources.get("CPU", 0.0) * cpu_price + node_type.resources.get("GPU", 0.0) * gpu_price
