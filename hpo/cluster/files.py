"""Cluster files, checked offline: Ray's schema plus hpo's rules.

Ray's own schema (with Ray's provider defaults merged, as ``ray up`` does) plus hpo's rules: a GPU node
type, ``min_workers: 0`` for GPU types (no idle GPU machines), an explicit idle timeout, the dashboard
bound to localhost, token auth not switched off, no cloud credentials in the file, GCP ``scheduling`` an
object (the GCE API takes no list) with ``onHostMaintenance: TERMINATE`` on GPU machines, and no example
placeholder left (``your-bucket``, the account ``123456789012``, ...) unless the file is checked as a
template. Errors are one line, ``file: key: problem; fix``.
"""

from __future__ import annotations

import copy
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from hpo.cluster.shapes import NodeShape
from hpo.config import read_yaml
from hpo.errors import ConfigError

_LOCAL_HOSTS = {"127.0.0.1", "localhost", "::1"}
_CREDENTIAL_KEYS = re.compile(r"(secret|password|access_key|access_key_id|credentials|api_key)$", re.IGNORECASE)
_DASHBOARD_HOST = re.compile(r"--dashboard-host[= ](\S+)")
#: The example values of the shipped cluster files (their SETTING comments): a bucket, registry or project
#: named your-..., AWS's documentation account id, the example GCP project.
_PLACEHOLDER = re.compile(r"(?i)\byour-[a-z0-9]+\b|\b123456789012\b|\bmy-gcp-project\b")
#: Stands for "no limit" (a node group with max_count -1); more nodes than any trial has workers.
UNBOUNDED = 1000


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


def validate_cluster_file(path: str | Path, *, template: bool = False) -> ClusterFileInfo:
    """Validates a cluster file offline against Ray's schema and hpo's rules.

    Args:
        path: The cluster YAML file (as given to ``ray up``).
        template: The file is a template (as shipped in cluster/): its example placeholders are not errors.

    Returns:
        A summary of the cluster it describes.

    Raises:
        ConfigError: On the first problem, as one line ``file: key: problem; fix``.
    """
    source = str(path)
    raw = load_cluster_file(path)
    config = _ray_validate(raw, source)
    info = _hpo_rules(raw, config, source)
    if not template:
        _check_no_placeholders(raw, source)
    return info


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
    if config["provider"]["type"] == "gcp":
        _check_gcp_scheduling(config, source)
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


def _check_gcp_scheduling(config: dict[str, Any], source: str) -> None:
    """GCE takes ``scheduling`` as one object; a GPU VM cannot live-migrate, so it must terminate on maintenance."""
    for name, node_type in config["available_node_types"].items():
        node_config = node_type.get("node_config") or {}
        key = f"available_node_types.{name}.node_config.scheduling"
        scheduling = node_config.get("scheduling")
        if isinstance(scheduling, list):
            raise ConfigError(
                f"{source}: {key}: a list, but the GCE API takes one object (the VM would never start); write it "
                "as a mapping, e.g. scheduling: {provisioningModel: SPOT, onHostMaintenance: TERMINATE}"
            )
        if scheduling is not None and not isinstance(scheduling, dict):
            raise ConfigError(f"{source}: {key}: {scheduling!r} is not an object; write it as a mapping of settings")
        if node_config.get("guestAccelerators") and (scheduling or {}).get("onHostMaintenance") != "TERMINATE":
            raise ConfigError(
                f"{source}: {key}.onHostMaintenance: GPU VMs cannot live-migrate, so GCE refuses to start them "
                "without it; set onHostMaintenance: TERMINATE"
            )


def _check_no_placeholders(node: Any, source: str, path: str = "") -> None:
    """No example value left: the image, bucket, account or project of the shipped files is not yours."""
    if isinstance(node, dict):
        for key, value in node.items():
            _check_no_placeholders(value, source, f"{path}.{key}" if path else str(key))
    elif isinstance(node, list):
        for index, value in enumerate(node):
            _check_no_placeholders(value, source, f"{path}[{index}]")
    elif isinstance(node, str) and (match := _PLACEHOLDER.search(node)):
        raise ConfigError(
            f"{source}: {path}: '{match.group(0)}' is the example's placeholder; put your own value there (the "
            "file's SETTING comments say which), or pass --template to check a template"
        )


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
