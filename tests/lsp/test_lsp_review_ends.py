"""However a review ends, each hunk ends as exactly its old text or exactly its new text, the user's
typing kept in the side it was typed in: typing in a hunk's new lines accepts it, in its old lines
rejects it, deleting one side whole keeps the other, typing that stops a streaming rewrite keeps the
hunk typed in and puts the others back; a client that shows removed lines itself (`removedLines:
"virtual"`) holds only the answer's lines. A pytest-lsp client drives `assistant lsp` with a scripted
engine (`scripted_server.py`)."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient
from test_lsp import INITIALIZE, command, editor_client, open_buffer, type_at, type_into

from assistant.lsp.ranges import range_at

pytestmark = pytest.mark.asyncio(loop_scope="module")

SERVER = [sys.executable, str(Path(__file__).with_name("scripted_server.py"))]
DOCUMENT = "def f(x):\n    return x + 1\n\n\ndef g(y):\n    return y * 2\n"
ANSWER = "def f(x):\n    return x + 10\n\n\ndef g(y):\n    return y * 20\n"
SCRIPT = json.dumps({"streamed": ANSWER, "final": ANSWER, "problems": []})
REVIEW = DOCUMENT.replace("1\n", "1\n    return x + 10\n").replace("2\n", "2\n    return y * 20\n")  # both sides


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER, client_factory=editor_client), scope="module")
async def client(lsp_client: LanguageClient):
    await lsp_client.initialize_session(INITIALIZE)
    yield
    await lsp_client.shutdown_session()


VIRTUAL = types.InitializeParams(capabilities=INITIALIZE.capabilities, initialization_options={"removedLines": "virtual"})


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER, client_factory=editor_client), scope="module")
async def virtual(lsp_client: LanguageClient):
    await lsp_client.initialize_session(VIRTUAL)
    yield
    await lsp_client.shutdown_session()


async def until(check) -> None:
    """Wait until `check()` holds (the server's edit and notice follow the typing), 30 s at most."""
    for _ in range(600):
        if check():
            return
        await asyncio.sleep(0.05)


async def settled(client: LanguageClient, uri: str, text: str) -> str:
    """The buffer once it holds `text` and the server has said what it shows, or as it is after 30 s."""
    await until(lambda: client.editor.buffers[uri][0] == text and client.editor.diffs[-1].version == client.editor.buffers[uri][1])
    return client.editor.buffers[uri][0]


async def review(client: LanguageClient, name: str) -> tuple[str, dict]:
    uri = open_buffer(client, name, DOCUMENT)
    result = await command(client, "assistant.rewriteDocument", uri, SCRIPT)
    assert result["hunks"] == 2
    return uri, result


def type_after(client: LanguageClient, uri: str, line: str, typed: str) -> None:
    text = client.editor.buffers[uri][0]
    type_at(client, uri, text.index(line) + len(line), typed)


async def test_typing_in_a_hunks_new_line_accepts_it_and_accepting_all_leaves_only_the_answer(client):
    uri, result = await review(client, "typed-new")
    assert client.editor.buffers[uri][0] == REVIEW
    type_after(client, uri, "return x + 10", "  # checked")
    typed = ANSWER.replace("x + 10", "x + 10  # checked")
    expected = REVIEW.replace("    return x + 1\n", "").replace("x + 10", "x + 10  # checked")
    assert await settled(client, uri, expected) == expected  # hunk 0's old line went, the typing stayed
    assert [hunk.index for hunk in client.editor.diffs[-1].hunks] == [1]
    with pytest.raises(Exception, match="hunk 0 is not an undecided hunk"):
        await command(client, "assistant.rejectHunk", uri, result["id"], 0)
    assert await command(client, "assistant.acceptAll", uri) == {
        "uri": uri, "id": result["id"], "accepted": True, "remaining": 0}
    assert client.editor.buffers[uri][0] == typed


async def test_typing_in_a_hunks_old_line_rejects_it_and_rejecting_all_leaves_only_the_original(client):
    uri, _ = await review(client, "typed-old")
    type_after(client, uri, "return y * 2", "  # kept")
    expected = REVIEW.replace("    return y * 20\n", "").replace("y * 2\n", "y * 2  # kept\n")
    assert await settled(client, uri, expected) == expected
    await command(client, "assistant.rejectAll", uri)
    assert client.editor.buffers[uri][0] == DOCUMENT.replace("y * 2\n", "y * 2  # kept\n")


async def test_deleting_a_side_whole_keeps_the_other(client):
    uri, _ = await review(client, "deleted-side")
    text = client.editor.buffers[uri][0]
    start = text.index("    return x + 1\n")  # hunk 0's old line: it is accepted
    type_into(client, uri, range_at(text, start, start + len("    return x + 1\n")), "",
              text[:start] + text[start + len("    return x + 1\n"):])
    text = client.editor.buffers[uri][0]
    start = text.index("    return y * 20\n")  # hunk 1's new line: it is rejected
    type_into(client, uri, range_at(text, start, start + len("    return y * 20\n")), "",
              text[:start] + text[start + len("    return y * 20\n"):])
    expected = ANSWER.replace("y * 20", "y * 2")
    assert await settled(client, uri, expected) == expected
    assert client.editor.diffs[-1].hunks == []


async def test_typing_that_stops_a_streaming_rewrite_keeps_its_hunk_and_puts_back_the_rest(client):
    uri = open_buffer(client, "typed-streaming", DOCUMENT)

    def type_in_first_hunk(client, uri, edit):
        type_after(client, uri, "return x + 10", "  # mine")
        return True

    client.editor.on_edit[uri] = type_in_first_hunk
    messages = len(client.messages)
    result = await command(client, "assistant.rewriteDocument", uri, SCRIPT)
    assert result["conflict"] and result["hunks"] == 0 and not result["restored"]
    assert client.editor.buffers[uri][0] == DOCUMENT.replace("x + 1\n", "x + 10  # mine\n")
    assert any("rewrite stopped" in m.message for m in client.messages[messages:])
    assert client.editor.diffs[-1].hunks == []


async def test_a_new_rewrite_waits_and_closing_ends_the_review(client):
    uri, _ = await review(client, "closed-review")
    with pytest.raises(Exception, match="wait for a decision"):
        await command(client, "assistant.rewriteDocument", uri, SCRIPT)
    client.text_document_did_close(types.DidCloseTextDocumentParams(text_document=types.TextDocumentIdentifier(uri=uri)))
    with pytest.raises(Exception, match="no finished rewrite"):  # the review is gone with the document
        await command(client, "assistant.acceptAll", uri)
    uri, _ = await review(client, "closed-review")  # opened again (from the file): a new review


async def test_a_client_that_shows_removed_lines_itself_holds_only_the_answer(virtual):
    uri, result = await review(virtual, "virtual")
    assert virtual.editor.buffers[uri][0] == ANSWER
    first, second = virtual.editor.diffs[-1].hunks
    assert (first.old.start, first.old.end, first.new.start, first.new.end) == (1, 1, 1, 2)
    assert first.removed == ["    return x + 1"] and second.removed == ["    return y * 2"]
    type_after(virtual, uri, "return x + 10", "  # checked")
    await until(lambda: [hunk.index for hunk in virtual.editor.diffs[-1].hunks] == [1])  # typed in: accepted
    await command(virtual, "assistant.rejectHunk", uri, result["id"], 1)
    assert virtual.editor.buffers[uri][0] == DOCUMENT.replace("x + 1\n", "x + 10  # checked\n")
