"""Plain-text geometry for the language server: LSP positions and string offsets, and how offsets
move when a document changes under a rewrite.

LSP positions count UTF-16 code units and lines end at "\\n", "\\r\\n" or "\\r"; Python strings
count code points, so every conversion goes through here.
"""

from __future__ import annotations

import re

from diff_match_patch import diff_match_patch
from lsprotocol import types

LINE_END = re.compile(r"\r\n|\r|\n")


class Conflict(Exception):
    """A change touched the inside of a range we track, so the range no longer holds."""


def line_starts(text: str) -> list[int]:
    return [0] + [m.end() for m in LINE_END.finditer(text)]


def utf16_units(text: str) -> int:
    return len(text.encode("utf-16-le")) // 2


def position_at(text: str, offset: int) -> types.Position:
    starts = line_starts(text)
    line = max(i for i, start in enumerate(starts) if start <= offset)
    return types.Position(line=line, character=utf16_units(text[starts[line]:offset]))


def range_at(text: str, start: int, end: int) -> types.Range:
    return types.Range(start=position_at(text, start), end=position_at(text, end))


def offset_at(text: str, position: types.Position) -> int:
    """The string offset of an LSP position; ValueError when it lies outside the text."""
    starts = line_starts(text)
    if not 0 <= position.line < len(starts) or position.character < 0:
        raise ValueError(f"line {position.line} is outside the document")
    start = starts[position.line]
    end = starts[position.line + 1] if position.line + 1 < len(starts) else len(text)
    content = LINE_END.sub("", text[start:end])
    units = 0
    for index, char in enumerate(content):
        if units >= position.character:
            if units > position.character:  # inside a surrogate pair
                raise ValueError(f"character {position.character} splits a character")
            return start + index
        units += utf16_units(char)
    if units == position.character:
        return start + len(content)
    raise ValueError(f"character {position.character} is past the end of line {position.line}")


def offsets_of(text: str, range_: types.Range) -> tuple[int, int]:
    start, end = offset_at(text, range_.start), offset_at(text, range_.end)
    if end < start:
        raise ValueError("the range ends before it starts")
    return start, end


def changes(old: str, new: str) -> list[tuple[int, int, int]]:
    """The edits that turn `old` into `new`, as (start, end, inserted length) in `old` offsets."""
    if old == new:
        return []
    differ = diff_match_patch()
    differ.Diff_Timeout = 0.5
    edits, position = [], 0
    for op, chunk in differ.diff_main(old, new):
        if op == 0:
            position += len(chunk)
        elif op < 0:
            edits.append((position, position + len(chunk), 0))
            position += len(chunk)
        else:
            edits.append((position, position, len(chunk)))
    return edits


def map_range(start: int, end: int, edits: list[tuple[int, int, int]]) -> tuple[int, int]:
    """Move [start, end) through `edits`; typing right at either edge stays outside the range.

    Raises Conflict when an edit removes or inserts anything inside the range.
    """
    shift = 0
    for a, b, inserted in edits:
        if a == b:  # an insertion
            if a <= start:
                shift += inserted
            elif a < end:
                raise Conflict()
        elif b <= start:
            shift -= b - a
        elif a < end:
            raise Conflict()
    return start + shift, end + shift
