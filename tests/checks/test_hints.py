"""The `typing` imports a type-hint edit forgot, written without a model."""

from __future__ import annotations

from assistant.checks import applied, check_edit, hint_fix_edit

HINTS = "Add type hints to every function."
BEFORE = '"""Colours."""\n\nfrom __future__ import annotations\n\nimport math\n\n\ndef hls(h, s):\n    return h, s\n'
AFTER = BEFORE.replace("def hls(h, s):", "def hls(h: float, s: typing.Optional[float]) -> Tuple[float, float]:")


def test_the_imports_go_after_the_docstring_and_future_imports():
    [fix] = hint_fix_edit(BEFORE, AFTER, language="python", instruction=HINTS)
    assert fix.source is None and fix.start == fix.end == AFTER.index("import math")
    fixed = applied(AFTER, [fix])
    assert "annotations\n\nimport typing\nfrom typing import Tuple\nimport math\n" in fixed
    assert check_edit(BEFORE, fixed, language="python", instruction=HINTS).problems == ()


def test_an_annotation_naming_a_type_that_is_nowhere_is_removed():
    after = BEFORE.replace("def hls(h, s):", "def hls(h: float, s: Colour = None, *, t: list[Colour]) -> Colour:")
    fixed = applied(after, hint_fix_edit(BEFORE, after, language="python", instruction=HINTS))
    assert "def hls(h: float, s = None, *, t):\n" in fixed
    value = BEFORE.replace("return h, s", "return Colour(h), s")  # a name the code reads: the model's to repair
    assert hint_fix_edit(BEFORE, value, language="python", instruction=HINTS) == []


def test_classes_of_types_get_their_import_too():
    after = BEFORE.replace("def hls(h, s):", "def hls(h: CodeType, s: List[ModuleType]) -> None:")
    [fix] = hint_fix_edit(BEFORE, after, language="python", instruction=HINTS)
    fixed = applied(after, [fix])
    assert "from typing import List\nfrom types import CodeType, ModuleType\nimport math\n" in fixed
    assert check_edit(BEFORE, fixed, language="python", instruction=HINTS).problems == ()


def test_a_standard_library_module_an_annotation_names_gets_its_import():
    after = BEFORE.replace("def hls(h, s):", "def hls(h: io.IOBase, s: typing.Any) -> os.PathLike:")
    [fix] = hint_fix_edit(BEFORE, after, language="python", instruction=HINTS)
    assert "annotations\n\nimport typing\nimport io\nimport os\nimport math\n" in applied(after, [fix])
    missing = BEFORE.replace("def hls(h, s):", "def hls(h: io.Colour, s: io.IOBase):")  # `io` has no `Colour`
    fixed = applied(missing, hint_fix_edit(BEFORE, missing, language="python", instruction=HINTS))
    assert "import io" not in fixed and "def hls(h, s):" in fixed  # not imported, so neither hint stands
    used = BEFORE.replace("return h, s", "return io.open(h)")  # a module used as a value is the model's to fix
    assert hint_fix_edit(BEFORE, used, language="python", instruction=HINTS) == []


def test_a_standard_library_class_an_annotation_names_bare_gets_its_import():
    after = BEFORE.replace("def hls(h, s):", "def hls(h: deque, s: Optional[Decimal]) -> date:")
    [fix] = hint_fix_edit(BEFORE, after, language="python", instruction=HINTS)
    fixed = applied(after, [fix])
    assert ("from typing import Optional\nfrom collections import deque\nfrom datetime import date\n"
            "from decimal import Decimal\nimport math\n") in fixed
    assert check_edit(BEFORE, fixed, language="python", instruction=HINTS).problems == ()
    used = after.replace("return h, s", "return deque(h), s")  # a class the code uses too is the model's to fix
    assert "collections" not in applied(used, hint_fix_edit(BEFORE, used, language="python", instruction=HINTS))
    guess = BEFORE.replace("def hls(h, s):", "def hls(h: datetime, s: float):")  # the module or its class?
    assert "def hls(h, s: float):" in applied(guess, hint_fix_edit(BEFORE, guess, language="python", instruction=HINTS))


