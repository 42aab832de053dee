"""Plain-text geometry for the language server: LSP positions and string offsets, and how offsets
move when a document changes under a rewrite; and ranges to and from JSON, through lsprotocol's
converter, whose positions are whole numbers or an error.

LSP positions count code units of the negotiated position encoding (UTF-8, UTF-16 or UTF-32;
pygls's PositionCodec counts them) and lines end at "\\n", "\\r\\n" or "\\r"; Python strings count
code points, so every conversion goes through here. A `Lines` index is built once per text, so
converting many positions costs a bisection each, never a pass over the document.
"""

from __future__ import annotations

import re
from bisect import bisect_right
from functools import lru_cache

import cattrs
from diff_match_patch import diff_match_patch
from lsprotocol import types
from pygls.exceptions import JsonRpcInvalidParams
from pygls.protocol import default_converter
from pygls.workspace import PositionCodec

LINE_END = re.compile(r"\r\n|\r|\n")
UTF16 = types.PositionEncodingKind.Utf16


def parse_position(value) -> types.Position:
    numbers = [value["line"], value["character"]]
    for name, number in zip(("line", "character"), numbers):
        if type(number) is not int or not 0 <= number < 2**31:
            raise JsonRpcInvalidParams(f"position {name} must be a whole number from 0 to 2**31-1, not {number!r}")
    return types.Position(*numbers)


def converter() -> cattrs.Converter:
    """pygls' converter (lsprotocol's, plus JSON-RPC messages), except that positions are whole numbers
    from 0 to 2**31 - 1: cattrs would turn 1.5 into 1 and "3" into 3."""
    converter = default_converter()
    converter.register_structure_hook(types.Position, lambda value, _: parse_position(value))
    return converter


CONVERTER = converter()


def innermost(error: BaseException | None) -> BaseException | None:
    """The first problem inside cattrs' nested groups of them."""
    while isinstance(error, BaseExceptionGroup):
        error = error.exceptions[0]
    return error


def parse_range(value) -> types.Range:
    """An LSP range from a command argument: whole numbers from 0 to 2**31 - 1, nothing else."""
    try:
        return CONVERTER.structure(value, types.Range)
    except Exception as error:
        if isinstance(problem := innermost(error), JsonRpcInvalidParams):
            raise problem from error
        raise JsonRpcInvalidParams(f"not an LSP range (start and end, each with line and character): "
                                   f"{value!r}") from error


def to_json(range_: types.Range) -> dict:
    return CONVERTER.unstructure(range_)


class Conflict(Exception):
    """A change touched the inside of a range we track, so the range no longer holds."""


def line_starts(text: str) -> list[int]:
    return [0] + [m.end() for m in LINE_END.finditer(text)]


class Lines:
    """One text's line index in one position encoding: LSP positions <-> string offsets."""

    def __init__(self, text: str, encoding: str = UTF16):
        self.text = text
        self.codec = PositionCodec(encoding)
        self.starts = line_starts(text)

    def line_of(self, offset: int) -> int:
        return bisect_right(self.starts, offset) - 1

    def positions(self, offsets: list[int]) -> list[types.Position]:
        """The positions of `offsets`, sorted and each counted on from the one before on its line."""
        found: dict[int, types.Position] = {}
        line = start = units = -1
        for offset in sorted(set(offsets)):
            if (here := self.line_of(offset)) != line:
                line, start, units = here, self.starts[here], 0
            units += self.codec.client_num_units(self.text[start:offset])
            start = offset
            found[offset] = types.Position(line=line, character=units)
        return [found[offset] for offset in offsets]

    def range(self, start: int, end: int) -> types.Range:
        return types.Range(*self.positions([start, end]))

    def offset(self, position: types.Position, clamp: bool = False) -> int:
        """The string offset of an LSP position; ValueError when it lies outside the text. With `clamp`, a
        character past its line's end means the line's end, as the LSP specification has it."""
        if not 0 <= position.line < len(self.starts) or position.character < 0:
            raise ValueError(f"line {position.line} is outside the document")
        start = self.starts[position.line]
        end = self.starts[position.line + 1] if position.line + 1 < len(self.starts) else len(self.text)
        content = LINE_END.sub("", self.text[start:end])
        units = 0
        for index, char in enumerate(content):
            if units >= position.character:
                if units > position.character:
                    raise ValueError(f"character {position.character} splits a character")
                return start + index
            units += self.codec.impl.code_units_for_char(char)
        if units == position.character or clamp:
            return start + len(content)
        raise ValueError(f"character {position.character} is past the end of line {position.line}")

    def offsets(self, range_: types.Range, clamp: bool = False) -> tuple[int, int]:
        start, end = self.offset(range_.start, clamp), self.offset(range_.end, clamp)
        if end < start:
            raise ValueError("the range ends before it starts")
        return start, end


@lru_cache(maxsize=8)
def lines(text: str, encoding: str = UTF16) -> Lines:
    """The index of `text`, kept for the few texts in use (the document now and as it was)."""
    return Lines(text, encoding)


def position_at(text: str, offset: int, encoding: str = UTF16) -> types.Position:
    return lines(text, encoding).positions([offset])[0]


def range_at(text: str, start: int, end: int, encoding: str = UTF16) -> types.Range:
    return lines(text, encoding).range(start, end)


def offset_at(text: str, position: types.Position, encoding: str = UTF16) -> int:
    return lines(text, encoding).offset(position)


def offsets_of(text: str, range_: types.Range, encoding: str = UTF16, clamp: bool = False) -> tuple[int, int]:
    return lines(text, encoding).offsets(range_, clamp)


@lru_cache(maxsize=8)
def changes(old: str, new: str) -> list[tuple[int, int, int]]:
    """The edits that turn `old` into `new`, as (start, end, inserted length) in `old` offsets; kept for
    the few pairs in use, so repeated look-ups on an unchanged document do not diff it again."""
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


def move(position: int, edits: list[tuple[int, int, int]], push: bool = False) -> tuple[int, bool]:
    """Where `position` goes through `edits`, and whether a deletion ran over it (it then goes where the
    deletion began). An insertion right at it goes after it, or before it with `push`."""
    shift = 0
    for a, b, inserted in edits:
        if a == b:
            if a < position or (push and a == position):
                shift += inserted
        elif b <= position:
            shift -= b - a
        elif a < position:
            return a + shift, True
    return position + shift, False


def follow_spans(spans: list[tuple], edits: list[tuple[int, int, int]]) -> list[tuple]:
    """Ranges that start tuples (start, end, ...) moved through `edits`; those an edit touched inside are dropped."""
    kept = []
    for start, end, *rest in spans:
        try:
            kept.append((*map_range(start, end, edits), *rest))
        except Conflict:
            pass
    return kept


def slide(edits: list[tuple[int, int, int]], text: str, wholes: list[tuple[int, int]]) -> list[tuple[int, int, int]]:
    """`edits` of `text`, each deletion that could as well have removed one of `wholes` moved onto it: a
    diff of two texts cannot tell which of two equal lines went (deleting either gives the same text)."""
    found = list(edits)
    for number, (a, b, _) in enumerate(found):
        for start, end in wholes:
            low, high = min(a, start), max(b, end)
            others = [edit for edit in found if edit is not found[number] and low <= edit[1] and edit[0] <= high]
            if a < b and end - start == b - a and not others and text[low:a] + text[b:high] == text[low:start] + text[end:high]:
                found[number] = (start, end, 0)
                break
    return found
