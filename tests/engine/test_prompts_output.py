"""Prompts with document offsets, fenced answers, held-back output text, and incremental
detokenisation, with the embedded model's tokenizer only (no model weights are loaded)."""

from __future__ import annotations

import pytest

from assistant.config import settings
from assistant.engine.output import Detokenizer, OutputText, Span, held_back, merge_spans, missing_final_newline
from assistant.engine.prompts import SYSTEM, Segment, build_prompt, edit_prompt, fence_for


@pytest.fixture(scope="module")
def tokenizer():
    from transformers import AutoTokenizer

    from assistant.model import loading

    folder, _, _ = loading.resolve(settings().model, settings().cache)
    return AutoTokenizer.from_pretrained(folder)


# --- fences -------------------------------------------------------------------------------------------------------

@pytest.mark.parametrize("texts, fence", [
    (("plain text",), "```"),
    (("",), "```"),
    (("a ``` b",), "````"),
    (("x", "`````"), "``````"),
    (("inline `code` and ``more``",), "```"),
])
def test_fence_is_longer_than_any_backtick_run(texts, fence):
    assert fence_for(*texts) == fence


def test_held_back():
    assert held_back("abc", ["\n```"]) == 0
    assert held_back("abc\n", ["\n```"]) == 1
    assert held_back("abc\n``", ["\n```"]) == 3
    assert held_back("abc\n```", ["\n```"]) == 0  # a whole marker is not a proper prefix
    assert held_back("xxST", ["STOP", "T"]) == 2
    assert held_back("", ["STOP"]) == 0


# --- OutputText ----------------------------------------------------------------------------------------------------

def stream(tokenizer, pieces, document="", stop=(), fence="```"):
    """Feed text pieces as token runs; return (the shown text piece by piece, output)."""
    output = OutputText(tokenizer, document, stop, fence)
    shown = []
    for piece in pieces:
        ids = tokenizer(piece, add_special_tokens=False)["input_ids"]
        text, _ = output.add(ids, [None] * len(ids))
        shown.append(text)
        if output.ended:
            break
    text, _ = output.finish()
    shown.append(text)
    return shown, output


def test_output_holds_back_a_possible_stop_string(tokenizer):
    shown, output = stream(tokenizer, ["Hello", " wor", "ld EN", "D and more"], stop=("END",))
    assert output.ended == "stop" and output.text == "Hello world "
    assert "".join(shown) == "Hello world "
    assert not any("EN" in s for s in shown)


def test_output_releases_a_held_tail_that_is_not_a_stop_string(tokenizer):
    shown, output = stream(tokenizer, ["Hello", " EN", "joy"], stop=("END",))
    assert not output.ended and output.text == "Hello ENjoy" == "".join(shown)


def test_output_holds_back_a_partial_closing_fence(tokenizer):
    output = OutputText(tokenizer, "", fence="```")
    shown = []
    for piece in ["x = 1", "\n", "``"]:
        ids = tokenizer(piece, add_special_tokens=False)["input_ids"]
        shown.append(output.add(ids, [None] * len(ids))[0])
    assert "".join(shown) == "x = 1"  # "\n``" is held back
    assert output.finish()[0] == "\n``"  # it never became a closing fence


@pytest.mark.parametrize("pieces, text", [
    (["x = 1\n", "```", "\n", "Explanation."], "x = 1"),  # the fence line ends the answer; chatter after it is cut
    (["x = 1\ny = 2\n```"], "x = 1\ny = 2"),  # closed, then the model's end of sequence
    (["x = 1\n```  \n"], "x = 1"),
    (["```\n", "x"], ""),  # an empty answer: the fence is its first line
    (["a", "\n", "``", "`", "\n", "b"], "a"),
], ids=["chatter after", "closed at the end", "trailing spaces", "empty", "split fence"])
def test_output_ends_where_the_answer_closes_its_fence(tokenizer, pieces, text):
    shown, output = stream(tokenizer, pieces)
    assert output.text == "".join(shown) == text
    assert "`" not in "".join(shown)


