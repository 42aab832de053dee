"""The structure check: an edit asked only to annotate or document must leave the code as it was."""

from __future__ import annotations

from textwrap import dedent

import pytest

from assistant.checks import applied, check_edit, preserving
from assistant.checks.restore import restored_defaults

from .helpers import TYPE_HINTS, annotate, colorsys_source, replace_once

TYPED = "from typing import Tuple\n\n# Some floating point constants"


def structural(check) -> list[str]:
    return [problem.message for problem in check.problems if problem.checker == "structure"]


@pytest.mark.parametrize(("instruction", "kind"), [
    ("Add type hints to every function.", "annotations"),
    ("Add type hints to every function and class.", "annotations"),
    ("Annotate every function with types, including private ones.", "annotations"),
    ("Add type hints and docstrings.", "annotations"),
    ("Please add type hints. Thanks!", "annotations"),
    ("Add docstrings to every function.", "documentation"),
    ("Add comments explaining the code.", "documentation"),
    ("Document this module.", "documentation"),
    ("Add JSDoc comments to the exported functions.", "documentation"),
    ("Add type hints and fix the bug.", None),
    ("Add type hints, then rename foo to bar.", None),
    ("Refactor this and add comments", None),
    ("Add type hints and add a main function.", None),
    ("Add type hints to every function, and add error handling.", None),
    ("Make this faster", None),
    ("Fix the bug.", None),
    ("", None),
])
def test_preserving_reads_the_instruction_conservatively(instruction, kind):
    assert preserving(instruction) == kind


def test_a_changed_constant_under_type_hints_names_the_function():
    before = colorsys_source()
    after = replace_once(replace_once(annotate(before), "h-ONE_THIRD))", "h-ONE_SIXTH))"), "# Some floating", TYPED)
    check = check_edit(before, after, language="python", instruction=TYPE_HINTS)
    assert structural(check) == ["the edit changed code in `hls_to_rgb`"]
    problem = check.problems[0]
    assert (problem.code, problem.checker) == ("changed-code", "structure")
    assert "h-ONE_SIXTH" in after[problem.start:problem.end]
    function = after.index("def hls_to_rgb")
    assert function < problem.start < problem.end <= after.index("def _v")
    assert [p for p in check.problems if p.checker == "ruff"] == []  # ruff sees nothing wrong: only structure can


def test_a_deleted_statement_under_type_hints_is_reported_by_both_checks():
    before = colorsys_source()
    after = replace_once(replace_once(annotate(before), "    sumc = (maxc+minc)\n", ""), "# Some floating", TYPED)
    check = check_edit(before, after, language="python", instruction=TYPE_HINTS)
    assert structural(check) == ["the edit removed code from `rgb_to_hls`"]
    assert [p.message for p in check.problems if p.checker == "ruff"] == ["Undefined name `sumc`"] * 2
    removal = next(p for p in check.problems if p.checker == "structure")
    assert removal.start == removal.end == after.index("    rangec = (maxc-minc)\n    l = sumc") + 4


def test_docstrings_comments_annotations_and_typing_imports_are_not_changes():
    before = dedent("""\
        import os


        class Box:
            size = 3

            def grow(self, by=1):
                self.size += by
                return os.sep
        """)
    after = dedent('''\
        """Boxes."""
        from __future__ import annotations

        import os
        from typing import TYPE_CHECKING, TypeAlias, TypeVar

        if TYPE_CHECKING:
            from collections.abc import Iterable
        T = TypeVar("T")
        Size: TypeAlias = int


        class Box:
            """A box."""

            size: int = 3
            label: str

            def grow(self, by: int = 1) -> str:
                """Grow."""
                # grows the box
                self.size += by
                return os.sep
        ''')
    check = check_edit(before, after, language="python", instruction=TYPE_HINTS)
    assert check.ran == ("ruff", "structure")
    assert structural(check) == []


def test_other_additions_under_type_hints_are_reported_where_they_are():
    before = "def f(x):\n    return x\n"
    after = "import os\n\n\ndef f(x: int) -> int:\n    return x\n\n\ndef g() -> None:\n    pass\n"
    check = check_edit(before, after, language="python", instruction=TYPE_HINTS)
    assert structural(check) == ["the edit added code at module level", "the edit added `g`"]
    added = check.problems[-1]
    assert after[added.start:added.end] == "def g() -> None:\n    pass"


