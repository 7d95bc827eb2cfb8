"""Core claims: node-wide locks that die with their process, and pinning only while the node is full."""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from hpo.trial import affinity


@pytest.fixture
def locks(tmp_path, monkeypatch):
    monkeypatch.setenv("HPO_CORE_LOCK_DIR", str(tmp_path / "cores"))
    everywhere = sorted(os.sched_getaffinity(0))
    yield everywhere
    affinity.release_cores()
    affinity.pin_process(everywhere)


def hold_cores(count: int) -> subprocess.Popen:
    """Another worker on the node: a process that claims ``count`` cores and keeps them until killed."""
    code = (
        "import sys, time\n"
        "from hpo.trial import affinity\n"
        f"print(affinity.claim_cores({count}), flush=True)\n"
        "time.sleep(120)\n"
    )
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True, env=os.environ)
    assert proc.stdout.readline().strip() != "[]"
    return proc


@pytest.mark.parametrize(("cpus", "gpus", "cores"), [(1, 0, 1), (2.0, 0, 2), (0.5, 0, 0), (1.5, 0, 0), (1, 1, 0),
                                                     (4, 0.5, 0)])
def test_only_whole_cpus_of_cpu_workers_are_claimed(cpus, gpus, cores):
    assert affinity.cores_to_claim(cpus, gpus) == cores


def test_a_worker_pins_while_the_node_is_full_and_floats_when_a_core_frees(locks):
    everywhere = locks
    claim = affinity.CoreClaim(1, 0)
    assert claim.cores == [everywhere[0]]
    if len(everywhere) == 1:
        assert claim.refresh() and sorted(os.sched_getaffinity(0)) == everywhere
        return
    assert not claim.refresh() and sorted(os.sched_getaffinity(0)) == everywhere  # idle cores: float
    other = hold_cores(len(everywhere) - 1)  # the rest of the node is claimed by another worker
    try:
        assert affinity.free_cores(everywhere) == 0
        assert claim.refresh() and sorted(os.sched_getaffinity(0)) == claim.cores
    finally:
        other.kill()
        other.wait()
    # The kernel dropped the killed worker's locks: its cores are free again, and this worker floats.
    assert affinity.free_cores(everywhere) == len(everywhere) - 1
    assert not claim.refresh() and sorted(os.sched_getaffinity(0)) == everywhere


def test_a_claimed_core_is_not_claimed_twice(locks):
    everywhere = locks
    other = hold_cores(len(everywhere))
    try:
        assert affinity.claim_cores(1) == []  # no free core: this worker claims none and floats
        assert not affinity.CoreClaim(1, 0).refresh()
    finally:
        other.kill()
        other.wait()
    assert affinity.claim_cores(1) == [everywhere[0]]
