"""The language server under faults and odd input: unfinished answers, position encodings, CRLF
buffers, clients that refuse or never answer, rewrites named by id, malformed ranges, several
documents at once. A real pytest-lsp client drives `assistant lsp` over stdio with the embedded model."""

from __future__ import annotations

import asyncio
import json
import socket

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient
from test_lsp import (ADD, CODE, INITIALIZE, LONG_ANSWER, SERVER, SHORT, command, editor_client, lsp_range,
                      open_buffer, type_at)

from assistant.lsp.ranges import position_at

pytestmark = pytest.mark.asyncio(loop_scope="module")

BOUND = 120  # seconds: only so that a hang fails the test instead of blocking the suite


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[*SERVER, "--request-timeout", "3"],
                                              client_factory=editor_client), scope="module")
async def client(lsp_client: LanguageClient):
    await lsp_client.initialize_session(INITIALIZE)
    yield
    await lsp_client.shutdown_session()


def messages_since(client: LanguageClient, count: int) -> str:
    return "\n".join(m.message for m in client.messages[count:])


async def test_an_answer_stopped_by_the_token_limit_is_taken_back(client: LanguageClient):
    uri = open_buffer(client, "limit", SHORT)
    seen, edits = len(client.messages), client.editor.edits
    result = await command(client, "assistant.rewriteDocument", uri, LONG_ANSWER)
    assert result["stopped"] == "length" and result["restored"]
    assert client.editor.edits > edits + 1  # it streamed, then put the original back
    assert client.editor.buffers[uri][0] == SHORT and result["text"] == SHORT
    shown = messages_since(client, seen)
    assert "limit" in shown and "smaller selection" in shown and "original text is back" in shown


async def test_a_cancelled_answer_is_taken_back(client: LanguageClient):
    uri = open_buffer(client, "cancelled")
    seen = len(client.messages)

    def cancel(client, uri, edit):
        asyncio.ensure_future(command(client, "assistant.cancel", uri))
        return True

    client.editor.on_edit[uri] = cancel
    result = await command(client, "assistant.rewriteSelection", uri, lsp_range(CODE, *ADD), "add docstrings")
    assert result["stopped"] == "cancelled" and result["restored"]
    assert client.editor.buffers[uri][0] == CODE
    assert "cancelled" in messages_since(client, seen)


async def test_crlf_buffers_keep_their_line_endings(client: LanguageClient):
    crlf = CODE.replace("\n", "\r\n")
    target = (crlf.index("def add"), crlf.index("\r\n\r\n\r\nprint"))
    uri = open_buffer(client, "crlf", crlf)
    client.editor.keep_crlf = True
    try:
        result = await command(client, "assistant.rewriteSelection", uri, lsp_range(crlf, *target), "fix bugs")
    finally:
        client.editor.keep_crlf = False
    assert not result["conflict"] and result["stopped"] == "eos"
    assert (await command(client, "assistant.accept", uri))["accepted"]
    text = client.editor.buffers[uri][0]
    assert text == crlf[:target[0]] + result["text"] + crlf[target[1]:]
    assert text.count("\n") == text.count("\r\n")
    for span in result["spans"]:  # offsets into the CRLF text
        (a, b), (c, d) = span["output"], span["source"]
        assert result["text"][a:b] == crlf[c:d]


async def test_a_refused_edit_stops_the_generation(client: LanguageClient):
    uri = open_buffer(client, "refused", SHORT)
    seen = len(client.messages)
    client.editor.refuse = True
    try:
        result = await command(client, "assistant.rewriteDocument", uri, LONG_ANSWER)
    finally:
        client.editor.refuse = False
    assert result["stopped"] == "cancelled"  # not "length": the model stopped instead of writing on for nobody
    assert client.editor.buffers[uri] == [SHORT, 1]
    assert "did not apply an edit (declined by the user)" in messages_since(client, seen)


