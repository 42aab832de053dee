"""A rewrite shown as a diff in the buffer: the original lines and the answer's, hunk by hunk, until
the user decides each hunk; and where each offset of the answer stands in that text.

`Diff.between(base, answer)` compares whole lines; `Diff.view()` renders what stands over the
rewrite's lines: unchanged lines once; each undecided hunk's old lines, then its new lines; a
decided hunk's kept side only; while streaming, the base lines the answer has not reached yet after
the rest; with `virtual`, an undecided hunk's old lines are left out (the editor shows them without
making them text). Invariants: with every hunk accepted the view is exactly the answer, with every
hunk rejected exactly the base, and a line of the view lacks its line break only when it is the last.

`Diff.absorb` takes in the user's typing: whatever they typed stays where they typed it, and a hunk
typed in is decided for the side typed in, so no review ends with both of a hunk's sides in the text.
"""

from __future__ import annotations

import difflib
from bisect import bisect_right
from dataclasses import dataclass, replace
from itertools import accumulate, pairwise

from assistant.lsp import ranges

PENDING, ACCEPTED, REJECTED = "pending", "accepted", "rejected"
BREAKS = ("\n", "\r")


def split_lines(text: str) -> tuple[str, ...]:
    """`text`'s lines, each with its line break (the last one may lack it), as LSP counts lines."""
    bounds = [0] + [match.end() for match in ranges.LINE_END.finditer(text)]
    bounds += [len(text)] if bounds[-1] != len(text) else []
    return tuple(text[a:b] for a, b in pairwise(bounds))


def common_ends(old: tuple[str, ...], new: tuple[str, ...], last: bool = True) -> tuple[int, int]:
    """How many first lines, and (when `last`) how many of the other last lines, two texts share."""
    head = 0
    while head < min(len(old), len(new)) and old[head] == new[head]:
        head += 1
    tail = 0
    while last and tail < min(len(old), len(new)) - head and old[-1 - tail] == new[-1 - tail]:
        tail += 1
    return head, tail


def line_opcodes(old: tuple[str, ...], new: tuple[str, ...], final: bool) -> list[tuple[str, int, int, int, int]]:
    """difflib's opcodes for two lists of lines, the common first (and, when `final`, last) lines set
    aside first: a rewrite changes a few lines of many, and difflib costs far more than a comparison."""
    head, tail = common_ends(old, new, final)
    matcher = difflib.SequenceMatcher(None, old[head:len(old) - tail], new[head:len(new) - tail])
    opcodes = [("equal", 0, head, 0, head)] if head else []
    opcodes += [(tag, i1 + head, i2 + head, j1 + head, j2 + head) for tag, i1, i2, j1, j2 in matcher.get_opcodes()
                if tag != "equal" or i1 < i2]
    if tail:
        opcodes.append(("equal", len(old) - tail, len(old), len(new) - tail, len(new)))
    return opcodes


def line_edit(old: str, new: str) -> tuple[int, int, str]:
    """One edit turning `old` into `new` that keeps their common first and last lines: (start, end)
    in `old` and the text to put there."""
    a, b = split_lines(old), split_lines(new)
    head, tail = common_ends(a, b)
    start = sum(map(len, a[:head]))
    return start, len(old) - sum(map(len, a[len(a) - tail:])), "".join(b[head:len(b) - tail])


@dataclass(frozen=True)
class Hunk:
    index: int
    old: tuple[str, ...]  # the base's lines it replaces
    new: tuple[str, ...]  # the answer's lines in their place
    state: str = PENDING


@dataclass(frozen=True)
class Shown:
    """An undecided hunk as the view shows it: its old and new lines (view line numbers, half-open)
    and the answer offsets its new lines hold."""

    index: int
    old: tuple[int, int]
    new: tuple[int, int]
    answer: tuple[int, int]
    removed: tuple[str, ...]  # its old lines' text


@dataclass(frozen=True)
class Part:
    """A stretch of the view, in view offsets: a block's lines (`kind` "lines": unchanged lines, "kept": a
    decided hunk's side), an undecided hunk's "old" or "new" lines, or the "waiting" base lines; `block`
    is its index in `Diff.blocks`."""

    kind: str
    block: int
    start: int
    end: int


@dataclass(frozen=True)
class Side:
    """One side of an undecided hunk after the user's typing (`Diff.absorb`): its text now, and whether it changed."""

    kind: str
    block: int
    text: str
    changed: bool


