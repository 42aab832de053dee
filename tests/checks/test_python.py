"""Ruff on Python edits: only what the edit introduced is reported, at its place in the edited text."""

from __future__ import annotations

from assistant.checks import check_edit

from .helpers import TYPE_HINTS, annotate, colorsys_source, replace_once

FIX = "Fix the bug."


def codes(check) -> list[tuple[str, str]]:
    return [(problem.code, problem.message) for problem in check.problems]


def test_type_hints_without_importing_tuple_report_the_undefined_name():
    before = colorsys_source()
    after = annotate(before)
    check = check_edit(before, after, language="python", instruction=TYPE_HINTS)
    undefined = [problem for problem in check.problems if problem.code == "F821"]
    assert len(undefined) == 6  # six functions return a Tuple, `_v` a float
    assert all("`Tuple`" in problem.message and problem.checker == "ruff" for problem in undefined)
    assert {after[problem.start:problem.end] for problem in undefined} == {"Tuple"}
    assert check.ran == ("ruff", "structure")


def test_correct_type_hints_with_their_import_report_nothing():
    before = colorsys_source()
    after = replace_once(annotate(before), "# Some floating point constants",
                         "from typing import Tuple\n\n# Some floating point constants")
    check = check_edit(before, after, language="python", instruction=TYPE_HINTS)
    assert check.problems == ()
    assert check.checked and check.notes == ()
    modern = annotate(before, "tuple[float, float, float]")
    assert check_edit(before, modern, language="python", instruction=TYPE_HINTS).problems == ()


def test_a_deleted_statement_reports_the_names_it_defined():
    before = colorsys_source()
    after = replace_once(before, "    sumc = (maxc+minc)\n", "")
    check = check_edit(before, after, language="python", instruction=FIX)
    assert check.ran == ("ruff",)
    assert codes(check) == [("F821", "Undefined name `sumc`")] * 2
    assert all(after[problem.start:problem.end] == "sumc" for problem in check.problems)


def test_a_deleted_public_function_is_reported_through_all():
    before = colorsys_source()
    start = before.index("def hsv_to_rgb")
    after = before[:start]
    check = check_edit(before, after, language="python", instruction=FIX)
    assert codes(check) == [("F822", "Undefined name `hsv_to_rgb` in `__all__`")]
    assert after[check.problems[0].start:check.problems[0].end] == '"hsv_to_rgb"'


def test_problems_the_text_had_before_are_not_reported_even_when_they_move():
    before = "import os\n\n\ndef f():\n    return undefined_thing\n"
    after = "import os\n\n\ndef helper():\n    return 1\n\n\ndef f():\n    return undefined_thing\n"
    assert check_edit(before, after, language="python", instruction=FIX).problems == ()
    added = "import os\nimport sys\n\n\ndef f():\n    return undefined_thing\n"
    check = check_edit(before, added, language="python", instruction=FIX)
    assert codes(check) == [("F401", "`sys` imported but unused")]
    assert added[check.problems[0].start:check.problems[0].end] == "sys"


def test_one_more_of_a_kind_is_the_one_on_a_new_line():
    before = "def f():\n    return Missing\n"
    after = "def f():\n    return Missing\n\n\ndef g():\n    x = 1\n    return Missing + 1\n"
    check = check_edit(before, after, language="python", instruction=FIX)
    assert codes(check) == [("F841", "Local variable `x` is assigned to but never used"),
                            ("F821", "Undefined name `Missing`")]
    assert check.problems[1].start == after.index("Missing + 1")


def test_redefinitions_are_reported():
    before = "import json\n\n\ndef load(path):\n    return json.load(open(path))\n"
    after = before + "\n\ndef load(path):\n    return None\n"
    check = check_edit(before, after, language="python", instruction=FIX)
    assert [problem.code for problem in check.problems] == ["F811"]


def test_syntax_errors_the_edit_introduced_are_reported_and_old_ones_are_not():
    before = "def f(x):\n    return x + 1\n"
    after = "def f(x):\n    return (x + 1\n"
    check = check_edit(before, after, language="python", instruction=FIX)
    assert check.problems and all(problem.code == "syntax" for problem in check.problems)
    assert all(problem.message.startswith("syntax error: ") for problem in check.problems)
    assert check.problems[0].start >= after.index("(x + 1")
    broken = "def f(x:\n    return x\n"
    assert check_edit(broken, broken + "\ny = 2\n", language="python", instruction=FIX).problems == ()
