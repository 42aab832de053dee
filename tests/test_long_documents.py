"""The splitter behind long-document rewrites: pieces fit, cover the region exactly and end at
natural boundaries. No model: tokens are counted as words."""

from __future__ import annotations

from assistant.long_documents import core, split


def words(text: str) -> int:
    return len(text.split())


PYTHON = ("import os\n\n\ndef one():\n    return 1\n\n\ndef two():\n    x = 2\n    return x\n\n\n"
          "class Three:\n    pass\n")


def test_pieces_cover_the_text_in_order_without_gaps():
    pieces = split(PYTHON, words, 5)
    assert len(pieces) > 1
    assert pieces[0][0] == 0 and pieces[-1][1] == len(PYTHON)
    assert all(a[1] == b[0] for a, b in zip(pieces, pieces[1:]))
    assert "".join(PYTHON[a:b] for a, b in pieces) == PYTHON


def test_pieces_start_at_definitions_and_fit():
    pieces = split(PYTHON, words, 7)  # the longest definition is 7 words
    for start, end in pieces:
        assert words(PYTHON[start:end]) <= 7
        assert PYTHON[start:end].lstrip().startswith(("import", "def", "class"))


def test_cuts_prefer_blank_lines_over_filling_up():
    text = "a b\nc d\n\ne f\ng h\ni j\n"
    assert [text[a:b] for a, b in split(text, words, 7)] == ["a b\nc d\n\n", "e f\ng h\ni j\n"]


def test_markdown_cuts_before_headings():
    text = "# One\nx y z\n# Two\nu v w\n"
    assert [text[a:b] for a, b in split(text, words, 5)] == ["# One\nx y z\n", "# Two\nu v w\n"]


def test_a_line_longer_than_a_piece_is_a_piece_of_its_own():
    text = "short\n" + "long " * 20 + "\nshort again\n"
    pieces = [text[a:b] for a, b in split(text, words, 3)]
    assert pieces[1].startswith("long") and "".join(pieces) == text


def test_region_only_is_split():
    start, end = PYTHON.index("def one"), PYTHON.index("class")
    pieces = split(PYTHON, words, 4, (start, end))
    assert pieces[0][0] == start and pieces[-1][1] == end and len(pieces) >= 2


def test_everything_fits_in_one_piece():
    assert split(PYTHON, words, 1000) == [(0, len(PYTHON))]


def test_core_drops_surrounding_whitespace_only():
    text = "\n\n  def f():\n    pass\n\n"
    start, end = core(text, (0, len(text)))
    assert text[start:end] == "def f():\n    pass"
    assert core("x\n\n\n", (1, 4)) == (1, 1)
