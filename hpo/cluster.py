"""Ray cluster files and cluster capacity: offline validation and the "can this trial ever run" check.

Two jobs, both raising one-line :class:`~hpo.errors.ConfigError` messages (``file: key: problem; fix``):

* :func:`validate_cluster_file` checks a ``ray up`` cluster file offline: Ray's own schema (after
  Ray merges its provider defaults, exactly as ``ray up`` does) plus hpo's rules — a GPU node type,
  ``min_workers: 0`` for GPU types (no idle GPU machines), an explicit idle timeout, the dashboard bound
  to localhost, token auth not switched off, no cloud credentials in the file.
* :func:`check_trial_fits` checks, once connected to Ray, that a trial's placement group (one bundle per
  Horovod worker) can ever be placed: on the nodes the cluster has now, plus the node types its
  autoscaler may launch. Without it, an impossible shape waits forever for a node that never comes.
"""

from __future__ import annotations

import copy
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpo.config import read_yaml
from hpo.errors import ConfigError

#: Environment variable naming the autoscaler config of the cluster hpo connects to.
CLUSTER_CONFIG_ENV = "HPO_CLUSTER_CONFIG"
#: Where ``ray up`` leaves the autoscaler config on the head node (``ray job submit`` runs there).
RAY_BOOTSTRAP_CONFIG = Path("~/ray_bootstrap_config.yaml")

#: Stands for "no limit" (a node group with max_count -1); more nodes than any trial has workers.
_UNBOUNDED = 1000
_LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}
_CREDENTIAL_KEYS = re.compile(r"(secret|password|access_key|access_key_id|credentials|api_key)$", re.IGNORECASE)
_DASHBOARD_HOST = re.compile(r"--dashboard-host[= ](\S+)")


@dataclass(frozen=True)
class NodeShape:
    """Resources of one kind of node and how many of them there can be.

    Attributes:
        name: Node type name (or ``node <id>`` for a live node).
        resources: Resource name → amount on one node.
        count: How many such nodes can exist at once.
    """

    name: str
    resources: dict[str, float]
    count: int


@dataclass(frozen=True)
class ClusterFileInfo:
    """What ``hpo cluster validate`` reports about a valid cluster file.

    Attributes:
        name: ``cluster_name``.
        provider: Provider type (``aws``, ``gcp``, ``fake_multinode``, …).
        head_type: The head node type.
        gpu_types: GPU worker node types.
        max_workers: Global ``max_workers``.
        idle_timeout_minutes: Minutes before an idle worker node is removed.
    """

    name: str
    provider: str
    head_type: str
    gpu_types: list[NodeShape]
    max_workers: int
    idle_timeout_minutes: float


# --------------------------------------------------------------------------------------------------
# Cluster files


def load_cluster_file(path: str | Path) -> dict[str, Any]:
    """Reads a cluster YAML file.

    Raises:
        ConfigError: If the file is missing, not YAML, or not a mapping.
    """
    data = read_yaml(path)
    source = str(path)
    if not isinstance(data, dict):
        raise ConfigError(
            f"{source}: (top level): expected a mapping of keys, got {type(data).__name__}; "
            "start from cluster/aws-gpu.yaml"
        )
    return data


def validate_cluster_file(path: str | Path) -> ClusterFileInfo:
    """Validates a cluster file offline against Ray's schema and hpo's rules.

    Args:
        path: The cluster YAML file (as given to ``ray up``).

    Returns:
        A summary of the cluster it describes.

    Raises:
        ConfigError: On the first problem, as one line ``file: key: problem; fix``.
    """
    source = str(path)
    raw = load_cluster_file(path)
    config = _ray_validate(raw, source)
    return _hpo_rules(raw, config, source)


def _ray_validate(raw: dict[str, Any], source: str) -> dict[str, Any]:
    """Runs Ray's own validation; returns the config as Ray will use it (defaults merged)."""
    import jsonschema

    from hpo.compat import ray_cluster_config_tools

    prepare_config, validate_config = ray_cluster_config_tools()

    provider = raw.get("provider")
    if not isinstance(provider, dict) or not isinstance(provider.get("type"), str):
        raise ConfigError(f"{source}: provider: missing or has no 'type'; add e.g. provider: {{type: aws, ...}}")
    try:
        if provider["type"] == "fake_multinode":
            # The fake provider ships no defaults file; its autoscaler reads the file exactly as written.
            config = copy.deepcopy(raw)
        else:
            config = prepare_config(copy.deepcopy(raw))
        validate_config(config)
    except jsonschema.ValidationError as exc:
        key = ".".join(str(p) for p in exc.absolute_path) or "(top level)"
        message = " ".join(str(exc.message).split())
        if len(message) > 200:
            message = message[:197] + "..."
        raise ConfigError(f"{source}: {key}: {message}; see Ray's ray/autoscaler/ray-schema.json") from None
    except NotImplementedError as exc:
        raise ConfigError(
            f"{source}: provider.type: {exc}; use aws, gcp, azure, kuberay, local or fake_multinode"
        ) from None
    except (ValueError, KeyError, RuntimeError, AssertionError, TypeError) as exc:
        text = " ".join(str(exc).split()) or type(exc).__name__
        raise ConfigError(f"{source}: (top level): Ray rejects the file: {text}; fix it as Ray says") from None
    return config


