"""Undoing, without a model, the code that an edit asked only to annotate or document changed.

The structure check (`structure`) names each function or class whose code such an edit changed,
removed or added; `restorable` turns those findings into Fixes that put the text before the edit
back, so a 1.5B model's broken answer becomes a correct one without a repair pass it could not
make. Each Fix keeps as much of the edit as it can:
- in a changed definition, only the lines of the statements that differ go back (its new docstring
  and annotations stay), or the whole definition when its signature, bases or decorators changed or
  it holds definitions of its own (whose lines may lie among its statements);
- a removed definition goes back, with the blank lines after it, where the line diff of the two
  texts puts its first line, kept between its surviving neighbours;
- an added definition goes, with the blank lines after it.
A definition inside one put back whole needs no Fix of its own. `restored_defaults` puts back only the
default values of parameters, so that the type hints written beside them stay. Invariant: every Fix's
text is the text before the edit at its source, or empty, or (a default put back where it went) an `=`
and that text.
"""

from __future__ import annotations

import ast
from itertools import pairwise

from assistant.checks.asked import by_name
from assistant.checks.positions import LineIndex, line_diff
from assistant.checks.report import Fix, restoring
from assistant.checks.structure import Scope, Span, differing, outline

FUNCTIONS = (ast.FunctionDef, ast.AsyncFunctionDef)


def restorable(before: str, after: str, kind: str) -> list[Fix]:
    """The Fixes that undo the code changes of an annotating (`kind` "annotations") or documenting edit
    (see the module's docstring), in order; none where a text does not parse."""
    old, new = outline(before, kind == "annotations"), outline(after, kind == "annotations")
    if old is None or new is None:
        return []
    changed = [name for name in old.keys() & new.keys()
               if name and (old[name].header != new[name].header or old[name].statements != new[name].statements)]
    innermost = [name for name in changed if not any(other.startswith(f"{name}.") for other in changed)
                 and old[name].span[1] == new[name].span[1]]

    def covered(name: str) -> bool:
        return any(name.startswith(f"{inner}.") for inner in innermost)

    texts = LineIndex(before), LineIndex(after)
    parents = {scope.parent for scope in [*old.values(), *new.values()]}
    fixes = [_restoring(*texts, old[name], new[name], old[name].title in parents) for name in innermost]
    removed = [name for name in old if name not in new and old[name].parent in new and not covered(name)]
    fixes += _put_back(removed, old, new, *texts)
    fixes += [Fix(*_with_blank_lines(texts[1], new[name].span), "", None) for name in new
              if name not in old and new[name].parent in old and not covered(name)]
    return sorted(fixes)


def _restoring(before: LineIndex, after: LineIndex, old: Scope, new: Scope, nesting: bool) -> Fix:
    """The Fix that puts a changed definition's differing statements, or all of it, back."""
    found = differing(old, new)
    whole = restoring(before.text, _lines(after, new.span), _lines(before, old.span))
    if old.header != new.header or found is None or nesting:
        return whole
    first, last_old, last_new = found
    if first < min(last_old, last_new) and old.spans[first][1] != new.spans[first][1]:
        return whole  # the body moved to another indentation
    return restoring(before.text, _statement_lines(after, new, first, last_new),
                     _statement_lines(before, old, first, last_old))


def _statement_lines(lines: LineIndex, scope: Scope, first: int, end: int) -> tuple[int, int]:
    """The character range of the whole lines of a scope's statements first..end (exclusive); where there
    are none, the empty range where they would be: before statement `end`, else after the scope."""
    if first < end:
        return _lines(lines, (*scope.spans[first][:2], *scope.spans[end - 1][2:]))
    at = lines.offset(scope.spans[end][0] - 1, 0) if end < len(scope.spans) else lines.offset(scope.span[2], 0)
    return at, at


def _put_back(removed: list[str], old: dict[str, Scope], new: dict[str, Scope], before: LineIndex,
              after: LineIndex) -> list[Fix]:
    """The insertions of the removed definitions, those at one place joined in their order before the edit."""
    rows = _row_map(before.text, after.text)
    places: dict[int, list[tuple[int, int]]] = {}
    for name in sorted(removed, key=lambda name: old[name].span):
        at = after.offset(_place(old[name], old, new, rows[old[name].span[0] - 1]), 0)
        places.setdefault(at, []).append(_with_blank_lines(before, old[name].span))
    fixes = []
    for at, ranges in places.items():
        contiguous = all(a[1] == b[0] for a, b in pairwise(ranges))
        text = "".join(before.text[a:b] for a, b in ranges)
        fixes.append(Fix(at, at, text, (ranges[0][0], ranges[-1][1]) if contiguous else None))
    return fixes


