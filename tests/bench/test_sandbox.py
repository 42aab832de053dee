"""The sandbox that runs a model's rewrite with its task's tests: limits, scratch folder, no network."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import tempfile
import time

import pytest

from assistant.bench import data, sandbox


def fix_row(index: int = 0) -> dict:
    return data.read_jsonl(data.FOLDER / data.FIX_FILE)[index]


@pytest.fixture
def scratch_parent(tmp_path, monkeypatch):
    """Where the sandbox's temporary folders go, so that the test can see what is left there."""
    parent = tmp_path / "tmp"
    parent.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(parent))
    return parent


@pytest.fixture(params=["namespace", "guard"])
def network_off(request, monkeypatch):
    """Both ways of cutting the network: a network namespace where this machine allows it, the guard always."""
    if request.param == "namespace":
        if not sandbox.network_namespace():
            pytest.skip("unshare -n is not allowed here")
    else:
        monkeypatch.setattr(sandbox, "network_namespace", lambda: False)
    return request.param


def test_the_correct_solution_passes_and_the_buggy_one_fails(network_off):
    row = fix_row()
    record = data.fix_record(row)
    assert sandbox.run_python(f"{row['prompt']}{row['canonical_solution']}\n\n{record.tests}").passed
    failed = sandbox.run_python(f"{record.document}\n\n{record.tests}")
    assert not failed.passed and "AssertionError" in failed.reason


def test_an_endless_loop_is_killed_at_the_time_limit_with_what_it_started(tmp_path, scratch_parent):
    pid_file = tmp_path / "child.pid"
    program = (f"import subprocess\nchild = subprocess.Popen(['sleep', '600'])\n"
               f"open({str(pid_file)!r}, 'w').write(str(child.pid))\nwhile True:\n    pass\n")
    outcome = sandbox.run_python(program, time_limit=1)
    assert outcome == sandbox.Outcome(False, "time limit of 1 s")
    child = int(pid_file.read_text())
    for _ in range(200):  # the orphaned child is reaped by init soon after the kill
        state = gone_or_zombie(child)
        if state:
            break
        time.sleep(0.05)
    assert state
    assert os.listdir(scratch_parent) == []


def gone_or_zombie(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().rsplit(")", 1)[1].split()[0] == "Z"
    except FileNotFoundError:
        return True


def test_an_allocation_past_the_memory_limit_fails():
    program = "block = bytearray(384 << 20)\n"
    assert sandbox.run_python(program, memory_mb=1024).passed  # the same program fits under a larger limit
    outcome = sandbox.run_python(program, memory_mb=256)
    assert not outcome.passed and "MemoryError" in outcome.reason


def test_the_program_runs_in_a_scratch_folder_that_is_removed(scratch_parent):
    program = ("import os, tempfile\nhere = os.getcwd()\n"
               f"assert here.startswith({str(scratch_parent)!r}) and os.environ['HOME'] == here\n"
               "assert tempfile.gettempdir() == here\nopen('left-behind.txt', 'w').write('x')\n")
    assert sandbox.run_python(program).passed
    assert os.listdir(scratch_parent) == []


def test_the_environment_is_clean(monkeypatch):
    monkeypatch.setenv("ASSISTANT_SECRET", "1")
    monkeypatch.setenv("PYTHONPATH", "/nowhere")
    program = "import os, sys\nassert 'ASSISTANT_SECRET' not in os.environ and '/nowhere' not in sys.path\n"
    assert sandbox.run_python(program).passed


def test_no_network_socket_can_be_opened(network_off):
    with socket.create_server(("127.0.0.1", 0)) as server:
        port = server.getsockname()[1]
        program = (f"import socket\ntry:\n    socket.create_connection(('127.0.0.1', {port}), timeout=5).close()\n"
                   "except OSError as error:\n    raise SystemExit(3)\n")
        # Outside the sandbox the same program reaches the listening server.
        assert subprocess.run([sys.executable, "-c", program], timeout=30).returncode == 0
        outcome = sandbox.run_python(program)
    assert outcome.reason.startswith("exit status 3"), outcome

