"""Whether a Python definition already has what a documenting or annotating edit asks of it: a docstring,
complete type hints. The engine skips definitions that have it, and a measure of how much of such an
edit was done reads the same rules.

A function's annotations are complete when every parameter (`*args` and `**kwargs` included) but a first
positional `self` or `cls` is annotated, and so is its return (`-> None` too: a missing return hint is
not complete). A definition has what was asked only when every definition nested in it has it too, since
an edit of the definition is an edit of what it nests.
"""

from __future__ import annotations

import ast

Definition = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef
Function = ast.FunctionDef | ast.AsyncFunctionDef
METHOD_FIRST = ("self", "cls")
DOCSTRING, ANNOTATIONS = "docstring", "annotations"


def by_name(tree: ast.AST | None, prefix: str = "") -> dict[str, Definition]:
    """Every function and class by qualified name (`Class.method`, `outer.inner`; the first of a name defined
    twice), at any depth, those under an `if` or a `try` included."""
    found: dict[str, Definition] = {}
    for node in ast.iter_child_nodes(tree) if tree is not None else ():
        if isinstance(node, Definition):
            found.setdefault(prefix + node.name, node)
            inner = by_name(node, f"{prefix}{node.name}.")
        else:
            inner = by_name(node, prefix)
        for name, definition in inner.items():
            found.setdefault(name, definition)
    return found


def unannotated(function: Function) -> list[str]:
    """The parameters of `function` that lack an annotation, `*args` and `**kwargs` included, but a first
    positional `self` or `cls`."""
    arguments = function.args
    positional = arguments.posonlyargs + arguments.args
    if positional and positional[0].arg in METHOD_FIRST:
        positional = positional[1:]
    rest = [a for a in (arguments.vararg, arguments.kwarg) if a is not None]
    return [a.arg for a in positional + arguments.kwonlyargs + rest if a.annotation is None]


def annotated(function: Function) -> bool:
    """Whether every parameter but a first positional `self` or `cls`, and the return, is annotated."""
    return function.returns is not None and not unannotated(function)


def has(node: Definition, wanted: frozenset[str]) -> bool:
    """Whether `node` itself has each of `wanted` (DOCSTRING, ANNOTATIONS; a class needs no annotations)."""
    if DOCSTRING in wanted and ast.get_docstring(node) is None:
        return False
    return ANNOTATIONS not in wanted or isinstance(node, ast.ClassDef) or annotated(node)


def none_but_returns(function: Function) -> bool:
    """Whether `function` is annotated `-> None` yet returns or yields a value (`gives_value`): a hint that is
    wrong."""
    return isinstance(function.returns, ast.Constant) and function.returns.value is None and gives_value(function)


def gives_value(function: Function) -> bool:
    """Whether `function` returns a value (a `return` of anything but None) or yields, in its own body, not in
    the functions and classes it defines."""
    stack: list[ast.AST] = [node for node in function.body if not isinstance(node, Definition)]
    while stack:
        node = stack.pop()
        if isinstance(node, ast.Yield | ast.YieldFrom) or isinstance(node, ast.Return) and node.value is not None and not (
                isinstance(node.value, ast.Constant) and node.value.value is None):
            return True
        stack += [child for child in ast.iter_child_nodes(node) if not isinstance(child, Definition | ast.Lambda)]
    return False


def complete(node: Definition, wanted: frozenset[str]) -> bool:
    """Whether `node` and every definition nested in it, at any depth, has each of `wanted`."""
    return all(has(inner, wanted) for inner in ast.walk(node) if isinstance(inner, Definition))
