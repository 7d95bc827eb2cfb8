"""Cluster files (offline validation: Ray's schema + hpo's rules) and the trial-fits arithmetic. No Ray runtime."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from hpo.cluster import NodeShape, bundles_per_node, check_trial_fits, launchable_node_types, validate_cluster_file
from hpo.errors import ConfigError
from tests.conftest import ROOT, hpo_cli

CLUSTER_FILES = sorted((ROOT / "cluster").glob("*.yaml"))
AWS = ROOT / "cluster" / "aws-gpu.yaml"
GCP = ROOT / "cluster" / "gcp-gpu.yaml"
FAKE = ROOT / "cluster" / "local-fake.yaml"


def test_cluster_dir_has_the_three_files():
    assert {p.name for p in CLUSTER_FILES} >= {"aws-gpu.yaml", "gcp-gpu.yaml", "local-fake.yaml"}


@pytest.mark.parametrize("path", CLUSTER_FILES, ids=lambda p: p.name)
def test_every_cluster_file_validates(path):
    info = validate_cluster_file(path, template=True)
    assert info.gpu_types and all(t.resources["GPU"] >= 1 for t in info.gpu_types)
    # One multi-GPU type (a whole Horovod trial on one machine) and one single-GPU type.
    assert {t.resources["GPU"] for t in info.gpu_types} >= {1.0} and max(t.resources["GPU"] for t in info.gpu_types) > 1
    assert info.idle_timeout_minutes > 0


@pytest.mark.parametrize("path", CLUSTER_FILES, ids=lambda p: p.name)
def test_cli_cluster_validate_ok(path, tmp_path):
    proc = hpo_cli("cluster", "validate", str(path), "--template", cwd=tmp_path)
    assert proc.returncode == 0, proc.stderr
    assert f"{path}: ok — cluster '" in proc.stdout
    assert proc.stderr == ""


def write_variant(tmp_path: Path, base: Path, change) -> Path:
    data = yaml.safe_load(base.read_text())
    change(data)
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    return path


def _set(dotted: str, value: Any):
    def change(data: dict[str, Any]) -> None:
        *parents, last = dotted.split("/")
        node = data
        for part in parents:
            node = node[part]
        if value is _DELETE:
            del node[last]
        else:
            node[last] = value

    return change


_DELETE = object()
HEAD_CMD = (
    "ulimit -n 65536; ray start --head --port=6379 --autoscaling-config=~/ray_bootstrap_config.yaml "
    "--dashboard-host=0.0.0.0"
)


def _no_gpu_types(data: dict[str, Any]) -> None:
    for node_type in data["available_node_types"].values():
        node_type["resources"].pop("GPU", None)


BROKEN = [
    (
        "gpu-min-workers",
        _set("available_node_types/gpu-x1/min_workers", 1),
        "cluster.yaml: available_node_types.gpu-x1.min_workers: 1 keeps GPU nodes running while no trial "
        "needs them; set it to 0",
    ),
    (
        "no-gpu-type",
        _no_gpu_types,
        "cluster.yaml: available_node_types: no worker node type declares GPU resources; add one with",
    ),
    (
        "gpu-type-never-launched",
        _set("available_node_types/gpu-x4/max_workers", 0),
        "cluster.yaml: available_node_types.gpu-x4.max_workers: 0 means this GPU type is never launched",
    ),
    (
        "no-idle-timeout",
        _set("idle_timeout_minutes", _DELETE),
        "cluster.yaml: idle_timeout_minutes: not set (Ray would use 5); set it explicitly",
    ),
    (
        "zero-idle-timeout",
        _set("idle_timeout_minutes", 0),
        "cluster.yaml: idle_timeout_minutes: 0 never removes idle nodes; use a positive number",
    ),
    (
        "dashboard-exposed",
        _set("head_start_ray_commands", ["ray stop", HEAD_CMD]),
        "cluster.yaml: head_start_ray_commands[1]: --dashboard-host=0.0.0.0 exposes the dashboard",
    ),
    (
        # Without its own start commands the file gets Ray's defaults, which bind the dashboard to 0.0.0.0.
        "ray-default-start-commands",
        _set("head_start_ray_commands", _DELETE),
        "cluster.yaml: head_start_ray_commands[1]: --dashboard-host=0.0.0.0 exposes the dashboard",
    ),
    (
        "token-auth-off",
        _set("worker_start_ray_commands", ["RAY_AUTH_MODE=disabled ray start --address=$RAY_HEAD_IP:6379"]),
        "cluster.yaml: worker_start_ray_commands[0]: RAY_AUTH_MODE=disabled turns token authentication off",
    ),
    (
        "credentials-in-file",
        _set("provider/aws_secret_access_key", "abc"),
        "cluster.yaml: provider.aws_secret_access_key: looks like a credential; remove it",
    ),
    (
        "unknown-key",
        _set("max_worker", 3),
        "cluster.yaml: (top level): Additional properties are not allowed ('max_worker' was unexpected); "
        "see Ray's ray/autoscaler/ray-schema.json",
    ),
    (
        "fractional-gpu-resource",
        _set("available_node_types/gpu-x1/resources/GPU", 0.5),
        "cluster.yaml: available_node_types.gpu-x1.resources.GPU: 0.5 is not of type 'integer'",
    ),
    (
        "unknown-provider",
        _set("provider/type", "nimbus"),
        "cluster.yaml: provider.type: Unsupported node provider: nimbus; use aws, gcp",
    ),
]


@pytest.mark.parametrize(("change", "expected"), [b[1:] for b in BROKEN], ids=[b[0] for b in BROKEN])
def test_broken_aws_variants_fail_with_message(tmp_path, change, expected):
    path = write_variant(tmp_path, AWS, change)
    with pytest.raises(ConfigError) as info:
        validate_cluster_file(path)
    message = str(info.value)
    assert message.startswith(f"{tmp_path}/{expected}"), message
    assert "\n" not in message


PLACEHOLDER_ERRORS = {
    AWS: "docker.image: '123456789012' is the example's placeholder; put your own value there (the file's "
    "SETTING comments say which), or pass --template to check a template",
    GCP: "docker.image: 'my-gcp-project' is the example's placeholder; put your own value there (the file's "
    "SETTING comments say which), or pass --template to check a template",
}


@pytest.mark.parametrize("path", [AWS, GCP], ids=lambda p: p.name)
def test_a_cloud_file_with_the_examples_placeholders_is_refused_in_one_line(path, tmp_path):
    proc = hpo_cli("cluster", "validate", str(path), cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout
    assert proc.stderr.splitlines() == [f"error: {path}: {PLACEHOLDER_ERRORS[path]}"]


def _own_values(text: str) -> str:
    """The file as a user fills it in: their account, project, bucket."""
    for example, own in (("123456789012", "210987654321"), ("my-gcp-project", "acme-ml"),
                         ("your-bucket", "acme-hpo")):
        text = text.replace(example, own)
    return text


@pytest.mark.parametrize("path", [AWS, GCP], ids=lambda p: p.name)
def test_a_cloud_file_filled_in_validates_without_template(path, tmp_path):
    own = tmp_path / path.name
    own.write_text(_own_values(path.read_text()))
    assert validate_cluster_file(own).gpu_types


@pytest.mark.parametrize(
    ("where", "placeholder"),
    [
        ("available_node_types/gpu-x1/node_config/IamInstanceProfile/Arn",
         "arn:aws:iam::123456789012:instance-profile/w"),
        ("docker/head_run_options", ["--env HPO_STORAGE=s3://your-bucket/runs"]),
    ],
)
def test_a_placeholder_anywhere_is_named_by_its_key(tmp_path, where, placeholder):
    data = yaml.safe_load(_own_values(AWS.read_text()))
    _set(where, placeholder)(data)
    path = tmp_path / "cluster.yaml"
    path.write_text(yaml.safe_dump(data, sort_keys=False))
    with pytest.raises(ConfigError) as info:
        validate_cluster_file(path)
    key = where.replace("/", ".") + ("[0]" if isinstance(placeholder, list) else "")
    found = "123456789012" if "123456789012" in str(placeholder) else "your-bucket"
    assert str(info.value) == (
        f"{path}: {key}: '{found}' is the example's placeholder; put your own value there (the file's SETTING "
        "comments say which), or pass --template to check a template"
    )


GCP_BROKEN = [
    (
        # The GCE API takes one object: a list (as in Ray's own GCP GPU example) never starts a VM.
        "scheduling-as-list",
        _set("available_node_types/gpu-x4-spot/node_config/scheduling",
             [{"provisioningModel": "SPOT"}, {"onHostMaintenance": "TERMINATE"}]),
        "available_node_types.gpu-x4-spot.node_config.scheduling: a list, but the GCE API takes one object (the "
        "VM would never start); write it as a mapping, e.g. scheduling: {provisioningModel: SPOT, "
        "onHostMaintenance: TERMINATE}",
    ),
    (
        "scheduling-as-text",
        _set("available_node_types/gpu-x1/node_config/scheduling", "SPOT"),
        "available_node_types.gpu-x1.node_config.scheduling: 'SPOT' is not an object; write it as a mapping of "
        "settings",
    ),
    (
        "gpu-vm-live-migrates",
        _set("available_node_types/gpu-x1/node_config/scheduling", {"provisioningModel": "STANDARD"}),
        "available_node_types.gpu-x1.node_config.scheduling.onHostMaintenance: GPU VMs cannot live-migrate, so "
        "GCE refuses to start them without it; set onHostMaintenance: TERMINATE",
    ),
    (
        "gpu-vm-without-scheduling",
        _set("available_node_types/gpu-x4/node_config/scheduling", _DELETE),
        "available_node_types.gpu-x4.node_config.scheduling.onHostMaintenance: GPU VMs cannot live-migrate, so "
        "GCE refuses to start them without it; set onHostMaintenance: TERMINATE",
    ),
]


@pytest.mark.parametrize(("change", "expected"), [b[1:] for b in GCP_BROKEN], ids=[b[0] for b in GCP_BROKEN])
def test_broken_gcp_scheduling_fails_in_one_line(tmp_path, change, expected):
    path = write_variant(tmp_path, GCP, change)
    proc = hpo_cli("cluster", "validate", str(path), "--template", cwd=tmp_path)
    assert proc.returncode == 2, proc.stdout
    assert proc.stderr.splitlines() == [f"error: {path}: {expected}"]


def test_fake_file_is_validated_as_written(tmp_path):
    # The fake provider has no defaults to merge: a key the autoscaler reads must be in the file.
    path = write_variant(tmp_path, FAKE, _set("cluster_synced_files", _DELETE))
    with pytest.raises(ConfigError, match=r"cluster.yaml: \(top level\): Ray rejects the file: Missing "):
        validate_cluster_file(path)


def test_fake_gpu_min_workers(tmp_path):
    path = write_variant(tmp_path, FAKE, _set("available_node_types/gpu.x2/min_workers", 2))
    with pytest.raises(ConfigError, match=r"available_node_types\.gpu\.x2\.min_workers: 2 keeps GPU nodes"):
        validate_cluster_file(path)


def test_cli_broken_file_is_one_line_exit_2(tmp_path):
    path = write_variant(tmp_path, AWS, _set("available_node_types/gpu-x4/min_workers", 1))
    proc = hpo_cli("cluster", "validate", str(path), cwd=tmp_path)
    assert proc.returncode == 2, (proc.stdout, proc.stderr)
    lines = proc.stderr.strip().splitlines()
    assert lines == [
        f"error: {path}: available_node_types.gpu-x4.min_workers: 1 keeps GPU nodes running while no trial "
        "needs them; set it to 0 (the autoscaler adds them when trials wait)"
    ]


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("cluster_name: [unclosed\n", "cluster.yaml: line 2: not valid YAML"),
        ("- a\n- b\n", "cluster.yaml: (top level): expected a mapping of keys, got list"),
        ("cluster_name: x\n", "cluster.yaml: provider: missing or has no 'type'"),
    ],
)
def test_unreadable_files(tmp_path, text, expected):
    path = tmp_path / "cluster.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        validate_cluster_file(path)
    assert str(info.value).startswith(f"{tmp_path}/{expected}"), str(info.value)


def test_missing_file(tmp_path):
    with pytest.raises(ConfigError, match=r"nope.yaml: \(file\): no such file; check the path"):
        validate_cluster_file(tmp_path / "nope.yaml")


# ---------------------------------------------------------------------------------------------------
# Can a trial ever be placed?

HEAD = NodeShape("node head", {"CPU": 2.0, "memory": 1e9}, 1)
WORKER = {"CPU": 0.5, "GPU": 1.0}


def fake_types(**overrides: Any) -> tuple[list[NodeShape], int]:
    config = copy.deepcopy(yaml.safe_load(FAKE.read_text()))
    config.update(overrides)
    return launchable_node_types(config), config["max_workers"]


def test_bundles_per_node():
    assert bundles_per_node({"CPU": 2, "GPU": 2}, WORKER) == 2
    assert bundles_per_node({"CPU": 1, "GPU": 4}, WORKER) == 2  # CPU-bound
    assert bundles_per_node({"CPU": 8}, WORKER) == 0
    assert bundles_per_node({"GPU": 1}, {"GPU": 0.25}) == 4
    assert bundles_per_node({"CPU": 0.3}, {"CPU": 0.1}) == 3  # no float round-off loss


def test_launchable_types_from_fake_file():
    types, max_workers = fake_types()
    assert {(t.name, t.resources["GPU"], t.count) for t in types} == {("gpu.x2", 2.0, 2), ("gpu.x1", 1.0, 1)}
    assert max_workers == 3


def test_gpu_trial_fits_on_launchable_nodes():
    types, max_workers = fake_types()
    check_trial_fits(WORKER, 2, source="s.yaml", live=[HEAD], launchable=types, max_launched=max_workers)
    # 2 + 2 + 1 GPUs at most: 5 one-GPU workers fit, 6 never do.
    check_trial_fits(WORKER, 5, source="s.yaml", live=[HEAD], launchable=types, max_launched=max_workers)
    with pytest.raises(ConfigError) as info:
        check_trial_fits(WORKER, 6, source="s.yaml", live=[HEAD], launchable=types, max_launched=max_workers)
    assert str(info.value).startswith(
        "s.yaml: trial.gpus_per_worker: a trial needs 6 workers x {CPU: 0.5, GPU: 1} but the cluster can never "
        "hold more than 5 (nodes: node head {CPU: 2}; launchable node types: gpu.x2 {CPU: 2, GPU: 2} x2, "
        "gpu.x1 {CPU: 1, GPU: 1} x1); lower trial.workers"
    ), str(info.value)


def test_global_max_workers_limits_capacity():
    types, _ = fake_types()
    with pytest.raises(ConfigError, match="can never hold more than 2 "):
        check_trial_fits(WORKER, 3, source="s.yaml", live=[HEAD], launchable=types, max_launched=1)


def test_worker_larger_than_any_node_type():
    types, max_workers = fake_types()
    with pytest.raises(ConfigError) as info:
        check_trial_fits(
            {"CPU": 0.5, "GPU": 3.0}, 1, source="s.yaml", live=[HEAD], launchable=types, max_launched=max_workers
        )
    assert str(info.value).startswith(
        "s.yaml: trial.gpus_per_worker: a trial needs 1 worker x {CPU: 0.5, GPU: 3} but the cluster can never "
        "hold more than 0 "
    ), str(info.value)


def test_local_ray_only_live_nodes_count():
    check_trial_fits({"CPU": 0.5}, 4, source="s.yaml", live=[HEAD], launchable=None)
    with pytest.raises(ConfigError) as info:
        check_trial_fits(WORKER, 2, source="s.yaml", live=[HEAD], launchable=None)
    assert "launchable node types: none) (a local Ray: this machine is all there is; use --address for a cluster)" \
        in str(info.value)
    with pytest.raises(ConfigError) as info:
        check_trial_fits({"CPU": 1.0}, 3, source="s.yaml", live=[HEAD], launchable=None)
    assert str(info.value).startswith("s.yaml: trial.cpus_per_worker: a trial needs 3 workers x {CPU: 1} but")
