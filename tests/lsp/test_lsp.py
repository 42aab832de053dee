"""The language server end to end: a pytest-lsp client drives `assistant lsp` (a subprocess over stdio)
with the real embedded model, applying the server's edits to its own copy of each buffer the way an
editor does (didChange first, then the applyEdit answer)."""

from __future__ import annotations

import ast
import asyncio
import sys
from dataclasses import dataclass, field

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient, make_test_lsp_client

from assistant.lsp.ranges import offsets_of, position_at, range_at, to_json

pytestmark = pytest.mark.asyncio(loop_scope="module")

SERVER = [sys.executable, "-m", "assistant.cli", "lsp"]
CODE = "import math\n\n\ndef add(a, b):\n    return a - b\n\n\nprint(add(1, 2))\n"
ADD = (CODE.index("def add"), CODE.index("\n\n\nprint"))  # the function, as offsets
SHORT = "def fib(n):\n    pass\n"  # the model writes past its token limit on LONG_ANSWER: a long stream
LONG_ANSWER = "add a detailed docstring to every function, with examples"


@dataclass
class Editor:
    """The test client's buffers, and hooks that run when the server edits one (to type, cancel, close)."""

    buffers: dict[str, list] = field(default_factory=dict)  # uri -> [text, version]
    on_edit: dict[str, object] = field(default_factory=dict)
    attributions: list[dict] = field(default_factory=list)
    diffs: list[dict] = field(default_factory=list)  # the assistant/diff notifications
    edits: int = 0
    encoding: str = "utf-16"  # the position encoding the server chose
    keep_crlf: bool = False  # like Neovim's fileformat=dos: a line break typed into a CRLF buffer becomes \r\n
    refuse: bool = False  # decline every edit
    silent: asyncio.Event | None = None  # answer no request of the server's until this is set
    hold: asyncio.Event | None = None  # sit on the next edit until this is set
    holding: bool = False
    stale: int = 0  # edits refused because they named an old version


def editor_client() -> LanguageClient:
    client = make_test_lsp_client()
    client.editor = Editor()


    @client.feature(types.WORKSPACE_APPLY_EDIT)
    async def apply_edit(client: LanguageClient, params: types.ApplyWorkspaceEditParams):
        if client.editor.silent is not None:
            await client.editor.silent.wait()
            return types.ApplyWorkspaceEditResult(applied=False, failure_reason="too late")
        if client.editor.hold is not None:
            client.editor.holding = True
            await client.editor.hold.wait()
            client.editor.hold, client.editor.holding = None, False
        if client.editor.refuse:
            return types.ApplyWorkspaceEditResult(applied=False, failure_reason="declined by the user")
        for change in params.edit.document_changes or []:
            uri = change.text_document.uri
            text, version = client.editor.buffers[uri]
            if change.text_document.version != version:
                client.editor.stale += 1
                return types.ApplyWorkspaceEditResult(applied=False, failure_reason="stale version")
            for edit in change.edits:
                start, end = offsets_of(text, edit.range, client.editor.encoding)
                new_text = edit.new_text
                if client.editor.keep_crlf and "\r\n" in text:
                    new_text = new_text.replace("\r\n", "\n").replace("\n", "\r\n")
                text = text[:start] + new_text + text[end:]
                type_into(client, uri, edit.range, new_text, text)
            client.editor.edits += 1
            if (hook := client.editor.on_edit.get(uri)) is not None and hook(client, uri, edit):
                del client.editor.on_edit[uri]
        return types.ApplyWorkspaceEditResult(applied=True)

    create_progress = client.protocol.fm.features[types.WINDOW_WORK_DONE_PROGRESS_CREATE]

    async def create_progress_unless_silent(params):
        if client.editor.silent is not None:
            await client.editor.silent.wait()
        return create_progress(params)

    client.protocol.fm.features[types.WINDOW_WORK_DONE_PROGRESS_CREATE] = create_progress_unless_silent

    @client.feature("assistant/attribution")
    def attribution(client: LanguageClient, params):
        client.editor.attributions.append(params)

    @client.feature("assistant/diff")
    def diff(client: LanguageClient, params):
        client.editor.diffs.append(params)

    return client


