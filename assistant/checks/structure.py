"""Whether a Python edit that should only annotate or document changed code, and where.

When the instruction asks only for type hints or docstrings (see `instructions.preserving`), the
program must do exactly what it did before. Both texts are parsed with `ast`, then stripped of
what such an edit may add: annotations (of arguments and returns; `x: T = v` becomes `x = v`,
a bare `x: T` goes), string statements (docstrings) and, for type hints, imports from typing-like
modules, a plain `import` of a standard-library module that only annotations name (`import io` for
`stream: io.TextIOWrapper`) and the names imported from one that only annotations read (`from collections
import deque` for `items: deque`), `if TYPE_CHECKING:` blocks, `TypeVar`-like definitions and `TypeAlias`es.
Comments are not in the tree.
What is left is compared per function and class by qualified name, so a difference is reported
as "the edit changed code in `hls_to_rgb`" at the changed statements of that function in the
after text, "the edit removed `name`" where the definition was, or "the edit added `name`".

`restore` says how to undo such changes without a model.
"""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from dataclasses import dataclass

from assistant.checks.positions import LineIndex
from assistant.checks.report import Check, Problem

Span = tuple[int, int, int, int]  # first row, byte column, last row, byte column (as ast counts them)
TYPING_MODULES = {"typing", "typing_extensions", "collections.abc", "types", "__future__"}
TYPE_FACTORIES = {"TypeVar", "ParamSpec", "TypeVarTuple", "NewType"}
Scopeable = ast.FunctionDef | ast.AsyncFunctionDef | ast.ClassDef


@dataclass(frozen=True)
class Scope:
    """A module, class or function with its own code: nested definitions are scopes of their own."""

    name: str  # qualified, "" for the module; a repeated name gets "#2", "#3"...
    parent: str
    header: str  # the dump of the signature, bases and decorators
    statements: tuple[str, ...]  # the dumps of the body's statements
    spans: tuple[Span, ...]  # where each of those statements is
    span: Span  # where the whole definition is, decorators included

    @property
    def title(self) -> str:
        return self.name.partition("#")[0]


def _span(node: ast.stmt) -> Span:
    """Where a node is; a definition's decorators, which start at its indentation, included."""
    first = min([node.lineno, *(decorator.lineno for decorator in getattr(node, "decorator_list", []))])
    return first, node.col_offset, node.end_lineno or node.lineno, node.end_col_offset or 0


def _typing_module(name: str | None) -> bool:
    return name is not None and (name in TYPING_MODULES or name.endswith(".typing"))


def _names(node: ast.expr) -> str:
    """The dotted name of a Name or Attribute, "" for anything else."""
    if isinstance(node, ast.Attribute):
        return f"{_names(node.value)}.{node.attr}"
    return node.id if isinstance(node, ast.Name) else ""


