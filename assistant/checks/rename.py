"""Whether a Python edit asked only to rename something changed anything else.

"Rename the local variable `total` in `parse` to `count`." must give the program it was given with
one name changed. Linters see a rename that missed a use (an undefined name) but not one that also
renamed an unrelated name, dropped a statement or changed a constant on the way. So the text before
the edit is parsed, the rename is made on its tree, and the result is compared with the edited
text's, definition by definition, as the structure check compares them (`structure.compare`):
annotations and docstrings are left out, so only code counts.

The rename is made only on the lines the edit changed (from the first to the last): lines it left
as they were, as outside a selection, are not the model's to rename. A rename inside a named
function or class renames the variables, parameters and nested definitions
of that name within it; when no module-level name is the old name, the same rename of the variables
of other functions is taken too (a small model often makes it, and it changes nothing they do), but
not of their parameters, which callers may name. Without a scope the name may be anything, so two readings are tried, the
names of variables, parameters and definitions only, and those together with attributes, keyword
arguments and strings equal to the name (`__all__`), and the one that leaves fewer differences is
taken: a correct rename of either kind is never blamed.
"""

from __future__ import annotations

import ast
import copy

from assistant.checks.positions import line_diff
from assistant.checks.report import Check
from assistant.checks.structure import Outline, compare, outline


class Renamer(ast.NodeTransformer):
    """Renames `old` to `new` on the given lines of a tree: the names of variables, parameters and
    definitions, and, when `broadly`, attributes, keyword arguments and strings equal to `old` too."""

    def __init__(self, old: str, new: str, broadly: bool, lines: range) -> None:
        self.old, self.new, self.broadly, self.lines = old, new, broadly, lines

    def _renamed(self, name: str | None, node: ast.AST, broad: bool = False) -> str | None:
        here = getattr(node, "lineno", None) in self.lines and (self.broadly or not broad)
        return self.new if name == self.old and here else name

    def visit_Name(self, node: ast.Name) -> ast.Name:
        node.id = self._renamed(node.id, node) or node.id
        return node

    def visit_arg(self, node: ast.arg) -> ast.arg:
        node.arg = self._renamed(node.arg, node) or node.arg
        return self.generic_visit(node)

    def _definition(self, node: ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef) -> ast.AST:
        node.name = self._renamed(node.name, node) or node.name
        return self.generic_visit(node)

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _definition

    def visit_Global(self, node: ast.Global | ast.Nonlocal) -> ast.AST:
        node.names = [self._renamed(name, node) or name for name in node.names]
        return node

    visit_Nonlocal = visit_Global

    def visit_ExceptHandler(self, node: ast.ExceptHandler) -> ast.AST:
        node.name = self._renamed(node.name, node)
        return self.generic_visit(node)

    def visit_Attribute(self, node: ast.Attribute) -> ast.AST:
        node.attr = self._renamed(node.attr, node, broad=True) or node.attr
        return self.generic_visit(node)

    def visit_keyword(self, node: ast.keyword) -> ast.AST:
        node.arg = self._renamed(node.arg, node, broad=True)
        return self.generic_visit(node)

    def visit_Constant(self, node: ast.Constant) -> ast.Constant:
        if isinstance(node.value, str):
            node.value = self._renamed(node.value, node, broad=True)
        return node