def type_into(client: LanguageClient, uri: str, range_: types.Range, new_text: str, text_after: str) -> None:
    """Change the client's buffer and tell the server, as an editor does for any edit."""
    version = client.editor.buffers[uri][1] + 1
    client.editor.buffers[uri] = [text_after, version]
    client.text_document_did_change(types.DidChangeTextDocumentParams(
        text_document=types.VersionedTextDocumentIdentifier(uri=uri, version=version),
        content_changes=[types.TextDocumentContentChangePartial(range=range_, text=new_text)]))


def type_at(client: LanguageClient, uri: str, offset: int, typed: str) -> None:
    text = client.editor.buffers[uri][0]
    position = position_at(text, offset, client.editor.encoding)
    type_into(client, uri, types.Range(start=position, end=position), typed, text[:offset] + typed + text[offset:])


def open_buffer(client: LanguageClient, name: str, text: str = CODE) -> str:
    uri = f"file:///tmp/assistant-lsp-test/{name}.py"
    client.editor.buffers[uri] = [text, 1]
    client.text_document_did_open(types.DidOpenTextDocumentParams(
        text_document=types.TextDocumentItem(uri=uri, language_id="python", version=1, text=text)))
    return uri


def lsp_range(text: str, start: int, end: int, encoding: str = "utf-16") -> dict:
    return to_json(range_at(text, start, end, encoding))


async def command(client: LanguageClient, name: str, *arguments):
    return await client.workspace_execute_command_async(
        types.ExecuteCommandParams(command=name, arguments=list(arguments)))


async def rewrite_selection(client, uri, start, end, instruction="fix bugs"):
    return await command(client, "assistant.rewriteSelection", uri, lsp_range(CODE, start, end), instruction)


INITIALIZE = types.InitializeParams(capabilities=types.ClientCapabilities(
    window=types.WindowClientCapabilities(work_done_progress=True),
    workspace=types.WorkspaceClientCapabilities(apply_edit=True)))


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER, client_factory=editor_client), scope="module")
async def client(lsp_client: LanguageClient):
    await lsp_client.initialize_session(INITIALIZE)
    yield
    await lsp_client.shutdown_session()


async def test_rewrite_selection_streams_into_the_buffer(client: LanguageClient):
    uri = open_buffer(client, "selection")
    result = await rewrite_selection(client, uri, *ADD)
    assert result["uri"] == uri and result["stopped"] == "eos" and not result["conflict"]
    assert set(CODE.splitlines()) <= set(client.editor.buffers[uri][0].splitlines())  # the original in view
    reports = [r for reports in client.progress_reports.values() for r in reports]
    assert any(isinstance(r, types.WorkDoneProgressReport) and "tokens/s" in (r.message or "") for r in reports)
    assert client.editor.attributions[-1].uri == uri

    await command(client, "assistant.reject", uri)
    assert client.editor.buffers[uri][0] == CODE
    assert len(client.editor.attributions[-1].spans) == 0


async def test_rewrite_document_hover_and_highlight(client: LanguageClient):
    uri = open_buffer(client, "document")
    result = await command(client, "assistant.rewriteDocument", uri, "fix bugs")
    await command(client, "assistant.accept", uri)
    text = client.editor.buffers[uri][0]
    assert text == result["text"]
    notice = client.editor.attributions[-1]
    assert notice.uri == uri and notice.spans

    span = max(result["spans"], key=lambda s: s["output"][1] - s["output"][0])
    (a, b), (c, d) = span["output"], span["source"]
    assert text[a:b] == CODE[c:d]
    where = position_at(text, a)
    hover = await client.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=where))
    first, last = position_at(CODE, c).line + 1, position_at(CODE, d).line + 1
    assert (f"lines {first}–{last}" if first != last else f"line {first}") in hover.contents.value
    assert CODE[c:d] in hover.contents.value

    found = await client.text_document_document_highlight_async(types.DocumentHighlightParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=where))
    assert found and all(text[slice(*offsets_of(text, h.range))] == CODE[c:d] for h in found)

    # typing before the attributed output moves its ranges along
    type_at(client, uri, 0, "# hi\n")
    moved = position_at(client.editor.buffers[uri][0], a + 5)
    hover = await client.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=uri), position=moved))
    assert hover is not None and CODE[c:d] in hover.contents.value


