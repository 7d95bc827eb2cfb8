"""Starting and tearing down a cluster from its file: Ray's cluster launcher, and the local fake cluster.

:class:`RayLauncher` (every cloud provider) wraps Ray's own launcher, ``ray.autoscaler.sdk``: a head is
looked up by the provider's tags (as ``ray up`` does); a new cluster is created with
``create_or_update_cluster(no_restart=True)`` (a new head runs every setup and start command); a running
one is left exactly as it is: no ``ray up`` at all, because ``ray up`` restarts Ray by default, re-syncs
the file mounts (the checkout under a running sweep) and even relaunches a head whose node config
changed. ``teardown`` is ``ray down``; ``teardown_from_head`` is what the autostop runs on the head:
``ray stop`` there, then the provider (built from the head's ``~/ray_bootstrap_config.yaml``, as the
autoscaler on the head builds it) terminates every node of the cluster, workers first, head last.

:class:`FakeLauncher` is for ``provider: {type: fake_multinode}`` files (``cluster/local-fake.yaml``).
Ray's fake provider treats the head as given and cannot start or stop one (``ray up`` does not work with
it), so hpo does what a provider would: the "head node" is ``ray start --head --block`` in a session of
its own on this machine, recorded under hpo's state directory, and tearing it down kills that process
tree (fake worker nodes included) by PID.
"""

from __future__ import annotations

import contextlib
import json
import shlex
import shutil
import socket
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Literal, Protocol

from hpo.cluster.files import load_cluster_file
from hpo.cluster.lock import HostLock, state_dir
from hpo.errors import ConfigError, HpoError

HeadStatus = Literal["down", "starting", "up", "failed"]
#: Providers whose "nodes" are processes of this machine: a plain local storage directory is fine there.
LOCAL_PROVIDERS = frozenset({"fake_multinode"})
#: Where ``ray up`` leaves the cluster file on the head (already bootstrapped).
HEAD_CONFIG = "~/ray_bootstrap_config.yaml"


class Launcher(Protocol):
    """What ``hpo cluster up/down`` and the autostop need from a provider."""

    name: str
    key: str
    provider: str

    def head_status(self) -> HeadStatus:
        """Whether the head node is down, being set up, up, or failed its setup."""

    def create(self) -> None:
        """Starts a new cluster (only called when the head is down)."""

    def teardown(self) -> None:
        """Tears the cluster down from the user's machine, head included (``ray down``)."""

    def teardown_from_head(self) -> None:
        """Tears the cluster down from its own head (the autostop)."""

    def start_watcher(self, storage: str) -> str:
        """Starts the autostop watcher on the head unless one runs; returns what it printed."""

    def check_storage(self, storage: str) -> None:
        """Raises ConfigError for a storage the head cannot read."""


def launcher_for(path: str | Path, *, on_head: bool = False) -> Launcher:
    """The launcher for a cluster file.

    Args:
        path: The cluster file (``on_head``: the head's ``~/ray_bootstrap_config.yaml``).
        on_head: True in the autostop watcher on the head.
    """
    config = load_cluster_file(path)
    if (config.get("provider") or {}).get("type") == "fake_multinode":
        return FakeLauncher(Path(path), config)
    return RayLauncher(Path(path), config, on_head=on_head)