ADDED = "the edit added code at module level"


@pytest.mark.parametrize("after, used, other", [
    ("import io\n\n\ndef f(stream: io.TextIOWrapper) -> str:\n    return stream.read()\n",
     ("return stream.read()", "return io.open(stream).read()"),  # a value: code the edit added
     ("import io\n", "import io as streams\n")),  # under another name: not the module's own
    ("from collections import deque\n\n\ndef f(stream: deque) -> str:\n    return stream.read()\n",
     ("return stream.read()", "return deque(stream).read()"),
     ("from collections", "from numpy")),  # not the standard library: an import may run code
])
def test_an_import_of_the_standard_library_that_only_annotations_need_is_part_of_type_hints(after, used, other):
    before = "def f(stream):\n    return stream.read()\n"
    assert structural(check_edit(before, after, language="python", instruction=TYPE_HINTS)) == []
    for changed in (after.replace(*used), after.replace(*other)):
        assert ADDED in structural(check_edit(before, changed, language="python", instruction=TYPE_HINTS))


def test_a_typing_import_is_a_change_when_only_docstrings_were_asked_for():
    before = "def f(x):\n    return x\n"
    after = "from typing import Any\n\n\ndef f(x: Any) -> Any:\n    \"\"\"Return x.\"\"\"\n    return x\n"
    check = check_edit(before, after, language="python", instruction="Add docstrings.")
    assert structural(check) == ["the edit added code at module level"]


def test_a_removed_method_is_named_by_its_qualified_name_at_the_place_it_was():
    before = dedent("""\
        class A:
            def one(self):
                return 1

            def two(self):
                return 2


        def three():
            return 3
        """)
    after = "class A:\n    def one(self) -> int:\n        return 1\n\n\ndef three() -> int:\n    return 3\n"
    check = check_edit(before, after, language="python", instruction=TYPE_HINTS)
    assert structural(check) == ["the edit removed `A.two`"]
    assert check.problems[0].start == check.problems[0].end == after.index("def three")


def test_changed_defaults_and_decorators_change_the_signature():
    before = "import functools\n\n\n@functools.cache\ndef f(x=1):\n    return x\n"
    after = "import functools\n\n\n@functools.cache\ndef f(x: int = 2) -> int:\n    return x\n"
    check = check_edit(before, after, language="python", instruction=TYPE_HINTS)
    assert structural(check) == ["the edit changed code in `f`"]
    assert after[check.problems[0].start:].startswith("@functools.cache")


def test_structure_does_not_run_when_the_instruction_asks_for_more():
    before = colorsys_source()
    after = replace_once(before, "h-ONE_THIRD))", "h-ONE_SIXTH))")
    check = check_edit(before, after, language="python", instruction="Add type hints and fix the bug.")
    assert check.ran == ("ruff",) and check.problems == ()


def test_an_edited_text_that_does_not_parse_is_left_to_ruff():
    before = "def f(x):\n    return x\n"
    after = "def f(x: int) -> int\n    return x\n"
    check = check_edit(before, after, language="python", instruction=TYPE_HINTS)
    assert check.ran == ("ruff",)
    assert check.notes == ("structure not checked: the edited text is not valid Python",)
    assert check.problems and {problem.code for problem in check.problems} == {"syntax"}


RESTORE_BEFORE = dedent('''\
    class GetoptError(Exception):
        opt = ''
        msg = ''

        def __init__(self, msg, opt=''):
            self.msg = msg
            self.opt = opt
            Exception.__init__(self, msg, opt)
    ''')


def restored(after: str, instruction: str = "Add docstrings.") -> str:
    from assistant.checks import applied, restorable_edit
    return applied(after, restorable_edit(RESTORE_BEFORE, after, language="python", instruction=instruction))


def test_a_definition_holding_others_is_put_back_whole():
    after = RESTORE_BEFORE.replace("    opt = ''\n    msg = ''\n", '    """An error of getopt."""\n')
    assert restored(after) == RESTORE_BEFORE  # a class with a method of its own is put back whole


