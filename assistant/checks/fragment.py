"""An answer that gives back only the definitions it added or changed, put into the file it belongs in.

Asked to "add a class ASeq" to a module of fifteen classes, the 1.5B sometimes answers with the new class
alone. In place of the whole text, that answer deletes the other fifteen and leaves the names the new class
uses undefined. `fragment_fixes` tells such an answer and puts back, as Fixes, each top-level statement of
the text before the edit that the answer lacks: a definition by its name (the answer's own version of a
definition stands), any other statement (an import, an assignment, a docstring) by its text.

Invariant: the answer is taken for a fragment only when it lacks at least half of the definitions the text
had at its top level, and names it uses are defined by nothing but the statements it lacks. A deliberate
deletion leaves no name dangling, so it stands, and so does an answer that keeps most of the file. Each
Fix inserts the text before the edit at its source: a missing statement with the comments just above it,
placed before the answer's statement that matches the next statement the answer kept, else after the
last one it kept, else before the answer's first statement, since new code mostly builds on the old.
"""

from __future__ import annotations

import ast
import builtins
from collections.abc import Hashable

from assistant.checks.positions import LineIndex
from assistant.checks.report import Fix
from assistant.checks.structure import bound_names

DEFINITIONS = (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)


def fragment_fixes(before: str, after: str) -> list[Fix]:
    """The Fixes that put the statements an answer that is a fragment lacks back around it (see the module's
    docstring); none when it is not one or a text does not parse."""
    try:
        old, new = ast.parse(before), ast.parse(after)
    except (SyntaxError, ValueError):
        return []
    ours = {_key(after, node): node for node in new.body}
    lacking = [node for node in old.body if _key(before, node) not in ours]
    definitions = [node for node in old.body if isinstance(node, DEFINITIONS)]
    gone = [node for node in lacking if isinstance(node, DEFINITIONS)]
    dangling = used_names(new) - bound_names(new) - set(dir(builtins))
    if not gone or 2 * len(gone) < len(definitions) or not dangling & defined(lacking):
        return []
    places: dict[tuple[int, bool], list[ast.stmt]] = {}
    for place, node in zip(_places(before, after, old.body, ours), old.body):
        if node in lacking:
            places.setdefault(place, []).append(node)
    lines = LineIndex(before)
    return [fix for (at, behind), nodes in sorted(places.items()) for fix in _inserted(lines, at, nodes, behind)]


def defined(nodes: list[ast.stmt]) -> set[str]:
    """The names top-level statements define: a definition's own, and what the others bind."""
    return ({node.name for node in nodes if isinstance(node, DEFINITIONS)}
            | bound_names(ast.Module([node for node in nodes if not isinstance(node, DEFINITIONS)], [])))


def used_names(tree: ast.AST) -> set[str]:
    """The names a tree reads."""
    return {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}


def _key(text: str, node: ast.stmt) -> Hashable:
    """What tells a top-level statement in both texts: a definition's kind and name, else its text."""
    if isinstance(node, DEFINITIONS):
        return type(node) is ast.ClassDef, node.name
    return ast.get_source_segment(text, node)


def _places(before: str, after: str, nodes: list[ast.stmt], ours: dict[Hashable, ast.stmt]) -> list[tuple[int, bool]]:
    """For each of `nodes` (the text's statements), where to put it in the answer if it lacks it, and whether
    that is behind a statement: before the answer's first statement while the answer kept none before it, else
    before the answer's match of the next statement it kept, else behind its match of the last one kept."""
    lines = LineIndex(after)
    kept = [ours.get(_key(before, node)) for node in nodes]
    top = lines.offset(_first_row(lines, min(ours.values(), key=lambda node: node.lineno)), 0) if ours else 0
    places, earlier = [], None
    for i, node in enumerate(kept):
        later = next((other for other in kept[i + 1:] if other is not None), None)
        if earlier is None or later is not None:
            places.append((lines.offset(_first_row(lines, later), 0) if earlier and later else top, False))
        else:
            places.append((lines.offset(earlier.end_lineno, 0), True))
        earlier = node or earlier
    return places


def _first_row(lines: LineIndex, node: ast.stmt) -> int:
    """A statement's first row (0-based): its first decorator's, or that of the comments just above it."""
    row = min([node.lineno, *(d.lineno for d in getattr(node, "decorator_list", []))]) - 1
    while row > 0 and lines.line(row - 1).lstrip().startswith("#"):
        row -= 1
    return row


def _inserted(lines: LineIndex, at: int, nodes: list[ast.stmt], behind: bool) -> list[Fix]:
    """The Fixes that insert `nodes` (statements of the text before, in order) at `at`: each with the comments
    just above it, and the blank lines after it, or before it where it goes `behind` a statement; attributed
    to the text before where they were one run of it there. Before a statement, new blank lines make two."""
    ranges, rows = [], len(lines.starts)
    for node in nodes:
        first, last = _first_row(lines, node), node.end_lineno
        while behind and first > 0 and not lines.line(first - 1).strip():
            first -= 1
        while not behind and last < rows and lines.offset(last, 0) < len(lines.text) and not lines.line(last).strip():
            last += 1
        ranges.append((lines.offset(first, 0), lines.offset(last, 0)))
    text = "".join(lines.text[a:b] for a, b in ranges)
    joined = all(a[1] == b[0] for a, b in zip(ranges, ranges[1:]))
    fixes = [Fix(at, at, text, (ranges[0][0], ranges[-1][1]) if joined else None)]
    if not behind and not text.endswith("\n\n\n"):  # two blank lines before the answer's statement
        fixes.append(Fix(at, at, "\n" * (3 - len(text) + len(text.rstrip("\n"))), None))
    return fixes