def check_rename(before: str, after: str, old: str, new: str, scope: str | None) -> Check:
    """The code a Python edit asked to rename `old` to `new` (within the function or class `scope`, a
    qualified name, or anywhere when None) changed besides the rename."""
    try:
        tree = ast.parse(before)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return Check(notes=("rename not checked: the text before the edit is not valid Python",))
    new_outline = outline(after, typing_allowed=False)
    if new_outline is None:
        return Check(notes=("rename not checked: the edited text is not valid Python",))
    target = _definition(tree, scope) if scope else tree
    if target is None:
        return Check(notes=(f"rename not checked: no function or class `{scope}` in the text before the edit",))
    if not any(old in _identifiers(node) for node in ast.walk(target)):
        return Check(notes=(f"rename not checked: no `{old}` in the text before the edit",))
    lines = _changed_lines(before, after)
    readings = [_renamed(tree, scope, Renamer(old, new, False, lines))]
    if scope is None:
        readings.append(_renamed(tree, None, Renamer(old, new, True, lines)))
    elif old not in module_names(tree):
        readings.append(_locals_renamed(readings[0], old, new, lines))
    found = [compare(Outline(typing_allowed=False).outline(reading), new_outline, after) for reading in readings]
    return Check(tuple(min(found, key=len)), ("rename",))


def _renamed(tree: ast.Module, scope: str | None, renamer: Renamer) -> ast.Module:
    """A copy of `tree` with `renamer` run over the definition `scope` (its parameters and body), or all of it."""
    renamed = copy.deepcopy(tree)
    target = _definition(renamed, scope) if scope else renamed
    assert target is not None
    parameters = [target.args] if isinstance(target, ast.FunctionDef | ast.AsyncFunctionDef) else []
    for part in [*parameters, *target.body]:
        renamer.visit(part)
    return renamed


def _changed_lines(before: str, after: str) -> range:
    """The lines of `before` (1-based) from the first to the last that the edit changed: a rename is made
    only there, since lines the edit left as they were (outside a selection, say) are not the model's."""
    changed = [(i1, i2) for tag, i1, i2, _, _ in line_diff(before, after)[2] if tag != "equal"]
    return range(changed[0][0] + 1, changed[-1][1] + 1) if changed else range(0)


def _locals_renamed(tree: ast.Module, old: str, new: str, lines: range) -> ast.Module:
    """A copy of `tree` with the variable `old` renamed in every function (not its parameters): a local
    rename made in other functions too changes nothing they do, when no module-level name is `old`."""
    renamed = copy.deepcopy(tree)
    for function in ast.walk(renamed):
        if isinstance(function, ast.FunctionDef | ast.AsyncFunctionDef):
            for node in (node for part in function.body for node in ast.walk(part)):
                if isinstance(node, ast.Name) and node.id == old and node.lineno in lines:
                    node.id = new
    return renamed


def module_names(tree: ast.Module) -> set[str]:
    """The names a module binds at its own level (in `if` and `try` statements too, not in definitions)."""
    names: set[str] = set()
    pending: list[ast.AST] = list(tree.body)
    while pending:
        node = pending.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            names.add(node.name)
            continue
        if isinstance(node, ast.alias):
            names.add((node.asname or node.name).split(".")[0])
        elif isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store):
            names.add(node.id)
        pending.extend(ast.iter_child_nodes(node))
    return names


def _identifiers(node: ast.AST) -> tuple[str | None, ...]:
    """The names a node binds or uses, as the narrow reading of a rename renames them."""
    if isinstance(node, ast.Global | ast.Nonlocal):
        return tuple(node.names)
    return (getattr(node, "id", None), getattr(node, "arg", None), getattr(node, "name", None))


def _definition(tree: ast.Module, qualified: str) -> ast.AST | None:
    """The function or class of a qualified name ("Class.method"), looked for in definitions and in the
    bodies of `if` and `try` statements; None if there is none."""
    nodes: list[ast.AST] = [tree]
    for name in qualified.split("."):
        found = [node for parent in nodes for node in _definitions(parent) if node.name == name]
        if not found:
            return None
        nodes = found[:1]
    return nodes[0]


def _definitions(parent: ast.AST) -> list[ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef]:
    found, pending = [], list(getattr(parent, "body", []))
    while pending:
        node = pending.pop(0)
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef):
            found.append(node)
        elif isinstance(node, ast.If | ast.Try):
            pending.extend(node.body + node.orelse + getattr(node, "finalbody", []))
    return found
