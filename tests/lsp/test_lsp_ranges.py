"""Attribution geometry on a 1 MB document, counted rather than timed: converting every span's
positions builds each text's line index once, and finding the span under the cursor is a bisection.
Plus position encodings and CRLF output, in process, without a model."""

from __future__ import annotations

import pytest
from lsprotocol import types

from assistant.engine.output import Span
from assistant.lsp import ranges
from assistant.lsp.rewrite import Rewrite

LINE = "    total = add(total, 'é😀')  # a line of code\n"
DOCUMENT = LINE * (1_000_000 // len(LINE))


class Counted(list):
    """The spans list, counting how many of its items are looked at."""

    looked = 0

    def __getitem__(self, index):
        Counted.looked += 1
        return super().__getitem__(index)

    def __iter__(self):
        Counted.looked += len(self)
        return super().__iter__()


@pytest.fixture
def index_builds(monkeypatch):
    builds = []
    original = ranges.line_starts

    def counted(text):
        builds.append(len(text))
        assert len(builds) <= 10, "a line index per position: work that grows with spans times document size"
        return original(text)

    monkeypatch.setattr(ranges, "line_starts", counted)
    ranges.lines.cache_clear()
    return builds


def rewritten() -> Rewrite:
    """A whole-document rewrite whose output copied every line of the original: one span per line."""
    job = Rewrite("file:///big.py", DOCUMENT, 0, len(DOCUMENT), types.PositionEncodingKind.Utf8)
    spans = [Span((i, i + len(LINE) - 1), (i, i + len(LINE) - 1)) for i in range(0, len(DOCUMENT), len(LINE))]
    diff, answer_spans = job.diff_of(DOCUMENT, spans, final=True)
    job.wrote(diff, diff.view(), DOCUMENT, answer_spans)
    return job


def test_attribution_of_many_spans_indexes_each_text_once(index_builds):
    job = rewritten()
    notice = job.attribution(1)
    assert len(notice["spans"]) == len(DOCUMENT) // len(LINE)
    last = notice["spans"][-1]["output"]
    assert last["end"] == {"line": len(notice["spans"]) - 1, "character": len(LINE[:-1].encode())}
    assert len(index_builds) <= 2  # the current text and the original


def test_the_span_under_the_cursor_is_found_by_bisection(index_builds):
    job = rewritten()
    job.spans = Counted(job.spans)
    Counted.looked = 0
    middle = len(DOCUMENT) // 2
    found = job.spans_at(middle)
    assert found and found[0][0] <= middle < found[0][1]
    assert Counted.looked < 64  # about log2(spans), not all of them
    job.describe(found[0])
    job.range_at(found[0][0], found[0][1])
    assert len(index_builds) <= 2


@pytest.mark.parametrize("encoding, character", [("utf-8", 15), ("utf-16", 12), ("utf-32", 11)])
def test_positions_count_units_of_the_negotiated_encoding(encoding, character):
    text = "s = 'é😀x'; y\n"
    offset = text.index("; y") + 2
    position = ranges.position_at(text, offset, encoding)
    assert position == types.Position(line=0, character=character)
    assert ranges.offset_at(text, position, encoding) == offset


def test_crlf_output_keeps_the_documents_line_endings():
    document = "a = 1\r\nb = 2\r\n"
    job = Rewrite("file:///crlf.py", document, 0, len(document))
    output = "a = 1\nb = 3\n"
    assert job.shown(output) == "a = 1\r\nb = 3\r\n"
    assert job.shown("a = 1\nb") == "a = 1\r\nb\r\n"  # partial output keeps the target's final line break
    diff, spans = job.diff_of(output, [Span((6, 11), (7, 12))], final=True)
    view = diff.view()
    assert view.text == "a = 1\r\nb = 2\r\nb = 3\r\n"  # the old line and the new, both in CRLF
    job.wrote(diff, view, view.text, spans)
    (a, b, c, d), = job.spans
    assert view.text[a:b] == "b = 3" and document[c:d] == "b = 2"