def _resources(node_type: dict[str, Any]) -> dict[str, float]:
    return {str(k): float(v) for k, v in (node_type.get("resources") or {}).items()}


def _hpo_rules(raw: dict[str, Any], config: dict[str, Any], source: str) -> ClusterFileInfo:
    """Checks hpo's own rules on the merged config (``raw`` tells what the user wrote)."""
    head_type = config["head_node_type"]
    types = config["available_node_types"]
    gpu_types: list[NodeShape] = []
    for name, node_type in types.items():
        if name == head_type:
            continue
        resources = _resources(node_type)
        if resources.get("GPU", 0) <= 0:
            continue
        key = f"available_node_types.{name}"
        if node_type.get("min_workers", 0) != 0:
            raise ConfigError(
                f"{source}: {key}.min_workers: {node_type['min_workers']} keeps GPU nodes running while no "
                "trial needs them; set it to 0 (the autoscaler adds them when trials wait)"
            )
        max_workers = int(node_type.get("max_workers", config["max_workers"]))
        if max_workers < 1:
            raise ConfigError(
                f"{source}: {key}.max_workers: {max_workers} means this GPU type is never launched; "
                "set it to at least 1"
            )
        gpu_types.append(NodeShape(name, resources, max_workers))
    if not gpu_types:
        raise ConfigError(
            f"{source}: available_node_types: no worker node type declares GPU resources; add one with "
            "e.g. resources: {CPU: 8, GPU: 1} and min_workers: 0"
        )
    if "idle_timeout_minutes" not in raw:
        raise ConfigError(
            f"{source}: idle_timeout_minutes: not set (Ray would use 5); set it explicitly so idle GPU "
            "nodes are removed when you expect, e.g. idle_timeout_minutes: 10"
        )
    idle = raw["idle_timeout_minutes"]
    if not isinstance(idle, (int, float)) or idle <= 0:
        raise ConfigError(
            f"{source}: idle_timeout_minutes: {idle!r} never removes idle nodes; use a positive number, e.g. 10"
        )
    if config.get("max_workers", 0) < 1:
        raise ConfigError(f"{source}: max_workers: {config.get('max_workers')} allows no worker nodes; set it >= 1")
    _check_head_commands(config, source)
    _check_no_credentials(raw, source)
    return ClusterFileInfo(
        name=str(config["cluster_name"]),
        provider=str(config["provider"]["type"]),
        head_type=head_type,
        gpu_types=gpu_types,
        max_workers=int(config["max_workers"]),
        idle_timeout_minutes=float(idle),
    )


def _check_head_commands(config: dict[str, Any], source: str) -> None:
    """The dashboard listens on localhost only, and token auth is not switched off."""
    for key in ("head_start_ray_commands", "worker_start_ray_commands", "setup_commands", "head_setup_commands"):
        for index, command in enumerate(config.get(key) or []):
            text = str(command)
            where = f"{key}[{index}]"
            for host in _DASHBOARD_HOST.findall(text):
                if host.strip("'\"") not in _LOCAL_HOSTS:
                    raise ConfigError(
                        f"{source}: {where}: --dashboard-host={host} exposes the dashboard (and job "
                        "submission) to the network; use --dashboard-host=127.0.0.1 and reach it with "
                        "'ray dashboard CLUSTER.yaml' over SSH"
                    )
            if re.search(r"RAY_AUTH_MODE=(['\"]?)disabled\1", text):
                raise ConfigError(
                    f"{source}: {where}: RAY_AUTH_MODE=disabled turns token authentication off; remove it "
                    "and ship ~/.ray/auth_token with file_mounts"
                )


def _check_no_credentials(node: Any, source: str, path: str = "") -> None:
    """Cloud credentials belong in the user's environment, never in a cluster file."""
    if isinstance(node, dict):
        for key, value in node.items():
            if not path and key == "file_mounts":
                continue  # remote path -> local path; a mounted token file is not a credential in the file
            here = f"{path}.{key}" if path else str(key)
            if _CREDENTIAL_KEYS.search(str(key)) and value not in (None, "", {}):
                raise ConfigError(
                    f"{source}: {here}: looks like a credential; remove it and let Ray use your cloud "
                    "login (aws configure / gcloud auth application-default login)"
                )
            _check_no_credentials(value, source, here)
    elif isinstance(node, list):
        for index, value in enumerate(node):
            _check_no_credentials(value, source, f"{path}[{index}]")


def launchable_node_types(config: dict[str, Any]) -> list[NodeShape]:
    """The worker node types an autoscaler config may launch, with their per-type limits."""
    head = config.get("head_node_type")
    global_max = int(config.get("max_workers", 0) or 0)
    shapes = []
    for name, node_type in (config.get("available_node_types") or {}).items():
        if name == head:
            continue
        count = min(int(node_type.get("max_workers", global_max)), global_max)
        if count > 0:
            shapes.append(NodeShape(name, _resources(node_type), count))
    return shapes


# --------------------------------------------------------------------------------------------------
# Can a trial ever be placed?


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
            g.name, {k: float(v) for k, v in g.resources.items()}, g.max_count if g.max_count >= 0 else _UNBOUNDED
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