@pytest.mark.parametrize("stop", [(), ("Explanation",)])
def test_output_counts_the_tokens_up_to_where_the_answer_ends(tokenizer, stop):
    """A step may accept tokens past the end of the answer; they are not counted, so a strategy that
    verifies many tokens at once counts what one-token decoding would have produced before stopping."""
    ids = tokenizer("x = 1\n```\nExplanation of the change, and more.", add_special_tokens=False)["input_ids"]
    at_once = OutputText(tokenizer, "", stop, fence="```")
    at_once.add(ids, [None] * len(ids))
    one_by_one = OutputText(tokenizer, "", stop, fence="```")
    fed = 0
    while not one_by_one.ended:
        one_by_one.add(ids[fed:fed + 1], [None])
        fed += 1
    assert at_once.ended == one_by_one.ended and at_once.text == one_by_one.text == "x = 1"
    assert at_once.tokens == one_by_one.tokens == fed < len(ids)


def test_output_keeps_shorter_backtick_runs_inside_a_longer_fence(tokenizer):
    shown, output = stream(tokenizer, ["a\n```\nb\n", "````\n"], fence="````")
    assert output.text == "".join(shown) == "a\n```\nb" and output.ended == "eos"


def test_output_without_fence_is_shown_as_it_comes(tokenizer):
    shown, output = stream(tokenizer, ["Just", " text", "\n", "```", "\nmore"], fence=None)
    assert shown[:5] == ["Just", " text", "\n", "```", "\nmore"] and output.text == "Just text\n```\nmore"


def test_output_attribution_is_dropped_when_it_names_other_characters(tokenizer):
    document = "alpha beta"
    output = OutputText(tokenizer, document)
    ids = tokenizer("alpha beta", add_special_tokens=False)["input_ids"]
    pieces = [tokenizer.decode([i]) for i in ids]
    spans, at = [], 0
    for piece in pieces:
        spans.append((at, at + len(piece)))
        at += len(piece)
    spans[-1] = (0, len(pieces[-1]))  # wrong on purpose: different characters
    _, tokens = output.add(ids, spans)
    tokens += output.finish()[1]
    assert len(tokens) == len(ids)
    assert tokens[-1].source is None
    assert all(document[s.source[0]:s.source[1]] == output.text[s.output[0]:s.output[1]]
               for s in tokens if s.source is not None)


def test_merge_spans():
    spans = [Span((0, 2), (10, 12)), Span((2, 5), (12, 15)), Span((5, 6), None), Span((6, 8), (15, 17)),
             Span((8, 9), (30, 31)), Span((9, 10), (31, 32))]
    assert merge_spans(spans) == [Span((0, 5), (10, 15)), Span((6, 8), (15, 17)), Span((8, 10), (30, 32))]


# --- Detokenizer ---------------------------------------------------------------------------------------------------

MULTI_BYTE = [
    "Café naïve — “quoted” ½ €5",
    "emoji 😀👍🏽 family 👨‍👩‍👧‍👦 flags 🇯🇵 end",
    "中文文本，日本語のテキスト、한국어 텍스트。",
    "def f():\n    return '🐍'  # ünïcödé\n\n\tx = 1",
    " leading space and trailing space ",
    "𝔘𝔫𝔦𝔠𝔬𝔡𝔢 math 𝛼𝛽𝛾",
]


@pytest.mark.parametrize("text", MULTI_BYTE)
def test_incremental_detokenisation_round_trips(tokenizer, text):
    ids = tokenizer(text, add_special_tokens=False)["input_ids"]
    detokenizer = Detokenizer(tokenizer)
    pieces = [detokenizer.add(i) for i in ids]
    assert "".join(pieces) == text == tokenizer.decode(ids)
    assert all("\ufffd" not in p for p in pieces)


def test_detokenisation_shows_nothing_until_a_character_is_complete(tokenizer):
    ids = tokenizer("😀", add_special_tokens=False)["input_ids"]
    assert len(ids) > 1, "the emoji should be split over byte tokens"
    detokenizer = Detokenizer(tokenizer)
    pieces = [detokenizer.add(i) for i in ids]
    assert pieces[:-1] == [""] * (len(ids) - 1) and pieces[-1] == "😀"


