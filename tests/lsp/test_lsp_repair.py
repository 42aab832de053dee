"""A rewrite whose answer the engine repaired after it streamed: the final edit turns the streamed diff
into the diff of the answer kept, and the answer's problems become diagnostics on their hunk until it
is decided. A pytest-lsp client drives `assistant lsp` with a scripted engine (`scripted_server.py`)."""

from __future__ import annotations

import json
import sys
from pathlib import Path

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient
from test_lsp import INITIALIZE, command, editor_client, open_buffer

pytestmark = pytest.mark.asyncio(loop_scope="module")

SERVER = [sys.executable, str(Path(__file__).with_name("scripted_server.py"))]
DOCUMENT = "a = 1\nb = 2\nc = 3\n"
STREAMED = "a = 1\nb = 20\nc = 3\n"  # what streamed before the repair
FINAL = "a = 10\nb = 2\nc = 3\n"  # the answer kept


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER, client_factory=editor_client), scope="module")
async def client(lsp_client: LanguageClient):
    await lsp_client.initialize_session(INITIALIZE)
    yield
    await lsp_client.shutdown_session()


async def test_the_answer_kept_replaces_what_streamed_and_its_problems_show_until_decided(client: LanguageClient):
    uri = open_buffer(client, "repaired", DOCUMENT)
    script = {"streamed": STREAMED, "final": FINAL, "problems": [[4, 6, "a changed constant"]]}
    result = await command(client, "assistant.rewriteDocument", uri, json.dumps(script))
    assert result["text"] == FINAL and result["hunks"] == 1
    assert client.editor.buffers[uri][0] == "a = 1\na = 10\nb = 2\nc = 3\n"  # no trace of the streamed b = 20
    reports = [r for reports in client.progress_reports.values() for r in reports]
    assert any("repairing" in (getattr(r, "message", "") or "") for r in reports)

    (diagnostic,) = client.diagnostics[uri]
    assert (diagnostic.source, diagnostic.message, diagnostic.code) == ("assistant", "a changed constant", "F821")
    assert diagnostic.range == types.Range(types.Position(1, 4), types.Position(1, 6))  # on the new line

    await command(client, "assistant.acceptAll", uri)
    assert client.editor.buffers[uri][0] == FINAL
    assert not client.diagnostics[uri]  # cleared once decided