async def test_a_client_that_never_answers_does_not_hold_the_document(client: LanguageClient):
    uri = open_buffer(client, "silent")
    seen = len(client.messages)
    client.editor.silent = asyncio.Event()  # neither applyEdit nor workDoneProgress/create get an answer
    try:
        for _ in range(2):  # the second is not refused as "already being rewritten"
            result = await asyncio.wait_for(command(client, "assistant.rewriteSelection", uri,
                                                    lsp_range(CODE, *ADD), "add docstrings"), BOUND)
            assert result["restored"] and not result["conflict"]
    finally:
        client.editor.silent.set()  # the late answers find their requests timed out
        client.editor.silent = None
    assert client.editor.buffers[uri][0] == CODE
    assert "no answer in 3 s" in messages_since(client, seen)


async def test_accept_and_reject_name_their_rewrite(client: LanguageClient):
    uri = open_buffer(client, "named")
    first = await command(client, "assistant.rewriteSelection", uri, lsp_range(CODE, *ADD), "fix bugs")
    await command(client, "assistant.accept", uri, first["id"])
    text = client.editor.buffers[uri][0]
    last_line = (text.index("print"), len(text) - 1)
    second = await command(client, "assistant.rewriteSelection", uri, lsp_range(text, *last_line), "fix bugs")
    with pytest.raises(Exception, match="not the latest rewrite"):
        await command(client, "assistant.reject", uri, first["id"])
    assert second["id"] != first["id"]
    with pytest.raises(Exception, match="not the latest rewrite"):
        await command(client, "assistant.accept", uri, first["id"])
    assert (await command(client, "assistant.accept", uri, second["id"]))["accepted"]


async def test_a_rewrite_asked_for_during_a_reject_is_refused_and_the_reject_lands(client: LanguageClient):
    uri = open_buffer(client, "reject-race")
    await command(client, "assistant.rewriteSelection", uri, lsp_range(CODE, *ADD), "fix bugs")
    text = client.editor.buffers[uri][0]
    last_line = (text.index("print"), len(text) - 1)
    stale = client.editor.stale
    client.editor.hold = asyncio.Event()  # the client sits on the reject's edit until released
    reject = asyncio.ensure_future(command(client, "assistant.reject", uri))
    for _ in range(BOUND * 10):
        if client.editor.holding:
            break
        await asyncio.sleep(0.1)
    with pytest.raises(Exception, match="wait for a decision"):
        await command(client, "assistant.rewriteSelection", uri, lsp_range(text, *last_line), "add docstrings")
    client.editor.hold.set()
    assert (await reject)["rejected"]
    assert client.editor.buffers[uri][0] == CODE
    assert client.editor.stale == stale


@pytest.mark.parametrize("bad, problem", [
    (1.5, "whole number"), ("3", "whole number"), (float("inf"), "whole number"), (-1, "whole number"),
    (True, "whole number"),
])
async def test_malformed_ranges_are_refused_by_name(client: LanguageClient, bad, problem):
    uri = open_buffer(client, "malformed")
    range_ = lsp_range(CODE, *ADD)
    range_["end"]["character"] = bad
    with pytest.raises(Exception, match=problem):
        await command(client, "assistant.rewriteSelection", uri, range_, "fix bugs")
    assert client.editor.buffers[uri] == [CODE, 1]


async def test_a_lone_surrogate_is_refused_by_name(client: LanguageClient):
    text = "x = '\ud800'\n" + CODE
    uri = open_buffer(client, "surrogate", text)
    with pytest.raises(Exception, match="lone surrogate .U\\+D800. at line 1"):
        await command(client, "assistant.rewriteDocument", uri, "fix bugs")
    hover = await client.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=types.Position(line=0, character=5)))
    assert hover is None  # and the server is still up


async def test_three_documents_at_once_with_typing(client: LanguageClient):
    uris = [open_buffer(client, f"load-{n}") for n in range(3)]
    typed = {uri: 0 for uri in uris}
    stale = client.editor.stale  # the module's client: a race in an earlier test may have refused one

    def type_ahead(client, uri, edit):  # typing before the target, on every edit, in every buffer
        type_at(client, uri, 0, "#")
        typed[uri] += 1
        return False

    for uri in uris:
        client.editor.on_edit[uri] = type_ahead
    results = await asyncio.wait_for(asyncio.gather(*[
        command(client, "assistant.rewriteSelection", uri, lsp_range(CODE, *ADD), "fix bugs") for uri in uris]),
        BOUND)
    for uri, result in zip(uris, results):
        del client.editor.on_edit[uri]
        assert not result["conflict"] and result["stopped"] == "eos"
        await command(client, "assistant.accept", uri)
        assert typed[uri] > 0
        assert client.editor.buffers[uri][0] == "#" * typed[uri] + CODE[:ADD[0]] + result["text"] + CODE[ADD[1]:]
    assert client.editor.stale == stale  # the client had to refuse no edit for naming an old version


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER, client_factory=editor_client),
                    scope="module", params=["utf-8", "utf-32"])