def test_a_typing_name_in_the_wrong_case_is_spelt_as_typing_does():
    after = BEFORE.replace("def hls(h, s):", "def hls(h: hashable, s: Optional[iterable]) -> float:")
    fixed = applied(after, hint_fix_edit(BEFORE, after, language="python", instruction=HINTS))
    assert "from typing import Hashable, Iterable, Optional\n" in fixed
    assert "def hls(h: Hashable, s: Optional[Iterable]) -> float:" in fixed
    assert check_edit(BEFORE, fixed, language="python", instruction=HINTS).problems == ()
    own = after.replace("import math", "import math\n\n\nclass Hashable:\n    pass")  # the module's own name
    assert "Hashable]" not in applied(own, hint_fix_edit(BEFORE, own, language="python", instruction=HINTS))
    imported = after.replace("import math", "from typing import Hashable\nimport math")  # a slip of a name it has
    fixed = applied(imported, hint_fix_edit(BEFORE, imported, language="python", instruction=HINTS))
    assert "def hls(h: Hashable," in fixed and fixed.count("Hashable") == 2


def test_a_typing_name_spelt_as_a_module_attribute_is_spelt_with_typing():
    after = BEFORE.replace("def hls(h, s):", "def hls(h: io.TextIO, s: io.IOBase) -> collections.Iterable[str]:")
    fixed = applied(after, hint_fix_edit(BEFORE, after, language="python", instruction=HINTS))
    assert "import typing\nimport io\nimport math\n" in fixed  # `io` still named, for its `IOBase`
    assert "def hls(h: typing.TextIO, s: io.IOBase) -> typing.Iterable[str]:" in fixed
    assert check_edit(BEFORE, fixed, language="python", instruction=HINTS).problems == ()
    exec(compile(fixed, "<fixed>", "exec"), {})  # it imports: `io.TextIO` failed with an AttributeError
    imported = "import io\n" + BEFORE.replace("def hls(h, s):", "def hls(h: io.TextIO) -> typing.TextIO:")
    fixed = applied(imported, hint_fix_edit(BEFORE, imported, language="python", instruction=HINTS))
    assert fixed.startswith("import typing\nimport io\n") and "def hls(h: typing.TextIO) -> typing.TextIO:" in fixed
    kept = BEFORE.replace("def hls(h, s):", "def hls(h: io.TextIO, s):")  # there before the edit: not the edit's
    assert hint_fix_edit(kept, kept.replace(", s)", ", s: int)"), language="python", instruction=HINTS) == []


def test_only_type_hint_edits_get_imports():
    assert hint_fix_edit(BEFORE, AFTER, language="python", instruction="Add docstrings.") == []
    assert hint_fix_edit(BEFORE, AFTER, language="python", instruction="Fix the bug.") == []


def test_a_module_of_definitions_only_gets_them_first():
    before, after = "def f(x):\n    return x\n", "@cache\ndef f(x: List[int]) -> int:\n    return x\n"
    [fix] = hint_fix_edit(before, after, language="python", instruction=HINTS)
    assert applied(after, [fix]).startswith("from typing import List\n@cache\n")


def test_forward_references_are_quoted_where_they_stand():
    before = "class Box:\n    def copy(self):\n        return self\n\n\ndef wrap(x):\n    return [x]\n\n\nclass Later:\n    pass\n"
    after = before.replace("def copy(self):", "def copy(self) -> Box:").replace(
        "def wrap(x):", "def wrap(x: Later) -> List[Later]:")
    fixed = applied(after, hint_fix_edit(before, after, language="python", instruction=HINTS))
    assert 'def copy(self) -> "Box":' in fixed and 'def wrap(x: "Later") -> List["Later"]:' in fixed
    assert fixed.startswith("from typing import List\nclass Box:")
    assert check_edit(before, fixed, language="python", instruction=HINTS).problems == ()
    exec(compile(fixed, "<fixed>", "exec"), {})  # it imports


def test_a_name_used_as_a_value_is_never_quoted():
    before = "def make(kind):\n    return kind\n\n\nclass Box:\n    pass\n"
    after = "def make(kind=Box) -> Box:\n    return kind\n\n\nclass Box:\n    pass\n"
    [fix] = hint_fix_edit(before, after, language="python", instruction=HINTS)
    assert applied(after, [fix]) == after.replace("-> Box", '-> "Box"')  # the default stays undefined
