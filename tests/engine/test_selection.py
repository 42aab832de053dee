"""An answer to a selection ends at the selection's end: a copy of the text after it ends the answer, a copy of
the text before it at its start is dropped (engine/selection.py, through OutputText), and shorter matches are
the answer's own. With the embedded model's tokenizer only; one end-to-end pass with the model."""

from __future__ import annotations

import pytest

from assistant.engine.output import OutputText

DOCUMENT = '''import os


def first(path):
    return os.path.basename(path)


def second(path):
    return os.path.dirname(path)


def third(path, suffix):
    return os.path.join(path, suffix)
'''
START, END = DOCUMENT.index("def second"), DOCUMENT.index("\n\n\ndef third") + 1
NEW = 'def second(path):\n    """The folder."""\n    return os.path.dirname(path)\n'
FENCE = "```"


@pytest.fixture(scope="module")
def tokenizer(embedded_tokenizer):
    return embedded_tokenizer


def answer(tokenizer, raw: str, offset: int | None = None, target=(START, END)):
    """`raw` fed a token at a time, as the engine would (then the closing fence); each token attributed to
    document[offset + its range] when `offset` is given. Returns the OutputText and the text streamed."""
    encoded = tokenizer(raw + "\n" + FENCE + "\n", add_special_tokens=False, return_offsets_mapping=True)
    output = OutputText(tokenizer, DOCUMENT, fence=FENCE, target=target)
    streamed, spans = "", []
    for token, (s, e) in zip(encoded["input_ids"], encoded["offset_mapping"]):
        source = (offset + s, offset + e) if offset is not None and e <= len(raw) else None
        text, tokens = output.add([token], [source])
        streamed, spans = streamed + text, spans + tokens
        if output.ended:
            break
    text, tokens = output.finish()
    return output, streamed + text, spans + tokens


def test_a_copy_of_the_text_after_the_selection_ends_the_answer(tokenizer):
    output, streamed, _ = answer(tokenizer, NEW + DOCUMENT[END:])
    assert output.text == streamed == NEW  # the blank lines that lead to the copy go with it
    assert output.ended == "eos"


def test_the_copy_is_never_shown_while_it_is_undecided(tokenizer):
    encoded = tokenizer(NEW + DOCUMENT[END:], add_special_tokens=False)["input_ids"]
    output = OutputText(tokenizer, DOCUMENT, fence=FENCE, target=(START, END))
    for token in encoded:
        output.add([token], [None])
        assert len(output.text) <= len(NEW)


def test_a_copy_that_skips_the_first_lines_after_the_selection_ends_it_too(tokenizer):
    """As the 1.5B model did on shlex.py: it dropped the line right after the selection and copied from the next."""
    document = DOCUMENT + "\n\ndef fourth(path):\n    return os.path.splitext(path)\n"
    later = document[END:].replace("def third(path, suffix):\n", "", 1)
    output = OutputText(tokenizer, document, fence=FENCE, target=(START, END))
    ids = tokenizer(NEW + later + "\n" + FENCE + "\n", add_special_tokens=False)["input_ids"]
    streamed = "".join(output.add([token], [None])[0] for token in ids) + output.finish()[0]
    assert output.text == streamed == NEW


def test_lines_of_the_selection_itself_are_no_copy(tokenizer):
    document = DOCUMENT + "\n\ndef fourth(path):\n    return os.path.dirname(path)\n"  # second's body again
    own = NEW.replace('    """The folder."""\n', "")
    output = OutputText(tokenizer, document, fence=FENCE, target=(START, END))
    ids = tokenizer(own + "\n" + FENCE + "\n", add_special_tokens=False)["input_ids"]
    output.add(ids, [None] * len(ids))
    output.finish()
    assert output.text == own


def test_a_line_like_the_text_after_is_the_answers_own(tokenizer):
    own = NEW + "\n\ndef third(path, suffix):\n    pass\n"  # one line alike: short of a copy
    output, streamed, _ = answer(tokenizer, own)
    assert output.text == streamed == own


def test_a_copy_of_the_text_before_the_selection_is_dropped_from_the_start(tokenizer):
    begin = DOCUMENT.index("def first")
    output, streamed, spans = answer(tokenizer, DOCUMENT[begin:START] + NEW, offset=begin)
    assert output.text == streamed == NEW
    assert spans and all(output.text[a:b] == DOCUMENT[c:d] for (a, b), (c, d) in
                         ((span.output, span.source) for span in spans if span.source))


def test_an_answer_that_begins_like_the_text_before_is_kept(tokenizer):
    own = "def first(path):\n    return path\n" + NEW  # not a whole copy up to the selection
    output, streamed, _ = answer(tokenizer, own)
    assert output.text == streamed == own


def test_the_whole_document_has_nothing_around_it(tokenizer):
    output, streamed, _ = answer(tokenizer, DOCUMENT + DOCUMENT, target=(0, len(DOCUMENT)))
    assert output.text == streamed == DOCUMENT + DOCUMENT


def test_a_selection_answer_stops_at_the_selections_end_end_to_end(embedded, monkeypatch):
    """The embedded model, asked to copy the middle function, answers with the lines before it and then the
    lines after it, word for word: neither copy is part of the answer, which is left with nothing of its own."""
    document = DOCUMENT.replace("\n\n\n", "\n\n")
    start = document.index("def second")
    end = document.index("\n\n", start) + 1
    raw = []
    finish = OutputText.finish
    monkeypatch.setattr(OutputText, "finish", lambda self: raw.append(self.raw) or finish(self))
    result = embedded.rewrite_text(document, "Copy the text exactly.", selection=(start, end), max_new_tokens=120,
                                   repairs=0)
    assert raw[0].startswith(document[:start]) and document[end:].lstrip() in raw[0]  # what the model wrote
    assert result.finished and result.text.strip() == ""
