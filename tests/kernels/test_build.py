"""The kernel cache: a library is mapped only when it is whole (a truncated one would kill the process
with SIGBUS), a damaged one is built again, and two processes that build at once compile once."""

from __future__ import annotations

import json
import os
import shutil
import stat
import subprocess
import sys
import time
from pathlib import Path

import pytest

from assistant.kernels import build
from assistant.kernels.attention_avx2 import FLOAT32 as KERNEL

pytestmark = pytest.mark.skipif(not KERNEL.usable(), reason=f"no attention kernel here: {KERNEL.failure()}")

# Loads the attention kernel from the cache (building it there if needed) and runs it on a decode step.
ATTEND = """
import torch
from assistant.kernels.attention_avx2 import FLOAT32
from assistant.model import attention
q, k, v = torch.randn(1, 4, 1, 64), torch.randn(1, 4, 8, 64), torch.randn(1, 4, 8, 64)
assert attention.kernel_queries(q, k, v, 0.125, FLOAT32).shape == (1, 1, 4, 64)
"""


def attend(cache: Path, **environ: str) -> subprocess.Popen:
    return subprocess.Popen([sys.executable, "-c", ATTEND], env={**os.environ, "ASSISTANT_CACHE": str(cache), **environ},
                            stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)


def finished(process: subprocess.Popen) -> tuple[int, str]:
    output, _ = process.communicate(timeout=300)
    return process.returncode, output


def libraries(cache: Path) -> list[Path]:
    return sorted((cache / "kernels").glob("attention_avx2-*.so"))


@pytest.fixture(scope="module")
def built(tmp_path_factory) -> Path:
    """A cache holding the attention kernel, built by a process of its own."""
    cache = tmp_path_factory.mktemp("built")
    code, output = finished(attend(cache))
    assert code == 0, output
    return cache


def test_a_library_cut_to_half_its_size_is_built_again_not_mapped(built, tmp_path):
    """A full disk or a killed copy leaves half a library; mapping it kills the process with SIGBUS."""
    cache = tmp_path / "cache"
    shutil.copytree(built, cache)
    [library] = libraries(cache)
    size = library.stat().st_size
    os.truncate(library, size // 2)
    code, output = finished(attend(cache))
    assert (code, "is damaged or unrecorded; building it again" in output) == (0, True), output
    assert build.whole(library) and library.stat().st_size == size


@pytest.mark.parametrize("damage", ["truncated", "foreign", "unrecorded", "misrecorded", "zeroed"])
def test_a_damaged_library_is_not_whole_and_is_left_for_the_locked_build(built, tmp_path, damage):
    [library] = libraries(built)
    copy = tmp_path / library.name
    shutil.copy(library, copy)
    shutil.copy(build.record_of(library), build.record_of(copy))
    data = copy.read_bytes()
    if damage == "truncated":
        os.truncate(copy, len(data) // 2)
    elif damage == "foreign":
        shutil.copy(sys.executable, copy)
    elif damage == "unrecorded":
        build.record_of(copy).unlink()
    elif damage == "misrecorded":
        build.record_of(copy).write_text(json.dumps({"size": len(data), "sha256": "0" * 64}))
    else:
        copy.write_bytes(bytes(len(data)))
    assert build.whole(tmp_path / library.name) is False
    assert copy.exists()  # another process may have renamed it in and be about to record it


def test_two_processes_building_at_once_compile_once(tmp_path):
    """The first compiles (held by its compiler until the second waits on the lock); the second then
    finds the first's library whole and loads it."""
    runs, release = tmp_path / "runs", tmp_path / "release"
    compiler = tmp_path / "cxx"
    compiler.write_text(f"#!/bin/sh\necho $$ >> {runs}\n"
                        f"for _ in $(seq 600); do [ -e {release} ] && break; sleep 0.1; done\n"
                        f"exec {shutil.which('g++') or shutil.which('c++')} \"$@\"\n")
    compiler.chmod(compiler.stat().st_mode | stat.S_IXUSR)
    cache = tmp_path / "cache"
    first = attend(cache, CXX=str(compiler))
    until(lambda: runs.exists() or first.poll() is not None)
    second = attend(cache, CXX=str(compiler))
    until(lambda: waits_on_a_lock(second.pid) or len(runs.read_text().split()) > 1 or second.poll() is not None)
    release.touch()
    results = [finished(first), finished(second)]
    assert [code for code, _ in results] == [0, 0], results
    assert len(runs.read_text().split()) == 1
    [library] = libraries(cache)
    assert build.whole(library)


def until(condition, limit: float = 120) -> None:
    """Wait for `condition`, bounded so that a broken build fails the test instead of hanging it."""
    deadline = time.monotonic() + limit
    while not condition():
        assert time.monotonic() < deadline, "gave up waiting"
        time.sleep(0.05)


def waits_on_a_lock(pid: int) -> bool:
    """Whether process `pid` is blocked on a file lock (a "->" line of /proc/locks)."""
    return any(line.split()[1] == "->" and line.split()[5] == str(pid)
               for line in Path("/proc/locks").read_text().splitlines())
