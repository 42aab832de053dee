"""How much of what an instruction asked an answer did, measured on the syntax tree of Python before and
after the edit: an answer that gives the code back unchanged keeps every test passing, and did nothing.

Each measure is a share in [0, 1] of the things the instruction asked about, found by qualified name
(`Class.method`, a nested function `outer.inner`), or None when the code before had nothing to do:
- type hints: the functions that lacked complete annotations and now have them. A function's annotations
  are complete when every parameter (`*args` and `**kwargs` included) but a first positional `self` or
  `cls` is annotated, and so is its return (`-> None` too: a missing return hint is not complete): the
  engine's own rule (`checks.asked`), by which it skips the definitions that have what was asked. A
  function hinted `-> None` that returns a value is not done (`checks.asked.none_but_returns`, by which
  the engine grades a pass);
- docstrings: the functions (and the classes, when the instruction asks for them too) that lacked a docstring
  and now have one: "Add a docstring to every function that lacks one." asks nothing of a class;
- f-strings: the `%` formats (a string literal `%` something) converted: 1 less those left over those before;
- a rename: the occurrences (names read, written or deleted, in the function and what it nests) of the
  old name that are the new one after, over those of the old name before.
A definition the answer removed is not done; an answer that does not parse did nothing.

The measures read only the two texts (and `checks.asked`), so the engine could use them as well as the
bench.
"""

from __future__ import annotations

import ast

from assistant.checks.asked import ANNOTATIONS, DOCSTRING, by_name, has, none_but_returns

HINTS, DOCSTRINGS = frozenset({ANNOTATIONS}), frozenset({DOCSTRING})


def parsed(text: str) -> ast.AST | None:
    try:
        return ast.parse(text)
    except (SyntaxError, ValueError):
        return None


def share(asked: set[str], done: set[str]) -> float | None:
    return len(asked & done) / len(asked) if asked else None


def functions(text: str) -> dict[str, ast.FunctionDef | ast.AsyncFunctionDef]:
    return {name: node for name, node in by_name(parsed(text)).items() if not isinstance(node, ast.ClassDef)}


def hints_done(before: str, after: str) -> float | None:
    """The share of the functions lacking complete annotations before that have them after, none of them a
    `-> None` on a function that returns a value."""
    asked = {name for name, node in functions(before).items() if not has(node, HINTS)}
    return share(asked, {name for name, node in functions(after).items()
                         if has(node, HINTS) and not none_but_returns(node)})


def docstrings_done(before: str, after: str, classes: bool = False) -> float | None:
    """The share of the functions (and, with `classes`, the classes) without a docstring before that have one
    after."""
    def documented(text: str, wanted: bool) -> set[str]:
        return {name for name, node in by_name(parsed(text)).items()
                if (classes or not isinstance(node, ast.ClassDef)) and has(node, DOCSTRINGS) is wanted}
    return share(documented(before, False), documented(after, True))


def percent_formats(tree: ast.AST | None) -> int:
    """The `%` operations whose left side is a string literal."""
    return sum(isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod) and isinstance(node.left, ast.Constant)
               and isinstance(node.left.value, str) for node in ast.walk(tree)) if tree is not None else 0


def fstrings_done(before: str, after: str) -> float | None:
    """1 less the share of the `%` formats before that are left after (0 when the answer does not parse)."""
    asked, tree = percent_formats(parsed(before)), parsed(after)
    if not asked:
        return None
    return 0.0 if tree is None else max(0.0, 1 - percent_formats(tree) / asked)


def occurrences(node: ast.AST | None, name: str) -> int:
    return sum(isinstance(n, ast.Name) and n.id == name for n in ast.walk(node)) if node is not None else 0


def rename_done(before: str, after: str, function: str, old: str, new: str) -> float | None:
    """The share of the occurrences of `old` in `function` before that are `new` in it after."""
    asked = occurrences(by_name(parsed(before)).get(function), old)
    if not asked:
        return None
    return min(asked, occurrences(by_name(parsed(after)).get(function), new)) / asked
