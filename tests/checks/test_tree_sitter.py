"""Tree-sitter syntax checks of other languages, the comment-only structure check, and language names."""

from __future__ import annotations

import pytest

from assistant.checks import check_edit, language_of
from assistant.checks.syntax import grammar

FIX = "Fix the bug."

# language: (a valid program, the text an edit breaks, what it breaks it into)
PROGRAMS = {
    "java": ("class Point {\n    int x;\n    int twice() {\n        return x * 2;\n    }\n}\n", "return x * 2;",
             "return x * 2"),
    "javascript": ("function twice(x) {\n  return x * 2;\n}\nconsole.log(twice(2));\n", "twice(2));", "twice(2);"),
    "typescript": ("function twice(x: number): number {\n  return x * 2;\n}\n", "x: number)", "x: number"),
    "typescriptreact": ("const A = () => <div>{1}</div>;\n", "</div>", "</dv"),
    "go": ("package main\n\nfunc twice(x int) int {\n\treturn x * 2\n}\n", "int {", "int"),
    "rust": ("fn twice(x: i32) -> i32 {\n    x * 2\n}\n", "fn twice(x: i32)", "fn twice(x: i32"),
    "c": ("int twice(int x) {\n    return x * 2;\n}\n", "return x * 2;", "return x * ;"),
    "cpp": ("#include <vector>\nint twice(int x) {\n    return x * 2;\n}\n", "int twice(int x) {", "int twice(int x {"),
    "csharp": ("class P {\n    int Twice(int x) {\n        return x * 2;\n    }\n}\n", "return x * 2;", "return x * ;"),
    "kotlin": ("fun twice(x: Int): Int {\n    return x * 2\n}\n", "fun twice(x: Int)", "fun twice(x: Int"),
    "ruby": ("def twice(x)\n  x * 2\nend\n", "end\n", "\n"),
    "php": ("<?php\nfunction twice($x) {\n    return $x * 2;\n}\n", "return $x * 2;", "return $x * ;"),
    "shellscript": ('twice() {\n  echo $(( $1 * 2 ))\n}\nif [ -n "$1" ]; then\n  twice "$1"\nfi\n', "fi\n", "\n"),
}


@pytest.mark.parametrize("language", sorted(PROGRAMS))
def test_a_syntax_error_the_edit_introduced_is_reported(language):
    before, old, new = PROGRAMS[language]
    assert old in before
    after = before.replace(old, new)
    check = check_edit(before, after, language=language, instruction=FIX)
    assert check.ran == ("tree-sitter",)
    assert check.problems, language
    assert all(problem.code == "syntax" and problem.checker == "tree-sitter" for problem in check.problems)
    assert all(0 <= problem.start <= problem.end <= len(after) for problem in check.problems)
    assert check_edit(before, before + "\n", language=language, instruction=FIX).problems == ()


@pytest.mark.parametrize("language", sorted(PROGRAMS))
def test_a_syntax_error_the_text_had_before_is_not_reported(language):
    before, old, new = PROGRAMS[language]
    broken = before.replace(old, new)
    edited = broken.replace("2", "3")
    check = check_edit(broken, edited, language=language, instruction=FIX)
    assert check.ran == ("tree-sitter",) and check.problems == ()


def test_the_new_error_is_the_one_reported_at_its_place_after_non_ascii_text():
    before = 'const greeting = "héllo 😀";\nfunction a() {\n  return 1 +;\n}\nfunction b() {\n  return 2;\n}\n'
    after = before.replace("return 2;", "return 2 +;")
    check = check_edit(before, after, language="javascript", instruction=FIX)
    assert len(check.problems) == 1
    problem = check.problems[0]
    assert after.index("function b") < problem.start <= after.index("2 +;") + len("2 +;")


def test_a_missing_token_is_named():
    before = "class A {\n    int f() {\n        return 1;\n    }\n}\n"
    check = check_edit(before, before.replace("return 1;", "return 1"), language="java", instruction=FIX)
    assert [problem.message for problem in check.problems] == ["syntax error: missing `;`"]
    assert check.problems[0].start == before.index(";")


def test_grammars_are_loaded_once():
    assert grammar("java") is grammar("java")


def test_a_documenting_edit_that_changed_code_names_the_function():
    before = "class Point {\n    int x;\n\n    int twice() {\n        return x * 2;\n    }\n}\n"
    after = before.replace("    int twice", "    /** Twice x, ü. */\n    int twice").replace("x * 2", "x * 3")
    check = check_edit(before, after, language="java", instruction="Add Javadoc comments.")
    assert check.ran == ("tree-sitter", "structure")
    assert [problem.message for problem in check.problems] == ["the edit changed code in `twice`"]
    assert after[check.problems[0].start:check.problems[0].end] == "3"


def test_a_documenting_edit_that_only_adds_comments_reports_nothing():
    before = "int twice(int x) {\n    return x * 2;\n}\n"
    after = "/* Twice x. */\nint twice(int x) {\n    // doubles\n    return x * 2; /* é */\n}\n"
    check = check_edit(before, after, language="c", instruction="Add comments.")
    assert check.ran == ("tree-sitter", "structure") and check.problems == ()
    changed = check_edit(before, after.replace("x * 2", "x - 2"), language="c", instruction="Add comments.")
    assert [problem.message for problem in changed.problems] == ["the edit changed code in `twice`"]


def test_annotation_edits_of_other_languages_get_syntax_checks_only():
    before, _, _ = PROGRAMS["typescript"]
    check = check_edit(before, before, language="typescript", instruction="Add type hints to every function.")
    assert check.ran == ("tree-sitter",)
    assert check.notes == ("structure not checked: annotation edits are compared in Python only",)


@pytest.mark.parametrize(("name", "text", "language"), [
    ("colorsys.py", None, "python"), ("python", None, "python"), ("/src/App.TSX", None, "typescriptreact"),
    ("typescriptreact", None, "typescriptreact"), ("main.go", None, "go"), ("lib.rs", None, "rust"),
    ("x.h", None, "c"), ("x.hpp", None, "cpp"), ("Main.java", None, "java"), ("file:///a/b.kt", None, "kotlin"),
    ("README.md", None, None), ("markdown", None, None), ("plaintext", None, None), ("notes.txt", None, None),
    ("data.unknown", None, None), (None, None, None), ("", None, None),
    (None, "#!/usr/bin/env python3\nprint(1)\n", "python"), ("run", "#!/bin/bash\necho\n", "shellscript"),
    ("notes.md", "#!/usr/bin/env python3\n", None),
])
def test_language_of_names_lsp_language_ids(name, text, language):
    assert language_of(name, text) == language
