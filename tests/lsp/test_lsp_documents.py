"""The server's copy of a document is the editor's: lines end at "\\n", "\\r\\n" and "\\r" only, whatever
else the text holds (the characters where `str.splitlines` also breaks), in every position encoding.

Edits are made here the way an editor makes them, their positions counted by a reference written for
this test (not `lsp.ranges`): first on `lsp.documents.Document` alone, many of them, then through
`assistant lsp` over stdio, where a rewrite after them must land where the editor expects."""

from __future__ import annotations

import random
import re

import pytest
import pytest_lsp
from lsprotocol import types
from pygls.workspace import PositionCodec
from pytest_lsp import ClientServerConfig, LanguageClient
from test_lsp import SERVER, command, editor_client, open_buffer, type_into

from assistant.lsp.documents import Document

CODECS = {"utf-8": ("utf-8", 1), "utf-16": ("utf-16-le", 2), "utf-32": ("utf-32-le", 4)}  # bytes per code unit
ENCODINGS = tuple(CODECS)
ODD = ("\x0b", "\x0c", "\x1c", "\x1d", "\x1e", "\x85", "\u2028", "\u2029")  # str.splitlines breaks at each
BREAKS = ("\n", "\r\n", "\r")
TYPED = ODD + BREAKS + ("x", "é", "😀", "def f():\n    pass\n")
TEXTS = {
    "form feed": "import os\x0c\ndef a():\n\x0c    return 1\n",
    "separators": "x = 1\u2028y = 2\u2029z = 3\nw = 4\n",
    "nel and controls": "a\x85b\x0bc\x1cd\x1de\x1ef\r\ng\rh\n",
    "every break": "".join(f"line {i}{odd}{brk}" for i, (odd, brk) in enumerate(zip(ODD, BREAKS * 3))),
}
LINE_BREAK = re.compile(r"\r\n|\r|\n")
LINE = re.compile(r"[^\r\n]*(?:\r\n|\r|\n)|[^\r\n]+\Z")  # a line and its break, or the last line without one


def units(text: str, encoding: str) -> int:
    codec, width = CODECS[encoding]
    return len(text.encode(codec)) // width


def position(text: str, offset: int, encoding: str) -> types.Position:
    """The LSP position of `offset`: LSP's three line breaks before it, code units since the last."""
    breaks = list(LINE_BREAK.finditer(text[:offset]))
    start = breaks[-1].end() if breaks else 0
    return types.Position(line=len(breaks), character=units(text[start:offset], encoding))


def splits_a_break(text: str, offset: int) -> bool:
    return 0 < offset < len(text) and text[offset - 1:offset + 1] == "\r\n"


def edits(text: str, seed: int, count: int):
    """Up to `count` edits an editor could send for `text` as it changes, none inside a "\\r\\n": the start and
    end offsets of each, the text typed there, and the text after it."""
    rng = random.Random(seed)
    for _ in range(count):
        start, end = sorted(rng.randrange(len(text) + 1) for _ in range(2))
        if splits_a_break(text, start) or splits_a_break(text, end):
            continue
        typed = "".join(rng.choice(TYPED) for _ in range(rng.randrange(3)))
        yield start, end, typed, text[:start] + typed + text[end:]
        text = text[:start] + typed + text[end:]


@pytest.mark.parametrize("encoding", ENCODINGS)
@pytest.mark.parametrize("name", TEXTS)
def test_incremental_changes_land_where_the_editor_made_them(name, encoding):
    text = TEXTS[name]
    document = Document("file:///tmp/odd.py", text, version=1, position_codec=PositionCodec(encoding))
    for start, end, typed, after in edits(text, seed=len(name), count=300):
        document.apply_change(types.TextDocumentContentChangePartial(
            range=types.Range(start=position(text, start, encoding), end=position(text, end, encoding)), text=typed))
        assert document.source == after
        assert document.lines == tuple(LINE.findall(after))
        text = after


def test_a_character_past_the_end_of_its_line_means_the_line_end():
    document = Document("file:///tmp/past.py", "ab\x0ccd\r\nef", version=1)
    document.apply_change(types.TextDocumentContentChangePartial(
        range=types.Range(start=types.Position(line=0, character=99), end=types.Position(line=1, character=0)),
        text="!"))
    assert document.source == "ab\x0ccd!ef"


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER, client_factory=editor_client),
                    scope="module", params=ENCODINGS)
async def client(lsp_client: LanguageClient, request):
    lsp_client.editor.encoding = request.param
    await lsp_client.initialize_session(types.InitializeParams(capabilities=types.ClientCapabilities(
        general=types.GeneralClientCapabilities(position_encodings=[request.param]),
        workspace=types.WorkspaceClientCapabilities(apply_edit=True))))
    yield
    await lsp_client.shutdown_session()


@pytest.mark.asyncio(loop_scope="module")
async def test_a_rewrite_after_edits_past_odd_line_breaks_lands_where_the_editor_expects(client: LanguageClient):
    encoding = client.editor.encoding
    text = "".join(TEXTS.values())
    uri = open_buffer(client, f"odd-{encoding}", text)
    for start, end, typed, after in edits(text, seed=7, count=40):  # the server follows each, as an editor sends it
        type_into(client, uri, types.Range(start=position(text, start, encoding), end=position(text, end, encoding)),
                  typed, after)
        text = after
    end, tail = position(text, len(text), encoding), "\n\ndef add(a, b):\n    return a - b\n"
    type_into(client, uri, types.Range(start=end, end=end), tail, text + tail)
    text += tail
    target = (text.index("def add"), len(text))
    selection = {"start": as_json(position(text, target[0], encoding)), "end": as_json(position(text, target[1], encoding))}
    result = await command(client, "assistant.rewriteSelection", uri, selection, "fix bugs")
    assert not result["conflict"] and result["stopped"] == "eos"
    assert client.editor.buffers[uri][0] == text[:target[0]] + result["text"] + text[target[1]:]
    assert result["spans"]
    for span in result["spans"]:  # the sources are offsets into the server's copy: the editor's text
        (a, b), (c, d) = span["output"], span["source"]
        assert result["text"][a:b] == text[c:d]


def as_json(point: types.Position) -> dict:
    return {"line": point.line, "character": point.character}
