"""The cluster node images (cluster/Dockerfile) and the cloud cluster files that use them.

Structure only: these tests read the Dockerfile's text and the YAML files. Building the images needs a
Docker daemon (and pulls several GB), which the test machines do not have, so `docker build` is not run
here; docs/cluster-image.md says how to build them.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from hpo.cluster import validate_cluster_file
from tests.conftest import ROOT

DOCKERFILE = ROOT / "cluster" / "Dockerfile"
DOCKERIGNORE = ROOT / ".dockerignore"
CLOUD_FILES = {"aws": ROOT / "cluster" / "aws-gpu.yaml", "gcp": ROOT / "cluster" / "gcp-gpu.yaml"}
STORAGE_SCHEME = {"aws": "s3://", "gcp": "gs://"}
VENV = "/opt/hpo/venv"
HOME = "/home/ray"
# What the cluster files' setup commands exported before the image existed; hpo's Ray processes expect it.
IMAGE_ENV = {
    "RAY_AUTH_MODE": "token",
    "TF_USE_LEGACY_KERAS": "1",
    "RAY_DISABLE_PYARROW_VERSION_CHECK": "1",
    "RAY_USAGE_STATS_ENABLED": "0",
    "RAY_TRAIN_V2_ENABLED": "0",
}
SECRET_NAME = re.compile(r"secret|passw|token|credential|access_key|api_key|private_key", re.IGNORECASE)


@dataclass
class Stage:
    name: str
    base: str
    instructions: list[tuple[str, str]] = field(default_factory=list)

    def args(self, keyword: str) -> list[str]:
        return [args for kw, args in self.instructions if kw == keyword]

    def env(self) -> dict[str, str]:
        values: dict[str, str] = {}
        for args in self.args("ENV"):
            values.update(dict(re.findall(r"(\w+)=(\S+)", args)))
        return values

    def text(self) -> str:
        return "\n".join(f"{kw} {args}" for kw, args in self.instructions)


def instructions(text: str) -> list[tuple[str, str]]:
    """(KEYWORD, arguments) per instruction: comments dropped, continuation lines joined."""
    result: list[tuple[str, str]] = []
    pending = ""
    for line in text.splitlines():
        if line.strip().startswith("#"):
            continue  # also inside a continued instruction, as Docker reads it
        if line.rstrip().endswith("\\"):
            pending += line.rstrip()[:-1] + " "
            continue
        line = (pending + line).strip()
        pending = ""
        if line:
            keyword, _, args = line.partition(" ")
            result.append((keyword.upper(), " ".join(args.split())))
    assert not pending, "the Dockerfile ends inside a continued instruction"
    return result


def parse_stages(text: str) -> dict[str, Stage]:
    global_args: dict[str, str] = {}
    stages: dict[str, Stage] = {}
    current: Stage | None = None
    for keyword, args in instructions(text):
        if keyword == "FROM":
            image, _, name = re.sub(r"\$\{(\w+)\}", lambda m: global_args[m.group(1)], args).partition(" AS ")
            current = stages.setdefault(name.strip(), Stage(name.strip(), image.strip()))
        elif current is None:
            assert keyword == "ARG", f"{keyword} before the first FROM"
            key, _, value = args.partition("=")
            global_args[key] = value
        else:
            current.instructions.append((keyword, args))
    return stages


@pytest.fixture(scope="module")
def stages() -> dict[str, Stage]:
    return parse_stages(DOCKERFILE.read_text())


def install_run(stage: Stage) -> str:
    runs = [args for args in stage.args("RUN") if "scripts/install.sh" in args or "make install" in args]
    assert len(runs) == 1, f"stage {stage.name}: expected one RUN of the project's install, got {runs}"
    return runs[0]


def test_targets_cpu_and_gpu(stages):
    assert {"cpu", "gpu"} <= set(stages)


def test_gpu_target_is_nvidia_cuda_base_built_on_cuda_devel(stages):
    cuda = r"nvidia/cuda:12\.\d+\.\d+-{}-ubuntu22\.04"
    # base: the CUDA runtime only; TensorFlow's CUDA libraries and NCCL come from the venv's pip wheels.
    assert re.fullmatch(cuda.format("base"), stages["gpu"].base), stages["gpu"].base
    assert re.fullmatch(cuda.format("devel"), stages["gpu-build"].base), stages["gpu-build"].base
    # Horovod is built (with nvcc) in the devel stage; the gpu target takes its venv.
    copies = stages["gpu"].args("COPY")
    assert any(args.startswith("--from=gpu-build") and "/opt/hpo /opt/hpo" in args for args in copies), copies
    assert "install.sh" not in stages["gpu"].text()
    # Horovod's libnccl.so.2 is the NCCL wheel's, the one TensorFlow loads (also in the build's import check).
    for name in ("gpu", "gpu-build"):
        assert stages[name].env()["LD_LIBRARY_PATH"].startswith(f"{VENV}/lib/python3.11/site-packages/nvidia/nccl/lib:")


def test_the_images_cuda_is_the_one_tensorflow_and_cuda_installs(stages):
    pins = dict(line.split("==") for line in (ROOT / "requirements" / "cuda.txt").read_text().splitlines()
                if line and not line.startswith("#"))
    runtime = pins["nvidia-cuda-runtime-cu12"].split(".")[:2]
    for name in ("gpu-build", "gpu"):
        version = re.search(r"nvidia/cuda:(\d+)\.(\d+)\.\d+-", stages[name].base).groups()
        assert list(version) == runtime, (name, version, runtime)
    # TensorFlow's CUDA wheels are installed at those pins.
    install = (ROOT / "scripts" / "install.sh").read_text()
    assert '-c requirements/cuda.txt "tensorflow[and-cuda]==2.21.0"' in install


def test_horovod_is_compiled_for_the_cluster_files_gpus(stages):
    build = stages["gpu-build"].env()
    archs = build["HOROVOD_BUILD_CUDA_CC_LIST"].split(",")
    assert {"86", "89"} <= set(archs)  # A10G (aws-gpu.yaml's g5), L4 (gcp-gpu.yaml's g2)
    assert build["HPO_CUDA_HOME"] == "/usr/local/cuda"
    # Headers TensorFlow's XLA headers include, which its wheel lacks (Horovod's XLA ops include them).
    assert re.search(r"apt-get install .*\blibhighwayhash-dev libfarmhash-dev\b", stages["gpu-build"].text())
    defaults = re.search(r"^HPO_CUDA_CC_LIST_DEFAULT=(\S+)$", (ROOT / "scripts" / "build_horovod.sh").read_text(), re.M)
    assert defaults and defaults.group(1).split(",") == archs


def test_cpu_target_base(stages):
    assert re.fullmatch(r"ubuntu:22\.04|python:3\.11-slim-bookworm", stages["cpu"].base)


def test_every_stage_has_the_same_python(stages):
    # Ray refuses a node whose Python differs from the head's down to the patch release: both targets take
    # Ubuntu 22.04's python3.11 package.
    for stage in stages.values():
        assert stage.base.endswith("ubuntu22.04") or stage.base == "ubuntu:22.04", stage.base
        assert re.search(r"apt-get install .*\bpython3\.11\b", stage.text()), stage.name


@pytest.mark.parametrize("name", ["cpu", "gpu-build"])
def test_install_runs_the_project_script_with_python_311(stages, name):
    run = install_run(stages[name])
    assert "scripts/install.sh" in run or "make install" in run
    assert "PYTHON=python3.11" in run
    assert f"VENV={VENV}" in run
    # Ray's dashboard and job server, constrained by the stack's pins.
    assert re.search(r"pip install .*-c requirements/stack\.txt 'ray\[default\]==2\.60\.0'", run)
    # pip's cache and the wheel cache stay out of the image.
    assert re.search(rf"--mount=type=cache,\S*target={HOME}/\.cache", run)
    # What the cluster files compare the synced checkout with.
    assert "> /opt/hpo/stack.sha256" in run
    # The install reads these; they are copied before it runs.
    copied = " ".join(stages[name].args("COPY"))
    for path in ("pyproject.toml", "requirements/", "patches/", "scripts/", "hpo/"):
        assert path in copied, path


def test_hpo_cuda_only_on_the_gpu_path(stages):
    build = stages["gpu-build"]
    assert build.env().get("HPO_CUDA") == "1"
    env_index = next(i for i, (kw, args) in enumerate(build.instructions) if kw == "ENV" and "HPO_CUDA=1" in args)
    run_index = next(i for i, (kw, args) in enumerate(build.instructions) if kw == "RUN" and "install.sh" in args)
    assert env_index < run_index
    assert "HPO_CUDA" not in stages["cpu"].text()
    assert "HPO_CUDA=1" not in stages["gpu"].text()  # the runtime image installs nothing


@pytest.mark.parametrize("name", ["cpu", "gpu"])
def test_target_environment(stages, name):
    env = stages[name].env()
    assert env["PATH"].startswith(f"{VENV}/bin:")
    assert {key: env.get(key) for key in IMAGE_ENV} == IMAGE_ENV
    # Ray places `~/...` file_mounts under the image's HOME; the synced checkout (~/hpo) is on PYTHONPATH.
    assert env["HOME"] == HOME
    assert env["PYTHONPATH"] == f"{HOME}/hpo"
    assert stages[name].args("WORKDIR")[-1] == f"{HOME}/hpo"
    assert stages[name].args("USER")[-1] == "ray"
    # Ray copies its bootstrap files and the file_mounts into the container with rsync.
    assert re.search(r"apt-get install .*\brsync\b", stages[name].text())


def test_no_secrets_in_the_dockerfile(stages):
    for stage in stages.values():
        names = list(stage.env()) + [args.split("=")[0] for args in stage.args("ARG")]
        assert not [n for n in names if SECRET_NAME.search(n)], (stage.name, names)
        for args in stage.args("COPY") + stage.args("ADD"):
            assert not re.search(r"\.aws|\.ssh|auth_token|\.pem\b|credentials", args), args
    ignored = DOCKERIGNORE.read_text().split()
    for entry in (".git", ".venv", "**/.env", "**/*.pem", "**/auth_token"):
        assert entry in ignored, entry


def cloud_file(provider: str) -> tuple[dict, str]:
    text = CLOUD_FILES[provider].read_text()
    return yaml.safe_load(text), text


@pytest.mark.parametrize("provider", sorted(CLOUD_FILES))
def test_cloud_file_validates(provider):
    info = validate_cluster_file(CLOUD_FILES[provider], template=True)
    assert info.provider == provider and info.gpu_types


@pytest.mark.parametrize("provider", sorted(CLOUD_FILES))
def test_cloud_file_uses_the_images(provider):
    data, _ = cloud_file(provider)
    docker = data["docker"]
    assert docker["container_name"]
    assert docker["pull_before_run"] is True
    assert "gpu" in docker["image"] and "cpu" in docker["head_image"]
    for node_type in data["available_node_types"].values():
        assert "gpu" in node_type.get("docker", {}).get("worker_image", docker.get("worker_image", docker["image"]))
    assert "--ulimit nofile=65536:65536" in docker["run_options"]
    # GPUs in the workers' containers only: the head has none, and --gpus fails there.
    assert "--gpus all" in docker["worker_run_options"]
    assert not any("--gpus" in option for option in docker["run_options"] + docker.get("head_run_options", []))
    # The image has the stack: no install on the node; the check against the image's pins instead.
    commands = " ".join(data["setup_commands"] + data["head_setup_commands"] + data["worker_setup_commands"])
    assert "make install" not in commands and "install.sh" not in commands
    assert "/opt/hpo/stack.sha256" in commands
    # The user's checkout (their model modules) still reaches every node, at the image's PYTHONPATH.
    assert data["file_mounts"]["~/hpo"] == "."


@pytest.mark.parametrize("provider", sorted(CLOUD_FILES))
def test_cloud_file_exports_the_storage(provider):
    data, text = cloud_file(provider)
    exported = [o for o in data["docker"]["head_run_options"] if "HPO_STORAGE=" in o]
    assert len(exported) == 1
    storage = exported[0].split("HPO_STORAGE=", 1)[1]
    assert storage.startswith(STORAGE_SCHEME[provider]), storage
    # The documented start and submission use it (the queue and the autostop live there).
    assert re.search(rf"hpo cluster up .*--storage {re.escape(storage)}", text)
    assert re.search(rf"hpo submit .*--storage {re.escape(storage)}", text)


def test_aws_nodes_use_instance_profiles():
    data, _ = cloud_file("aws")
    for name, node_type in data["available_node_types"].items():
        arn = node_type["node_config"]["IamInstanceProfile"]["Arn"]
        assert re.fullmatch(r"arn:aws:iam::\d{12}:instance-profile/[\w+=,.@-]+", arn), (name, arn)


def test_gcp_workers_use_a_service_account():
    data, _ = cloud_file("gcp")
    for name, node_type in data["available_node_types"].items():
        if name == data["head_node_type"]:
            continue  # keeps the account `ray up` makes (it starts the workers)
        (account,) = node_type["node_config"]["serviceAccounts"]
        assert account["email"].endswith(".iam.gserviceaccount.com")
        assert account["scopes"] == ["https://www.googleapis.com/auth/devstorage.read_write"]


def gpu_types(data: dict) -> dict[str, dict]:
    return {name: t for name, t in data["available_node_types"].items() if t["resources"].get("GPU")}


def is_spot(provider: str, node_config: dict) -> bool:
    if provider == "aws":
        return node_config.get("InstanceMarketOptions", {}).get("MarketType") == "spot"
    return node_config.get("scheduling", {}).get("provisioningModel") == "SPOT"


@pytest.mark.parametrize("provider", sorted(CLOUD_FILES))
def test_every_spot_gpu_type_has_an_on_demand_fallback_of_lower_priority(provider):
    data, _ = cloud_file(provider)
    types = gpu_types(data)
    spot = {n: t for n, t in types.items() if is_spot(provider, t["node_config"])}
    on_demand = {n: t for n, t in types.items() if n not in spot}
    assert spot and set(on_demand) == {n.removesuffix("-spot") for n in spot}, sorted(types)
    for name, node_type in spot.items():
        fallback = on_demand[name.removesuffix("-spot")]
        # Ray's autoscaler v2 tries the higher priority first, the other type when its launch fails.
        assert node_type["priority"] > fallback["priority"]
        assert node_type["resources"] == fallback["resources"] and node_type["max_workers"] == fallback["max_workers"]
        same = {k: v for k, v in node_type["node_config"].items() if k not in ("scheduling", "InstanceMarketOptions")}
        assert same == {k: v for k, v in fallback["node_config"].items() if k not in ("scheduling",)}


def test_gcp_spot_is_real_spot_and_scheduling_is_one_object():
    data, _ = cloud_file("gcp")
    for name, node_type in gpu_types(data).items():
        scheduling = node_type["node_config"]["scheduling"]
        assert isinstance(scheduling, dict), name
        assert scheduling["onHostMaintenance"] == "TERMINATE"  # GPU VMs cannot live-migrate
        assert "preemptible" not in scheduling  # legacy preemptible VMs stop after 24 hours
        if scheduling["provisioningModel"] == "SPOT":
            assert scheduling["automaticRestart"] is False and scheduling["instanceTerminationAction"] == "DELETE"


@pytest.mark.parametrize("provider", sorted(CLOUD_FILES))
def test_every_node_logs_in_to_the_private_registry_before_pulling(provider):
    """Per-type initialization_commands replace the global list: each type needs its own login."""
    data, _ = cloud_file(provider)
    registry = data["docker"]["image"].split("/")[0]
    assert data["docker"]["head_image"].split("/")[0] == registry
    login = "aws ecr get-login-password" if provider == "aws" else f"gcloud auth configure-docker {registry}"
    lists = {"(global, the head)": data["initialization_commands"]}
    for name, node_type in data["available_node_types"].items():
        if "initialization_commands" in node_type:
            lists[name] = node_type["initialization_commands"]
    assert set(gpu_types(data)) <= set(lists)
    for where, commands in lists.items():
        text = " ".join(commands)
        assert login in text and (provider == "gcp" or f"--password-stdin {registry}" in text), where


@pytest.mark.parametrize("provider", sorted(CLOUD_FILES))
def test_the_roles_described_may_read_the_registry(provider):
    _, text = cloud_file(provider)
    role = "AmazonEC2ContainerRegistryReadOnly" if provider == "aws" else "roles/artifactregistry.reader"
    # The head's role and the workers' role, each where it is described.
    assert text.count(role) >= 2, role


def test_disks_are_fast_enough_to_pull_the_image():
    aws, _ = cloud_file("aws")
    for name, node_type in aws["available_node_types"].items():
        (device,) = node_type["node_config"]["BlockDeviceMappings"]
        ebs = device["Ebs"]
        assert ebs["VolumeType"] == "gp3" and ebs["Throughput"] >= 250 and ebs["Iops"] >= 3000, name
    gcp, _ = cloud_file("gcp")
    for name, node_type in gcp["available_node_types"].items():
        (disk,) = node_type["node_config"]["disks"]
        assert disk["initializeParams"]["diskType"].rsplit("/", 1)[-1] in ("pd-balanced", "pd-ssd"), name


@pytest.mark.parametrize("provider", sorted(CLOUD_FILES))
def test_nothing_is_pip_installed_at_boot(provider):
    data, _ = cloud_file(provider)
    commands = [c for key in ("setup_commands", "head_setup_commands", "worker_setup_commands",
                              "initialization_commands") for c in data.get(key) or []]
    commands += [c for t in data["available_node_types"].values() for c in t.get("initialization_commands", [])]
    assert not [c for c in commands if re.search(r"\bpip\b", c)]


def test_the_head_image_has_the_cloud_clients_pinned_with_the_stack(stages):
    pins = dict(line.split("==") for line in (ROOT / "requirements" / "cloud.txt").read_text().splitlines()
                if line and not line.startswith("#"))
    assert {"boto3", "google-api-python-client"} <= set(pins)
    run = install_run(stages["cpu"])
    assert re.search(r"pip install .*-c requirements/stack\.txt .*-r requirements/cloud\.txt", run), run


@pytest.mark.parametrize("path", sorted(CLOUD_FILES.values()), ids=lambda p: Path(p).name)
def test_no_credentials_in_cloud_files(path):
    text = path.read_text()
    assert not re.search(r"AKIA[0-9A-Z]{16}|ASIA[0-9A-Z]{16}", text)  # AWS access key ids
    assert not re.search(r"-----BEGIN [A-Z ]*PRIVATE KEY-----|\"private_key\"", text)
    assert not re.search(r"(?i)aws_secret_access_key|aws_session_token|password\s*[:=]", text)

    def keys(node):
        if isinstance(node, dict):
            for key, value in node.items():
                yield str(key)
                yield from keys(value)
        elif isinstance(node, list):
            for value in node:
                yield from keys(value)

    assert not [key for key in keys(yaml.safe_load(text)) if SECRET_NAME.search(key) and "auth_token" not in key]


@pytest.mark.parametrize("name", ["cpu", "gpu-build"])
def test_the_install_step_has_every_file_the_package_build_reads(stages, name):
    """`pip install -e .` in install.sh reads pyproject.toml, setup.py, MANIFEST.in, the readme and the license."""
    copied = " ".join(stages[name].args("COPY"))
    for needed in ("pyproject.toml", "setup.py", "MANIFEST.in", "README.md", "LICENSE"):
        assert re.search(rf"(^|\s){re.escape(needed)}(\s|$)", copied), f"{name}: {needed} is not copied"
