"""A rewrite reviewed hunk by hunk, end to end: a pytest-lsp client drives `assistant lsp` with the
embedded model. While the answer streams the buffer keeps every original line; the finished diff
is listed by `assistant/diff` and by code lenses; rejecting a hunk brings its original text back
exactly, accepting the rest leaves the answer with that hunk's original text, accepting all leaves
exactly the answer; the user's typing elsewhere is followed and no edit names a stale version."""

from __future__ import annotations

import pytest
import pytest_lsp
from lsprotocol import types
from pytest_lsp import ClientServerConfig, LanguageClient
from test_lsp import INITIALIZE, SERVER, command, editor_client, lsp_range, open_buffer, type_at

pytestmark = pytest.mark.asyncio(loop_scope="module")

SHAPES = '''def area(width, height):
    return width * height


def perimeter(width, height):
    return 2 * (width + height)


print(area(3, 4), perimeter(3, 4))
'''
RENAME = "Rename the function area to rectangle_area."


@pytest_lsp.fixture(config=ClientServerConfig(server_command=SERVER, client_factory=editor_client), scope="module")
async def client(lsp_client: LanguageClient):
    await lsp_client.initialize_session(INITIALIZE)
    yield
    await lsp_client.shutdown_session()


def in_order(lines: list[str], within: list[str]) -> bool:
    """Whether `lines` appear in `within` in their order (others may come between)."""
    found = iter(within)
    return all(any(line == other for other in found) for line in lines)


def lines_of(text: str, span) -> list[str]:
    return text.splitlines(keepends=True)[span.start:span.end]


async def lenses(client: LanguageClient, uri: str) -> list[types.CodeLens]:
    return await client.text_document_code_lens_async(types.CodeLensParams(
        text_document=types.TextDocumentIdentifier(uri=uri)))


async def test_reject_one_hunk_then_accept_the_rest(client: LanguageClient):
    uri = open_buffer(client, "review", SHAPES)
    seen: list[str] = []

    def snapshot(client, uri, edit):
        seen.append(client.editor.buffers[uri][0])
        return False

    client.editor.on_edit[uri] = snapshot
    stale = client.editor.stale
    result = await command(client, "assistant.rewriteDocument", uri, RENAME)
    del client.editor.on_edit[uri]
    answer = result["text"]
    assert result["stopped"] == "eos" and result["hunks"] >= 2, result
    # while it streamed and now, every original line is in view, in its order
    assert len(seen) > 1 and all(in_order(SHAPES.splitlines(), text.splitlines()) for text in seen)

    text = client.editor.buffers[uri][0]
    notice = client.editor.diffs[-1]
    assert notice.uri == uri and notice.id == result["id"] and not notice.streaming
    hunks = {hunk.index: hunk for hunk in notice.hunks}
    assert sorted(hunks) == list(range(result["hunks"]))
    removed = [line for hunk in notice.hunks for line in lines_of(text, hunk.old)]
    added = [line for hunk in notice.hunks for line in lines_of(text, hunk.new)]
    assert in_order(removed, SHAPES.splitlines(keepends=True)) and in_order(added, answer.splitlines(keepends=True))

    found = await lenses(client, uri)
    titles = [lens.command.title for lens in found]
    assert titles.count("Accept all") == 1 and titles.count("Reject all") == 1
    assert titles.count("Accept") == titles.count("Reject") == len(hunks)
    for lens in found:
        if lens.command.command in ("assistant.acceptHunk", "assistant.rejectHunk"):
            index = lens.command.arguments[2]
            assert list(lens.command.arguments[:2]) == [uri, result["id"]]
            assert lens.range.start.line == hunks[index].old.start

    # reject the hunk that deletes the last line: that line is back, exactly
    last = next(hunk for hunk in notice.hunks if "print(" in "".join(lines_of(text, hunk.old)))
    original = "".join(lines_of(text, last.old))
    assert SHAPES.endswith(original) and last.new.start == last.new.end  # a deletion at the end
    decided = await command(client, "assistant.rejectHunk", uri, result["id"], last.index)
    assert decided["rejected"] and decided["remaining"] == len(hunks) - 1
    text = client.editor.buffers[uri][0]
    assert text.endswith(original) and text.count("print(") == 1
    with pytest.raises(Exception, match=f"hunk {last.index} is not an undecided hunk"):
        await command(client, "assistant.acceptHunk", uri, result["id"], last.index)

    for hunk in client.editor.diffs[-1].hunks:
        await command(client, "assistant.acceptHunk", uri, result["id"], hunk.index)
    # the rejected hunk deleted the last lines: the answer, then those lines
    assert client.editor.buffers[uri][0] == answer + original
    assert client.editor.diffs[-1].hunks == [] and not await lenses(client, uri)
    assert client.editor.stale == stale


async def test_accept_all_leaves_exactly_the_answer_and_typing_elsewhere_is_followed(client: LanguageClient):
    uri = open_buffer(client, "review-all", SHAPES)
    target = (0, SHAPES.index("\n\n\ndef perimeter") + 1)  # the first function
    typed = []

    def type_above(client, uri, edit):
        type_at(client, uri, 0, "# typed\n")
        typed.append(True)
        return True

    client.editor.on_edit[uri] = type_above
    stale = client.editor.stale
    result = await command(client, "assistant.rewriteSelection", uri, lsp_range(SHAPES, *target), RENAME)
    assert typed and not result["conflict"] and result["stopped"] == "eos" and result["hunks"] >= 1
    notice = client.editor.diffs[-1]
    assert notice.lines.start == 1  # below the typed line
    text = client.editor.buffers[uri][0]
    assert text.startswith("# typed\n") and in_order(SHAPES.splitlines(), text.splitlines())

    type_at(client, uri, 0, "# again\n")  # typing during the review moves it too
    await lenses(client, uri)  # a round trip: the server has read the change
    assert client.editor.diffs[-1].lines.start == 2

    assert (await command(client, "assistant.acceptAll", uri, result["id"]))["accepted"]
    assert client.editor.buffers[uri][0] == "# again\n# typed\n" + result["text"] + SHAPES[target[1]:]
    assert client.editor.diffs[-1].hunks == []
    assert client.editor.stale == stale
    with pytest.raises(Exception, match="no rewrite to reject"):
        await command(client, "assistant.rejectAll", uri)


async def test_a_second_rewrite_waits_for_the_review(client: LanguageClient):
    uri = open_buffer(client, "review-busy", SHAPES)
    first = await command(client, "assistant.rewriteDocument", uri, RENAME)
    assert first["hunks"]
    with pytest.raises(Exception, match="wait for a decision"):
        await command(client, "assistant.rewriteDocument", uri, RENAME)
    with pytest.raises(Exception, match="hunk index"):
        await command(client, "assistant.acceptHunk", uri, first["id"], "0")
    assert (await command(client, "assistant.rejectAll", uri, first["id"]))["rejected"]
    assert client.editor.buffers[uri][0] == SHAPES
    assert client.editor.attributions[-1].spans == []
