"""Helpers for the server tests: `assistant serve`'s app under a real uvicorn on a free loopback port."""

from __future__ import annotations

import socket
import threading
import time
from contextlib import contextmanager

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
