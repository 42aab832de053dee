"""`assistant web` ends cleanly on SIGTERM or Ctrl-C (SIGINT) while a rewrite streams: uvicorn shuts down
gracefully (the socket closed, its rewrite cancelled, the model closed) and the command exits 0, with no
traceback and never SIGABRT. A real `assistant web` subprocess with the embedded model."""

from __future__ import annotations

import asyncio
import json
import signal
import socket
import subprocess
import sys

import httpx
import pytest
import websockets
from playground import receive, until, wait_loaded

LONG = {"document": "def add(a, b):\n    return a - b\n" * 30, "instruction": "add docstrings"}


@pytest.mark.parametrize("signum", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "SIGINT"])
def test_a_signal_during_a_rewrite_ends_the_playground_cleanly(signum):
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = subprocess.Popen([sys.executable, "-m", "assistant.cli", "web", "--port", str(port)],
                              stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)

    async def rewrite_then_signal():
        async with websockets.connect(f"ws://127.0.0.1:{port}/ws/rewrite") as ws:
            await ws.send(json.dumps(LONG))
            await until(ws, "delta")
            server.send_signal(signum)
            with pytest.raises(websockets.ConnectionClosed):
                while True:
                    await receive(ws)

    try:
        with httpx.Client(base_url=f"http://127.0.0.1:{port}", transport=httpx.HTTPTransport(retries=10)) as http:
            wait_loaded(http.get)
        asyncio.run(rewrite_then_signal())
        errors = server.communicate(timeout=120)[1]
        assert server.returncode == 0, errors
        assert "Traceback" not in errors and "terminate called" not in errors
    finally:
        server.kill()
        server.wait()
