"""A pass over one definition ends where its answer copies the definition's body, which then follows as it
stands (engine/selection.py's `Rest`, through OutputText; the range from engine/definitions.py's `body`). With
the embedded model's tokenizer, and one end-to-end run with the model."""

from __future__ import annotations

import ast

import pytest

from assistant.checks.positions import LineIndex
from assistant.engine.definitions import body, plan
from assistant.engine.output import OutputText

DOCUMENT = '''import os


def walk(top, suffix):
    found = []
    for folder, _, names in os.walk(top):
        found += [os.path.join(folder, name) for name in names if name.endswith(suffix)]
    return sorted(found)


def size(path):
    """Bytes."""
    return os.path.getsize(path)
'''
START, END = DOCUMENT.index("def walk"), DOCUMENT.index("\n\n\ndef size")
REST = DOCUMENT.index("    found = []"), END
FENCE = "```"
DOCSTRING = 'def walk(top, suffix):\n    """The files under `top` whose names end with `suffix`, sorted."""\n'


@pytest.fixture(scope="module")
def tokenizer(embedded_tokenizer):
    return embedded_tokenizer


def answer(tokenizer, raw: str):
    """`raw` fed a token at a time, then the closing fence; returns the OutputText, the text streamed and its spans."""
    ids = tokenizer(raw + "\n" + FENCE + "\n", add_special_tokens=False)["input_ids"]
    output = OutputText(tokenizer, DOCUMENT, fence=FENCE, target=(START, END), rest=REST)
    streamed, spans = "", []
    for token in ids:
        text, shown = output.add([token], [None])
        streamed, spans = streamed + text, spans + shown
        if output.ended:
            break
    return output, streamed, spans


def test_a_copy_of_the_body_ends_the_answer_and_the_body_follows_as_it_stands(tokenizer):
    body_text = DOCUMENT[slice(*REST)]
    changed_later = body_text.replace("return sorted(found)", "return found")  # never written: the copy ended first
    output, streamed, spans = answer(tokenizer, DOCSTRING + changed_later)
    assert streamed == output.text == DOCSTRING + body_text and output.ended == "eos"
    assert len(tokenizer(DOCSTRING + changed_later)["input_ids"]) > output.tokens
    [followed] = [span for span in spans if span.source is not None and span.source[1] == REST[1]]
    assert streamed[slice(*followed.output)] == DOCUMENT[slice(*followed.source)]
    assert followed.output[1] == len(streamed)


def test_a_body_changed_at_its_start_is_the_models_up_to_its_copy(tokenizer):
    body_text = DOCUMENT[slice(*REST)]
    hinted = body_text.replace("found = []", "found: list[str] = []")
    output, streamed, _ = answer(tokenizer, DOCSTRING + hinted + "\n\n\ndef extra():\n    pass")
    assert streamed == DOCSTRING + hinted


def test_a_body_never_copied_is_the_models(tokenizer):
    rewritten = DOCSTRING + "    return sorted(\n        os.path.join(folder, name)\n        for folder, _, names in os.walk(top)\n" \
                            "        for name in names if name.endswith(suffix)\n    )"
    output, streamed, _ = answer(tokenizer, rewritten)
    assert streamed == rewritten and output.ended == "eos"


def test_the_body_is_after_the_docstring_on_lines_of_its_own_without_definitions():
    source = DOCUMENT + '''

def inline(x): return x


def nested(x):
    def inner(y):
        return y
    return inner(x)


class Box:
    size = 1
'''
    tree, index = ast.parse(source), LineIndex(source)
    ranges = {node.name: body(node, index, (0, len(source))) for node in tree.body if not isinstance(node, ast.Import)}
    assert source[slice(*ranges["walk"])].startswith("    found = []")
    assert source[slice(*ranges["size"])].startswith("    return os.path.getsize(path)\n")
    assert ranges["inline"] is ranges["nested"] is ranges["Box"] is None
    found = plan(DOCUMENT, (0, len(DOCUMENT)), "Add type hints to every function.", "python")
    assert [DOCUMENT[slice(*part.rest)] for part in found.parts] == [
        DOCUMENT[slice(*REST)], "    return os.path.getsize(path)"]


def test_definition_passes_that_end_on_the_body_are_exact_end_to_end(embedded, monkeypatch):
    """`ar` and `pld+h` give the same answer when passes end by copying the body (as the bench's exact check)."""
    from assistant.engine import selection

    ended = []
    end = selection.Rest.end
    monkeypatch.setattr(selection.Rest, "end", lambda self, raw: (found := end(self, raw), ended.append(found))[0])
    instruction = "Add a docstring to every function that lacks one."
    texts = [embedded.rewrite_text(DOCUMENT + DOCUMENT.replace("walk", "scan").replace("def size", "def length"),
                                   instruction, language="python", repairs=0, strategy=strategy).text
             for strategy in ("ar", "pld+h")]
    assert texts[0] == texts[1]
    assert any(ended), "no pass ended on its body: the test no longer tests it"