class Outline(ast.NodeTransformer):
    """Strips a parsed module of what an annotating or documenting edit may add, and splits it into scopes."""

    def __init__(self, typing_allowed: bool, annotating: frozenset[str] = frozenset()) -> None:
        self.typing_allowed = typing_allowed
        self.annotating = annotating  # names only annotations read
        self.scopes: dict[str, Scope] = {}
        self.stack: list[str] = []

    def outline(self, tree: ast.Module) -> dict[str, Scope]:
        self.visit(tree)
        end = tree.body[-1] if tree.body else None
        self._record("", "", tree.body, (1, 0, end.end_lineno or 1, end.end_col_offset or 0) if end else (1, 0, 1, 0))
        return self.scopes

    def _record(self, name: str, header: str, body: list[ast.stmt], span: Span) -> None:
        unique, count = name, 1
        while unique in self.scopes:
            count += 1
            unique = f"{name}#{count}"
        self.scopes[unique] = Scope(unique, ".".join(self.stack), header, tuple(ast.dump(part) for part in body),
                                    tuple(_span(part) for part in body), span)

    def _scope(self, node: Scopeable) -> None:
        if not isinstance(node, ast.ClassDef):
            node.returns = None
        self.stack.append(node.name)
        self.generic_visit(node)
        self.stack.pop()
        parts = [node.args] if not isinstance(node, ast.ClassDef) else [*node.bases, *node.keywords]
        header = " ".join(ast.dump(part) for part in [*parts, *node.decorator_list])
        self._record(".".join([*self.stack, node.name]), f"{type(node).__name__} {header}", node.body, _span(node))

    visit_FunctionDef = visit_AsyncFunctionDef = visit_ClassDef = _scope

    def visit_arg(self, node: ast.arg) -> ast.arg:
        node.annotation = None
        return node

    def visit_AnnAssign(self, node: ast.AnnAssign) -> ast.AST | None:
        if node.value is None or (self.typing_allowed and _names(node.annotation).endswith("TypeAlias")):
            return None
        return self.generic_visit(ast.copy_location(ast.Assign([node.target], node.value, None), node))

    def visit_Expr(self, node: ast.Expr) -> ast.AST | None:
        if isinstance(node.value, ast.Constant) and isinstance(node.value.value, str):
            return None
        return self.generic_visit(node)

    def visit_Import(self, node: ast.Import) -> ast.AST | None:
        if self.typing_allowed:
            node.names = [alias for alias in node.names if not _typing_module(alias.name)
                          and not self._annotating(alias, alias.name)]
        return node if node.names else None

    def visit_ImportFrom(self, node: ast.ImportFrom) -> ast.AST | None:
        if self.typing_allowed and _typing_module(node.module):
            return None
        if self.typing_allowed and not node.level:
            node.names = [alias for alias in node.names if not self._annotating(alias, node.module or "")]
        return node if node.names else None

    def _annotating(self, alias: ast.alias, module: str) -> bool:
        """Whether an import from a standard-library `module` binds, by its own name, a name only annotations read."""
        standard = module.split(".")[0] in sys.stdlib_module_names
        return standard and alias.asname is None and alias.name in self.annotating

    def visit_If(self, node: ast.If) -> ast.AST | None:
        if self.typing_allowed and _names(node.test).endswith("TYPE_CHECKING") and not node.orelse:
            return None
        return self.generic_visit(node)

    def visit_Assign(self, node: ast.Assign) -> ast.AST | None:
        value = node.value
        if self.typing_allowed and isinstance(value, ast.Call) and _names(value.func).split(".")[-1] in TYPE_FACTORIES:
            return None
        return self.generic_visit(node)


def outline(text: str, typing_allowed: bool) -> dict[str, Scope] | None:
    """The scopes of a Python text, stripped for comparison; None if it does not parse."""
    try:
        tree = ast.parse(text)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return None
    return Outline(typing_allowed, annotation_only(tree) if typing_allowed else frozenset()).outline(tree)


def annotation_only(tree: ast.Module) -> frozenset[str]:
    """The names a module reads in annotations and nowhere else (a plain `import` binds a standard-library
    module's; a name imported from one, its own)."""
    inside = {id(node) for node in annotation_nodes(tree)}
    used: dict[str, bool] = {}  # name: only in annotations
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            used[node.id] = used.get(node.id, True) and id(node) in inside
    return frozenset(name for name, only in used.items() if only)


def bound_names(tree: ast.Module | None) -> set[str]:
    """The names a module binds anywhere: assigned, defined, imported or taken as parameters."""
    names = set()
    for node in ast.walk(tree or ast.Module([], [])):
        if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Store) or isinstance(node, ast.arg):
            names.add(node.id if isinstance(node, ast.Name) else node.arg)
        elif isinstance(node, Scopeable):
            names.add(node.name)
        elif isinstance(node, (ast.Import, ast.ImportFrom)):
            names.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    return names


def annotation_nodes(tree: ast.AST) -> Iterator[ast.AST]:
    """Every node of every annotation in a tree (`annotations`)."""
    return (node for annotation in annotations(tree) for node in ast.walk(annotation))


