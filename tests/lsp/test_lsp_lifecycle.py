"""The language server ends cleanly whatever its client does during a rewrite: closes its pipe, asks
`shutdown` then `exit`, sends `exit` alone, or a signal comes. The generation stops with the process,
nothing is printed, and the status is 0 (1 for `exit` without `shutdown`, as LSP says), never SIGABRT.

Raw JSON-RPC over a real `assistant lsp` subprocess, so that the test decides what the pipe does."""

from __future__ import annotations

import asyncio
import signal

import pytest
from test_lsp import CODE, SERVER
from test_lsp_reliability import BOUND, frame, initialize, receive_until

pytestmark = pytest.mark.asyncio(loop_scope="module")


async def shutdown_then_exit(server: asyncio.subprocess.Process) -> None:
    server.stdin.write(frame({"jsonrpc": "2.0", "id": 3, "method": "shutdown"}))
    answer = await receive_until(server.stdout, lambda m: m.get("id") == 3)
    assert "error" not in answer, answer
    server.stdin.write(frame({"jsonrpc": "2.0", "method": "exit"}))


async def exit_alone(server: asyncio.subprocess.Process) -> None:
    server.stdin.write(frame({"jsonrpc": "2.0", "method": "exit"}))


async def close_stdin(server: asyncio.subprocess.Process) -> None:
    server.stdin.close()


def signalled(signum: int):
    async def send(server: asyncio.subprocess.Process) -> None:
        server.send_signal(signum)
    return send


@pytest.mark.parametrize("act, status", [
    (close_stdin, 0), (shutdown_then_exit, 0), (exit_alone, 1), (signalled(signal.SIGTERM), 0),
    (signalled(signal.SIGINT), 0),
], ids=["stdin closed", "shutdown then exit", "exit without shutdown", "SIGTERM", "SIGINT"])
async def test_the_server_ends_cleanly_during_a_rewrite(act, status):
    server = await asyncio.create_subprocess_exec(*SERVER, stdin=asyncio.subprocess.PIPE,
                                                  stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    try:
        server.stdin.write(initialize() + frame({
            "jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
                "uri": "file:///ending.py", "languageId": "python", "version": 1, "text": CODE * 20}}}) + frame({
            "jsonrpc": "2.0", "id": 2, "method": "workspace/executeCommand",
            "params": {"command": "assistant.rewriteDocument", "arguments": ["file:///ending.py", "add docstrings"]}}))
        await receive_until(server.stdout, lambda m: m.get("method") == "workspace/applyEdit")  # it streams
        await act(server)
        _, errors = await asyncio.wait_for(asyncio.gather(server.stdout.read(), server.stderr.read()), BOUND)
        assert await asyncio.wait_for(server.wait(), BOUND) == status, errors.decode()
        assert errors.decode() == ""
    finally:
        if server.returncode is None:
            server.kill()
            await server.wait()
