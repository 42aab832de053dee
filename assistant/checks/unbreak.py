"""Which changed lines of an edit to put back, without a model, so that the edit no longer breaks the syntax.

An edit that should only annotate or document can still leave a file that does not parse: asked for
type hints, a 1.5B model wrote `else:` above a lone comment, an empty block, and asked to repair that
it gave its answer back unchanged. Such an edit is still what was asked without the lines that broke
it, so `unbreaking` reverts its changed line hunks (a hunk that replaced as many lines as it has is taken
line by line), one at a time: each time the hunk nearest at or
before the first syntax error the text now has that is not reverted yet (a parser stops at or after
the cause of an error, never before it; after it only when no hunk is left before), until the text
has no syntax error the document lacked. Then each reverted hunk that is not needed for that is put
forward again, so the edit keeps as much of itself as it can.

Invariant: the replacements turn `after` into a text of `after`'s and `before`'s own lines with no
syntax error that `before` lacks; there are none when no set of at most LIMIT hunks does that, when
`before` has a Python syntax error itself, or when no parser knows the language.
"""

from __future__ import annotations

import ast
from collections.abc import Callable

from assistant.checks.positions import LineIndex, line_diff
from assistant.checks.report import Fix, applied, restoring
from assistant.checks.syntax import LANGUAGES, GrammarError, check_syntax

LIMIT = 12  # hunks reverted at most: each costs a parse of the whole text


def unbreaking(before: str, after: str, language: str) -> list[Fix]:
    """The fewest hunks found whose revert leaves `after` without a syntax error `before` lacks: ranges of
    `after` and the ranges of `before` to put there, in order (see the module's invariant)."""
    first_error = _first_error(before, language)
    if first_error is None:
        return []
    hunks = _hunks(before, after)
    reverted: list[Fix] = []
    text, error = after, first_error(after)
    while error is not None and len(reverted) < min(LIMIT, len(hunks)):
        reverted.append(_nearest([hunk for hunk in hunks if hunk not in reverted], error))
        text = applied(after, reverted)
        error = first_error(text)
    if error is not None:
        return []
    for hunk in list(reverted[:-1]):
        fewer = [other for other in reverted if other != hunk]
        if first_error(applied(after, fewer)) is None:
            reverted = fewer
    return sorted(reverted)


def _first_error(before: str, language: str) -> Callable[[str], int | None] | None:
    """A function giving where the first syntax error a text has and `before` lacks is (an offset of that
    text; None where there is none), or None when `before` cannot be compared so."""
    if language == "python":
        if _python_error(before) is not None:
            return None
        return _python_error
    if language not in LANGUAGES:
        return None

    def introduced(text: str) -> int | None:
        problems = check_syntax(before, text, language).problems
        return problems[0].start if problems else None
    try:
        introduced(before)
    except GrammarError:
        return None
    return introduced


def _python_error(text: str) -> int | None:
    """The offset of the line Python's parser gave up on, None when `text` parses."""
    try:
        ast.parse(text)
    except SyntaxError as error:
        return LineIndex(text).offset((error.lineno or 1) - 1, 0)
    except (ValueError, RecursionError, MemoryError):
        return 0
    return None


def _hunks(before: str, after: str) -> list[Fix]:
    """The edit's changed runs of whole lines, a run that replaced as many lines as it has split line by line:
    the range of `after` each is, and the range of `before` it replaced."""
    old, new, opcodes = line_diff(before, after)
    old_starts, new_starts = _starts(old), _starts(new)
    hunks = []
    for tag, i1, i2, j1, j2 in opcodes:
        if tag == "replace" and i2 - i1 == j2 - j1:
            hunks += [restoring(before, (new_starts[j], new_starts[j + 1]), (old_starts[i], old_starts[i + 1]))
                      for i, j in zip(range(i1, i2), range(j1, j2), strict=True)]
        elif tag != "equal":
            hunks.append(restoring(before, (new_starts[j1], new_starts[j2]), (old_starts[i1], old_starts[i2])))
    return hunks


def _starts(lines: list[str]) -> list[int]:
    starts = [0]
    for line in lines:
        starts.append(starts[-1] + len(line))
    return starts


def _nearest(hunks: list[Fix], offset: int) -> Fix:
    """The hunk that starts last at or before `offset`, else the first after it."""
    before = [hunk for hunk in hunks if hunk.start <= offset]
    return max(before) if before else min(hunks)
