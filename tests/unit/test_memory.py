"""The driver hands the memory its allocator holds free back to the system (glibc), during and after a sweep."""

from __future__ import annotations

import sys

import pytest

from hpo.memory import ReleaseFreeMemory, release_free_memory

glibc = pytest.mark.skipif(not sys.platform.startswith("linux") or not release_free_memory(),
                           reason="malloc_trim is glibc's")


def _resident_mb() -> float:
    with open("/proc/self/status") as status:
        for line in status:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) / 1024
    raise AssertionError("no VmRSS")


@glibc
def test_memory_freed_inside_the_heap_is_handed_back():
    # 200 MB in blocks malloc serves from its heap, all freed but one block at the top: the allocator keeps
    # the freed pages below it (nothing at the heap's end to shrink) until they are released
    blocks = [bytearray(4000) for _ in range(50_000)]
    last = bytearray(4000)
    held = _resident_mb()
    del blocks
    kept = _resident_mb()
    assert release_free_memory()
    released = _resident_mb()
    assert held - kept < 100 and kept - released > 100, (held, kept, released)
    assert last  # the block that kept the heap from shrinking on its own


@glibc
def test_the_callback_releases_at_most_every_interval():
    often, rarely = ReleaseFreeMemory(every_s=0.0), ReleaseFreeMemory(every_s=3600.0)
    for i in range(3):
        often.on_step_end(i, [])
        rarely.on_step_end(i, [])
    assert often.releases >= 1 and rarely.releases == 0  # often: each step once its cost allows (a share of 1 %)