async def encoded(lsp_client: LanguageClient, request):
    lsp_client.editor.encoding = request.param
    await lsp_client.initialize_session(types.InitializeParams(capabilities=types.ClientCapabilities(
        general=types.GeneralClientCapabilities(position_encodings=[request.param, "utf-16"]),
        window=types.WindowClientCapabilities(work_done_progress=True),
        workspace=types.WorkspaceClientCapabilities(apply_edit=True))))
    yield
    await lsp_client.shutdown_session()


async def test_the_negotiated_position_encoding(encoded: LanguageClient):
    encoding = encoded.editor.encoding
    text = "greeting = 'héllo wörld 😀'; total = add(1, 2)\n\n\ndef add(a, b):\n    return a - b\n"
    target = (text.index("add(1, 2)"), text.index("add(1, 2)") + len("add(1, 2)"))
    uri = open_buffer(encoded, f"encoding-{encoding}", text)
    result = await command(encoded, "assistant.rewriteSelection", uri, lsp_range(text, *target, encoding),
                           "call it with 3 and 4")
    await command(encoded, "assistant.accept", uri)
    now = encoded.editor.buffers[uri][0]
    assert now == text[:target[0]] + result["text"] + text[target[1]:]
    notice = encoded.editor.attributions[-1]
    for span, sent in zip(result["spans"], notice.spans):
        a, b = span["output"]
        start = position_at(now, target[0] + a, encoding)
        assert (sent.output.start.line, sent.output.start.character) == (start.line, start.character)


# Raw JSON-RPC over a pipe or a socket, for what a pytest-lsp client cannot do: keep stdin open after
# `exit`, connect several clients over TCP.

def frame(message: dict) -> bytes:
    body = json.dumps(message).encode()
    return b"Content-Length: %d\r\n\r\n%s" % (len(body), body)


async def receive(reader: asyncio.StreamReader) -> dict | None:
    """The next message, or None at the end of the stream."""
    length = None
    while (line := await reader.readline()).strip():
        if line.lower().startswith(b"content-length:"):
            length = int(line.split(b":")[1])
    if length is None:
        return None
    return json.loads(await reader.readexactly(length))


async def receive_until(reader: asyncio.StreamReader, wanted) -> dict:
    while (message := await asyncio.wait_for(receive(reader), BOUND)) is not None:
        if wanted(message):
            return message
    raise AssertionError("the stream ended")


def initialize(msg_id: int = 1) -> bytes:
    return frame({"jsonrpc": "2.0", "id": msg_id, "method": "initialize",
                  "params": {"capabilities": {"workspace": {"applyEdit": True}}}}) + \
        frame({"jsonrpc": "2.0", "method": "initialized", "params": {}})


async def test_exit_during_a_rewrite_ends_the_process():
    server = await asyncio.create_subprocess_exec(*SERVER, stdin=asyncio.subprocess.PIPE,
                                                  stdout=asyncio.subprocess.PIPE)
    try:
        server.stdin.write(initialize() + frame({
            "jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
                "uri": "file:///exit.py", "languageId": "python", "version": 1, "text": CODE * 20}}}) + frame({
            "jsonrpc": "2.0", "id": 2, "method": "workspace/executeCommand",
            "params": {"command": "assistant.rewriteDocument", "arguments": ["file:///exit.py", "add docstrings"]}}))
        await receive_until(server.stdout, lambda m: m.get("method") == "workspace/applyEdit")
        server.stdin.write(frame({"jsonrpc": "2.0", "method": "exit"}))  # stdin stays open, as editors leave it
        await server.stdin.drain()
        while await asyncio.wait_for(server.stdout.read(1 << 16), BOUND):
            pass
        assert await asyncio.wait_for(server.wait(), BOUND) is not None
    finally:
        if server.returncode is None:
            server.kill()


