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
A definition inside one put back whole needs no Fix of its own. Invariant: every Fix's text is the
text before the edit at its source, or empty.
"""

from __future__ import annotations

from itertools import pairwise

from assistant.checks.positions import LineIndex, line_diff
from assistant.checks.report import Fix, restoring
from assistant.checks.structure import Scope, Span, differing, outline


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
