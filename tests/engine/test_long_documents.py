"""The splitter behind long-document rewrites: pieces fit, cover the region exactly and end at
natural boundaries. No model: tokens are counted as words."""

from __future__ import annotations

from assistant.engine.long_documents import core, split


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


# --- the engine plans and stitches, for every front door (the real embedded model) ---

COPY = "Copy the text exactly."


def check_attribution(result, document: str) -> None:
    for span in result.token_spans + result.spans:
        if span.source is not None:
            (a, b), (c, d) = span.output, span.source
            assert result.text[a:b] == document[c:d]


def test_the_engine_rewrites_a_long_document_in_pieces_in_whole_document_offsets(embedded):
    from assistant.engine.events import Delta, Result

    events = list(embedded.rewrite(PYTHON, COPY, max_piece_tokens=12, max_new_tokens=12))
    result = events[-1]
    assert isinstance(result, Result) and len(result.pieces) > 1
    assert "".join(e.text for e in events if isinstance(e, Delta)) == result.text
    check_attribution(result, PYTHON)
    assert result.stats.new_tokens > 0


def test_a_selection_split_in_pieces_answers_for_the_selection_only(embedded):
    start, end = PYTHON.index("def one"), PYTHON.index("class")
    result = embedded.rewrite_text(PYTHON, COPY, selection=(start, end), max_piece_tokens=8, max_new_tokens=8)
    assert len(result.pieces) > 1 and result.pieces[0][0] == start and result.pieces[-1][1] == end
    assert not result.text.startswith("import os")  # the text before the selection is not part of the answer
    check_attribution(result, PYTHON)


def test_one_piece_cut_at_the_token_limit_makes_the_whole_answer_unfinished(embedded):
    result = embedded.rewrite_text(PYTHON, COPY, max_piece_tokens=12, max_new_tokens=2)
    assert result.stopped == "length" and not result.finished


def test_a_document_too_long_for_one_pass_is_planned_to_fit(embedded):
    """No generation: the plan's pieces each leave room for their answer, with the engine's budget."""
    from assistant.engine.long_documents import answer_budget
    from assistant.engine.long_documents import plan

    document = "".join(f"def f{i}(x):\n    return x * {i} + {i * 7}\n\n\n" for i in range(900))
    pieces = plan(document, (0, len(document)), context_length=embedded.loaded.context_length,
                  count_tokens=embedded.count_tokens,
                  prompt_tokens=lambda part: len(embedded.prompt(document, COPY, part).ids))
    assert len(pieces) > 1 and pieces[0][0] == 0 and pieces[-1][1] == len(document)
    for piece in pieces:
        prompt = embedded.prompt(document, COPY, core(document, piece))
        assert len(prompt.ids) + answer_budget(embedded.count_tokens(document[slice(*piece)])) \
            <= embedded.loaded.context_length


def test_a_cancelled_long_rewrite_says_cancelled(embedded):
    """Every front door gets the split: a document too long for one pass is accepted, not refused."""
    import threading

    document = "".join(f"def f{i}(x):\n    return x * {i} + {i * 7}\n\n\n" for i in range(900))
    cancel = threading.Event()
    cancel.set()
    result = embedded.rewrite_text(document, COPY, cancel=cancel)
    assert result.stopped == "cancelled" and not result.finished and len(result.pieces) > 1