async def test_code_actions(client: LanguageClient):
    uri = open_buffer(client, "actions")
    actions = await client.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), range=range_at(CODE, *ADD),
        context=types.CodeActionContext(diagnostics=[])))
    titles = [a.title for a in actions]
    assert "Rewrite selection…" in titles and "Rewrite document…" in titles
    assert any("add type hints" in t for t in titles)
    prompt = next(a for a in actions if a.title == "Rewrite selection…")
    # lsprotocol reads any code action that carries a command as a Command, stringifying the nested one
    command = ast.literal_eval(prompt.command)
    assert command["command"] == "assistant.rewriteSelection" and len(command["arguments"]) == 2


async def test_cancel_mid_stream_leaves_a_consistent_buffer(client: LanguageClient):
    uri = open_buffer(client, "cancel", SHORT)

    def cancel(client, uri, edit):
        asyncio.ensure_future(command(client, "assistant.cancel", uri))
        return True

    client.editor.on_edit[uri] = cancel
    result = await command(client, "assistant.rewriteDocument", uri, LONG_ANSWER)
    assert result["stopped"] == "cancelled"
    assert client.editor.buffers[uri][0] == result["text"] == SHORT


async def test_progress_cancel_stops_the_rewrite(client: LanguageClient):
    uri = open_buffer(client, "progress-cancel", SHORT)

    def cancel(client, uri, edit):
        token = next(token for token, reports in reversed(client.progress_reports.items())
                     if reports and getattr(reports[0], "title", "") == "Assistant rewrite")
        client.window_work_done_progress_cancel(types.WorkDoneProgressCancelParams(token=token))
        return True

    client.editor.on_edit[uri] = cancel
    result = await command(client, "assistant.rewriteDocument", uri, LONG_ANSWER)
    assert result["stopped"] == "cancelled"
    assert client.editor.buffers[uri][0] == result["text"] == SHORT


async def test_cancel_request_stops_the_rewrite(client: LanguageClient):
    uri = open_buffer(client, "cancel-request", SHORT)

    def cancel(client, uri, edit):
        client.protocol.notify("$/cancelRequest", types.CancelParams(id="rewrite-to-cancel"))
        return True

    client.editor.on_edit[uri] = cancel
    request = client.protocol.send_request_async(types.WORKSPACE_EXECUTE_COMMAND, types.ExecuteCommandParams(
        command="assistant.rewriteDocument", arguments=[uri, LONG_ANSWER]), msg_id="rewrite-to-cancel")
    with pytest.raises(Exception, match="cancel"):
        await request
    while True:  # the cancelled request answers at once; the rewrite then stops and writes its last edit
        try:
            await command(client, "assistant.accept", uri)
            break
        except Exception:
            await asyncio.sleep(0.1)
    assert client.editor.buffers[uri][0] == SHORT
    ends = [r for reports in client.progress_reports.values() for r in reports if isinstance(r, types.WorkDoneProgressEnd)]
    assert ends[-1].message == "cancelled"


async def test_typing_inside_the_target_stops_the_rewrite(client: LanguageClient):
    uri = open_buffer(client, "inside")
    messages = len(client.messages)

    def type_inside(client, uri, edit):
        if len(edit.new_text) < 2:
            return False
        type_at(client, uri, ADD[0] + 1, "TYPED")
        return True

    client.editor.on_edit[uri] = type_inside
    result = await rewrite_selection(client, uri, *ADD, "add docstrings")
    assert result["conflict"]
    assert "TYPED" in client.editor.buffers[uri][0]
    assert any("edited the text being rewritten" in m.message for m in client.messages[messages:])
    assert client.editor.diffs[-1].uri == uri and client.editor.diffs[-1].hunks == []  # no marks left
    with pytest.raises(Exception, match="no rewrite to reject"):
        await command(client, "assistant.reject", uri)