def test_added_and_changed_statements_go_and_the_hints_stay():
    """The method is innermost: its statements go back, its new signature's hints and the class docstring stay."""
    hinted = RESTORE_BEFORE.replace("    opt = ''\n", '    """An error of getopt."""\n    opt = \'\'\n').replace(
        "def __init__(self, msg, opt=''):", "def __init__(self, msg: str, opt: str = '') -> None:")
    after = hinted.replace("        self.opt = opt\n", "        self.opt = opt.strip()\n        print(opt)\n")
    assert restored(after, "Add type hints.") == hinted


def test_statements_removed_at_the_end_go_after_the_last_line():
    after = RESTORE_BEFORE.replace("        Exception.__init__(self, msg, opt)\n", "")
    assert restored(after) == RESTORE_BEFORE


MODULE = dedent('''\
    """Wrapping."""

    __all__ = ["wrap", "fill", "shorten"]


    def wrap(text):
        return text.split()


    def fill(text):
        return "\\n".join(wrap(text))

    ALIAS = fill


    def shorten(text):
        return text[:10]
    ''')


def test_removed_definitions_go_back_where_they_stood():
    """The model's textwrap answer dropped `wrap` and `fill`: both go back before the surviving code after them."""
    after = MODULE.replace('def wrap(text):\n    return text.split()\n\n\ndef fill(text):\n    return "\\n".join(wrap(text))\n\n',
                           "")
    after = after.replace("def shorten(text):", 'def shorten(text):\n    """The first ten characters."""')
    assert restored_module(after) == MODULE.replace("def shorten(text):",
                                                     'def shorten(text):\n    """The first ten characters."""')


def test_an_added_definition_goes():
    after = MODULE.replace("\n\ndef shorten(text):", "\n\ndef helper():\n    return 1\n\n\ndef shorten(text):")
    assert restored_module(after) == MODULE


def restored_module(after: str) -> str:
    from assistant.checks import applied, restorable_edit
    return applied(after, restorable_edit(MODULE, after, language="python", instruction="Add docstrings."))


def test_a_form_feed_does_not_end_a_line_for_the_restore():
    """CPython's modules keep page breaks (`\\f`) on lines of their own: lines are counted as the parser does."""
    before = MODULE.replace("ALIAS = fill\n", "ALIAS = fill\n\x0c\n")
    after = before.replace('def fill(text):\n    return "\\n".join(wrap(text))\n\n', "")
    from assistant.checks import applied, restorable_edit
    assert applied(after, restorable_edit(before, after, language="python", instruction="Add docstrings.")) == before


def test_defaults_go_back_as_they_were_and_the_hints_stay():
    before = "def f(a, b, c=1, *, d, e=2):\n    return a\n\n\nclass K:\n    def m(self, x, y=None):\n        pass\n"
    after = ('def f(a: int, b: int = None, c: int = 3, *, d: str = "", e: int) -> int:\n    return a\n\n\n'
             "class K:\n    def m(self, x: int = 0, y: str = None) -> None:\n        pass\n")
    fixes = restored_defaults(before, after)
    assert applied(after, fixes) == ("def f(a: int, b: int, c: int = 1, *, d: str, e: int = 2) -> int:\n    return a\n\n\n"
                                     "class K:\n    def m(self, x: int, y: str = None) -> None:\n        pass\n")
    assert all(fix.source is None or fix.text == before[slice(*fix.source)] for fix in fixes)
    handled = "try:\n    pass\nexcept OSError:\n    pass\n"  # a handler without a name has name None
    assert restored_defaults(handled + before, handled + after) == [fix._replace(
        start=fix.start + len(handled), end=fix.end + len(handled),
        source=fix.source and (fix.source[0] + len(handled), fix.source[1] + len(handled))) for fix in fixes]
    renamed = after.replace("(a: int, b: int = None", "(a: int, bee: int = None")  # not the same parameters
    assert applied(renamed, restored_defaults(before, renamed)).startswith("def f(a: int, bee: int = None")
