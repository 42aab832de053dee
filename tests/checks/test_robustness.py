"""What the checks do when a checker is missing, slow or broken, on awkward text, and how fast they are."""

from __future__ import annotations

import functools
import time
from pathlib import Path

import pytest

from assistant.checks import Check, Problem, check_edit, lint, syntax

from .helpers import TYPE_HINTS, annotate, colorsys_source, replace_once

FIX = "Fix the bug."


def fake_ruff(tmp_path: Path, script: str) -> str:
    path = tmp_path / "ruff"
    path.write_text(f"#!/bin/sh\n{script}\n")
    path.chmod(0o755)
    return str(path)


def test_a_missing_ruff_is_a_note_not_an_exception(monkeypatch):
    monkeypatch.setattr(lint, "find_ruff", lambda: None)
    before = colorsys_source()
    check = check_edit(before, annotate(before), language="python", instruction=FIX)
    assert check == Check(notes=("ruff is not installed",))
    assert not check.checked
    changed = replace_once(annotate(before), "h-ONE_THIRD))", "h-ONE_SIXTH))")
    hinted = check_edit(before, changed, language="python", instruction=TYPE_HINTS)
    assert hinted.ran == ("structure",) and hinted.notes == ("ruff is not installed",)
    assert [problem.message for problem in hinted.problems] == ["the edit changed code in `hls_to_rgb`"]


def test_a_ruff_that_hangs_times_out_into_a_note(monkeypatch, tmp_path):
    monkeypatch.setattr(lint, "find_ruff", lambda: fake_ruff(tmp_path, "exec sleep 30"))
    started = time.monotonic()
    check = check_edit("x = 1\n", "x = 2\n", language="python", instruction=FIX, timeout=0.5)
    assert time.monotonic() - started < 5
    assert check == Check(notes=("ruff timed out after 0.5 s",))


@pytest.mark.parametrize(("script", "note"), [
    ("echo 'error: something broke' >&2; exit 2", "ruff failed: error: something broke"),
    ("kill -9 $$", "ruff failed: exit status -9"),
    ("echo not json", "ruff failed: its output is not JSON"),
    ("echo '{}'", "ruff failed: its output is not a list of diagnostics"),
])
def test_a_ruff_that_fails_is_a_note(monkeypatch, tmp_path, script, note):
    monkeypatch.setattr(lint, "find_ruff", lambda: fake_ruff(tmp_path, script))
    assert check_edit("x = 1\n", "x = 2\n", language="python", instruction=FIX) == Check(notes=(note,))


def test_a_ruff_that_cannot_start_is_a_note(monkeypatch, tmp_path):
    monkeypatch.setattr(lint, "find_ruff", lambda: str(tmp_path / "nowhere" / "ruff"))
    check = check_edit("x = 1\n", "x = 2\n", language="python", instruction=FIX)
    assert len(check.notes) == 1 and check.notes[0].startswith("ruff could not start: ")


def test_the_packaged_ruff_is_found_without_path(monkeypatch):
    monkeypatch.setenv("PATH", "")
    found = lint.find_ruff()
    assert found is not None and Path(found).name == "ruff"


def test_a_missing_grammar_is_a_note(monkeypatch):
    monkeypatch.setitem(syntax.GRAMMARS, "java", ("tree_sitter_no_such_grammar", "language"))
    syntax.grammar.cache_clear()
    try:
        check = check_edit("class A {}\n", "class A {\n", language="java", instruction=FIX)
    finally:
        syntax.grammar.cache_clear()
    assert check == Check(notes=("unchecked: the tree-sitter grammar for 'java' is not installed",))


def test_offsets_are_string_indices_after_non_ascii_text_and_any_line_ending():
    before = 'GREETING = "héllo wörld 😀 日本"\n\n\ndef f():\n    return GREETING\n'
    after = before.replace("return GREETING", "return GREETING, Tuple  # 😀")
    check = check_edit(before, after, language="python", instruction=FIX)
    assert [after[p.start:p.end] for p in check.problems] == ["Tuple"]
    same_line = 'x = "é😀"; y = Tuple\n'
    problem = check_edit("", same_line, language="python", instruction=FIX).problems[0]
    assert same_line[problem.start:problem.end] == "Tuple"
    for ending in ("\r\n", "\r"):
        text = f'a = "ü"{ending}b = 1{ending}c = Tuple{ending}'
        problem = check_edit("", text, language="python", instruction=FIX).problems[0]
        assert text[problem.start:problem.end] == "Tuple"


def test_structure_offsets_are_string_indices_after_non_ascii_text():
    before = 'def f():\n    s = "ñ😀"; return 1\n'
    after = 'def f() -> int:\n    s = "ñ😀"; return 2\n'
    problem = check_edit(before, after, language="python", instruction=TYPE_HINTS).problems[-1]
    assert problem.checker == "structure"
    assert after[problem.start:problem.end] == "return 2"  # after 4 characters that are 8 bytes in UTF-8


def test_prose_is_not_checked_and_says_so():
    check = check_edit("A paragraph.", "A clearer paragraph.", language=None, instruction="Make this clearer.")
    assert check == Check(notes=("unchecked: prose or an unknown language",))
    assert not check.checked
    assert check_edit("# T", "# U", language="markdown", instruction="x").notes == (
        "unchecked: no checker for language 'markdown'",)


def test_results_are_json():
    check = check_edit("", "y = Tuple\n", language="python", instruction=FIX)
    assert check.to_json() == {"problems": [{"message": "Undefined name `Tuple`", "start": 4, "end": 9, "code": "F821",
                                             "checker": "ruff"}], "ran": ["ruff"], "notes": [], "checked": True}
    assert Problem("m", 1, 2, "syntax", "tree-sitter").to_json()["checker"] == "tree-sitter"


@pytest.mark.parametrize("language", ["python", "javascript", "rust"])
@pytest.mark.parametrize(("before", "after"), [("", ""), ("", "\n"), ("x", ""), ("\ud800 = 1\n", "\ud800 = 2\n"),
                                               ("\x00\x01", "\x00"), ("(" * 500, ")" * 500)])
def test_awkward_text_never_raises(language, before, after):
    check = check_edit(before, after, language=language, instruction=TYPE_HINTS)
    assert check.checked
    assert all(0 <= problem.start <= problem.end <= len(after) for problem in check.problems)


def test_a_thousand_line_file_is_checked_well_within_a_second():
    before = Path(functools.__file__).read_text(encoding="utf-8")  # about 1,000 lines
    assert len(before.splitlines()) > 900
    after = before.replace("(self):", "(self) -> None:").replace("return", "return  ", 1)
    seconds = []
    for _ in range(3):
        started = time.perf_counter()
        check = check_edit(before, after, language="python", instruction=TYPE_HINTS)
        seconds.append(time.perf_counter() - started)
    assert check.ran == ("ruff", "structure")
    assert min(seconds) < 0.5, seconds
