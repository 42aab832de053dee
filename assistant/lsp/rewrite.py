"""The state of one rewrite of one document: where its lines lie now, the diff they show
(`lsp.hunks`), which output came from where, and what the editor is told of them (attribution,
the `assistant/diff` notification, code lenses, diagnostics).

A rewrite works on the whole lines its target touches: `base` is their text when it started, and
the answer is the target's output between the text of those lines before and after the target.
Offsets here are string offsets into `known`, the text we believe the editor holds; `follow`
moves everything onto the editor's current text, so typing elsewhere shifts the lines, and typing
inside them stays where it was typed (`Diff.absorb`): it stops a streaming rewrite, and it decides
the hunk typed in for the side typed in (`owed` until an edit of ours removes the other side).
Positions sent to the editor count units of the negotiated position encoding.
"""

from __future__ import annotations

import re
import threading
from bisect import bisect_left, bisect_right
from dataclasses import dataclass, field
from itertools import pairwise

from lsprotocol import types

from assistant.lsp import ranges
from assistant.lsp.hunks import Diff, Shown, View, split_lines

BARE_LF = re.compile(r"(?<!\r)\n")


@dataclass
class Rewrite:
    uri: str
    original: str  # the whole document when the rewrite started: attribution sources point into it
    start: int  # given: the target; from then on, the start and end of its lines in `known`
    end: int
    encoding: str = ranges.UTF16
    id: str = ""  # names this rewrite in accept / reject / cancel
    cancel: threading.Event = field(default_factory=threading.Event)
    known: str = ""
    virtual: bool = False  # the editor shows undecided hunks' old lines without making them text
    running: bool = True
    typed: bool = False  # the user edited the rewrite's lines
    closed: bool = False
    editing: bool = False  # an applyEdit of ours is in flight: the editor's text is between two states
    refused: str | None = None  # why the editor would not take our edits, when it would not
    restored: bool = False  # the answer did not finish and the original lines are back
    spans: list[tuple[int, int, int, int]] = field(default_factory=list)  # output range -> original range
    owed: dict[int, bool] = field(default_factory=dict)  # hunk -> accepted: decided by typing, not yet shown
    answer_problems: list[tuple[int, int, str, str]] = field(default_factory=list)  # answer range, message, code
    problems: list[tuple[int, int, str, str, int | None]] = field(default_factory=list)  # range, message, code, hunk
    lenses_sent: list[tuple[int, str]] = field(default_factory=list)  # the code lenses the editor last heard of
    target: str = field(init=False, default="")  # the target's text when the rewrite started
    base: str = field(init=False, default="")  # the text of its lines when the rewrite started
    prefix: str = field(init=False, default="")  # the text of its first line before the target
    suffix: str = field(init=False, default="")  # the text of its last line after the target
    ends_line: bool = field(init=False, default=False)  # the target ends with a line break
    crlf: bool = field(init=False, default=False)  # every line of the document ends with \r\n
    diff: Diff = field(init=False)  # what the lines hold: the base until an edit of ours lands
    view: View = field(init=False)  # the diff as rendered there

    def __post_init__(self):
        self.known = self.known or self.original
        self.target = self.original[self.start:self.end]
        self.ends_line = self.target.endswith("\n")
        self.crlf = "\r\n" in self.original and self.original.count("\r\n") == self.original.count("\n")
        starts = ranges.line_starts(self.original)
        first = starts[bisect_right(starts, self.start) - 1]
        after = bisect_right(starts, self.end)
        last = self.end if starts[after - 1] == self.end and self.end > self.start else (
            starts[after] if after < len(starts) else len(self.original))
        self.prefix, self.suffix = self.original[first:self.start], self.original[self.end:last]
        self.start, self.end = first, last
        self.base = self.original[first:last]
        self.diff = Diff.between(self.base, self.base, newline=self.newline, virtual=self.virtual)
        self.view = self.diff.view()

    @property
    def newline(self) -> str:
        return "\r\n" if self.crlf else "\n"

    def shown(self, output: str) -> str:
        """What goes over the target: `output` with the document's line endings (an editor keeps a
        CRLF buffer's endings, so a bare \\n would come back as a change), keeping the target's final
        line break while the output lacks one. Otherwise partial output would join the line after the
        target, and Neovim, whose buffers always end with a line break, would add its own, which then
        outlives the rewrite."""
        if self.crlf:
            output = BARE_LF.sub("\r\n", output)
        if self.ends_line and not output.endswith("\n"):
            output += "\r\n" if self.crlf else "\n"
        return output

    def shown_offset(self, output: str):
        """Map an offset into the engine's `output` to its offset in `shown(output)`."""
        bare = [m.start() for m in BARE_LF.finditer(output)] if self.crlf else []
        return lambda offset: offset + bisect_left(bare, offset)

    def diff_of(self, output: str, token_spans, final: bool) -> tuple[Diff, list[tuple[int, int, int, int]]]:
        """The diff the lines show for the engine's `output` (all of it if `final`, else its complete
        lines), and the answer's attribution spans in answer offsets."""
        at = self.shown_offset(output)
        spans = [(len(self.prefix) + at(s.output[0]), len(self.prefix) + at(s.output[1]), *s.source)
                 for s in token_spans
                 if s.source is not None and s.output[1] <= len(output) and s.source[1] <= len(self.original)]
        if final:
            answer = self.prefix + self.shown(output) + self.suffix
        else:
            answer = self.prefix + (BARE_LF.sub("\r\n", output) if self.crlf else output)
        return Diff.between(self.base, answer, final=final, newline=self.newline, virtual=self.virtual), spans

    def problems_of(self, output: str, problems) -> list[tuple[int, int, str, str]]:
        """The engine's problems (offsets into `output`) in answer offsets."""
        at = self.shown_offset(output)
        return [(len(self.prefix) + at(p.start), len(self.prefix) + at(p.end), p.message, p.code) for p in problems]

    def follow(self, current: str) -> None:
        """Move the lines, their diff (with the user's typing in it), the spans and the problems onto `current`."""
        if self.editing or current == self.known:
            return
        sides = [(self.start + part.start, self.start + part.end) for part in self.view.parts
                 if part.kind in ("old", "new") and part.end > part.start]
        edits = ranges.slide(ranges.changes(self.known, current), self.known, sides)
        bounds = [self.start + part.start for part in self.view.parts] + [self.end]
        moved = [ranges.move(bound, edits, push=bound == self.start) for bound in bounds]
        texts = [current[a:b] for (a, _), (b, _) in pairwise(moved)]
        if texts != [self.view.text[part.start:part.end] for part in self.view.parts]:
            self.typed = True
            self.diff, owed = self.diff.absorb(self.view, texts, [crossed for _, crossed in moved[1:-1]])
            self.owed |= owed
            self.view = self.diff.view()
        (self.start, _), (self.end, _) = moved[0], moved[-1]
        self.spans = ranges.follow_spans(self.spans, edits)
        self.problems = ranges.follow_spans(self.problems, edits)
        self.known = current

    def wrote(self, diff: Diff, view: View, expected: str, answer_spans) -> None:
        """Our edit putting `view` (of `diff`) over the lines landed; `expected` is the document now. The spans
        and problems come from the answer's (`answer_spans`), or without them follow the edit."""
        if answer_spans is None:
            edits = ranges.changes(self.known, expected)
            self.spans = ranges.follow_spans(self.spans, edits)
            self.problems = ranges.follow_spans(self.problems, edits)
        else:
            self.spans = [(self.start + a, self.start + b, c, d) for a, b, c, d in view.spans(answer_spans)]
            self.problems = self.placed(diff, view)
        self.known, self.end = expected, self.start + len(view.text)
        self.diff, self.view, self.owed = diff, view, {}

    def placed(self, diff: Diff, view: View) -> list[tuple[int, int, str, str, int | None]]:
        """The answer's problems where `view` shows them, with the hunk each lies in."""
        found = []
        for start, end, message, code in self.answer_problems:
            a, b = view.locate(start), view.locate(end)
            if a is not None:
                hunk = diff.hunk_at(start)
                found.append((self.start + a, self.start + (b if b is not None else a), message, code,
                              hunk.index if hunk else None))
        return found

    def resolved(self) -> Diff:
        """The diff with the decisions the user's typing made."""
        accepted = [index for index, accept in self.owed.items() if accept]
        return self.diff.decide(accepted, True).decide([i for i in self.owed if i not in accepted], False)

    @property
    def undecided(self) -> list[int]:
        """The hunks waiting for a decision."""
        return [index for index in self.diff.undecided if index not in self.owed]

    @property
    def reviewing(self) -> bool:
        return not self.running and bool(self.undecided)

    @property
    def first_line(self) -> int:
        return ranges.lines(self.known, self.encoding).line_of(self.start)

    def spans_at(self, offset: int) -> list[tuple[int, int, int, int]]:
        """The span holding `offset`: spans are sorted and apart, so a bisection finds it."""
        index = bisect_right(self.spans, offset, key=lambda span: span[0]) - 1
        return [self.spans[index]] if index >= 0 and offset < self.spans[index][1] else []

    def attribution(self, version: int | None) -> dict:
        """The `assistant/attribution` notification: output ranges in the current text, sources in the original."""
        outputs = ranges.lines(self.known, self.encoding).positions([o for a, b, *_ in self.spans for o in (a, b)])
        sources = ranges.lines(self.original, self.encoding).positions([o for *_, c, d in self.spans for o in (c, d)])
        return {"uri": self.uri, "version": version,
                "spans": [{"output": ranges.to_json(types.Range(outputs[2 * i], outputs[2 * i + 1])),
                           "source": ranges.to_json(types.Range(sources[2 * i], sources[2 * i + 1]))}
                          for i in range(len(self.spans))]}

    def diff_notice(self, version: int | None) -> dict:
        """The `assistant/diff` notification: the rewrite's lines, the waiting ones, the undecided hunks."""
        first = self.first_line
        view = self.view if self.running or self.undecided else None

        def lines(span: tuple[int, int]) -> dict:
            return {"start": first + span[0], "end": first + span[1]}

        notice = {"uri": self.uri, "version": version, "id": self.id, "streaming": self.running}
        if view is None:
            return notice | {"lines": lines((0, 0)), "waiting": lines((0, 0)), "hunks": []}
        gaps = view.generated([(a - self.start, b - self.start) for a, b, *_ in self.spans])
        return notice | {"lines": lines((0, len(split_lines(view.text)))), "waiting": lines(view.waiting),
                         "hunks": [{"index": hunk.index, "old": lines(hunk.old), "new": lines(hunk.new),
                                    "removed": [line.rstrip("\r\n") for line in hunk.removed],
                                    "generated": [ranges.to_json(self.range_at(self.start + a, self.start + b))
                                                  for a, b in gaps[hunk.index]]} for hunk in self.shown_hunks()]}

    def shown_hunks(self) -> list[Shown]:
        """The view's hunks the editor shows: while streaming all, then the undecided ones."""
        return [hunk for hunk in self.view.hunks if self.running or hunk.index in self.undecided]

    def code_lenses(self) -> list[types.CodeLens]:
        """Cancel while streaming; then Accept all / Reject all on the first line, Accept / Reject on each hunk."""
        first = self.first_line

        def lens(line: int, title: str, command: str, *hunk: int) -> types.CodeLens:
            return types.CodeLens(range=types.Range(types.Position(line, 0), types.Position(line, 0)),
                                  command=types.Command(title=title, command=command, arguments=[self.uri, self.id, *hunk]))

        if self.running:
            return [lens(first, "Cancel", "assistant.cancel")]
        if not self.undecided:
            return []
        found = [lens(first, "Accept all", "assistant.acceptAll"), lens(first, "Reject all", "assistant.rejectAll")]
        for hunk in self.shown_hunks():
            found += [lens(first + hunk.old[0], "Accept", "assistant.acceptHunk", hunk.index),
                      lens(first + hunk.old[0], "Reject", "assistant.rejectHunk", hunk.index)]
        return found

    def diagnostics(self) -> list[types.Diagnostic]:
        """The answer's problems where the review shows them: in undecided hunks, or in unchanged text."""
        if not self.reviewing:
            return []
        return [types.Diagnostic(range=self.range_at(start, end), message=message, code=code, source="assistant",
                                 severity=types.DiagnosticSeverity.Warning)
                for start, end, message, code, hunk in self.problems if hunk is None or hunk in self.undecided]

    def range_at(self, start: int, end: int) -> types.Range:
        """A range of the current text, in the client's position encoding."""
        return ranges.range_at(self.known, start, end, self.encoding)

    def describe(self, span: tuple[int, int, int, int]) -> str:
        """Hover text: where an output piece was copied from, with the source snippet."""
        index = ranges.lines(self.original, self.encoding)
        first, last = index.line_of(span[2]) + 1, index.line_of(span[3]) + 1
        lines = f"line {first}" if first == last else f"lines {first}–{last}"
        snippet = self.original[span[2]:span[3]]
        return f"copied from {lines} of the original\n\n```\n{snippet}\n```"

