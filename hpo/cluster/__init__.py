"""Ray clusters: cluster files and capacity.

Cluster files are checked offline (:mod:`~hpo.cluster.files`); the "can this trial ever run" check runs
against a connected cluster (:mod:`~hpo.cluster.fit`).
"""

from __future__ import annotations

from hpo.cluster.files import ClusterFileInfo, launchable_node_types, load_cluster_file, validate_cluster_file
from hpo.cluster.fit import bundles_per_node, check_trial_fits, check_trial_fits_cluster, max_bundles
from hpo.cluster.shapes import NodeShape
from hpo.cluster.visibility import check_storage_shared

__all__ = [
    "ClusterFileInfo",
    "NodeShape",
    "bundles_per_node",
    "check_storage_shared",
    "check_trial_fits",
    "check_trial_fits_cluster",
    "launchable_node_types",
    "load_cluster_file",
    "max_bundles",
    "validate_cluster_file",
]