# --- prompts -------------------------------------------------------------------------------------------------------

DOCUMENTS = [
    "The quick brown fox jumps over the lazy dog.\nSecond line, with    spaces.",
    "def add(a, b):\n    return a + b\n\n\nprint(add(1, 2))\n",
    "Emoji 😀 and CJK 中文 and accents café, mixed.\n",
    "  leading and trailing whitespace  \n\n",
]


@pytest.mark.parametrize("document", DOCUMENTS)
def test_every_prompt_token_with_a_source_decodes_to_its_document_span(tokenizer, document):
    prompt = edit_prompt(tokenizer, "Fix the grammar.", document)
    assert len(prompt.sources) == len(prompt.ids)
    covered = 0
    for token, source in zip(prompt.ids, prompt.sources):
        if source is not None:
            s, e = source
            assert 0 <= s < e <= len(document)
            assert document[s:e] == tokenizer.decode([token])
            covered += e - s
    # The document's tokens cover nearly all of it (byte tokens splitting a character get no span).
    assert covered >= 0.8 * len(document.encode()) / 4 and covered > 0
    # The document in a fence, the instruction after it, and the answer opened with the same fence.
    fenced = "```\n" + document + ("" if document.endswith("\n") else "\n") + "```"
    rendered = tokenizer.apply_chat_template(
        [{"role": "system", "content": SYSTEM}, {"role": "user", "content": fenced + "\n\nFix the grammar."}],
        tokenize=False, add_generation_prompt=True)
    assert prompt.fence == "```"
    assert prompt.ids == tokenizer(rendered + "```\n", add_special_tokens=False)["input_ids"]


def test_sources_are_increasing_and_cover_the_plain_document(tokenizer):
    document = DOCUMENTS[1]
    prompt = edit_prompt(tokenizer, "Rename add to plus.", document)
    spans = [s for s in prompt.sources if s is not None]
    assert all(a[1] <= b[0] for a, b in zip(spans, spans[1:]))
    assert "".join(document[s:e] for s, e in spans) == document


def test_selection_prompt_maps_into_the_whole_document(tokenizer):
    document = "First paragraph stays.\n\nSecond paragraph to rewrite.\n\nThird paragraph stays."
    start = document.index("Second")
    end = document.index("\n\nThird")
    prompt = edit_prompt(tokenizer, "Shorten it.", document, (start, end))
    sources = [s for s in prompt.sources if s is not None]
    for (s, e), token in zip([s for s in prompt.sources if s is not None],
                             [t for t, s in zip(prompt.ids, prompt.sources) if s is not None]):
        assert document[s:e] == tokenizer.decode([token])
    assert any(s >= start and e <= end for s, e in sources)
    assert any(e <= start for s, e in sources) and any(s >= end for s, e in sources)
    # The text to rewrite is the last of the document's text in the prompt, right before the instruction.
    assert prompt.sources[-1] is None
    last_source = max(i for i, s in enumerate(prompt.sources) if s is not None)
    assert prompt.sources[last_source][1] == end


def test_segments_without_source_get_no_span(tokenizer):
    prompt = build_prompt(tokenizer, [Segment("not the document "), Segment("the document", 0)])
    spans = [s for s in prompt.sources if s is not None]
    assert spans and all("the document"[s:e] for s, e in spans)
    # " the" straddles the two segments, so it gets no span; the rest is attributed.
    assert "the document".endswith("".join("the document"[s:e] for s, e in spans))
    assert "".join("the document"[s:e] for s, e in spans).strip() == "document"


def test_final_newline_kept_only_when_the_model_ended_without_it():
    assert missing_final_newline("x = 1", "x = 2\n", ended_by_model=True) == "\n"
    assert missing_final_newline("x = 1\n", "x = 2\n", ended_by_model=True) == ""
    assert missing_final_newline("x = 1", "x = 2", ended_by_model=True) == ""
    assert missing_final_newline("x = 1", "x = 2\n", ended_by_model=False) == ""  # cut short: not the end
