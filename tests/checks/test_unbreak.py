"""Undoing the changed lines that broke the syntax of an annotating or documenting edit, without a model."""

from __future__ import annotations

from textwrap import dedent

from assistant.checks import applied, unbroken_edit

HINTS, DOCSTRINGS = "Add type hints to every function.", "Add a docstring to every function that lacks one."

# timeit.py's Timer.print_exc, and the 1.5B model's type-hint edit of it: an `else:` above a lone comment
BEFORE = dedent('''\
    def print_exc(self, file=None):
        import linecache, traceback
        if self.src is not None:
            linecache.cache[dummy_src_name] = (len(self.src), None, self.src.split("\\n"), dummy_src_name)
        # else the source is already stored somewhere else

        traceback.print_exc(file=file)


    def timeit(self, number=default_number):
        return number
    ''')
AFTER = dedent('''\
    def print_exc(self, file: "IO[str] | None" = None) -> None:
        import linecache, traceback
        if self.src is not None:
            linecache.cache[dummy_src_name] = (len(self.src), None, self.src.split("\\n"), dummy_src_name)
        else:
            # else the source is already stored somewhere else

        traceback.print_exc(file=file)


    def timeit(self, number: int = default_number) -> float:
        return number
    ''')


def test_the_lines_before_the_error_are_put_back_and_every_other_change_kept():
    replacements = unbroken_edit(BEFORE, AFTER, language="python", instruction=HINTS)
    assert applied(AFTER, replacements) == AFTER.replace(
        "    else:\n        # else", "    # else")
    [fix] = replacements
    assert fix.text == BEFORE[slice(*fix.source)] == "    # else the source is already stored somewhere else\n"


def test_hunks_not_needed_are_put_forward_again():
    """An error late in the text is fixed by its own hunk; an earlier changed line stays as the edit wrote it."""
    before = "def f(x):\n    return x\n\n\ndef g(y):\n    return [y,\n            y]\n"
    after = "def f(x: int) -> int:\n    return x\n\n\ndef g(y: int) -> list:\n    return [y,\n            y\n"
    replacements = unbroken_edit(before, after, language="python", instruction=HINTS)
    fixed = applied(after, replacements)
    assert fixed.startswith("def f(x: int) -> int:") and "            y]\n" in fixed
    compile(fixed, "<fixed>", "exec")


def test_an_error_across_two_hunks_reverts_both():
    before = "def f(x):\n    return (x +\n            1)\n"
    after = "def f(x: int) -> int:\n    return (x +\n            1\n    # the sum\n"
    fixed = applied(after, unbroken_edit(before, after, language="python", instruction=DOCSTRINGS))
    compile(fixed, "<fixed>", "exec")
    assert "            1)\n" in fixed


def test_other_languages_use_their_grammar():
    before = "function twice(x) {\n  return x * 2;\n}\n"
    after = "/** Twice x. */\nfunction twice(x) {\n  return x * 2;\n\n"
    replacements = unbroken_edit(before, after, language="javascript", instruction=DOCSTRINGS)
    assert applied(after, replacements) == "/** Twice x. */\nfunction twice(x) {\n  return x * 2;\n}\n"


def test_nothing_is_undone_for_edits_that_may_change_code_or_have_no_parser():
    assert unbroken_edit(BEFORE, AFTER, language="python", instruction="Fix the bug.") == []
    assert unbroken_edit("Some prose.\n", "Some (prose.\n", language=None, instruction=DOCSTRINGS) == []
    assert unbroken_edit("x = (\n", AFTER, language="python", instruction=HINTS) == []  # the document does not parse
    assert unbroken_edit(BEFORE, BEFORE, language="python", instruction=HINTS) == []