async def test_typing_elsewhere_does_not_stop_the_rewrite(client: LanguageClient):
    uri = open_buffer(client, "elsewhere")

    def type_before(client, uri, edit):
        type_at(client, uri, 0, "# typed\n")
        return True

    client.editor.on_edit[uri] = type_before
    result = await rewrite_selection(client, uri, *ADD)
    assert not result["conflict"] and result["stopped"] == "eos"
    await command(client, "assistant.accept", uri)
    assert client.editor.buffers[uri][0] == "# typed\n" + CODE[:ADD[0]] + result["text"] + CODE[ADD[1]:]


@pytest.mark.parametrize("name, arguments, error", [
    ("assistant.rewriteDocument", ["file:///nowhere.py", "fix bugs"], "not open"),
    ("assistant.rewriteDocument", [None, "fix bugs"], "expected 2 arguments"),
    ("assistant.rewriteDocument", ["{uri}"], "expected 2 arguments"),
    ("assistant.rewriteDocument", ["{uri}", "   "], "instruction is empty"),
    ("assistant.rewriteSelection", ["{uri}", {"start": {"line": 40, "character": 0},
                                              "end": {"line": 41, "character": 0}}, "fix bugs"], "outside"),
    ("assistant.rewriteSelection", ["{uri}", {"start": 3}, "fix bugs"], "not an LSP range"),
    ("assistant.accept", ["{uri}"], "no finished rewrite"),
])
async def test_bad_requests_leave_the_buffer_alone(client: LanguageClient, name, arguments, error):
    uri = open_buffer(client, "bad")
    arguments = [uri if a == "{uri}" else a for a in arguments]
    with pytest.raises(Exception, match=error):
        await command(client, name, *arguments)
    assert client.editor.buffers[uri] == [CODE, 1]


async def test_second_rewrite_of_a_busy_document_is_refused(client: LanguageClient):
    uri = open_buffer(client, "busy")
    second = []

    def start_another(client, uri, edit):
        second.append(asyncio.ensure_future(command(client, "assistant.rewriteDocument", uri, "simplify")))
        return True

    client.editor.on_edit[uri] = start_another
    result = await rewrite_selection(client, uri, *ADD)
    with pytest.raises(Exception, match="already being rewritten"):
        await second[0]
    await command(client, "assistant.accept", uri)
    assert client.editor.buffers[uri][0] == CODE[:ADD[0]] + result["text"] + CODE[ADD[1]:]


async def test_closing_the_document_mid_rewrite(client: LanguageClient):
    uri = open_buffer(client, "closed")

    def close(client, uri, edit):
        client.text_document_did_close(types.DidCloseTextDocumentParams(
            text_document=types.TextDocumentIdentifier(uri=uri)))
        return True

    client.editor.on_edit[uri] = close
    with pytest.raises(Exception, match="closed"):
        await rewrite_selection(client, uri, *ADD, "add docstrings")
    # the server is still there
    other = open_buffer(client, "after-close")
    assert await client.text_document_hover_async(types.HoverParams(
        text_document=types.TextDocumentIdentifier(uri=other), position=types.Position(line=0, character=0))) is None


@pytest_lsp.fixture(config=ClientServerConfig(server_command=[*SERVER, "--model", "/nonexistent/model"],
                                              client_factory=editor_client), scope="module")
async def broken(lsp_client: LanguageClient):
    await lsp_client.initialize_session(INITIALIZE)
    yield
    await lsp_client.shutdown_session()


async def test_a_model_that_fails_to_load(broken: LanguageClient):
    uri = open_buffer(broken, "broken")
    with pytest.raises(Exception, match="failed to load"):
        await command(broken, "assistant.rewriteDocument", uri, "fix bugs")
    assert broken.editor.buffers[uri] == [CODE, 1]
    assert any("failed to load" in m.message for m in broken.messages)
    actions = await broken.text_document_code_action_async(types.CodeActionParams(
        text_document=types.TextDocumentIdentifier(uri=uri), range=range_at(CODE, 0, 0),
        context=types.CodeActionContext(diagnostics=[])))
    assert actions