async def test_tcp_serves_one_client_at_a_time_and_outlives_it():
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    server = await asyncio.create_subprocess_exec(*SERVER, "--tcp", f"127.0.0.1:{port}")
    try:
        for _ in range(BOUND * 10):
            try:
                first = await asyncio.open_connection("127.0.0.1", port)
                break
            except OSError:
                await asyncio.sleep(0.1)
        first[1].write(initialize())
        assert "capabilities" in (await receive_until(first[0], lambda m: m.get("id") == 1))["result"]

        second = await asyncio.open_connection("127.0.0.1", port)
        refusal = await asyncio.wait_for(receive(second[0]), BOUND)
        assert "one at a time" in refusal["params"]["message"]
        assert await asyncio.wait_for(receive(second[0]), BOUND) is None  # closed, and no reply meant for another

        first[1].close()  # the first client leaves; the server stays for the next
        for _ in range(BOUND * 10):  # refused until the server has seen the first one go
            third = await asyncio.open_connection("127.0.0.1", port)
            third[1].write(initialize())
            try:
                answer = await asyncio.wait_for(receive(third[0]), BOUND)
            except ConnectionResetError:  # refused while our initialize was unread
                answer = {}
            if answer.get("id") == 1:
                break
            third[1].close()
            await asyncio.sleep(0.1)
        assert "capabilities" in answer["result"]
        third[1].close()
        assert server.returncode is None
    finally:
        server.kill()
        await server.wait()


async def test_malformed_positions_in_requests_get_an_error_that_names_them():
    server = await asyncio.create_subprocess_exec(*SERVER, stdin=asyncio.subprocess.PIPE,
                                                  stdout=asyncio.subprocess.PIPE)
    bad = [{"line": float("inf"), "character": 0}, {"line": 1.5, "character": 0}, {"line": "0", "character": 0},
           {"line": 0, "character": -1}]
    try:
        server.stdin.write(initialize() + frame({
            "jsonrpc": "2.0", "method": "textDocument/didOpen", "params": {"textDocument": {
                "uri": "file:///bad.py", "languageId": "python", "version": 1, "text": CODE}}}))
        for msg_id, position in enumerate(bad + [{"line": 0, "character": 0}], start=10):
            server.stdin.write(frame({"jsonrpc": "2.0", "id": msg_id, "method": "textDocument/hover", "params": {
                "textDocument": {"uri": "file:///bad.py"}, "position": position}}))
        answers = {}
        while len(answers) < len(bad) + 1:
            message = await receive_until(server.stdout, lambda m: m.get("id", 0) >= 10)
            answers[message["id"]] = message
        for msg_id, position in enumerate(bad, start=10):
            assert "whole number" in answers[msg_id]["error"]["message"], position
        assert "error" not in answers[10 + len(bad)]  # the server is still up and answering
    finally:
        server.kill()
        await server.wait()


@pytest.mark.parametrize("address", ["host:abc", "127.0.0.1", "127.0.0.1:70000", ":-1"])
async def test_a_malformed_tcp_address_is_one_usage_line(address):
    server = await asyncio.create_subprocess_exec(*SERVER, "--tcp", address, stderr=asyncio.subprocess.PIPE)
    _, error = await asyncio.wait_for(server.communicate(), BOUND * 10)
    assert server.returncode == 2 and "Traceback" not in error.decode()
    assert "is not HOST:PORT" in error.decode().splitlines()[-1]


async def test_a_taken_port_is_one_line_and_status_1():
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        server = await asyncio.create_subprocess_exec(*SERVER, "--tcp", f"127.0.0.1:{port}",
                                                      stderr=asyncio.subprocess.PIPE)
        _, error = await asyncio.wait_for(server.communicate(), BOUND * 10)
    assert server.returncode == 1 and "Traceback" not in error.decode()
    assert error.decode().strip().splitlines() == [f"assistant lsp: cannot listen on 127.0.0.1:{port}: "
                                                   f"{error.decode().split(': ', 2)[2].strip()}"]