def _place(scope: Scope, old: dict[str, Scope], new: dict[str, Scope], row: int) -> int:
    """The row of the after text (0-based) to put a removed definition back at: `row`, where the line diff
    puts its first line, moved if need be to lie after its previous surviving sibling and before its next."""
    siblings = [other for other in old.values()
                if other.name and other.parent == scope.parent and other.name in new and other.name != scope.name]
    earlier = [other for other in siblings if other.span < scope.span]
    later = [other for other in siblings if other.span > scope.span]
    if earlier:
        row = max(row, new[max(earlier, key=lambda other: other.span).name].span[2])
    if later:
        row = min(row, new[min(later, key=lambda other: other.span).name].span[0] - 1)
    return row


def _row_map(before: str, after: str) -> list[int]:
    """For each line of `before` (and one past its last), the line of `after` it became or, where the
    edit removed or replaced it, the first line of `after` in its place (0-based)."""
    old, new, opcodes = line_diff(before, after)
    rows = [0] * (len(old) + 1)
    for tag, i1, i2, j1, _ in opcodes:
        for i in range(i1, i2):
            rows[i] = j1 + (i - i1) if tag == "equal" else j1
    rows[len(old)] = len(new)
    return rows


def _with_blank_lines(lines: LineIndex, span: Span) -> tuple[int, int]:
    """The character range of the whole lines a span covers and of the blank lines after them."""
    start, end = _lines(lines, span)
    row = span[2]
    while row < len(lines.starts) and end < len(lines.text) and not lines.line(row).strip():
        row += 1
        end = lines.offset(row, 0)
    return start, end


def _lines(lines: LineIndex, span: Span) -> tuple[int, int]:
    """The character range of the whole lines a span covers, their last line break included."""
    return lines.offset(span[0] - 1, 0), lines.offset(span[2], 0)


def restored_defaults(before: str, after: str) -> list[Fix]:
    """The Fixes that put back, in each function of `after` whose parameters have the names, order and kinds
    they had in `before` (matched by qualified name), every default value as `before` had it: one added goes,
    one changed or removed comes back. The 1.5B, adding type hints, also writes `dir_fd: int = None` where
    there was no default; the hint can stay, the default cannot. None where a text does not parse."""
    try:
        old, new = ast.parse(before), ast.parse(after)
    except (SyntaxError, ValueError, RecursionError, MemoryError):
        return []
    olds, lines = by_name(old), (LineIndex(before), LineIndex(after))
    fixes = []
    for name, function in by_name(new).items():
        if isinstance(olds.get(name), FUNCTIONS) and isinstance(function, FUNCTIONS) and \
                _parameters(olds[name]) == _parameters(function):
            for was, now in zip(_defaults(olds[name]), _defaults(function)):
                fixes += _default_fix(lines, was, now)
    return sorted(fixes)


def _parameters(function: ast.FunctionDef | ast.AsyncFunctionDef) -> tuple:
    """A function's parameters' names by kind."""
    args = function.args
    return tuple(tuple(a.arg for a in group) for group in (args.posonlyargs, args.args, args.kwonlyargs)) + (
        args.vararg and args.vararg.arg, args.kwarg and args.kwarg.arg)


def _defaults(function: ast.FunctionDef | ast.AsyncFunctionDef) -> list[tuple[ast.arg, ast.expr | None]]:
    """Each positional and keyword-only parameter with its default (None where it has none)."""
    args = function.args
    positional = args.posonlyargs + args.args
    padded = [None] * (len(positional) - len(args.defaults)) + list(args.defaults)
    return list(zip(positional, padded)) + list(zip(args.kwonlyargs, args.kw_defaults))


def _default_fix(lines: tuple[LineIndex, LineIndex], was: tuple[ast.arg, ast.expr | None],
                 now: tuple[ast.arg, ast.expr | None]) -> list[Fix]:
    """The Fix that gives a parameter of the function after the default it had before, if they differ."""
    (before, after), (_, old), (parameter, new) = lines, was, now
    old_text = None if old is None else _segment(before, old)
    if old_text == (None if new is None else _segment(after, new)):
        return []
    end = parameter.annotation or parameter
    at = after.offset_utf8(end.end_lineno - 1, end.end_col_offset)
    if new is None:  # removed: it comes back, spaced as PEP 8 spaces it beside an annotation or not
        return [Fix(at, at, (" = " if parameter.annotation else "=") + old_text, None)]
    stop = after.offset_utf8(new.end_lineno - 1, new.end_col_offset)
    if old is None:  # added: it goes, with the `=` and the spaces around it
        return [Fix(at, stop, "", None)]
    start = after.offset_utf8(new.lineno - 1, new.col_offset)
    source = (before.offset_utf8(old.lineno - 1, old.col_offset),
              before.offset_utf8(old.end_lineno - 1, old.end_col_offset))
    return [Fix(start, stop, old_text, source)]


def _segment(lines: LineIndex, node: ast.expr) -> str:
    return lines.text[lines.offset_utf8(node.lineno - 1, node.col_offset):
                      lines.offset_utf8(node.end_lineno - 1, node.end_col_offset)]