def annotations(tree: ast.AST) -> list[ast.expr]:
    """The annotations of arguments, returns and annotated assignments in a tree."""
    found: list[ast.expr | None] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.arg):
            found.append(node.annotation)
        elif isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
            found.append(node.returns)
        elif isinstance(node, ast.AnnAssign):
            found.append(node.annotation)
    return [annotation for annotation in found if annotation is not None]


def _where(scope: Scope, preposition: str = "in") -> str:
    return f"{preposition} `{scope.title}`" if scope.name else "at module level"


def differing(old: Scope, new: Scope) -> tuple[int, int, int] | None:
    """Where two versions of a scope's body differ: the first statement that differs, and the end of the
    differing statements in the old and in the new body; None where the bodies are the same."""
    first, shortest = 0, min(len(old.statements), len(new.statements))
    while first < shortest and old.statements[first] == new.statements[first]:
        first += 1
    if first == len(old.statements) == len(new.statements):
        return None
    last_old, last_new = len(old.statements), len(new.statements)
    while last_old > first and last_new > first and old.statements[last_old - 1] == new.statements[last_new - 1]:
        last_old, last_new = last_old - 1, last_new - 1
    return first, last_old, last_new


def _changed_statements(old: Scope, new: Scope, lines: LineIndex) -> Problem | None:
    """The first to last statement that differs between two versions of a scope's body, as one Problem."""
    if old.header != new.header:
        return _problem(f"the edit changed code {_where(new)}", new.span, lines)
    found = differing(old, new)
    if found is None:
        return None
    first, last_old, last_new = found
    if last_new == first:  # statements removed: point between their neighbours
        at = new.spans[first][:2] if first < len(new.spans) else new.span[2:]
        return _problem(f"the edit removed code {_where(new, 'from')}", (*at, *at), lines)
    span = (*new.spans[first][:2], *new.spans[last_new - 1][2:])
    verb = "added" if last_old == first else "changed"
    return _problem(f"the edit {verb} code {_where(new)}", span, lines)


def _problem(message: str, span: Span, lines: LineIndex) -> Problem:
    start = lines.offset_utf8(span[0] - 1, span[1])
    return Problem(message, start, max(start, lines.offset_utf8(span[2] - 1, span[3])), "changed-code", "structure")


def _removed(name: str, old: dict[str, Scope], new: dict[str, Scope], lines: LineIndex) -> Problem:
    """A definition the edit removed, pointed at with an empty range where the next surviving one starts."""
    later = [scope for scope in old.values() if scope.span[:2] > old[name].span[:2] and scope.name in new]
    at = new[min(later, key=lambda scope: scope.span[:2]).name].span[:2] if later else new[""].span[2:]
    return _problem(f"the edit removed `{old[name].title}`", (*at, *at), lines)


def compare(old: dict[str, Scope], new: dict[str, Scope], after: str) -> list[Problem]:
    """What differs between two outlines: definitions removed, added, or with changed code."""
    lines = LineIndex(after)
    problems = [_removed(name, old, new, lines) for name, scope in old.items()
                if name not in new and scope.parent in new]
    problems += [_problem(f"the edit added `{scope.title}`", scope.span, lines) for name, scope in new.items()
                 if name not in old and scope.parent in old]
    for name in old.keys() & new.keys():
        changed = _changed_statements(old[name], new[name], lines)
        if changed is not None:
            problems.append(changed)
    return sorted(problems, key=lambda problem: (problem.start, problem.end))


def check_structure(before: str, after: str, kind: str) -> Check:
    """The code an annotating (`kind` "annotations") or documenting ("documentation") Python edit changed."""
    old = outline(before, typing_allowed=kind == "annotations")
    if old is None:
        return Check(notes=("structure not checked: the text before the edit is not valid Python",))
    new = outline(after, typing_allowed=kind == "annotations")
    if new is None:
        return Check(notes=("structure not checked: the edited text is not valid Python",))
    return Check(tuple(compare(old, new, after)), ("structure",))