@dataclass(frozen=True)
class View:
    text: str
    hunks: tuple[Shown, ...]
    waiting: tuple[int, int]  # view lines of the base the streaming answer has not reached
    answer_lines: tuple[tuple[int, int, int], ...]  # each shown line of the answer: its start, end, view start
    parts: tuple[Part, ...]  # the whole text, in order (some empty)

    def locate(self, offset: int) -> int | None:
        """The view offset of an answer offset, None when its line is not shown (a rejected hunk's)."""
        index = bisect_right(self.answer_lines, offset, key=lambda line: line[0]) - 1
        if index < 0:
            return None
        start, end, at = self.answer_lines[index]
        return at + offset - start if offset <= end else None

    def spans(self, spans: list[tuple[int, int, int, int]]) -> list[tuple[int, int, int, int]]:
        """Attribution spans (answer range -> source range) as view range -> source range: split at the
        answer's line breaks, the pieces on lines not shown dropped, neighbours in both joined again."""
        found: list[tuple[int, int, int, int]] = []
        for a, b, c, _ in spans:
            first = max(bisect_right(self.answer_lines, a, key=lambda line: line[0]) - 1, 0)
            for start, end, at in self.answer_lines[first:]:
                if start >= b:
                    break
                lo, hi = max(a, start), min(b, end)
                if lo >= hi:
                    continue
                piece = (at + lo - start, at + hi - start, c + lo - a, c + hi - a)
                if found and found[-1][1] == piece[0] and found[-1][3] == piece[2]:
                    joined = found.pop()
                    piece = (joined[0], piece[1], joined[2], piece[3])
                found.append(piece)
        return found

    def owner(self, offset: int) -> int | None:
        """The index of the undecided hunk whose new lines hold this answer offset."""
        return next((hunk.index for hunk in self.hunks if hunk.answer[0] <= offset < hunk.answer[1]), None)

    def generated(self, copied: list[tuple[int, int]]) -> dict[int, list[tuple[int, int]]]:
        """Per undecided hunk, the view ranges in its new lines (line breaks left out) that no copied view
        range (sorted, apart) covers."""
        starts = [0, *accumulate(map(len, split_lines(self.text)))]
        found: dict[int, list[tuple[int, int]]] = {}
        first = 0
        for hunk in self.hunks:
            gaps = found[hunk.index] = []
            for line in range(*hunk.new):
                start = starts[line]
                end = start + len(self.text[start:starts[line + 1]].rstrip("\r\n"))
                while first < len(copied) and copied[first][1] <= start:
                    first += 1
                for a, b in copied[first:]:
                    if a >= end:
                        break
                    if a > start:
                        gaps.append((start, a))
                    start = max(start, b)
                if start < end:
                    gaps.append((start, end))
        return found


