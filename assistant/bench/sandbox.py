"""Running a model's rewrite with its task's tests in a throwaway process (`assistant bench --tasks fix`).

The bench executes code a model wrote, so each program runs in its own process with:
- a time limit: its whole process group is killed when the limit is reached;
- a memory limit (RLIMIT_AS) and a file-size limit (RLIMIT_FSIZE), set in the child before it starts;
- no network: a new, empty network namespace (`unshare -n`) where this machine allows it (root, or
  unprivileged user namespaces); elsewhere a guard that runs before the program and makes every
  socket creation fail (best effort: it does not cover a process the program starts itself);
- a scratch directory (a fresh temporary folder, removed afterwards) as its working directory,
  HOME and TMPDIR;
- a clean environment (PATH and LANG only) and an isolated interpreter (`python -I`: no PYTHON*
  variables, no user site-packages, no working directory on sys.path).
This guards against accidents (an endless loop, a huge allocation, a stray write or connection);
it is not a security boundary against code written to escape it.
"""

from __future__ import annotations

import functools
import os
import resource
import shutil
import signal
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

TIME_LIMIT_S = 10.0
MEMORY_LIMIT_MB = 1024
FILE_LIMIT_MB = 16
# Runs before the program when there is no network namespace: socket creation raises, the rest is the program.
GUARD = """\
import _socket, runpy, socket, sys
class _NoNetwork(socket.socket):
    def __init__(self, *args, **kwargs):
        raise PermissionError("network access is disabled in the test sandbox")
socket.socket = socket.SocketType = _socket.socket = _NoNetwork
del _socket, socket
runpy.run_path(sys.argv[1], run_name="__main__")
"""


@dataclass(frozen=True)
class Outcome:
    passed: bool
    reason: str  # "passed", "time limit of N s", or the exit status and the last line of stderr


@functools.cache
def network_namespace() -> bool:
    """Whether `unshare -n` can give a child a network of its own here (checked once)."""
    if shutil.which("unshare") is None:
        return False
    try:
        return subprocess.run(["unshare", "-n", "true"], capture_output=True, timeout=10).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def limits(memory_mb: int):
    def apply() -> None:  # runs in the child, before exec
        resource.setrlimit(resource.RLIMIT_AS, (memory_mb << 20, memory_mb << 20))
        resource.setrlimit(resource.RLIMIT_FSIZE, (FILE_LIMIT_MB << 20, FILE_LIMIT_MB << 20))
        resource.setrlimit(resource.RLIMIT_CORE, (0, 0))
    return apply


def command(program: Path) -> list[str]:
    if network_namespace():
        return ["unshare", "-n", sys.executable, "-I", str(program)]
    return [sys.executable, "-I", "-c", GUARD, str(program)]


def run_python(source: str, time_limit: float = TIME_LIMIT_S, memory_mb: int = MEMORY_LIMIT_MB) -> Outcome:
    """Run `source` as a Python program in the sandbox; it passes when it exits with status 0."""
    with tempfile.TemporaryDirectory(prefix="assistant-sandbox-") as scratch:
        program, errors = Path(scratch) / "program.py", Path(scratch) / "stderr"
        program.write_text(source, encoding="utf-8")
        env = {"PATH": os.defpath, "LANG": "C.UTF-8", "HOME": scratch, "TMPDIR": scratch}
        with open(errors, "wb") as stderr:
            process = subprocess.Popen(command(program), cwd=scratch, env=env, stdin=subprocess.DEVNULL,
                                       stdout=subprocess.DEVNULL, stderr=stderr, start_new_session=True,
                                       preexec_fn=limits(memory_mb))
            try:
                status = process.wait(timeout=time_limit)
            except subprocess.TimeoutExpired:
                status = None
            finally:
                kill_group(process)
        if status is None:
            return Outcome(False, f"time limit of {time_limit:g} s")
        if status == 0:
            return Outcome(True, "passed")
        last = errors.read_bytes()[-4096:].decode("utf-8", "replace").strip().splitlines()
        return Outcome(False, f"exit status {status}" + (f": {last[-1]}" if last else ""))


def kill_group(process: subprocess.Popen) -> None:
    """Kill whatever the program left running in its session, then reap the program."""
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except ProcessLookupError:
        pass
    process.wait()
