"""Helpers for the tests of servers: a free loopback port, a liveness bound, `assistant serve`'s app under a
real uvicorn in this process, and a server process (`assistant serve`, vLLM) that answers its health check."""

from __future__ import annotations

import socket
import subprocess
import threading
import time
from contextlib import contextmanager
from pathlib import Path
from typing import Iterator

import httpx
import uvicorn

from assistant.serve.app import server_config


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def eventually(condition, what: str, seconds: float = 120) -> None:
    """A liveness bound, generous enough never to flake: `condition` must hold within `seconds`."""
    deadline = time.time() + seconds
    while not condition():
        assert time.time() < deadline, what
        time.sleep(0.05)


@contextmanager
def serve(app, health: str | None = "/health", config=server_config):
    """Run `app` under uvicorn (`config` makes its settings) on 127.0.0.1 until GET `health` answers 200 (the
    model has loaded; None: until it listens); yields the base URL."""
    port = free_port()
    server = uvicorn.Server(config(app, "127.0.0.1", port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    base = f"http://127.0.0.1:{port}"
    try:
        eventually(lambda: server.started or not thread.is_alive(), "the server did not start", 60)
        assert thread.is_alive(), "the server stopped at start"
        if health:
            eventually(lambda: httpx.get(f"{base}{health}").status_code == 200, "the model did not load")
        yield base
    finally:
        server.should_exit = True
        thread.join(timeout=30)


@contextmanager
def server_process(command: list[str], port: int, log: Path, what: str,
                   seconds: float) -> Iterator[tuple[subprocess.Popen, str]]:
    """Run `command`, a server that listens on 127.0.0.1:`port` with its output in `log`, until GET /health
    answers 200 within `seconds`; yields the process and its URL, and ends it after if still running."""
    with log.open("w") as output:
        server = subprocess.Popen(command, stdout=output, stderr=subprocess.STDOUT)
    url = f"http://127.0.0.1:{port}"

    def ready() -> bool:
        assert server.poll() is None, f"{what} stopped:\n{log.read_text()[-3000:]}"
        try:
            return httpx.get(f"{url}/health").status_code == 200
        except httpx.TransportError:
            return False

    try:
        eventually(ready, f"{what} did not come up", seconds)
        yield server, url
    finally:
        server.terminate()
        server.wait(timeout=120)
