"""The language server on a remote engine (`assistant lsp --engine URL`): a rewrite streams into review and
is accepted with its attribution as with the model in-process, whether the engine is `assistant serve` or
a real vLLM server (the `vllm` fixture; skipped where vLLM is not set up). A pytest-lsp client drives it."""

from __future__ import annotations

import os

import pytest
import pytest_asyncio
from pytest_lsp import ClientServerConfig, LanguageClient
from test_lsp import CODE, INITIALIZE, SERVER, command, editor_client, open_buffer

pytestmark = pytest.mark.asyncio(loop_scope="module")


@pytest_asyncio.fixture(scope="module", loop_scope="module", params=["served_engine", "vllm"])
async def client(request):
    url = request.getfixturevalue(request.param)
    config = ClientServerConfig(server_command=[*SERVER, "--engine", url], client_factory=editor_client,
                                server_env={**os.environ, "ASSISTANT_API_KEY": ""})
    client = await config.start()
    await client.initialize_session(INITIALIZE)
    yield client
    await client.shutdown_session()
    await client.stop()


async def test_a_rewrite_on_a_remote_engine_is_reviewed_and_accepted(client: LanguageClient):
    uri = open_buffer(client, "remote")
    result = await command(client, "assistant.rewriteDocument", uri, "fix bugs")
    assert result["uri"] == uri and result["stopped"] in ("eos", "length") and not result["conflict"]
    assert client.editor.attributions[-1].uri == uri

    await command(client, "assistant.acceptAll", uri)
    text = client.editor.buffers[uri][0]
    assert text == result["text"]
    assert all(text[a:b] == CODE[c:d] for (a, b), (c, d) in ((s["output"], s["source"]) for s in result["spans"]))
