"""The rename check: an edit asked only to rename a name must change nothing else."""

from __future__ import annotations

import ast
import io
import tokenize

import pytest

from assistant.bench import preserve
from assistant.checks import check_edit
from assistant.checks.instructions import renaming

from .helpers import colorsys_source, replace_once

RENAME = "Rename the local variable `maxc` in `rgb_to_hls` to `largest`."


def renamed(source: str, old: str, new: str, lines: tuple[int, int] = (1, 10**9)) -> str:
    """`source` with every NAME token `old` on the given lines (1-based, inclusive) renamed, but attributes:
    a correct rename of a variable."""
    tokens, previous = [], None
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type == tokenize.NAME and token.string == old and lines[0] <= token.start[0] <= lines[1] \
                and previous != ".":
            token = token._replace(string=new)
        tokens.append(token)
        previous = token.string
    return tokenize.untokenize(tokens)


def function_lines(source: str, name: str) -> tuple[int, int]:
    node = next(node for node in ast.walk(ast.parse(source)) if isinstance(node, ast.FunctionDef) and node.name == name)
    return node.lineno, node.end_lineno


def problems(before: str, after: str, instruction: str = RENAME) -> list[str]:
    check = check_edit(before, after, language="python", instruction=instruction)
    assert "rename" in check.ran
    return [problem.message for problem in check.problems]


@pytest.mark.parametrize(("instruction", "reading"), [
    (RENAME, ("maxc", "largest", "rgb_to_hls")),
    ("Rename the local variable `total` in `Parser.parse` to `count`.", ("total", "count", "Parser.parse")),
    ("rename foo to bar", ("foo", "bar", None)),
    ('Rename function "old_name" to "new_name".', ("old_name", "new_name", None)),
    ("Please rename the parameter n in f() to count", ("n", "count", "f")),
    ("Rename the function to snake_case", None),
    ("Rename it to foo", None),
    ("Rename variables to be clearer.", None),
    ("Rename x to y and fix the bug", None),
])
def test_renaming_reads_only_a_single_rename(instruction, reading):
    assert renaming(instruction) == reading


def test_a_correct_rename_has_no_problem():
    before = colorsys_source()
    assert problems(before, renamed(before, "maxc", "largest", function_lines(before, "rgb_to_hls"))) == []


def test_a_rename_that_changed_a_constant_too_is_named():
    before = colorsys_source()
    after = replace_once(renamed(before, "maxc", "largest", function_lines(before, "rgb_to_hls")),
                         "l = sumc/2.0", "l = sumc/3.0")
    assert problems(before, after) == ["the edit changed code in `rgb_to_hls`"]


def test_the_same_local_renamed_in_other_functions_is_no_problem():
    before = colorsys_source()
    assert problems(before, renamed(before, "maxc", "largest")) == []  # rgb_to_hsv has a `maxc` of its own


def test_a_parameter_or_a_module_name_renamed_outside_its_function_is_named():
    instruction = "Rename the local variable `size` in `f` to `length`."
    before = "def f(x):\n    size = len(x)\n    return size\n\n\ndef g(size):\n    return size * 2\n"
    assert problems(before, before.replace("size", "length"), instruction) == ["the edit changed code in `g`"]
    before = "size = 3\n\n\ndef f(x):\n    size = len(x)\n    return size\n\n\ndef g():\n    return size * 2\n"
    after = before.replace("    size = len", "    length = len").replace("return size", "return length")
    assert sorted(problems(before, after, instruction)) == ["Undefined name `length`", "the edit changed code in `g`"]


def test_a_missed_use_is_named_by_both_checks():
    before = colorsys_source()
    lines = function_lines(before, "rgb_to_hls")
    after = replace_once(renamed(before, "maxc", "largest", lines), "    if minc == largest:", "    if minc == maxc:")
    assert sorted(problems(before, after)) == ["Undefined name `maxc`", "the edit changed code in `rgb_to_hls`"]


def test_a_rename_without_scope_may_rename_attributes_and_strings_too():
    before = '__all__ = ["area"]\n\n\ndef area(w, h):\n    return w * h\n\n\nclass Box:\n    def size(self):\n        return area(1, 2)\n'
    instruction = "Rename area to surface."
    assert problems(before, before.replace("area", "surface"), instruction) == []
    assert problems(before, renamed(before, "area", "surface"), instruction) == [  # `__all__` left as it was
        "Undefined name `area` in `__all__`"]
    assert problems(before, before.replace("area", "surface").replace("1, 2", "2, 1"), instruction) == [
        "the edit changed code in `Box.size`"]


@pytest.mark.parametrize("module", preserve.MODULES)
def test_the_benchs_rename_done_right_has_no_problem(module):
    """The rename the bench asks of each module, done by tokens within the function, is never blamed."""
    source = preserve.module_source(module)
    instruction = preserve.rename_instruction(source)
    old, new, scope = renaming(instruction)
    node = next(node for name, node in preserve.functions(ast.parse(source).body) if name == scope)
    assert problems(source, renamed(source, old, new, (node.lineno, node.end_lineno)), instruction) == []
