"""Each row's peak memory (`max_rss_mb`): on Linux the process's resident high-water mark since the row began (reset
through /proc/self/clear_refs), not the run's, so that a strategy's is its own."""

from __future__ import annotations

import mmap
import sys

import pytest
import torch

from assistant.bench.run import peak_memory_mb, reset_peak_memory

CPU = torch.device("cpu")


def touched(megabytes: int) -> mmap.mmap:
    """Memory of its own mapping, every page written: resident until it is closed, and gone then."""
    block, page = mmap.mmap(-1, megabytes << 20), b"x" * mmap.PAGESIZE
    for _ in range((megabytes << 20) // mmap.PAGESIZE):
        block.write(page)
    return block


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="VmHWM and clear_refs are Linux's")
def test_a_rows_peak_starts_from_what_is_held_when_it_begins():
    touched(64).close()
    before = peak_memory_mb(CPU)["max_rss_mb"]  # past the block
    reset_peak_memory(CPU)
    quiet = peak_memory_mb(CPU)["max_rss_mb"]
    block = touched(64)
    busy = peak_memory_mb(CPU)["max_rss_mb"]
    block.close()
    assert quiet <= before - 60  # the block freed before the row is not its peak
    assert busy >= quiet + 60