@dataclass(frozen=True)
class Diff:
    blocks: tuple[tuple[str, ...] | Hunk, ...]  # unchanged lines, or a hunk
    waiting: tuple[str, ...] = ()  # base lines the streaming answer has not reached
    newline: str = "\n"  # what ends a base line that lacks a break while new lines follow it
    virtual: bool = False  # undecided hunks' old lines are left out of the view

    @classmethod
    def between(cls, base: str, answer: str, *, final: bool = True, newline: str = "\n", virtual: bool = False) -> Diff:
        """The diff of `base` and `answer`; of a streaming answer (not `final`), the base lines after the
        last one it matched wait (its last line may be partial)."""
        old, new = split_lines(base), split_lines(answer)
        opcodes = line_opcodes(old, new, final)
        waiting: tuple[str, ...] = ()
        if not final and opcodes and opcodes[-1][0] in ("delete", "replace"):
            tag, i1, i2, j1, j2 = opcodes.pop()
            waiting = old[i1:i2]
            if j1 < j2:
                opcodes.append(("insert", i1, i1, j1, j2))
        blocks: list[tuple[str, ...] | Hunk] = []
        for tag, i1, i2, j1, j2 in opcodes:
            if tag == "equal":
                blocks.append(new[j1:j2])
            else:
                blocks.append(Hunk(sum(isinstance(b, Hunk) for b in blocks), old[i1:i2], new[j1:j2]))
        return cls(tuple(blocks), waiting, newline, virtual)

    @property
    def hunks(self) -> list[Hunk]:
        return [block for block in self.blocks if isinstance(block, Hunk)]

    @property
    def undecided(self) -> list[int]:
        return [hunk.index for hunk in self.hunks if hunk.state == PENDING]

    @property
    def rejected(self) -> bool:
        """Every hunk rejected: the view is the base again."""
        return bool(self.hunks) and all(hunk.state == REJECTED for hunk in self.hunks)

    def hunk_at(self, offset: int) -> Hunk | None:
        """The hunk whose new lines hold this answer offset."""
        answer = 0
        for block in self.blocks:
            lines = block.new if isinstance(block, Hunk) else block
            size = sum(map(len, lines))
            if answer <= offset < answer + size:
                return block if isinstance(block, Hunk) else None
            answer += size
        return None

    def decide(self, indices: list[int], accept: bool) -> Diff:
        """This diff with the hunks `indices` accepted or rejected; ValueError for one not undecided."""
        if missing := set(indices) - set(self.undecided):
            raise ValueError(f"hunk {min(missing)} is not an undecided hunk of this rewrite "
                             f"(undecided: {self.undecided or 'none'})")
        state = ACCEPTED if accept else REJECTED
        return replace(self, blocks=tuple(replace(block, state=state)
                                          if isinstance(block, Hunk) and block.index in indices else block
                                          for block in self.blocks))

    def view(self) -> View:
        lines: list[tuple[str, int | None]] = []  # each line of the view, and its answer offset if it has one
        shown: list[Shown] = []
        parts: list[tuple[str, int, int, int]] = []  # kind, block, first and end view line
        answer = 0
        for number, block in enumerate(self.blocks):
            first = len(lines)
            if not isinstance(block, Hunk):
                for line in block:
                    lines.append((line, answer))
                    answer += len(line)
                parts.append(("lines", number, first, len(lines)))
                continue
            if block.state == REJECTED or (block.state == PENDING and not self.virtual):
                lines += [(line, None) for line in block.old]
            middle, at = len(lines), answer
            for line in block.new:
                if block.state != REJECTED:
                    lines.append((line, answer))
                answer += len(line)
            if block.state == PENDING:
                shown.append(Shown(block.index, (first, middle), (middle, len(lines)), (at, answer), block.old))
                parts += [("old", number, first, middle), ("new", number, middle, len(lines))]
            else:
                parts.append(("kept", number, first, len(lines)))
        waiting = (len(lines), len(lines) + len(self.waiting))
        lines += [(line, None) for line in self.waiting]
        parts.append(("waiting", len(self.blocks), *waiting))
        return self.render(lines, tuple(shown), waiting, parts)

    def render(self, lines: list[tuple[str, int | None]], shown: tuple[Shown, ...], waiting: tuple[int, int],
               parts: list[tuple[str, int, int, int]]) -> View:
        texts, answer_lines, starts = [], [], [0]
        for number, (line, at) in enumerate(lines):
            if at is not None:
                answer_lines.append((at, at + len(line), starts[-1]))
            if number + 1 < len(lines) and not line.endswith(BREAKS):
                line += self.newline
            texts.append(line)
            starts.append(starts[-1] + len(line))
        return View("".join(texts), shown, waiting, tuple(answer_lines),
                    tuple(Part(kind, block, starts[first], starts[end]) for kind, block, first, end in parts))

    def absorb(self, view: View, texts: list[str], crossed: list[bool]) -> tuple[Diff, dict[int, bool]]:
        """This diff (shown as `view`) after the user's typing: `texts` is what each of `view.parts` holds
        now, `crossed[i]` whether an edit ran over the border of parts i and i + 1. Parts that an edit
        joined (or whose last line lost its break) become unchanged lines. Returns the diff whose view
        is the text as typed, and the decisions the typing made (hunk index -> accepted)."""
        groups: list[list[int]] = []
        for number, text in enumerate(texts):
            joined = "".join(texts[i] for i in groups[-1]) if groups else ""
            if groups and (crossed[number - 1] or (joined and not joined.endswith(BREAKS))):
                groups[-1].append(number)
            else:
                groups.append([number])
        blocks: list[tuple[str, ...] | Hunk | Side] = []
        waiting = self.waiting
        for group in groups:
            part, text = view.parts[group[0]], "".join(texts[i] for i in group)
            changed = text != view.text[part.start:view.parts[group[-1]].end]
            if len(group) > 1 or part.kind == "lines":
                blocks.append(split_lines(text) if changed or len(group) > 1 else self.blocks[part.block])
            elif part.kind == "waiting":
                waiting = split_lines(text) if changed else self.waiting
            elif part.kind == "kept":
                hunk = self.blocks[part.block]
                side = "new" if hunk.state == ACCEPTED else "old"
                blocks.append(replace(hunk, **{side: split_lines(text)}) if changed else hunk)
            else:
                blocks.append(Side(part.kind, part.block, text, changed))
        return self.typed_hunks(blocks, waiting)

    def typed_hunks(self, blocks: list, waiting: tuple[str, ...]) -> tuple[Diff, dict[int, bool]]:
        """`absorb`'s blocks with each undecided hunk's sides made a hunk again, and the decision the typing
        made: the side typed in stays (the other one, if it was deleted whole); a side joined to unchanged
        lines stays, and the hunk shows only its other side."""
        sides: dict[int, dict[str, tuple[str, bool]]] = {}
        for block in blocks:
            if isinstance(block, Side):
                sides.setdefault(block.block, {})[block.kind] = (block.text, block.changed)
        found: list[tuple[str, ...] | Hunk] = []
        owed: dict[int, bool] = {}
        for block in blocks:
            if not isinstance(block, Side):
                found.append(block)
                continue
            if block.kind == "new" and "old" in sides[block.block]:
                continue  # made with its old side
            hunk, have = self.blocks[block.block], sides[block.block]
            for side, (text, changed) in have.items():
                hunk = replace(hunk, **{side: split_lines(text)}) if changed else hunk
            if len(have) == 1:
                hunk = replace(hunk, **{"new" if "old" in have else "old": ()})
                owed[hunk.index] = "old" in have  # the joined side stays
            elif have["new"][1]:
                owed[hunk.index] = bool(have["new"][0])
            elif have["old"][1]:
                owed[hunk.index] = not have["old"][0]
            found.append(hunk)
        return replace(self, blocks=tuple(found), waiting=waiting), owed
