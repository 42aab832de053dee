"""A door started with `--engine` is a light client: the command line, the language server and the playground,
each a real process talking to an OpenAI-compatible server, never import torch or transformers (the engine
contract and the remote client import neither; `Assistant` is imported only when a model loads here)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import httpx
import pytest
from serving import eventually, free_port

DOC = "def add(a, b):\n    return a + b\n"
# Runs the `assistant` command as `python -m assistant.cli` would, and as it exits writes which heavy modules it
# loaded.
PROBE = """
import atexit, json, os, runpy, sys
def report():
    with open(os.environ["PROBE_OUT"], "w") as out:
        json.dump({name: name in sys.modules for name in ("torch", "transformers")}, out)
atexit.register(report)
_exit = os._exit  # the language server leaves with os._exit, which skips atexit
os._exit = lambda status: (report(), _exit(status))
sys.argv = ["assistant"] + sys.argv[1:]
runpy.run_module("assistant.cli", run_name="__main__")
"""


class OpenAI(BaseHTTPRequestHandler):
    """Another server's protocol, as small as it gets: one model, and a streamed reply that copies the document."""

    def do_GET(self):
        self._send("application/json", json.dumps({"data": [{"id": "fake", "max_model_len": 4096}]}))

    def do_POST(self):
        self.rfile.read(int(self.headers["Content-Length"]))
        chunks = [{"choices": [{"delta": {"content": f"```python\n{DOC}```"}, "finish_reason": None}]},
                  {"choices": [{"delta": {}, "finish_reason": "stop"}]}]
        self._send("text/event-stream", "".join(f"data: {json.dumps(c)}\n\n" for c in chunks) + "data: [DONE]\n\n")

    def _send(self, kind: str, body: str):
        data = body.encode()
        self.send_response(200)
        self.send_header("Content-Type", kind)
        self.send_header("Content-Length", str(len(data)))
        self.end_headers()
        self.wfile.write(data)

    def log_message(self, *args):
        pass


@pytest.fixture(scope="module")
def engine():
    server = ThreadingHTTPServer(("127.0.0.1", 0), OpenAI)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_address[1]}"
    server.shutdown()


def door(args: list[str], tmp_path, **popen) -> tuple[subprocess.Popen, str]:
    out = tmp_path / "probe.json"
    env = {**os.environ, "PROBE_OUT": str(out), "ASSISTANT_API_KEY": ""}
    return subprocess.Popen([sys.executable, "-c", PROBE, *args], env=env, **popen), out


def loaded(out) -> dict:
    return json.loads(out.read_text())


def test_rewrite_with_an_engine_loads_no_torch(engine, tmp_path):
    path = tmp_path / "code.py"
    path.write_text(DOC)
    process, out = door(["rewrite", str(path), "-i", "Fix it.", "--engine", engine], tmp_path,
                        stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    stdout, stderr = process.communicate(timeout=120)
    assert process.returncode == 0, stderr
    assert stdout == DOC and loaded(out) == {"torch": False, "transformers": False}


def test_the_language_server_with_an_engine_loads_no_torch(engine, tmp_path):
    process, out = door(["lsp", "--engine", engine], tmp_path, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                        stderr=subprocess.PIPE)
    messages = [{"jsonrpc": "2.0", "id": 1, "method": "initialize", "params": {"capabilities": {}}},
                {"jsonrpc": "2.0", "method": "initialized", "params": {}},
                {"jsonrpc": "2.0", "id": 2, "method": "shutdown"}, {"jsonrpc": "2.0", "method": "exit"}]
    framed = b"".join(b"Content-Length: %d\r\n\r\n%s" % (len(body), body)
                      for body in (json.dumps(m).encode() for m in messages))
    stdout, stderr = process.communicate(framed, timeout=120)
    assert process.returncode == 0, stderr
    assert b'"id": 2' in stdout or b'"id":2' in stdout
    assert loaded(out) == {"torch": False, "transformers": False}


def test_the_playground_with_an_engine_loads_no_torch(engine, tmp_path):
    port = free_port()
    process, out = door(["web", "--engine", engine, "--port", str(port)], tmp_path, stdout=subprocess.DEVNULL,
                        stderr=subprocess.PIPE)
    try:
        def healthy() -> bool:
            try:
                return httpx.get(f"http://127.0.0.1:{port}/healthz").json().get("model_loaded") is True
            except httpx.HTTPError:
                return False
        eventually(healthy, "the playground did not come up on its engine", 120)
    finally:
        process.send_signal(signal.SIGINT)
        process.communicate(timeout=60)
    assert loaded(out) == {"torch": False, "transformers": False}
