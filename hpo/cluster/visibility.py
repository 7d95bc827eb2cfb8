"""Can every node of a connected cluster see the sweep's storage and data? Checked before any trial starts.

Ray 2.x does not copy trial directories between nodes: Tune's storage and the datasets must be a place
every node reads and writes (object storage or a mount they all have). A plain local directory on the
driver passes on one machine and fails every trial of a multi-node cluster, so it is refused there; a
``file://`` mount, an ``s3://`` or a ``gs://`` storage is probed: the driver writes a marker file and a
zero-CPU task pinned to each node reads it back. Data URLs are probed the same way, each with its data
source's probe (:attr:`hpo.data.sources.DataSource.probe`).
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import Any

from hpo.data.sources import DATA_SOURCES, data_source
from hpo.errors import ConfigError
from hpo.storage import Storage

#: How long the probes of all nodes may take together.
PROBE_TIMEOUT_S = 60.0
FIX = "pass --storage s3://bucket/prefix, gs://bucket/prefix, or file:///path of a mount every node has"


def alive_nodes() -> list[dict[str, Any]]:
    """The cluster's live nodes (``ray.nodes()`` entries) that can run work."""
    import ray

    return [n for n in ray.nodes() if n.get("Alive") and n.get("Resources")]


def check_storage_shared(storage: Storage, data_urls: list[tuple[str, str]], source: str) -> None:
    """Refuses, in one line, a storage or dataset that some node of a multi-node cluster cannot see.

    Args:
        storage: The sweep storage.
        data_urls: ``(sweep-file key, URL)`` of each dataset the trials read.
        source: The sweep file (for error messages).

    Raises:
        ConfigError: A local storage on a cluster of several nodes, or a node that cannot read the
            storage's marker file or a dataset.
    """
    nodes = alive_nodes()
    if len(nodes) < 2:
        return
    if not storage.shared:
        raise ConfigError(
            f"{source}: --storage: {storage} is a directory on the driver, which the other "
            f"{len(nodes) - 1} node(s) of this Ray cluster cannot see; {FIX}"
        )
    marker = f".hpo-probe-{uuid.uuid4().hex[:12]}"
    fs, base = storage.filesystem()
    fs.create_dir(base, recursive=True)
    with fs.open_output_stream(f"{base}/{marker}") as out:
        out.write(b"hpo")
    try:
        missing = _probe(nodes, [("--storage", storage.url(marker))])
    finally:
        fs.delete_file(f"{base}/{marker}")
    if missing:
        node, _, problem = missing[0]
        raise ConfigError(f"{source}: --storage: node {node} cannot read {storage} ({problem}); {FIX}")
    missing = _probe(nodes, data_urls)
    if missing:
        node, key, problem = missing[0]
        raise ConfigError(
            f"{source}: {key}: node {node} cannot read the dataset ({problem}); put the data where every "
            "node reads it (s3://, gs:// or a shared mount)"
        )


def _probe(nodes: list[dict[str, Any]], urls: list[tuple[str, str]]) -> list[tuple[str, str, str]]:
    """``(node address, key, problem)`` for every node that cannot open one of ``urls``."""
    import ray
    from ray.util.scheduling_strategies import NodeAffinitySchedulingStrategy

    if not urls:
        return []
    probes = [(key, url, probe_for(url)) for key, url in urls]
    task = ray.remote(num_cpus=0, max_retries=0)(_can_read)
    refs = {
        task.options(scheduling_strategy=NodeAffinitySchedulingStrategy(n["NodeID"], soft=False)).remote(probes): n
        for n in nodes
    }
    out = []
    done, pending = ray.wait(list(refs), num_returns=len(refs), timeout=PROBE_TIMEOUT_S)
    for ref in pending:
        out.append((refs[ref]["NodeManagerAddress"], urls[0][0], f"no answer in {PROBE_TIMEOUT_S:.0f} s"))
    for ref in done:
        node = refs[ref]["NodeManagerAddress"]
        try:
            problems = ray.get(ref)
        except ray.exceptions.RayError as exc:
            problems = [(urls[0][0], f"the probe failed: {str(exc).strip().splitlines()[-1]}")]
        out.extend((node, key, problem) for key, problem in problems)
    return out


def probe_for(url: str) -> Callable[[str, str], str | None]:
    """The probe of the data source ``url`` is of (a ``file://`` one's for a URL no source recognises)."""
    return (data_source(url) or DATA_SOURCES["file"]).prober()


def _can_read(probes: list[tuple[str, str, Callable[[str, str], str | None]]]) -> list[tuple[str, str]]:
    """On one node: ``(key, problem)`` for each URL (a file, or a dataset directory) it cannot read."""
    problems = []
    for key, url, probe in probes:
        try:
            problem = probe(url, key)
        except Exception as exc:  # noqa: BLE001 - any failure to read is the answer
            problem = f"{type(exc).__name__}: {exc}"
        if problem:
            problems.append((key, problem))
    return problems
