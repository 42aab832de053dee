"""Turning the positions that checkers report into Python string offsets, and telling new findings from old.

Ruff reports 1-based rows and character columns, Python's `ast` 1-based rows and UTF-8 byte
columns, tree-sitter byte offsets; the editor side of this project speaks Python string indices,
so every finding is converted here, once, against the text it was found in. Lines end at `\\n`,
`\\r\\n` or a lone `\\r`, as both ruff and Python's tokenizer count them. `introduced` decides
which findings an edit brought in: findings are matched by kind (a count per kind, not by line,
because an edit moves lines), and of a kind found more often after than before, the ones whose
line text the old document lacks are taken to be the new ones.
"""

from __future__ import annotations

import difflib
import re
from collections import Counter
from collections.abc import Hashable, Iterable, Sequence
from itertools import pairwise
from typing import TypeVar

_BREAK = re.compile(r"\r\n|\r|\n")
Item = TypeVar("Item")


class LineIndex:
    """Where each line of a text starts, to turn (row, column) positions into string offsets."""

    def __init__(self, text: str) -> None:
        self.text = text
        self.starts = [0] + [match.end() for match in _BREAK.finditer(text)]

    def _bounds(self, row: int) -> tuple[int, int]:
        """The offsets of a 0-based row's first character and of the end of its text (before its break)."""
        if row >= len(self.starts):
            return len(self.text), len(self.text)
        start = self.starts[max(row, 0)]
        end = self.starts[row + 1] if row + 1 < len(self.starts) else len(self.text)
        return start, len(self.text[start:end].rstrip("\r\n")) + start

    def line(self, row: int) -> str:
        """The text of a 0-based row, without its line break."""
        start, end = self._bounds(row)
        return self.text[start:end]

    def offset(self, row: int, column: int) -> int:
        """The offset of a 0-based row and a column in characters (clamped to the row, its break included)."""
        if row >= len(self.starts):
            return len(self.text)
        limit = self.starts[row + 1] if row + 1 < len(self.starts) else len(self.text)
        return min(self.starts[max(row, 0)] + max(column, 0), limit)

    def offset_utf8(self, row: int, byte_column: int) -> int:
        """The offset of a 0-based row and a column in UTF-8 bytes (as Python's `ast` counts them)."""
        start, end = self._bounds(row)
        prefix = self.text[start:min(start + byte_column, end)]
        if prefix.isascii():
            return start + len(prefix)
        size = 0
        for count, character in enumerate(prefix):
            if size >= byte_column:
                return start + count
            size += len(character.encode("utf-8", "replace"))
        return start + len(prefix)


def line_diff(before: str, after: str) -> tuple[list[str], list[str], list[tuple[str, int, int, int, int]]]:
    """The lines of two texts, each with its break (as LineIndex and the parsers count lines: a form feed
    does not end one), and difflib's opcodes between them, with no junk heuristic."""
    old, new = _lines(before), _lines(after)
    return old, new, difflib.SequenceMatcher(None, old, new, autojunk=False).get_opcodes()


def _lines(text: str) -> list[str]:
    starts = [0] + [match.end() for match in _BREAK.finditer(text)]
    lines = [text[a:b] for a, b in pairwise([*starts, len(text)])]
    return lines if lines[-1] else lines[:-1]


def encode(text: str) -> bytes:
    """UTF-8 for a checker: a lone surrogate becomes `?`, one byte for one character, so offsets still map."""
    return text.encode("utf-8", "replace")


def str_offset(data: bytes, byte_offset: int) -> int:
    """The string offset of a byte offset into `encode(text)`."""
    return len(data[:byte_offset].decode("utf-8", "replace"))


def introduced(before: Iterable[tuple[Hashable, str]], after: Sequence[tuple[Hashable, str, Item]]) -> list[Item]:
    """The `after` findings an edit introduced, in their order: of each kind (the first of each tuple),
    as many as `after` has more than `before`, preferring those whose context (the second) `before`
    lacks. `after` holds (kind, context, finding), `before` (kind, context)."""
    before = list(before)
    counts = Counter(kind for kind, _ in before)
    contexts = Counter(before)
    excess = Counter(kind for kind, _, _ in after)
    excess.subtract(counts)
    fresh: list[int] = []
    familiar: list[int] = []
    for index, (kind, context, _) in enumerate(after):
        if contexts[kind, context] > 0:
            contexts[kind, context] -= 1
            familiar.append(index)
        else:
            fresh.append(index)
    chosen: list[int] = []
    for index in fresh + familiar[::-1]:
        kind = after[index][0]
        if excess[kind] > 0:
            excess[kind] -= 1
            chosen.append(index)
    return [after[index][2] for index in sorted(chosen)]
