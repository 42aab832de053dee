"""An answer that copies the text it was asked to rewrite gives back every byte of it.

The prompt shows the text to rewrite in a code fence (prompts.fenced) and the answer ends where the
model closes it; the line break before the closing fence is the fence's, and `missing_final_newline`
gives back the target's own trailing line breaks. These properties feed the exact copy of what the
prompt shows, then the closing fence, to the two readers of answers: `OutputText`, as the tokens of
the small model's real tokenizer (no weights: no decoding), and the remote client's `Block`, as the
raw text of a chat reply; both in pieces of every size, over generated texts with blank lines, `\\r\\n`
and lone `\\r` line breaks, and backtick runs (fences inside the document).
"""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from assistant.engine.output import OutputText, missing_final_newline
from assistant.engine.prompts import edit_segments, fenced
from assistant.engine.remote import Block

PIECES = ["a", "é", "😀", " ", "\t", "#", "x = 1", "def f():", "`", "```", "\n", "\n\n", "\r\n", "\r"]
TEXTS = st.lists(st.sampled_from(PIECES), max_size=10).map("".join)
# what a model writes after closing the fence: nothing (its end of sequence), a line break, more chatter
TAILS = st.sampled_from(["", "\n", "\r\n", "\nThat is the text, unchanged.\n```\n"])
EXAMPLES = settings(max_examples=150, derandomize=True, deadline=None)


@pytest.fixture(scope="module")
def tokenizer(embedded_tokenizer):
    return embedded_tokenizer


def copied_answer(before: str, target: str, after: str) -> tuple[str, str, str]:
    """The document `before + target + after`, the answer that copies exactly what the prompt to rewrite its
    `target` (all of it when `before` and `after` are empty) shows of it, with the closing fence, and that fence."""
    document = before + target + after
    selection = (len(before), len(before) + len(target)) if before or after else None
    segments, fence = edit_segments("Copy it exactly.", document, selection)
    shown = "".join(segment.text for segment in fenced(target, len(before), fence))
    assert shown in "".join(segment.text for segment in segments)
    return document, shown.removeprefix(fence + "\n"), fence


def streamed(output: OutputText, ids: list[int], size: int) -> str:
    """What `output` shows of `ids` fed `size` tokens a step, until it sees where the answer ends."""
    shown = ""
    for at in range(0, len(ids), size):
        shown += output.add(ids[at:at + size], [None] * len(ids[at:at + size]))[0]
        if output.ended:
            break
    return shown + output.finish()[0]


@EXAMPLES
@given(before=TEXTS, target=TEXTS, after=TEXTS, tail=TAILS, size=st.integers(1, 4))
def test_output_text_gives_back_an_exact_copy(tokenizer, before, target, after, tail, size):
    """OutputText, then the final line breaks as the engine adds them: the copy is the target, byte for byte."""
    document, answer, fence = copied_answer(before, target, after)
    output = OutputText(tokenizer, document, fence=fence)
    shown = streamed(output, tokenizer(answer + tail, add_special_tokens=False)["input_ids"], size)
    assert shown == output.text
    assert shown + missing_final_newline(shown, target, ended_by_model=True) == target


@EXAMPLES
@given(before=TEXTS, target=TEXTS, after=TEXTS, tail=TAILS, language=st.sampled_from(["", "python"]),
       cuts=st.lists(st.integers(1, 6), min_size=1, max_size=8))
def test_a_remote_block_gives_back_an_exact_copy(before, target, after, tail, language, cuts):
    """The remote client's Block on a chat reply streamed in pieces, then the final line breaks as the remote
    client adds them: the copy is the target, byte for byte."""
    _, answer, fence = copied_answer(before, target, after)
    reply, block, shown, at = f"{fence}{language}\n{answer}{tail}", Block(), "", 0
    while at < len(reply):
        size = cuts[at % len(cuts)]
        shown += block.add(reply[at:at + size])
        at += size
    shown += block.finish()
    assert block.closed and shown == block.text
    assert shown + missing_final_newline(shown, target, ended_by_model=True) == target


@pytest.mark.parametrize(("document", "target"), [
    ("# Notes\n\nFirst paragraph.\n\nSecond paragraph.\n", "First paragraph.\n\n"),  # --lines 3:4
    ("def f():\n    return 1\n\n\ndef g():\n    return 2\n", "def f():\n    return 1\n\n\n"),
    ("a = 1\r\n\r\nb = 2\r\n", "a = 1\r\n\r\n"),
    ("Use a fence:\n\n```sh\nmake\n```\n\nDone.\n", "```sh\nmake\n```\n\n"),
    ("no final newline", "no final newline"),
])
def test_the_issues_selections_are_copied_whole(tokenizer, document, target):
    start = document.index(target)
    _, answer, fence = copied_answer(document[:start], target, document[start + len(target):])
    output = OutputText(tokenizer, document, fence=fence)
    shown = streamed(output, tokenizer(answer + "\n", add_special_tokens=False)["input_ids"], 1)
    assert shown + missing_final_newline(shown, target, ended_by_model=True) == target


@pytest.mark.parametrize(("text", "target", "ended", "missing"), [
    ("First paragraph, shorter.", "First paragraph.\n\n", True, "\n\n"),  # a rewrite keeps the blank line after
    ("def f() -> int:\n    return 1\n", "def f():\n    return 1\n\n\n", True, "\n\n"),
    ("x = 1", "x = 2\r\n", True, "\r\n"),  # a CRLF file's last line break is CRLF
    ("x = 1\r", "x = 2\r\n", True, "\n"),
    ("x = 1\n", "x = 2\r\n", True, ""),  # the model's own line break, even of another kind, is kept as it is
    ("x = 1\n\n\n", "x = 2\n", True, ""),
    ("", "Deleted paragraph.\n\n", True, "\n"),  # an empty answer keeps only the last line break
    ("", "", True, ""),
    ("x = 1", "x = 2\n", False, ""),  # cut short: not the end
])
def test_the_line_breaks_that_end_the_target_are_kept(text, target, ended, missing):
    assert missing_final_newline(text, target, ended) == missing


def test_the_small_model_copying_a_document_that_ends_in_a_blank_line_gives_it_back(embedded):
    """End to end, on a document that SmolLM2-135M copies: the answer is the document, its last blank line
    included (it lost it before)."""
    document = "a = 1\nb = 2\n\n"
    result = embedded.rewrite_text(document, "Copy the text exactly, changing nothing.", max_new_tokens=32)
    assert result.stopped == "eos" and result.text == document
