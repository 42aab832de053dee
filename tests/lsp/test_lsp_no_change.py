"""A rewrite whose finished answer made no edit (`Result.unchanged`: nothing, only the layout or only
comments changed) is told as "no change made", naming what did change, with `window/showMessage`,
and its answer says `"unchanged": true`; an answer that edits says nothing of the kind. A pytest-lsp
client drives `assistant lsp` with a scripted engine (`scripted_server.py`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import pytest_lsp
from pytest_lsp import ClientServerConfig, LanguageClient
from test_lsp import INITIALIZE, command, editor_client, open_buffer

pytestmark = pytest.mark.asyncio(loop_scope="module")

SERVER = [sys.executable, str(Path(__file__).with_name("scripted_server.py"))]
DOCUMENT = "def f(x):\n    return x + 1\n"


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER, client_factory=editor_client), scope="module")
async def client(lsp_client: LanguageClient):
    await lsp_client.initialize_session(INITIALIZE)
    yield
    await lsp_client.shutdown_session()


@pytest.mark.parametrize("answer, change, told", [
    (DOCUMENT, "none", "no change made: the answer is the text as it was"),
    (DOCUMENT.replace("x + 1", "x+1"), "layout", "no change made: only the layout changed"),
    (DOCUMENT.replace("1\n", "1  # one\n"), "comments", "no change made: only comments changed"),
    (DOCUMENT.replace("x + 1", "x + 2"), "edit", None),
])
async def test_an_answer_that_made_no_edit_is_told_as_no_change(client: LanguageClient, answer, change, told):
    uri = open_buffer(client, f"no-change-{change}", DOCUMENT)
    messages = len(client.messages)
    script = {"streamed": answer, "final": answer, "problems": [], "change": change}
    result = await command(client, "assistant.rewriteDocument", uri, json.dumps(script))
    said = [m.message for m in client.messages[messages:]]
    assert result["unchanged"] == (told is not None) and result["change"] == change
    if told is None:
        assert not any("no change made" in message for message in said)
    else:
        assert any(message.startswith(f"assistant: {told}") for message in said), said
    if result["hunks"]:
        await command(client, "assistant.rejectAll", uri)
