"""Where an answer to a selection ends: before it starts copying the text after the selection, and after a
copy of the text before the selection it began with.

Asked to add a docstring to lines 301-318 of shlex.py, the 1.5B model answered with the selection and then
a copy of the rest of the file, which the editor would have inserted after the selection: a duplicate of
everything below it. Models also begin an answer with the lines above the selection. Both copies are of
the document's own text, so they are recognised exactly: the text after the selection, from one of its
first LATER non-blank lines on (the model may move or drop the first ones), for at least MIN_LINES
non-blank lines and MIN_CHARS non-blank characters (whole lines, starting a line of the answer that is not
its first, and not found in the selection itself); the text before the selection, from the start of some
line to the selection, as much of it (at least as much) at the very start of the answer. The answer then
ends where the copy after begins (as at its closing fence), the blank lines before that copy going with
it, and starts where the copy before ends. Shorter matches are never cut: they can be the answer's own.

A pass over one definition (engine/definitions.py) is asked for its docstring or its signature's hints; the
body after them is copied, a few tokens a step, to be kept as it was. So such a pass is given the body's
`Rest`: once the answer copies it, by the same measure from one of its first LATER non-blank lines, the
answer ends there and the rest of the definition follows as it stands, attributed to it. A body the model
changes before such a copy is the model's as written; a change after it is never made, as an edit that
should only document or annotate wants.
"""

from __future__ import annotations

import re
from itertools import islice

MIN_LINES, MIN_CHARS = 2, 40
LATER = 6  # a copy of the text after the selection may start at any of its first LATER non-blank lines
RUN_CHARS = 4000  # enough of the document to find a substantial run of lines in
_TEXT_LINE = re.compile(r"^[ \t]*\S", re.MULTILINE)
_LINE = re.compile(r"[^\n]*\n|[^\n]+$")
_BREAK = re.compile("\n")


def substantial(text: str) -> bool:
    """Whether `text` holds at least MIN_LINES non-blank lines and MIN_CHARS non-blank characters."""
    lines = [line for line in text.splitlines() if line.strip()]
    return len(lines) >= MIN_LINES and sum(len(line.strip()) for line in lines) >= MIN_CHARS


class Copies:
    """The copies of the document around a selection `target` that an answer to it may make. `start` is asked
    of an answer as it grows, until it decides."""

    def __init__(self, document: str, target: tuple[int, int]):
        start, end = target
        after = end if document[end - 1] == "\n" else document.find("\n", end) + 1  # 0: no line after
        selection = document[start:end]
        self.after = [marker for marker in later_runs(document, after) if marker not in selection] if after else []
        self.newline = selection.endswith("\n")  # whether the answer's cut keeps the newline of its last line
        self.document, self.selection_start = document, start
        self.pending = copies_before(document, start)  # line starts whose text up to the selection may be copied

    def cut(self, raw: str, at: int) -> int:
        """Where an answer whose copy starts at the line start `at` ends: after its last text before the copy (and
        that line's newline when the selection ended with one), the blank lines between going with the copy."""
        text = len(raw[:at].rstrip())
        return raw.find("\n", text, at) + 1 if self.newline and text and "\n" in raw[text:at] else text

    def end(self, raw: str) -> tuple[int, int] | None:
        """(where the answer ends, where the copy that says so ends) once `raw` holds a copy of the text after
        the selection at the start of a line but its first, or None."""
        found = [(at + 1, marker) for marker in self.after if (at := raw.find("\n" + marker)) >= 0]
        if not found:
            return None
        at, marker = min(found)
        return self.cut(raw, at), at + len(marker)

    def held(self, raw: str) -> int:
        """How many of the last characters of `raw` could still become such a copy, with the blank lines before it."""
        longest, at = 0, len(raw)
        size = max(map(len, self.after), default=0)
        while self.after and (at := raw.rfind("\n", 0, at)) >= 0 and len(raw) - at - 1 < size:
            if any(marker.startswith(raw[at + 1:]) for marker in self.after):
                longest = len(raw) - self.cut(raw, at + 1)
        return longest

    def start(self, raw: str, finished: bool = False) -> int | None:
        """How many characters at the start of `raw` are a copy of the text before the selection (the longest such
        copy), or None while `raw` could still become a longer one (unless `finished`)."""
        document, start = self.document, self.selection_start
        self.pending = [x for x in self.pending if document.startswith(raw[:start - x], x)]
        if not finished and any(start - x > len(raw) for x in self.pending):
            return None
        return max((start - x for x in self.pending if start - x <= len(raw)), default=0)


class Rest:
    """The rest of a definition, the document's range `rest` (from the start of a line), that an answer may copy
    to the end."""

    def __init__(self, document: str, rest: tuple[int, int]):
        self.text, self.start = document[rest[0]:rest[1]], rest[0]
        self.runs = [(at, run) for at in line_starts(self.text, 0) if (run := first_lines(self.text[at:at + RUN_CHARS]))]

    def end(self, raw: str) -> tuple[int, int, int] | None:
        """(where the answer ends, where the copy that says so ends, where in the document the rest follows from)
        once `raw` holds, at the start of a line but its first, a copy of the rest from one of its first lines."""
        found = [(at + 1, run, start) for start, run in self.runs if (at := raw.find("\n" + run)) >= 0]
        if not found:
            return None
        at, run, start = min(found)
        return at, at + len(run), self.start + start

    def after(self, start: int) -> str:
        """The rest of the definition from the document offset `start` on."""
        return self.text[start - self.start:]


def line_starts(text: str, after: int) -> list[int]:
    """The starts of the first LATER non-blank lines of `text` from `after`."""
    return [match.start() for match in islice(_TEXT_LINE.finditer(text, after), LATER)]


def later_runs(document: str, after: int) -> list[str]:
    """The substantial runs of whole lines that start at each of the first LATER non-blank lines from `after`:
    a copy of the text after the selection may skip its first lines (the model moved or dropped them)."""
    return [run for run in (first_lines(document[at:at + RUN_CHARS]) for at in line_starts(document, after)) if run]


def first_lines(text: str) -> str:
    """The first whole lines of `text` that are substantial, or "" when all of it is not."""
    taken = ""
    for match in _LINE.finditer(text):
        taken += match.group()
        if substantial(taken) and taken.endswith("\n"):
            return taken
    return ""


def copies_before(document: str, start: int) -> list[int]:
    """The starts of the lines before `start` whose text up to `start` is substantial: a line start and all
    those before it, once one is."""
    starts = [0, *(match.end() for match in _BREAK.finditer(document, 0, start))]
    for index in range(len(starts) - 1, -1, -1):
        if substantial(document[starts[index]:start]):
            return starts[:index + 1]
    return []
