"""`assistant serve` as a process: it ends cleanly on Ctrl-C (SIGINT) or SIGTERM, idle or with a client
streaming (the stream ends with an error event, the process exits 0 within a few seconds, no traceback),
and a few hundred idle or unfinished connections never keep /health from answering. A real `assistant
serve` subprocess on 127.0.0.1 with the small embedded model (tests/conftest.py)."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import httpx
import pytest
from serving import free_port, server_process

from assistant.http.generations import STOPPING
from assistant.http.server import STOP_SECONDS

SIGNALS = pytest.mark.parametrize("signum", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
EXIT_SECONDS = STOP_SECONDS + 10  # a liveness bound: the stop itself, and the model's close
LONG = {"messages": [{"role": "user", "content": "Write a very long story about a dragon who learns to program."}],
        "max_tokens": 4000, "stream": True}


@contextmanager
def assistant_serve(log: Path) -> Iterator[tuple[subprocess.Popen, str]]:
    """`assistant serve` on a free port, its output in `log`, once /health answers 200."""
    port = free_port()
    with server_process([sys.executable, "-m", "assistant.cli", "serve", "--port", str(port)], port, log,
                        "assistant serve", 180) as (process, url):
        yield process, url


def written(line: str) -> str:
    """The text a streamed chunk adds ("" for any other line)."""
    chunk = json.loads(line.removeprefix("data: ")) if line.startswith("data: {") else {}
    return "".join(choice["delta"].get("content") or "" for choice in chunk.get("choices", []))


def ended_cleanly(process: subprocess.Popen, log: Path) -> None:
    process.wait(timeout=EXIT_SECONDS)
    errors = log.read_text()
    assert process.returncode == 0, errors
    assert "Traceback" not in errors and "terminate called" not in errors, errors


@SIGNALS
def test_a_signal_ends_an_idle_server_with_status_0(signum, tmp_path):
    with assistant_serve(tmp_path / "serve.log") as (process, _):
        process.send_signal(signum)
        ended_cleanly(process, tmp_path / "serve.log")


@SIGNALS
def test_a_signal_ends_a_streaming_answer_with_an_error_event_and_the_server(signum, tmp_path):
    log = tmp_path / "serve.log"
    with assistant_serve(log) as (process, url), httpx.stream("POST", f"{url}/v1/chat/completions", json=LONG,
                                                              timeout=60) as answer:
        lines = answer.iter_lines()
        next(line for line in lines if written(line))  # the model is writing
        process.send_signal(signum)
        signalled = time.monotonic()
        rest = [line for line in lines if line.startswith("data: ")]
        assert time.monotonic() - signalled < EXIT_SECONDS, "the stream went on after the signal"
        assert rest and json.loads(rest[-1].removeprefix("data: "))["error"]["message"] == STOPPING, rest[-3:]
        assert "data: [DONE]" not in rest
        ended_cleanly(process, log)


def test_health_answers_beside_300_idle_and_unfinished_connections(tmp_path):
    """A browser's preconnects or a scanner's probes: connections that send nothing or half a request."""
    with assistant_serve(tmp_path / "serve.log") as (_, url):
        port = int(url.rsplit(":", 1)[1])
        idle = [socket.create_connection(("127.0.0.1", port), timeout=30) for _ in range(300)]
        try:
            for sock in idle[::2]:
                sock.sendall(f"GET /health HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n".encode())
            with httpx.Client(base_url=url, timeout=30) as fresh:
                answer = fresh.get("/health")
            assert (answer.status_code, answer.json()["status"]) == (200, "ok")
        finally:
            for sock in idle:
                sock.close()
