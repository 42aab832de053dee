"""The diff a rewrite shows in the buffer (`lsp.hunks`): old and new lines hunk by hunk, decisions that
leave exactly the answer, the original or their splice, the streaming answer's waiting lines, and
where answer offsets and attribution stand in the view; pure text, no server."""

from __future__ import annotations

import itertools

import pytest

from assistant.lsp.hunks import Diff, line_edit, split_lines

BASE = "def area(w, h):\n    return w * h\n\n\nprint(area(3, 4))\n"
ANSWER = "def rectangle_area(w, h):\n    return w * h\n"  # renames, and drops the last line


def test_the_view_keeps_every_original_line_with_the_new_ones_after_them():
    view = Diff.between(BASE, ANSWER).view()
    assert view.text == ("def area(w, h):\ndef rectangle_area(w, h):\n    return w * h\n\n\n"
                         "print(area(3, 4))\n")
    first, second = view.hunks
    assert (first.old, first.new) == ((0, 1), (1, 2))  # removed, then added
    assert (second.old, second.new) == ((3, 6), (6, 6))  # a pure deletion
    lines = split_lines(view.text)
    assert set(split_lines(BASE)) <= set(lines)


@pytest.mark.parametrize("decisions", list(itertools.product([True, False], repeat=2)))
def test_every_decision_leaves_the_answer_with_the_rejected_hunks_original_text(decisions):
    diff = Diff.between(BASE, ANSWER)
    for index, accept in enumerate(decisions):
        diff = diff.decide([index], accept)
    expected = {(True, True): ANSWER, (False, False): BASE,
                (True, False): "def rectangle_area(w, h):\n    return w * h\n\n\nprint(area(3, 4))\n",
                (False, True): "def area(w, h):\n    return w * h\n"}
    assert diff.view().text == expected[decisions]
    assert diff.undecided == [] and diff.view().hunks == ()
    assert diff.rejected == (decisions == (False, False))


def test_a_hunk_is_decided_once():
    diff = Diff.between(BASE, ANSWER).decide([1], False)
    assert diff.undecided == [0]
    with pytest.raises(ValueError, match="hunk 1 is not an undecided hunk"):
        diff.decide([1], True)
    with pytest.raises(ValueError, match="hunk 7"):
        diff.decide([7], True)


def test_a_last_line_without_a_line_break_gets_one_only_while_new_lines_follow_it():
    diff = Diff.between("a\nb", "a\nc")
    assert diff.view().text == "a\nb\nc"
    assert diff.decide([0], True).view().text == "a\nc"
    assert diff.decide([0], False).view().text == "a\nb"
    crlf = Diff.between("a\r\nb", "a\r\nc", newline="\r\n")
    assert crlf.view().text == "a\r\nb\r\nc"


def test_a_streaming_answer_shows_its_lines_so_far_and_the_original_lines_it_has_not_reached():
    diff = Diff.between(BASE, "def rectangle_area(w, h):\n    return w", final=False)
    view = diff.view()
    assert view.text == "def rectangle_area(w, h):\n    return w\n" + BASE  # a partial line, then the waiting
    assert view.waiting == (2, 7) and [(h.old, h.new) for h in view.hunks] == [((0, 0), (0, 2))]
    later = Diff.between(BASE, "def rectangle_area(w, h):\n    return w * h\n", final=False).view()
    assert later.text == "def area(w, h):\ndef rectangle_area(w, h):\n    return w * h\n\n\nprint(area(3, 4))\n"
    assert later.waiting == (3, 6)  # not removed yet: the answer may still come to them
    assert Diff.between(BASE, "", final=False).view().text == BASE


def test_answer_offsets_and_attribution_in_the_view():
    diff = Diff.between(BASE, ANSWER)
    view = diff.view()
    body = ANSWER.index("    return")
    assert view.locate(body) == view.text.index("    return")
    # a span over two answer lines that the view keeps apart: split, and each piece in place
    copied = [(ANSWER.index("(w, h)"), len(ANSWER), BASE.index("(w, h)"), BASE.index("\n\n\n") + 1)]
    pieces = view.spans(copied)
    assert [view.text[a:b] for a, b, _, _ in pieces] == ["(w, h):\n    return w * h\n"]
    assert all(view.text[a:b] == BASE[c:d] for a, b, c, d in pieces)
    rejected = diff.decide([0], False).view()
    assert rejected.locate(ANSWER.index("rectangle")) is None  # its line is not shown
    assert [rejected.text[a:b] for a, b, _, _ in rejected.spans(copied)] == ["    return w * h\n"]


def test_generated_text_is_what_no_copied_span_covers_in_undecided_new_lines():
    view = Diff.between(BASE, ANSWER).view()
    line = view.text.index("def rectangle")
    copied = [(line + len("def rectangle_area"), line + len("def rectangle_area(w, h):\n"))]
    assert {index: [view.text[a:b] for a, b in gaps] for index, gaps in view.generated(copied).items()} == {
        0: ["def rectangle_area"], 1: []}


def test_hunk_at_names_the_hunk_of_an_answer_offset():
    diff = Diff.between(BASE, ANSWER)
    assert diff.hunk_at(0).index == 0
    assert diff.hunk_at(ANSWER.index("    return")) is None  # an unchanged line


@pytest.mark.parametrize("old, new, edit", [
    ("a\nb\nc\n", "a\nx\nb\nc\n", (2, 2, "x\n")),
    ("a\nb\nc\n", "a\nc\n", (2, 4, "")),
    ("a\nb", "a\nb\nc", (2, 3, "b\nc")),
    ("same\n", "same\n", (5, 5, "")),
])
def test_line_edit_replaces_only_the_lines_that_differ(old, new, edit):
    assert line_edit(old, new) == edit
    start, end, text = edit
    assert old[:start] + text + old[end:] == new


def test_split_lines_keeps_line_breaks_and_a_last_line_without_one():
    assert split_lines("a\r\nb\rc\nd") == ("a\r\n", "b\r", "c\n", "d")
    assert split_lines("") == () and split_lines("x\n") == ("x\n",)