def spawn_detached(cmd: list[str], log_path: Path, env: dict[str, str] | None = None) -> int:
    """Starts ``cmd`` in a session of its own (it outlives the caller and its terminal); returns its PID."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("a") as log:
        proc = subprocess.Popen(cmd, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                start_new_session=True, close_fds=True, env=env)
    return proc.pid


def _running(pid: int) -> bool:
    """True while process ``pid`` runs (not ended, not a zombie)."""
    import psutil

    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.Error:
        return False


def _watcher_command(storage: str, config: str) -> list[str]:
    return [sys.executable, "-m", "hpo.cluster.autostop", "--storage", storage, "--config", config, "--detach"]


class RayLauncher:
    """A cloud cluster, through Ray's cluster launcher (``ray up``/``ray down``).

    Args:
        path: The cluster file.
        config: Its contents.
        on_head: True on the head itself (the file is the head's bootstrapped config).
    """

    def __init__(self, path: Path, config: dict[str, Any], *, on_head: bool = False) -> None:
        self.path = path
        self.config = config
        self.name = str(config.get("cluster_name", "default"))
        self.key = self.name
        self.provider = str(config["provider"]["type"])
        self.on_head = on_head

    def _node_provider(self) -> Any:
        from hpo.compat import ray_cluster_node_provider

        return ray_cluster_node_provider(self.config, bootstrap=not self.on_head)

    def head_status(self) -> HeadStatus:
        """The head by the provider's tags: up-to-date → up, update-failed → failed, else starting."""
        from ray.autoscaler.tags import (
            NODE_KIND_HEAD,
            STATUS_UP_TO_DATE,
            STATUS_UPDATE_FAILED,
            TAG_RAY_NODE_KIND,
            TAG_RAY_NODE_STATUS,
        )

        provider = self._node_provider()
        states = [provider.node_tags(n).get(TAG_RAY_NODE_STATUS)
                  for n in provider.non_terminated_nodes({TAG_RAY_NODE_KIND: NODE_KIND_HEAD})]
        if not states:
            return "down"
        if STATUS_UP_TO_DATE in states:
            return "up"
        return "failed" if all(s == STATUS_UPDATE_FAILED for s in states) else "starting"

    def create(self) -> None:
        """``ray up`` of a cluster without a head."""
        from ray.autoscaler.sdk import create_or_update_cluster

        # no_restart only matters for a head that exists; a new head runs its start commands anyway.
        create_or_update_cluster(str(self.path), no_restart=True)

    def teardown(self) -> None:
        """``ray down``: Ray stopped on the head, then every node terminated by the provider."""
        from ray.autoscaler.sdk import teardown_cluster

        teardown_cluster(str(self.path))

    def teardown_from_head(self) -> None:
        """On the head: ``ray stop`` here, then every node of the cluster terminated, this one last."""
        from ray.autoscaler.tags import NODE_KIND_HEAD, NODE_KIND_WORKER, TAG_RAY_NODE_KIND

        ray = shutil.which("ray") or str(Path(sys.executable).with_name("ray"))
        subprocess.run([ray, "stop"], check=False, timeout=300)  # this head's Ray; the watcher is not a Ray process
        provider = self._node_provider()
        for _ in range(120):
            nodes = (provider.non_terminated_nodes({TAG_RAY_NODE_KIND: NODE_KIND_WORKER})
                     + provider.non_terminated_nodes({TAG_RAY_NODE_KIND: NODE_KIND_HEAD}))
            if not nodes:
                return
            provider.terminate_nodes(nodes)  # the head last: this process ends with it
            time.sleep(5)

    def start_watcher(self, storage: str) -> str:
        """Runs the watcher's ``--detach`` start on the head through Ray's command runner (``ray exec``)."""
        from ray.autoscaler.sdk import run_on_cluster

        cmd = shlex.join(_watcher_command(storage, HEAD_CONFIG)).replace(sys.executable, "python", 1)
        return (run_on_cluster(str(self.path), cmd=cmd, with_output=True) or "").strip()

    def check_storage(self, storage: str) -> None:
        """A directory of this machine is refused: the head cannot read it."""
        from hpo.storage import Storage

        if Storage.parse(storage).scheme == "local":
            raise ConfigError(
                f"--storage: {storage} is a directory of this machine, which the head cannot read; "
                "use the cluster's storage (s3://bucket/prefix, gs://…, or file:///a/mount/every/node/has)"
            )


class FakeLauncher:
    """A ``fake_multinode`` cluster on this machine (see the module's docstring).

    Args:
        path: The cluster file.
        config: Its contents.
    """

    def __init__(self, path: Path, config: dict[str, Any]) -> None:
        self.path = path.resolve()
        self.config = config
        self.name = str(config.get("cluster_name", "default"))
        self.provider = "fake_multinode"
        address = str(config["provider"].get("gcs_address") or "127.0.0.1:6379")
        host, _, port = address.rpartition(":")
        if host not in ("127.0.0.1", "localhost") or not port.isdigit():
            raise ConfigError(f"{path}: provider.gcs_address: {address} is not on this machine; "
                              "a fake_multinode cluster runs here: use 127.0.0.1:PORT")
        self.host, self.port = "127.0.0.1", int(port)
        self.key = f"{self.name}-{self.port}"
        self.record = state_dir() / "clusters" / f"{self.key}.json"

    @property
    def address(self) -> str:
        """The head's GCS address."""
        return f"{self.host}:{self.port}"

    def _read(self) -> dict[str, Any] | None:
        try:
            return json.loads(self.record.read_text())
        except (OSError, ValueError):
            return None

    def _head_alive(self, record: dict[str, Any]) -> bool:
        import psutil

        try:
            proc = psutil.Process(int(record["pid"]))
            return proc.is_running() and proc.status() != psutil.STATUS_ZOMBIE \
                and record["temp_dir"] in " ".join(proc.cmdline())
        except (psutil.Error, KeyError, ValueError):
            return False

    def head_status(self) -> HeadStatus:
        """Up once the head's autoscaler reported its first status; down without a live head process."""
        record = self._read()
        if record is None or not self._head_alive(record):
            return "down"
        if not (Path(record["temp_dir"]) / "hpo-head-ready").exists():
            return "starting"
        return "up"

    def create(self, timeout_s: float = 180.0) -> None:
        """``ray start --head --block`` with the file as its autoscaling config, in a session of its own."""
        head_type = self.config["head_node_type"]
        resources = self.config["available_node_types"][head_type].get("resources") or {}
        temp_dir = Path(tempfile.mkdtemp(prefix=f"hpo-{self.port}-", dir="/tmp"))  # short: socket paths
        ray = str(Path(sys.executable).with_name("ray"))
        ports = _free_ports(4)
        cmd = [
            ray, "start", "--head", "--block", f"--port={self.port}",
            f"--num-cpus={int(resources.get('CPU', 1))}", f"--num-gpus={int(resources.get('GPU', 0))}",
            f"--temp-dir={temp_dir}", f"--autoscaling-config={self.path}",
            f"--ray-client-server-port={ports[0]}", f"--dashboard-port={ports[1]}",
            f"--dashboard-agent-listen-port={ports[2]}", f"--metrics-export-port={ports[3]}",
            "--include-dashboard=false", "--disable-usage-stats",
        ]  # fmt: skip
        import os

        env = {**os.environ, "RAY_FAKE_CLUSTER": "1", "RAY_USAGE_STATS_ENABLED": "0",
               "RAY_DISABLE_PYARROW_VERSION_CHECK": "1", "PYTHONUNBUFFERED": "1"}  # head.log as it happens
        _wait_port_free(self.host, self.port, timeout_s=60.0)  # a head just torn down may still hold it
        pid = spawn_detached(cmd, temp_dir / "head.log", env=env)
        self.record.parent.mkdir(parents=True, exist_ok=True)
        self.record.write_text(json.dumps({"pid": pid, "temp_dir": str(temp_dir), "address": self.address,
                                           "config": str(self.path), "started_at": time.time()}))
        deadline = time.time() + timeout_s
        while True:
            logs = list(temp_dir.glob("session_*/logs/monitor.log"))
            if logs and "Autoscaler status" in logs[0].read_text(errors="replace"):
                (temp_dir / "hpo-head-ready").touch()
                return
            # The process just started is ours: only its exit counts (its /proc cmdline, which _head_alive
            # matches, can read empty while the interpreter starts on a busy machine).
            if not _running(pid) or time.time() > deadline:
                tail = (temp_dir / "head.log").read_text(errors="replace")[-1500:]
                self._kill(pid, str(temp_dir))
                raise HpoError(f"cluster {self.name}: the fake head did not start: {' '.join(tail.split())}")
            time.sleep(0.5)

    def _kill(self, pid: int, temp_dir: str) -> None:
        kill_tree([pid], temp_dir)
        with contextlib.suppress(OSError):
            self.record.unlink()
        shutil.rmtree(temp_dir, ignore_errors=True)

    def teardown_from_head(self) -> None:
        """Kills the head's process tree (fake worker nodes included) by PID."""
        record = self._read()
        if record is not None:
            self._kill(int(record["pid"]), record["temp_dir"])

    def teardown(self) -> None:
        """Kills the head's process tree, then the autostop watcher of this cluster."""
        import psutil

        self.teardown_from_head()
        watcher = HostLock(f"autostop-{self.key}")
        pid = watcher.holder()
        if pid is not None and watcher.held_by_other():
            with contextlib.suppress(psutil.Error):
                proc = psutil.Process(pid)
                if "hpo.cluster.autostop" in " ".join(proc.cmdline()):
                    proc.kill()

    def start_watcher(self, storage: str) -> str:
        """Runs the watcher's ``--detach`` start on this machine."""
        proc = subprocess.run(_watcher_command(storage, str(self.path)), capture_output=True, text=True,
                              timeout=120, check=False)
        if proc.returncode != 0:
            raise HpoError(f"cluster {self.name}: the autostop watcher did not start: "
                           f"{' '.join(proc.stderr.split())[-500:]}")
        return proc.stdout.strip()

    def check_storage(self, storage: str) -> None:
        """Any storage does: the fake nodes are processes of this machine."""


def _wait_port_free(host: str, port: int, timeout_s: float) -> bool:
    """Waits until ``port`` can be bound on ``host`` (a head's GCS port, freed a moment after its teardown)."""
    deadline = time.time() + timeout_s
    while True:
        with socket.socket() as sock:
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # TIME_WAIT does not count: a listener does
            try:
                sock.bind((host, port))
                return True
            except OSError:
                if time.time() > deadline:
                    return False
        time.sleep(0.5)


def _free_ports(count: int) -> list[int]:
    sockets, ports = [], []
    for _ in range(count):
        sock = socket.socket()
        sock.bind(("127.0.0.1", 0))
        sockets.append(sock)
        ports.append(sock.getsockname()[1])
    for sock in sockets:
        sock.close()
    return ports


def kill_tree(root_pids: list[int], marker: str) -> None:
    """SIGKILLs processes hpo started, by PID.

    The roots, everything below them, and any process whose command line holds ``marker`` (a Ray temp
    dir: workers re-parented to init); then the roots' groups.
    Never ``ray stop``, which kills every Ray process of the machine.
    """
    import os
    import signal

    import psutil

    procs: list[psutil.Process] = []
    for pid in root_pids:
        try:
            root = psutil.Process(pid)
            procs += [root, *root.children(recursive=True)]
        except psutil.NoSuchProcess:
            continue
    for proc in psutil.process_iter(["pid", "cmdline"]):
        try:
            if marker in " ".join(proc.info["cmdline"] or []) and proc not in procs and proc.pid != os.getpid():
                procs.append(proc)
        except (psutil.NoSuchProcess, psutil.AccessDenied):
            continue
    for proc in procs:
        with contextlib.suppress(psutil.NoSuchProcess):
            proc.kill()
    psutil.wait_procs(procs, timeout=15)
    for pid in root_pids:
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(pid, signal.SIGKILL)
